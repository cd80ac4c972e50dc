"""Yuxi-style file tools: reading a document around several literal patterns (non-overlapping windows of lines),
and finding documents by file name across the knowledge bases in scope.

Each pattern is a literal (no regex), matched case-insensitively within one line of the document's indexed text. A
line that holds any pattern is a match; each match opens a window of ``context_lines`` lines before and after it,
and windows that overlap or touch are merged, so no line is returned twice. Matching is one pass over the text with
at most ``MAX_PATTERNS`` substring searches per line (Python's substring search runs in linear time), so the work is
linear in the document's size whatever the patterns hold.

The answer is bounded: at most ``MAX_WINDOWS`` windows and ``BYTE_BUDGET`` bytes of line text. A window that does
not fit is not cut: the answer stops before it, ``truncated`` is set and ``next_line`` says where to continue (pass
it as ``from_line``). A window too large on its own starts at its first matching line and stops at the last line
that fits (again ``truncated``, continuing after it), so every answer moves on. A single matching line longer than
the whole budget is refused with an error rather than dropped.

Finding by name matches a case-insensitive text against each published document's file name (and its title, for
documents made from text or a URL): an exact name first, then names that start with it, then names that contain it.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcpbridge.domain.knowledge import Document, KnowledgeAccess
from mcpbridge.errors import InvalidInput
from mcpbridge.knowledge.bases import KnowledgeBases
from mcpbridge.knowledge.documents import Documents

MAX_PATTERNS = 10
PATTERN_MAX_CHARS = 200
CONTEXT_DEFAULT = 3
CONTEXT_MAX = 50
MAX_WINDOWS = 20
BYTE_BUDGET = 64 * 1024


@dataclass(frozen=True)
class WindowLine:
    line: int
    text: str
    matched: bool


@dataclass(frozen=True)
class Window:
    start_line: int
    end_line: int
    lines: list[WindowLine]
    patterns: list[str]
    """The patterns found in this window's matched lines."""


@dataclass(frozen=True)
class WindowsResult:
    document: Document
    patterns: list[str]
    context_lines: int
    windows: list[Window]
    matches: int
    """Matched lines from ``from_line`` on (all of them, not only those returned)."""
    truncated: bool
    next_line: int | None
    note: str | None = None


def clean_patterns(patterns: list[str] | None) -> list[str]:
    """Trimmed, de-duplicated (case-insensitively) literal patterns: 1 to 10, each 1 to 200 characters."""
    kept: dict[str, str] = {}
    for raw in patterns or []:
        if not isinstance(raw, str):
            raise InvalidInput("patterns must be strings", code="invalid_patterns")
        pattern = raw.strip()
        if not pattern or len(pattern) > PATTERN_MAX_CHARS or "\n" in pattern:
            raise InvalidInput(
                f"each pattern must be 1 to {PATTERN_MAX_CHARS} characters on one line", code="invalid_patterns"
            )
        kept.setdefault(pattern.casefold(), pattern)
    if not kept:
        raise InvalidInput("patterns must hold at least one literal pattern", code="invalid_patterns")
    if len(kept) > MAX_PATTERNS:
        raise InvalidInput(f"at most {MAX_PATTERNS} patterns ({len(kept)} given)", code="invalid_patterns")
    return list(kept.values())


def _spans(
    lines: list[str], patterns: list[str], *, context_lines: int, from_line: int
) -> tuple[list[tuple[int, list[str]]], list[tuple[int, int, dict[int, list[str]]]]]:
    """The matching lines (with the patterns each holds) and the merged spans around them."""
    folded = [(p, p.casefold()) for p in patterns]
    hits: list[tuple[int, list[str]]] = []
    for number in range(max(from_line, 1), len(lines) + 1):
        text = lines[number - 1].casefold()
        found = [pattern for pattern, needle in folded if needle in text]
        if found:
            hits.append((number, found))
    spans: list[tuple[int, int, dict[int, list[str]]]] = []
    for number, found in hits:
        start, end = max(max(from_line, 1), number - context_lines), min(len(lines), number + context_lines)
        if spans and start <= spans[-1][1] + 1:
            first, _, matched = spans[-1]
            matched[number] = found
            spans[-1] = (first, end, matched)
        else:
            spans.append((start, end, {number: found}))
    return hits, spans


def windows_of(
    lines: list[str],
    patterns: list[str],
    *,
    context_lines: int,
    from_line: int = 1,
    max_windows: int = MAX_WINDOWS,
    byte_budget: int = BYTE_BUDGET,
) -> tuple[list[Window], int, bool, int | None]:
    """The windows around the lines (numbered from 1) holding any pattern, from ``from_line`` on: (windows, matched
    lines counted, truncated, the line to continue from)."""
    hits, spans = _spans(lines, patterns, context_lines=context_lines, from_line=from_line)
    windows: list[Window] = []
    used = 0

    def size_of(first: int, last: int) -> int:
        return sum(len(lines[n - 1].encode()) for n in range(first, last + 1))

    for start, end, matched in spans:
        if len(windows) == max_windows:
            return windows, len(hits), True, start
        size = size_of(start, end)
        if windows and used + size > byte_budget:
            return windows, len(hits), True, start
        cut = size > byte_budget
        if cut:
            # Too large alone: from its first matching line, as many lines as fit (the rest comes next).
            start = min(matched)
            if len(lines[start - 1].encode()) > byte_budget:
                raise InvalidInput(
                    f"line {start} is longer than the {byte_budget}-byte output budget: read it with read_document "
                    "from that line instead",
                    code="line_too_long",
                )
            last = start
            while last < end and size_of(start, last + 1) <= byte_budget:
                last += 1
            cut, end, size = last < end, last, size_of(start, last)
        used += size
        found_here = sorted({p for n, names in matched.items() if start <= n <= end for p in names}, key=patterns.index)
        windows.append(
            Window(
                start,
                end,
                [WindowLine(n, lines[n - 1], n in matched) for n in range(start, end + 1)],
                found_here,
            )
        )
        if cut:
            return windows, len(hits), True, end + 1
    return windows, len(hits), False, None


@dataclass(frozen=True)
class NamedDocument:
    document: Document
    knowledge_base_name: str
    rank: int
    """0: the exact name; 1: a name starting with the text; 2: a name containing it."""

    @property
    def order(self) -> tuple[str, str, str]:
        """Best first: by rank, then name, then id (unique: a listing's key)."""
        return (str(self.rank), (self.document.filename or self.document.title).casefold(), self.document.id)


NAME_MAX_CHARS = 255
FIND_LIMIT_DEFAULT = 20
FIND_LIMIT_MAX = 100


class FileTools:
    """Documents read around literal patterns, and found by file name, within the caller's knowledge-base scope."""

    def __init__(self, documents: Documents, bases: KnowledgeBases) -> None:
        self._documents = documents
        self._bases = bases

    def find_by_name(
        self, access: KnowledgeAccess, name: str, *, knowledge_base_ids: list[str] | None = None
    ) -> list[NamedDocument]:
        """The published documents whose file name (or title) holds ``name``, best first."""
        wanted = name.strip().casefold()
        if not wanted or len(wanted) > NAME_MAX_CHARS:
            raise InvalidInput(f"name must be 1 to {NAME_MAX_CHARS} characters", code="invalid_name")
        found: list[NamedDocument] = []
        for kb in self._bases.select(access, knowledge_base_ids):
            for document in self._documents.matching(access, kb.id):
                rank = _name_rank(document, wanted)
                if rank is not None:
                    found.append(NamedDocument(document, kb.name, rank))
        found.sort(key=lambda n: n.order)
        return found

    def read_windows(
        self,
        document: Document,
        patterns: list[str] | None,
        *,
        context_lines: int = CONTEXT_DEFAULT,
        from_line: int = 1,
    ) -> WindowsResult:
        """``document``: one the caller already holds (``Documents.get`` checked its scope)."""
        cleaned = clean_patterns(patterns)
        if not 0 <= context_lines <= CONTEXT_MAX:
            raise InvalidInput(f"context_lines must be 0 to {CONTEXT_MAX}", code="invalid_context_lines")
        if from_line < 1:
            raise InvalidInput("from_line starts at 1", code="invalid_line")
        text = self._documents.text(document)
        if text is None:
            note = f"the document has no indexed text yet (parse_status {document.parse_status})"
            return WindowsResult(document, cleaned, context_lines, [], 0, False, None, note)
        windows, matches, truncated, next_line = windows_of(
            text.split("\n"), cleaned, context_lines=context_lines, from_line=from_line
        )
        return WindowsResult(document, cleaned, context_lines, windows, matches, truncated, next_line)


def _name_rank(document: Document, wanted: str) -> int | None:
    names = [n.casefold() for n in (document.filename, document.title) if n]
    if wanted in names:
        return 0
    if any(n.startswith(wanted) for n in names):
        return 1
    if any(wanted in n for n in names):
        return 2
    return None
