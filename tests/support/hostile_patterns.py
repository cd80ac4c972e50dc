"""Hostile regular expressions, and text that makes them work hard, for every place a caller's pattern enters: REST
``/api/v1/knowledge/grep`` and ``/api/v1/wiki/search``, MCP ``grep_chunks`` and ``wiki_search``.

Shared by tests/functional/test_hostile_patterns.py (every pattern must be answered, or refused with its code) and
tests/bench/hostile_patterns.py (how long the slowest answer takes).

Kinds of pattern:

- catastrophic for a backtracking engine (Python's ``re``): nested or overlapping quantifiers that fail at the end;
- costly for RE2: many DFA states (its NFA then costs up to the program's size per byte), big programs, many
  alternatives, deep nesting, empty matches everywhere;
- what RE2 refuses: constructs it does not have, repetitions or programs too large, over-long patterns.

Every pattern grep should run holds the literal word ``refresh``, so grep has candidates to run it on.
"""

from __future__ import annotations

from dataclasses import dataclass

# The two patterns of the bug report, verbatim.
REPORTED_GREP = r"refresh(\s?\w+)+!"
REPORTED_WIKI = r"(\w+\s?)+!"

SENTENCE = "Refresh the token lease before the session ends and rotate every key the service holds today"
"""One sentence without "!": enough for either reported pattern to backtrack for hours in Python's ``re``."""

DOCUMENT = "\n".join(
    [
        "# Token refresh",
        "",
        SENTENCE,
        "refresh " + "a" * 40,
        "refresh " + ".".join("abcdefghijklmnopqrstuvwxyz"),
        "refresh user.name.with.many.parts.and.more.parts.in.the.address@example",
        "refresh " + "aeiou " * 12 + "the lease ends",
        "refresh " + "ab" * 30,
        "refresh " + "x" * 30 + " " + "1234567890" * 3,
        "refresh 知识库检索 " * 4 + "刷新令牌",
        "",
        "Refresh tokens are refreshed under a lease so a rotating refresh token is used once.",
    ]
)
"""A document holding runs of letters, dots, vowels and CJK after ``refresh`` for the patterns below to chew on."""

WIKI_PAGE = {"slug": "concept/refresh", "type": "concept", "title": "Token refresh", "content": SENTENCE + "."}


@dataclass(frozen=True)
class Hostile:
    pattern: str
    refusal: tuple[str, ...] = ()
    """The codes an entry point may refuse it with; empty: it must be answered normally."""
    grep_refusal: tuple[str, ...] = ()
    """Refused by grep only (a pattern without a literal word has no candidates to run on)."""
    wiki_literal: bool = False
    """With ``regex`` unset the wiki searches it as literal text instead of refusing it (``C++``)."""

    def refused_by(self, entry: str) -> tuple[str, ...]:
        if entry.endswith("grep"):
            return self.refusal or self.grep_refusal
        return () if self.wiki_literal else self.refusal


_UNSUPPORTED = ("unsupported_pattern",)
_TOO_LARGE = ("pattern_too_large",)
# Over the length bound the edges answer first: REST with 422, MCP with invalid_argument.
_TOO_LONG = ("pattern_too_large", "validation_failed", "invalid_argument")
_NO_WORD = ("pattern_without_words",)

CORPUS: tuple[Hostile, ...] = (
    # Catastrophic backtracking.
    Hostile(REPORTED_GREP),
    Hostile(REPORTED_WIKI, grep_refusal=_NO_WORD),
    Hostile(r"refresh(\s*\w*)*!"),
    Hostile(r"refresh((\w+)\s?)*!"),
    Hostile(r"refresh\s(a+)+b"),
    Hostile(r"refresh\s(a|aa)+b"),
    Hostile(r"refresh\s(a|a?)+b"),
    Hostile(r"refresh\s(a*)*b"),
    Hostile(r"refresh\s(.*a){20}"),
    Hostile(r"refresh\s(x+x+)+y"),
    Hostile(r"refresh\s(\w|\d)+!"),
    Hostile(r"refresh\s(ab|a)*c"),
    Hostile(r"refresh\s(([a-z])+.)+[A-Z]([a-z])+$"),
    Hostile(
        r"refresh\s([a-z0-9])(([\-.]|[_]+)?([a-z0-9]+))*(@){1}[a-z0-9]+[.]{1}"
        r"(([a-z]{2,3})|([a-z]{2,3}[.]{1}[a-z]{2,3}))$"
    ),
    Hostile(r"refresh(\s+\w+\s*)+\.\.\.!"),
    Hostile(r"refresh\s(aeiou\s?|aei\s?|ou\s?)+z"),
    Hostile(r"refresh\s(\p{Han}+\s?)+!"),
    Hostile(r"^(refresh\s?|\w+\s?)+!$", grep_refusal=_NO_WORD),
    Hostile(r"(?s)refresh(.*)*!"),
    Hostile(r"refresh(.|\s)*!"),
    # Costly for RE2: DFA state explosion, big programs, many alternatives, deep nesting, empty matches.
    Hostile(r"refresh[a-z].{15}[a-z].{15}zq"),
    Hostile(r"refresh(?:[^z]{0,99}e){10}zq"),
    Hostile(r"refresh(?:.{0,30}[aeiou]){8}zq"),
    Hostile(r"refresh(?:.{1,20}\pL){10}zq"),
    Hostile(r"refresh(?:(?:\pL|\pN|\s){1,10}){1,10}zq"),
    Hostile(r"refresh(?:a|e|i|o|u|r|s|t|h).{15}(?:a|e).{15}z"),
    Hostile(r"refresh\pL{30}zq"),
    # The same without the leading literal, which would otherwise let RE2 skip ahead to each "refresh".
    Hostile(r"(?:a|e|i|o|u|r|s|t|h).{15}(?:a|e).{15}zq"),
    Hostile(r"(?:[^z]{0,99}e){10}zq"),
    Hostile(r"(?:.{0,30}[aeiou]){8}zq"),
    Hostile(r"(?:.{1,20}\pL){10}zq"),
    Hostile(r"[a-q][^u-z]{13}zq"),
    Hostile(r"(?:(?:\pL|\pN|\s){1,10}){1,10}zq"),
    Hostile(r"refresh.{1000}"),
    Hostile(r"refresh[^\n]{1,1000}zq"),
    Hostile("refresh(?:" + "|".join(f"w{i:02d}x" for i in range(90)) + ")"),
    Hostile("refresh" + "(" * 150 + "a?" + ")" * 150),
    Hostile("refresh" + "(?:" * 90 + "x*" + ")*" * 90),
    Hostile(r"refresh(x*)*"),
    Hostile(r"x*", grep_refusal=_NO_WORD),
    Hostile(r"^", grep_refusal=_NO_WORD),
    Hostile(r"\b", grep_refusal=_NO_WORD),
    # Refused: what RE2 does not have, and what is too large.
    Hostile(r"refresh\s(\w)\1", _UNSUPPORTED),
    Hostile(r"refresh(?=\s)", _UNSUPPORTED),
    Hostile(r"refresh(?!x)", _UNSUPPORTED),
    Hostile(r"(?<=\s)refresh", _UNSUPPORTED),
    Hostile(r"(?<!x)refresh", _UNSUPPORTED),
    Hostile(r"refresh(?>\s+)", _UNSUPPORTED),
    Hostile(r"refresh\s++", _UNSUPPORTED, wiki_literal=True),
    Hostile(r"refresh(\s)?(?(1)a|b)", _UNSUPPORTED),
    Hostile(r"refresh(?P<w>\w)(?P=w)", _UNSUPPORTED),
    Hostile(r"refresh\Z", _UNSUPPORTED),
    Hostile(r"refresh(a{1000}){1000}", _TOO_LARGE),
    Hostile(r"refresh((a{100}){100}){100}", _TOO_LARGE),
    Hostile(r"refresh\pL{1000}", _TOO_LARGE),
    Hostile(r"refresh[\pL\pN]{1000}", _TOO_LARGE),
    Hostile("refresh" + "a" * 494, _TOO_LONG),
)
