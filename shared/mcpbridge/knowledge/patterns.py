"""Patterns that callers write (grep, wiki search), run by RE2.

Python's ``re`` backtracks: ``refresh(\\s?\\w+)+!`` on one sentence runs for hours while holding the GIL, so one
request froze the whole server. RE2 takes time linear in the text whatever the pattern, and releases the GIL while
it searches, so other requests keep being answered. The syntax is RE2's (https://github.com/google/re2/wiki/Syntax),
as in Go's ``regexp``, matched case-insensitively. ``\\w``, ``\\d``, ``\\s`` and ``\\b`` are ASCII, as in RE2 and Go;
``\\pL`` or ``\\p{Han}`` match letters of any script.

Refusals (``InvalidInput``, 400) say what to change:

    pattern_too_large     longer than PATTERN_MAX_CHARS characters, a repetition count over 1000 (nested counts
                          multiply), or a compiled program over PROGRAM_MAX_MEM
    unsupported_pattern   a construct RE2 does not have, named in the message (backreference, lookahead,
                          lookbehind, atomic group, possessive quantifier, conditional, recursion, ``\\Z``, ...)
                          and in ``details.construct``
    invalid_pattern       any other syntax error, with RE2's reason

Linear is not free: when RE2's DFA runs out of room, its NFA spends up to the program's size on each byte. A
``ScanBudget`` bounds one call twice: the text it reads (SCAN_TEXT_MAX), and RE2's work (SCAN_WORK_MAX: bytes each
search may scan times the program size, plus a charge per search). A search that runs out of budget stops, and its
caller says so; it never stops silently.
"""

# Over 400 lines: RE2 compilation, the scan budget and the naming of unsupported constructs belong together.

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import re2

from mcpbridge.errors import InvalidInput

PATTERN_MAX_CHARS = 500
PROGRAM_MAX_MEM = 8 << 20
"""RE2's ``max_mem``: room for the compiled program and the DFA's cache (RE2's default, stated here)."""
SCAN_TEXT_MAX = 8 << 20
"""Text one call reads (chunks, page titles and contents), each counted once, in UTF-8 bytes."""
SCAN_WORK_MAX = 1 << 27
"""RE2's work in one call: bytes a search may scan times the program size (at least 8), plus a charge per search.
Measured worst case (an NFA with every instruction live) is about 4 ns a unit on a small machine: half a second.
A small pattern reaches SCAN_TEXT_MAX first; a pattern of 2,000 instructions may scan about 64 KiB."""
REPEAT_MAX = 1000  # RE2's own bound on a counted repetition
_PROGRAM_FLOOR = 8  # what a byte costs beyond RE2's own work (the DFA's step, encoding, splitting lines)
_CALL_BYTES = 256  # one search call costs the binding about as much as scanning this many bytes more
_MULTILINE = "(?m)"


class ScanBudget:
    """What one call may read and hand to RE2. Each search is paid for before it runs, at the most it could scan;
    once a text or a search is refused, ``exhausted`` stays true and every later one is refused too."""

    def __init__(self, *, text: int = SCAN_TEXT_MAX, work: int = SCAN_WORK_MAX) -> None:
        self._text = text
        self._work = work
        self.exhausted = False

    def read(self, size: int) -> bool:
        if self.exhausted or size > self._text:
            self.exhausted = True
            return False
        self._text -= size
        return True

    def spend(self, size: int, program_size: int) -> bool:
        cost = (size + _CALL_BYTES) * max(program_size, _PROGRAM_FLOOR)
        if self.exhausted or cost > self._work:
            self.exhausted = True
            return False
        self._work -= cost
        return True

    def refund(self, size: int, program_size: int) -> None:
        """Give back what a search was paid for but provably did not scan."""
        self._work += size * max(program_size, _PROGRAM_FLOOR)


class GrepPattern:
    """A pattern run over a whole chunk: ``^`` and ``$`` also match at line ends, and a match may span lines."""

    def __init__(self, regexp: re2._Regexp[str]) -> None:
        self._regexp = regexp

    def starting_lines(self, text: str, budget: ScanBudget) -> list[int]:
        """The lines (from 0) of ``text`` where a match starts, in order; fewer when the budget runs out.

        After a hit the search goes on from the next line; as a match may span lines, each search is paid for up to
        the end of the text (a chunk is small)."""
        data = _utf8(text)
        found: list[int] = []
        if not budget.read(len(data)):
            return found
        pos = line = 0
        while budget.spend(len(data) - pos, self._regexp.programsize):
            match = self._regexp.search(data, pos)
            if match is None:
                break
            line += data.count(b"\n", pos, match.start())
            found.append(line)
            end = data.find(b"\n", match.start())
            if end < 0:
                break
            pos, line = end + 1, line + 1
        return found


class LinePattern:
    """A pattern matched against each line on its own, as the wiki search does.

    A page is first searched whole, with ``(?m)`` and RE2's ``never_nl`` (no match crosses a line end): that finds
    every line able to match by itself, and no search scans past the end of the line it matches in, so a page costs
    about its size. Each line found is then checked on its own. A pattern with ``\\A``, ``\\z`` or a ``-`` flag group
    (which could clear ``m``) is checked line by line only.
    """

    def __init__(self, line: re2._Regexp[str], page: re2._Regexp[str] | None) -> None:
        self._line = line
        self._page = page

    def matches(self, line: str, budget: ScanBudget) -> bool:
        """Whether ``line`` (a text of its own, such as a title) holds a match."""
        data = _utf8(line)
        return budget.read(len(data)) and self._line_matches(data, budget)

    def matching_lines(self, text: str, budget: ScanBudget, *, limit: int) -> list[int]:
        """The first ``limit`` lines (from 0) of ``text`` that match on their own; fewer when the budget runs out."""
        data = _utf8(text)
        if not budget.read(len(data)):
            return []
        lines = data.split(b"\n")
        if self._page is None:
            found: list[int] = []
            for index, line in enumerate(lines):
                if len(found) >= limit or budget.exhausted:
                    break
                if self._line_matches(line, budget):
                    found.append(index)
            return found
        return self._paged(data, lines, budget, limit)

    def _line_matches(self, line: bytes, budget: ScanBudget) -> bool:
        return budget.spend(len(line), self._line.programsize) and self._line.search(line) is not None

    def _paged(self, data: bytes, lines: list[bytes], budget: ScanBudget, limit: int) -> list[int]:
        assert self._page is not None
        size = self._page.programsize
        found: list[int] = []
        pos = index = 0
        while len(found) < limit and budget.spend(len(data) - pos, size):
            match = self._page.search(data, pos)
            if match is None:
                break
            index += data.count(b"\n", pos, match.start())
            end = data.find(b"\n", match.start())
            end = len(data) if end < 0 else end
            budget.refund(len(data) - end, size)  # never_nl: the search stopped by the end of this line
            if self._line_matches(lines[index], budget):
                found.append(index)
            if end == len(data):
                break
            pos, index = end + 1, index + 1
        return found


def grep_pattern(pattern: str) -> GrepPattern:
    """``pattern`` (stripped) compiled for grep: multi-line, case-insensitive; ``InvalidInput`` when RE2 refuses it."""
    pattern = _within_bounds(pattern.strip(), "pattern")
    return GrepPattern(_compile(pattern, prefix=_MULTILINE))


def line_pattern(query: str, regex: bool | None) -> LinePattern:
    """The wiki's rule: ``regex`` None is a regex when RE2 accepts it, else literal text; True demands a regex that RE2
    accepts; False is always literal.

    Unset, text RE2 cannot parse (``C++``, ``(a+b``, ``what?)``) is searched literally, but a pattern using a
    construct only a regex has (a lookaround, a backreference, an atomic group, a conditional, ...) or too big for RE2
    is refused as with True: searched literally it would find nothing, and the caller would not know why.
    """
    query = _within_bounds(query.strip(), "query")
    if regex is False:
        return _literal(query)
    try:
        return _line_regex(query)
    except InvalidInput as refused:
        if regex or not _literal_in_auto_mode(refused):
            raise
    return _literal(query)


def value_pattern(pattern: str) -> Callable[[str], bool]:
    """``pattern`` compiled for policy rules: a case-sensitive RE2 search over one argument's text (up to
    SCAN_TEXT_MAX bytes); ``InvalidInput`` when RE2 refuses it."""
    pattern = _within_bounds(pattern, "pattern")
    options = re2.Options()
    options.max_mem = PROGRAM_MAX_MEM
    options.never_capture = True
    options.log_errors = False
    try:
        compiled = re2._Regexp(pattern, options)
    except re2.error as exc:
        reason = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise _refusal(pattern, reason) from None

    def search(text: str) -> bool:
        return compiled.search(text[:SCAN_TEXT_MAX]) is not None

    return search


def _literal_in_auto_mode(refused: InvalidInput) -> bool:
    # ``++`` is far more often C++ than a possessive quantifier.
    return refused.code == "invalid_pattern" or refused.details.get("construct") == "possessive_quantifier"


def _line_regex(query: str) -> LinePattern:
    line = _compile(query)
    page = None if _LINE_BOUND.search(query) else _compile(query, prefix=_MULTILINE, never_nl=True)
    return LinePattern(line, page)


def _literal(query: str) -> LinePattern:
    escaped = re2.escape(query)
    return LinePattern(_compile(escaped), _compile(escaped, prefix=_MULTILINE, never_nl=True))


# Anchors to the whole text, or a flag group that may clear ``m``: whole-page search could miss a line's match.
_LINE_BOUND = re.compile(r"\\[Az]|\(\?[A-Za-z]*-")


def _within_bounds(pattern: str, name: str) -> str:
    if not pattern:
        raise InvalidInput(f"{name} is required", code="invalid_pattern")
    if len(pattern) > PATTERN_MAX_CHARS:
        raise InvalidInput(
            f"{name} is longer than {PATTERN_MAX_CHARS} characters",
            code="pattern_too_large",
            details={"max_chars": PATTERN_MAX_CHARS},
        )
    try:
        pattern.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"{name} is not valid Unicode (it holds a lone surrogate)", code="invalid_pattern") from None
    return pattern


def _utf8(text: str) -> bytes:
    # Stored text may hold a lone surrogate; RE2 treats the bytes that stand for it as matching nothing.
    return text.encode("utf-8", "surrogatepass")


def _compile(pattern: str, *, prefix: str = "", never_nl: bool = False) -> re2._Regexp[str]:
    options = re2.Options()
    options.max_mem = PROGRAM_MAX_MEM
    options.case_sensitive = False
    options.never_capture = True  # only where a match starts is ever used
    options.never_nl = never_nl
    options.log_errors = False  # RE2 would print every refused pattern on stderr
    try:
        # Not re2.compile: its module-wide cache would keep the last 128 patterns, each with a DFA cache of up to
        # max_mem, alive for any caller to fill.
        return re2._Regexp(prefix + pattern, options)
    except re2.error as exc:
        reason = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise _refusal(pattern, reason.replace(prefix + pattern, pattern)) from None


def _refusal(pattern: str, reason: str) -> InvalidInput:
    construct = _unsupported_construct(pattern)
    if construct is not None:
        key, words, hint = construct
        return InvalidInput(
            f"the pattern uses {words}, which RE2 does not support{hint or _BACKTRACKING}",
            code="unsupported_pattern",
            details={"construct": key},
        )
    if reason.startswith("pattern too large"):
        return InvalidInput(
            f"the pattern is too large once compiled (over {PROGRAM_MAX_MEM >> 20} MiB for RE2): use smaller "
            "repetition counts or fewer alternatives",
            code="pattern_too_large",
        )
    if reason.startswith("invalid repetition size") and not _inverted_count(pattern):
        return InvalidInput(
            f"the pattern repeats too much: a count may be at most {REPEAT_MAX}, and nested counts multiply "
            "((a{100}){100} counts 10000)",
            code="pattern_too_large",
            details={"max_repeat": REPEAT_MAX},
        )
    return InvalidInput(f"pattern is not a valid regular expression: {reason}", code="invalid_pattern")


# ---------------------------------------------------------------------------------------------- what RE2 lacks


@dataclass(frozen=True)
class _Token:
    kind: str  # "escape", "class", "open", "quantifier", "quoted", "char"
    text: str
    position: int


_COUNT = re.compile(r"\{(\d+)(?:(,)(\d*))?\}")
_FLAGS = re.compile(r"\(\?[A-Za-z-]*[:)]")
_NAMED_GROUP = re.compile(r"\(\?P?<[A-Za-z_]\w*>")
_RECURSION_NUMBER = re.compile(r"\(\?[+-]?\d")
_RE2_FLAGS = frozenset("imsU-")
_BACKTRACKING = " (patterns run in linear time here, so nothing that needs backtracking is available)"

# Group openings RE2 refuses, longest first: (opening, key, plain words, hint; empty: the backtracking note).
_GROUPS = (
    ("(?<=", "lookbehind", "a lookbehind (?<=...)", ""),
    ("(?<!", "lookbehind", "a negative lookbehind (?<!...)", ""),
    ("(?P=", "backreference", "a named backreference (?P=name)", ""),
    ("(?P>", "recursion", "a subroutine call (?P>name)", ""),
    ("(?=", "lookahead", "a lookahead (?=...)", ""),
    ("(?!", "lookahead", "a negative lookahead (?!...)", ""),
    ("(?>", "atomic_group", "an atomic group (?>...)", ""),
    ("(?(", "conditional", "a conditional (?(...)...|...)", ""),
    ("(?&", "recursion", "a subroutine call (?&name)", ""),
    ("(?R", "recursion", "a recursion (?R)", ""),
    ("(?#", "comment", "an inline comment (?#...)", ": leave the comment out"),
    ("(?|", "branch_reset", "a branch-reset group (?|...)", ": use (?:...) and number the groups as usual"),
)
_ESCAPES = {
    "k": ("backreference", "a named backreference (\\k<name>)", ""),
    "g": ("backreference", "a backreference (\\g...)", ""),
    "Z": ("end_anchor", "\\Z (end of text, or before a final line break)", ": write \\z for the end of the text"),
    "G": ("continuation_anchor", "the \\G anchor (where the previous match ended)", ": each search starts afresh"),
    "K": ("match_reset", "a match reset (\\K)", ""),
}


def _unsupported_construct(pattern: str) -> tuple[str, str, str] | None:
    """The first construct of ``pattern`` that RE2 does not have, as (key, plain words, hint), or None."""
    for token in _tokens(pattern):
        if token.kind == "escape":
            letter = token.text[1:2]
            if letter.isdigit() and letter != "0":
                return "backreference", f"a backreference ({token.text[:2]})", ""
            if letter in _ESCAPES:
                return _ESCAPES[letter]
        elif token.kind == "quantifier" and len(token.text) > 1 and token.text.endswith("+"):
            hint = ": RE2 never backtracks, so drop the extra +, or write \\+ to match a plus sign"
            return "possessive_quantifier", f"a possessive quantifier ({token.text})", hint
        elif token.kind == "open" and token.text.startswith("(?"):
            found = _group_construct(pattern, token.position)
            if found is not None:
                return found
    return None


def _group_construct(pattern: str, position: int) -> tuple[str, str, str] | None:
    for opening, key, words, hint in _GROUPS:
        if pattern.startswith(opening, position):
            return key, words, hint
    if _RECURSION_NUMBER.match(pattern, position):
        return "recursion", "a recursive call of a group ((?1))", ""
    flags = _FLAGS.match(pattern, position)
    if flags is not None:
        unknown = [c for c in flags.group(0)[2:-1] if c not in _RE2_FLAGS]
        if "x" in unknown:
            return "verbose_mode", "verbose mode ((?x))", ": write the pattern without its spaces and comments"
        if unknown:
            return "inline_flag", f"the inline flag {unknown[0]} ((?{unknown[0]}))", ": RE2's flags are i, m, s and U"
    return None


def _inverted_count(pattern: str) -> bool:
    for token in _tokens(pattern):
        if token.kind == "quantifier" and (count := _COUNT.match(token.text)) is not None:
            low, comma, high = count.groups()
            if comma and high and int(high) < int(low):
                return True
    return False


def _tokens(pattern: str) -> Iterator[_Token]:
    """The pattern cut into escapes, character classes, group openings, quantifiers and characters."""
    i, size = 0, len(pattern)
    while i < size:
        c, start = pattern[i], i
        if c == "\\" and pattern.startswith("\\Q", i):
            end = pattern.find("\\E", i + 2)
            i = size if end < 0 else end + 2
            yield _Token("quoted", pattern[start:i], start)
            continue
        if c == "\\":
            i = _escape_end(pattern, i)
            yield _Token("escape", pattern[start:i], start)
        elif c == "[":
            i = _class_end(pattern, i)
            yield _Token("class", pattern[start:i], start)
        elif c == "(":
            named = _NAMED_GROUP.match(pattern, i)
            i = named.end() if named is not None else i + (2 if pattern.startswith("(?", i) else 1)
            yield _Token("open", pattern[start:i], start)
        elif c in "*+?" or (c == "{" and _COUNT.match(pattern, i)):
            count = _COUNT.match(pattern, i)
            i = count.end() if count is not None else i + 1
            if i < size and pattern[i] in "?+":  # lazy or possessive
                i += 1
            yield _Token("quantifier", pattern[start:i], start)
        else:
            i += 1
            yield _Token("char", c, start)


def _escape_end(pattern: str, i: int) -> int:
    letter = pattern[i + 1 : i + 2]
    if letter in ("p", "P", "x") and pattern.startswith("{", i + 2):
        end = pattern.find("}", i + 3)
        return len(pattern) if end < 0 else end + 1
    if letter == "x":
        return min(i + 4, len(pattern))
    if letter in ("p", "P"):
        return min(i + 3, len(pattern))
    return min(i + 2, len(pattern))


def _class_end(pattern: str, i: int) -> int:
    i += 1
    if pattern.startswith("^", i):
        i += 1
    if pattern.startswith("]", i):
        i += 1
    while i < len(pattern) and pattern[i] != "]":
        if pattern.startswith("[:", i) and (end := pattern.find(":]", i + 2)) >= 0:
            i = end + 2
        elif pattern[i] == "\\":
            i = _escape_end(pattern, i)
        else:
            i += 1
    return min(i + 1, len(pattern))
