"""Cutting a document's text into chunks that keep reading order, heading path and source lines.

Every chunk is an exact, whitespace-trimmed slice ``text[start_offset:end_offset]`` of the stored text, so a client
can cite "document X, lines a-b" and open the document at that line. Chunks come in reading order, never overlap,
and together cover every non-whitespace character.

Markdown is cut along its structure: a section runs from a heading to the next heading, and its ``heading_path`` is
the titles from the top level down (``("Guide", "Install", "Linux")``). Inside a section whole blocks (paragraphs,
lists, tables, fenced code) are packed up to ``max_chars``. Only a block that does not fit on its own is cut, and then
at the gentlest boundary that works: lines, then sentences (``.!?`` and the CJK ``。！？；``), then clauses, then
words, then, for a run of text with none of those, a hard cut. A fenced code block is never cut while it fits.

Two rules keep chunks useful for search:

* A heading is not left alone at the end of a chunk: if the first block of its section does not fit beside it, that
  block is cut (down to words, never inside a fitting code fence) so the heading travels with the start of its text.
  A chunk under ``min_chars`` is topped up the same way, down to sentences.
* A chunk that is under ``min_chars`` (or holds nothing but headings) absorbs the start of the next section when
  both fit in ``max_chars`` and the next section is a sibling of the chunk's only section or a child of the common
  path of its sections; sections under different parents are never mixed. The merged chunk's ``heading_path`` is the
  common prefix of the paths of the sections whose body text it holds (a section that contributes only its heading
  line does not count), so the path stays true for every sentence in the chunk: two sibling sections "Guide >
  Install" and "Guide > Configure" merge under ``("Guide",)``, while a bare "# Guide" heading merged with "## Install"
  keeps ``("Guide", "Install")``.

Plain text has no headings: blank-line paragraphs are packed the same way, with an empty heading path.
"""

# Over 400 lines: Markdown structure (headings, fences, lists, tables) and the splitting rules together.

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import NamedTuple

from mcpbridge.domain.knowledge import ChunkDraft, DocumentFormat

__all__ = ["Heading", "chunk_document", "markdown_outline"]


class Heading(NamedTuple):
    """A Markdown heading: its level (1-6), its title and its 1-based line (the title line for a setext heading)."""

    level: int
    title: str
    line: int


# Block kinds found by the Markdown scan.
_PARA, _FENCE, _HEADING = 0, 1, 2

# Cutting levels, gentlest first; a range is cut at level n + 1 only when it cannot be placed whole at level n.
_BLOCK, _LINE, _SENTENCE, _CLAUSE, _WORD, _HARD = 0, 1, 2, 3, 4, 5

_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?\s*$")
# Fences are recognised at any indentation: fences nested in list items are indented, and splitting one is worse
# than treating a rare indented-code "```" line as a fence.
_FENCE_OPEN = re.compile(r"[ \t]*(`{3,}|~{3,})(.*)$")
_SETEXT = re.compile(r" {0,3}(?:=+|-+)\s*$")
# A paragraph holding one of these lines is a list, quote or table: a "---" under it is a rule, not a heading.
_NOT_SETEXT_CONTENT = re.compile(r"[ \t]*(?:(?:[-*+]|\d{1,9}[.)])(?:[ \t]|$)|>|\|)")

_SENTENCE_END = re.compile(r"[.!?…]+[\"'”’)\]]*\s+|[。！？；]+[」』”’）)]*\s*")
_CLAUSE_END = re.compile(r"[,;:]\s+|[，、：]\s*")
_SPACE = re.compile(r"\s+")
_BOUNDARIES = {_SENTENCE: _SENTENCE_END, _CLAUSE: _CLAUSE_END, _WORD: _SPACE}


class _Block(NamedTuple):
    first: int  # 0-based index of the first line
    last: int  # 0-based index of the last line, inclusive
    kind: int
    level: int = 0
    title: str = ""


@dataclass
class _Candidate:
    """A chunk before the small-section merge: its span and the sections it touches."""

    start: int
    end: int
    opens_section: bool
    sections: list[int]
    body_sections: list[int] = field(default_factory=list)


def chunk_document(
    text: str, *, format: DocumentFormat, max_chars: int = 1500, min_chars: int = 200
) -> list[ChunkDraft]:
    """Cut ``text`` into chunks of at most ``max_chars`` characters, in reading order.

    ``format`` is "markdown" (sections follow headings; chunks carry their heading path) or "text" (blank-line
    paragraphs, no heading path). ``min_chars`` is the size under which a chunk tries to take in more text; see the
    module docstring for the exact rules. A whitespace-only text has no chunks.
    """
    if max_chars < 1:
        raise ValueError("max_chars must be at least 1")
    if not 0 <= min_chars <= max_chars:
        raise ValueError("min_chars must be between 0 and max_chars")
    if not text or text.isspace():
        return []
    lines = text.split("\n")
    line_starts = _line_starts(lines)
    blocks = _markdown_blocks(lines) if format == "markdown" else _text_blocks(lines)
    packer = _Packer(text, line_starts, max_chars, min_chars)
    stack: list[tuple[int, str]] = []
    for block in blocks:
        start = line_starts[block.first]
        end = line_starts[block.last] + len(lines[block.last])
        if block.kind == _HEADING:
            while stack and stack[-1][0] >= block.level:
                stack.pop()
            stack.append((block.level, block.title))
            packer.open_section(tuple(title for _, title in stack))
            packer.place_block(start, end, body=False, fillable=False)
        else:
            packer.place_block(start, end, body=True, fillable=block.kind != _FENCE)
    candidates = packer.finish()
    if format == "markdown":
        candidates = _merge_small_sections(candidates, packer.paths, max_chars, min_chars)
    drafts: list[ChunkDraft] = []
    for seq, cand in enumerate(candidates):
        owners = cand.body_sections or cand.sections
        drafts.append(
            ChunkDraft(
                seq=seq,
                text=text[cand.start : cand.end],
                start_line=bisect_right(line_starts, cand.start),
                end_line=bisect_right(line_starts, cand.end - 1),
                start_offset=cand.start,
                end_offset=cand.end,
                heading_path=_common_prefix([packer.paths[i] for i in owners]),
            )
        )
    return drafts


def markdown_outline(text: str) -> list[Heading]:
    """The headings of a Markdown text in reading order, with the same rules the chunker uses (none inside fences)."""
    return [
        Heading(block.level, block.title, block.first + 1)
        for block in _markdown_blocks(text.split("\n"))
        if block.kind == _HEADING
    ]


def _line_starts(lines: list[str]) -> list[int]:
    starts = [0] * len(lines)
    pos = 0
    for i, line in enumerate(lines):
        starts[i] = pos
        pos += len(line) + 1
    return starts


def _text_blocks(lines: list[str]) -> list[_Block]:
    blocks: list[_Block] = []
    first = -1
    for i, line in enumerate(lines):
        if not line or line.isspace():
            if first >= 0:
                blocks.append(_Block(first, i - 1, _PARA))
                first = -1
        elif first < 0:
            first = i
    if first >= 0:
        blocks.append(_Block(first, len(lines) - 1, _PARA))
    return blocks


def _markdown_blocks(lines: list[str]) -> list[_Block]:
    """Paragraph-like blocks, fenced code blocks and headings (ATX and setext), in order; blank lines separate."""
    blocks: list[_Block] = []
    n = len(lines)
    i = 0
    para = -1  # first line of the open paragraph, -1 when none
    setext_ok = False  # whether the open paragraph may become a setext heading
    # YAML front matter: its closing "---" must not turn "title: x" into a setext heading.
    if n > 1 and lines[0].rstrip() == "---":
        for j in range(1, n):
            if lines[j].rstrip() in ("---", "..."):
                blocks.append(_Block(0, j, _PARA))
                i = j + 1
                break
    while i < n:
        line = lines[i]
        stripped = line.lstrip()
        if not stripped:
            if para >= 0:
                blocks.append(_Block(para, i - 1, _PARA))
                para = -1
            i += 1
            continue
        lead = stripped[0]
        if lead in "`~":
            opener = _FENCE_OPEN.match(line)
            # A backtick "fence" whose info string holds a backtick is inline code, per CommonMark.
            if opener and not (lead == "`" and "`" in opener.group(2)):
                if para >= 0:
                    blocks.append(_Block(para, i - 1, _PARA))
                    para = -1
                last = _fence_end(lines, i, opener.group(1))
                blocks.append(_Block(i, last, _FENCE))
                i = last + 1
                continue
        elif lead == "#":
            atx = _ATX.match(line)
            if atx and atx.group(2):
                if para >= 0:
                    blocks.append(_Block(para, i - 1, _PARA))
                    para = -1
                blocks.append(_Block(i, i, _HEADING, len(atx.group(1)), atx.group(2).strip()))
                i += 1
                continue
        elif lead in "=-" and para >= 0 and setext_ok and _SETEXT.match(line):
            title = " ".join(part.strip() for part in lines[para:i])
            blocks.append(_Block(para, i, _HEADING, 1 if lead == "=" else 2, title))
            para = -1
            i += 1
            continue
        if para < 0:
            para = i
            # Four spaces or a tab open indented code, which cannot be a heading.
            setext_ok = len(line) - len(stripped) < 4 and not line.startswith("\t")
        if setext_ok and _NOT_SETEXT_CONTENT.match(line):
            setext_ok = False
        i += 1
    if para >= 0:
        blocks.append(_Block(para, n - 1, _PARA))
    return blocks


def _fence_end(lines: list[str], first: int, fence: str) -> int:
    """The line closing the fence opened at ``first``; an unclosed fence runs to the end, as in CommonMark."""
    char, size = fence[0], len(fence)
    for j in range(first + 1, len(lines)):
        candidate = lines[j].strip()
        if candidate and candidate[0] == char and len(candidate) >= size and candidate == char * len(candidate):
            return j
    return len(lines) - 1


def _common_prefix(paths: list[tuple[str, ...]]) -> tuple[str, ...]:
    if not paths:
        return ()
    prefix = paths[0]
    for path in paths[1:]:
        size = 0
        for a, b in zip(prefix, path, strict=False):
            if a != b:
                break
            size += 1
        prefix = prefix[:size]
    return prefix


def _merge_small_sections(
    candidates: list[_Candidate], paths: list[tuple[str, ...]], max_chars: int, min_chars: int
) -> list[_Candidate]:
    merged: list[_Candidate] = []
    for cand in candidates:
        if merged and cand.opens_section:
            prev = merged[-1]
            small = not prev.body_sections or prev.end - prev.start < min_chars
            if small and cand.end - prev.start <= max_chars:
                scope = _common_prefix([paths[i] for i in prev.sections])
                parent = paths[cand.sections[0]][:-1]
                # A child of the chunk's common path, or a sibling of its only section: never mix sections from under
                # different parents (a "### Linux" chunk does not take in the next "## Configure").
                if parent == scope or (len(prev.sections) == 1 and parent == scope[:-1]):
                    prev.end = cand.end
                    prev.sections.extend(cand.sections)
                    prev.body_sections.extend(cand.body_sections)
                    continue
        merged.append(cand)
    return merged


class _Packer:
    """Greedy packing of trimmed ranges into chunks, cutting a range only as finely as needed."""

    def __init__(self, text: str, line_starts: list[int], max_chars: int, min_chars: int) -> None:
        self.text = text
        self.line_starts = line_starts
        self.max = max_chars
        self.min = min_chars
        self.paths: list[tuple[str, ...]] = [()]  # section 0 is what comes before the first heading
        self.out: list[_Candidate] = []
        self.start = -1  # span of the chunk being built; start -1 when none
        self.end = -1
        self.has_body = False
        self.opens = True  # the next chunk opened is the first of its section
        self.body = True  # whether the ranges being placed are body text (not a heading line)

    def open_section(self, path: tuple[str, ...]) -> None:
        self._emit()
        self.paths.append(path)
        self.opens = True

    def place_block(self, start: int, end: int, *, body: bool, fillable: bool) -> None:
        start, end = self._trim(start, end)
        if start < end:
            self.body = body
            self._place(start, end, _BLOCK, fillable)

    def finish(self) -> list[_Candidate]:
        self._emit()
        return self.out

    def _place(self, start: int, end: int, level: int, fillable: bool) -> None:
        if self.start >= 0 and end - self.start <= self.max:
            self.end = end
            self.has_body = self.has_body or self.body
            return
        if end - start <= self.max:
            if fillable and level < self._fill_depth():
                # The range fits alone, but the open chunk is a bare heading or too small: top it up with the
                # range's first part instead of leaving it alone.
                for sub_start, sub_end in self._split(start, end, level + 1):
                    self._place(sub_start, sub_end, level + 1, fillable)
                return
            self._emit()
            self._open(start, end)
            return
        if level >= _WORD:
            self._hard_cut(start, end)
            return
        for sub_start, sub_end in self._split(start, end, level + 1):
            self._place(sub_start, sub_end, level + 1, fillable)

    def _fill_depth(self) -> int:
        if self.start < 0:
            return _BLOCK
        if not self.has_body:
            return _WORD
        if self.end - self.start < self.min:
            return _SENTENCE
        return _BLOCK

    def _split(self, start: int, end: int, level: int) -> list[tuple[int, int]]:
        """Trimmed, non-empty sub-ranges of ``[start, end)`` cut at ``level`` boundaries (one range if none)."""
        pieces: list[tuple[int, int]] = []
        if level == _LINE:
            starts = self.line_starts
            i = bisect_right(starts, start) - 1
            while i < len(starts) and starts[i] < end:
                line_end = starts[i + 1] - 1 if i + 1 < len(starts) else len(self.text)
                piece = self._trim(max(start, starts[i]), min(end, line_end))
                if piece[0] < piece[1]:
                    pieces.append(piece)
                i += 1
            return pieces
        pos = start
        for match in _BOUNDARIES[level].finditer(self.text, start, end):
            cut = match.end()
            if pos < cut < end:
                piece = self._trim(pos, cut)
                if piece[0] < piece[1]:
                    pieces.append(piece)
                pos = cut
        piece = self._trim(pos, end)
        if piece[0] < piece[1]:
            pieces.append(piece)
        return pieces

    def _hard_cut(self, start: int, end: int) -> None:
        # Only runs without any whitespace get here (words were tried first), so the pieces need no trimming.
        self._emit()
        while end - start > self.max:
            self._open(start, start + self.max)
            self._emit()
            start += self.max
        self._open(start, end)

    def _trim(self, start: int, end: int) -> tuple[int, int]:
        text = self.text
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        return start, end

    def _open(self, start: int, end: int) -> None:
        self.start, self.end = start, end
        self.has_body = self.body

    def _emit(self) -> None:
        if self.start < 0:
            return
        section = len(self.paths) - 1
        self.out.append(
            _Candidate(
                start=self.start,
                end=self.end,
                opens_section=self.opens,
                sections=[section],
                body_sections=[section] if self.has_body else [],
            )
        )
        self.opens = False
        self.start = self.end = -1
        self.has_body = False
