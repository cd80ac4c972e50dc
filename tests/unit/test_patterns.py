"""Callers' patterns on RE2 (knowledge.patterns): refusals that name what RE2 lacks, the semantics grep and the wiki
keep (case-insensitive; multi-line for grep, line by line for the wiki), the scan budget, and the GIL left free."""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from mcpbridge.bootstrap import Container
from mcpbridge.domain.knowledge import KnowledgeAccess
from mcpbridge.domain.text_tokens import literal_words, search_tokens
from mcpbridge.errors import InvalidInput
from mcpbridge.knowledge.patterns import PATTERN_MAX_CHARS, SCAN_TEXT_MAX, ScanBudget, grep_pattern, line_pattern
from mcpbridge.knowledge.wiki import CONTENT_MAX_BYTES
from mcpbridge.settings import Settings
from tests.support.hostile_patterns import CORPUS, DOCUMENT, REPORTED_GREP, REPORTED_WIKI, SENTENCE


def refusal(pattern: str, regex: bool | None = True) -> InvalidInput:
    with pytest.raises(InvalidInput) as raised:
        grep_pattern(pattern) if regex is True else line_pattern(pattern, regex)
    return raised.value


@pytest.mark.parametrize(
    ("pattern", "construct", "named"),
    [
        (r"(\w+)\s\1", "backreference", r"backreference (\1)"),
        (r"(?P<w>\w+)\s(?P=w)", "backreference", "backreference (?P=name)"),
        (r"(?<w>\w+)\s\k<w>", "backreference", r"backreference (\k<name>)"),
        (r"token(?=s)", "lookahead", "lookahead (?="),
        (r"token(?!s)", "lookahead", "negative lookahead (?!"),
        (r"(?<=oauth )token", "lookbehind", "lookbehind (?<="),
        (r"(?<!oauth )token", "lookbehind", "negative lookbehind (?<!"),
        (r"(?>refresh|re)fresh", "atomic_group", "atomic group (?>"),
        (r"refresh\s*+token", "possessive_quantifier", "possessive quantifier (*+)"),
        (r"refresh\s++token", "possessive_quantifier", "possessive quantifier (++)"),
        (r"refresh(\s)?(?(1)token|lease)", "conditional", "conditional (?("),
        (r"(refresh(?R)?)", "recursion", "recursion (?R)"),
        (r"refresh\Z", "end_anchor", r"write \z"),
        (r"(?x) refresh \s token", "verbose_mode", "verbose mode"),
        (r"refresh(?#why)token", "comment", "comment (?#"),
    ],
)
def test_what_re2_lacks_is_refused_by_name(pattern: str, construct: str, named: str) -> None:
    refused = refusal(pattern)
    assert refused.code == "unsupported_pattern"
    assert refused.status == 400
    assert refused.details == {"construct": construct}
    assert named in refused.message
    assert "RE2" in refused.message


def test_refusals_print_nothing(capfd: pytest.CaptureFixture[str]) -> None:
    for pattern in (r"(a)\1", "(unclosed", r"\pL{1000}", r"[[:alpha:]"):
        with pytest.raises(InvalidInput):
            grep_pattern(pattern)
    out, err = capfd.readouterr()
    assert (out, err) == ("", ""), "RE2 logs refused patterns on stderr unless log_errors is off"


def test_a_construct_inside_quotes_or_a_class_is_text() -> None:
    assert grep_pattern(r"\Q(?=x)\E and [(?=]").starting_lines("a (?=x) and =", ScanBudget()) == [0]


@pytest.mark.parametrize(
    ("pattern", "code"),
    [
        ("(unclosed", "invalid_pattern"),
        ("a)", "invalid_pattern"),
        ("[z-a]", "invalid_pattern"),
        ("x{3,2}", "invalid_pattern"),
        ("refresh\ud800", "invalid_pattern"),
        (r"(a{1000}){1000}", "pattern_too_large"),
        (r"a{1001}", "pattern_too_large"),
        (r"((a{100}){100}){100}", "pattern_too_large"),
        (r"\pL{1000}", "pattern_too_large"),
        ("a" * (PATTERN_MAX_CHARS + 1), "pattern_too_large"),
    ],
)
def test_invalid_and_oversized_patterns_are_400(pattern: str, code: str) -> None:
    refused = refusal(pattern)
    assert (refused.code, refused.status) == (code, 400)
    if code == "invalid_pattern":
        assert "not valid" in refused.message or "not a valid" in refused.message


def test_grep_is_case_insensitive_and_multi_line() -> None:
    text = "OAuth notes\nRefresh tokens rotate.\nthe refresh\ntoken lease\nend"
    budget = ScanBudget()
    assert grep_pattern(r"^refresh").starting_lines(text, budget) == [1]
    assert grep_pattern(r"refresh$").starting_lines(text, budget) == [2]
    assert grep_pattern(r"refresh\s+token").starting_lines(text, budget) == [1, 2], "a match may span lines"
    assert grep_pattern(r"(?-i)Refresh").starting_lines(text, budget) == [1]
    assert grep_pattern(r"\Aoauth").starting_lines(text, budget) == [0]
    assert grep_pattern(r"end\z").starting_lines(text, budget) == [4]
    assert grep_pattern(r"\p{Han}+库").starting_lines("x\n知识库", budget) == [1]


@pytest.mark.parametrize(
    "pattern",
    [
        "refresh",
        "^refresh",
        "lease$",
        r"^$",
        r"\Arefresh",
        r"lease\z",
        r"(?-m:^refresh)",
        r"(?i-m:^the) refresh",
        r"refresh\s+token",
        r"refresh[^x]+token",
        r"(?s)refresh.+token",
        r"\btoken\b",
        r"x*",
        r"LEASE|^the",
        r"(?-i:Refresh)",
    ],
)
@pytest.mark.parametrize("regex", [None, True])
def test_the_wiki_matches_each_line_on_its_own(pattern: str, regex: bool | None) -> None:
    text = "Refresh the token\n\nthe refresh\ntoken lease\n  lease \nrefresh lease"
    compiled = line_pattern(pattern, regex)
    one_by_one = [i for i, line in enumerate(text.split("\n")) if compiled.matches(line, ScanBudget())]
    assert compiled.matching_lines(text, ScanBudget(), limit=100) == one_by_one
    # The same lines as Python's re (no backtracking trap here) line by line, where the syntax is shared.
    python = re.compile(pattern.replace(r"\z", r"\Z"), re.IGNORECASE)
    assert one_by_one == [i for i, line in enumerate(text.split("\n")) if python.search(line)]
    assert compiled.matching_lines(text, ScanBudget(), limit=2) == one_by_one[:2]


def test_the_wiki_falls_back_to_literal_text_only_for_what_is_not_a_regex() -> None:
    lines = "C++ and C#\n(a+b) = c\nwhat?)"
    for query, line in (("C++", 0), ("(a+b", 1), ("what?)", 2)):
        assert line_pattern(query, None).matching_lines(lines, ScanBudget(), limit=5) == [line]
    assert line_pattern("a+b", False).matching_lines(lines, ScanBudget(), limit=5) == [1]
    for query, construct in ((r"c(?=\+)", "lookahead"), (r"(c)\1", "backreference"), (r"(?>c)", "atomic_group")):
        refused = refusal(query, regex=None)
        assert (refused.code, refused.details["construct"]) == ("unsupported_pattern", construct)
    assert refusal(r"a{1001}", regex=None).code == "pattern_too_large"
    assert refusal("C++", regex=True).details["construct"] == "possessive_quantifier"
    assert refusal("(a+b", regex=True).code == "invalid_pattern"


@pytest.mark.parametrize(("pattern", "text"), [(REPORTED_GREP, SENTENCE), (REPORTED_WIKI, SENTENCE * 20)])
def test_the_reported_patterns_answer_at_once(pattern: str, text: str) -> None:
    # Python's re needs hours for either; RE2 is linear.
    assert grep_pattern(pattern).starting_lines(text, ScanBudget()) == []
    assert line_pattern(pattern, None).matching_lines(text, ScanBudget(), limit=5) == []


def test_the_budget_stops_a_scan_and_stays_spent() -> None:
    pattern = grep_pattern("refresh")
    text = "refresh\n" * 1000
    budget = ScanBudget(work=len(text) * 256 * 3)
    found = pattern.starting_lines(text, budget)
    assert 0 < len(found) < 1000
    assert found == list(range(len(found))), "what was scanned is reported, in order"
    assert budget.exhausted
    assert pattern.starting_lines("refresh", budget) == [], "a spent budget refuses every later search"
    roomy = ScanBudget()
    assert len(pattern.starting_lines(text, roomy)) == 1000
    assert not roomy.exhausted


def test_a_bigger_program_gets_less_text() -> None:
    small, big = ScanBudget(), ScanBudget()
    simple, heavy = grep_pattern("refresh"), grep_pattern(r"refresh\pL{50}")
    text = "refresh " + "x" * 4000
    for _ in range(200):
        simple.starting_lines(text, small)
        heavy.starting_lines(text, big)
    assert not small.exhausted
    assert big.exhausted


def test_a_search_releases_the_gil() -> None:
    """With a 30 s switch interval the main thread runs again only when the searching thread lets the GIL go: if it
    sees the search unfinished, RE2 released the GIL during it. Python's re, as a control, does not."""
    text = ("refresh " + "e" * 60 + "\n") * 1500  # about 100 KiB, an NFA-heavy scan for the pattern below
    hostile = grep_pattern(r"refresh(?:[^z]{0,99}e){10}zq")

    def unfinished_when_main_ran(search: Callable[[], object]) -> bool:
        started, state = threading.Event(), {"finished": False}

        def work() -> None:
            started.set()
            search()
            state["finished"] = True

        previous = sys.getswitchinterval()
        sys.setswitchinterval(30)
        try:
            worker = threading.Thread(target=work)
            worker.start()
            started.wait()
            seen = not state["finished"]
            worker.join()
        finally:
            sys.setswitchinterval(previous)
        return seen

    budget = ScanBudget(work=1 << 40)  # room for the whole slow scan: this is about the GIL, not the budget
    assert unfinished_when_main_ran(lambda: hostile.starting_lines(text, budget))
    assert not budget.exhausted
    backtracking = re.compile(r"(a+)+b")
    assert not unfinished_when_main_ran(lambda: backtracking.search("a" * 21))


def test_a_wiki_search_stops_at_its_budget_and_says_so(tmp_path: Path) -> None:
    container = Container(Settings(data_dir=tmp_path / "data", jobs="inline"))
    try:
        workspace = container.identity.initialize().workspace_id
        access = KnowledgeAccess(workspace)
        kb = container.knowledge_bases.create(access, name="Big wiki")
        body = ("the token lease rotates every hour\n" * (CONTENT_MAX_BYTES // 35))[:CONTENT_MAX_BYTES]
        pages = SCAN_TEXT_MAX // CONTENT_MAX_BYTES + 5  # more text than one search reads
        for i in range(pages):
            container.wiki.create(access, kb.id, slug=f"note/{i:02d}", type="note", title=f"Note {i:02d}", content=body)
        container.wiki.create(access, kb.id, slug="zz/last", type="note", title="Refresh", content="refresh")

        found = container.wiki.search(access, "refresh")
        assert found.truncated
        assert [m.page.slug for m in found.matches] == [], "the page after the budget was never read"
        (notice,) = found.notices
        assert "budget" in notice
        assert "knowledge_base_ids" in notice

        title = container.wiki.search(access, "^note 0[0-3]$")
        assert [m.page.slug for m in title.matches] == ["note/00", "note/01", "note/02", "note/03"]
        assert title.truncated
    finally:
        container.close()


SOUNDNESS_PATTERNS = [
    *(h.pattern for h in CORPUS if not h.refused_by("grep")),
    r"\Qrefresh\E\s\pL+",
    r"(?U)refresh.+lease",
    r"(?<lead>Refresh)\s+the\s+token",
    r"refresh[[:space:]]+\x{61}{3}",
    r"知识库\p{Han}+",
    r"rotating\s+refresh\s+token\b",
    r"(?i:REFRESH) tokens? are",
]


@pytest.mark.parametrize("pattern", SOUNDNESS_PATTERNS)
def test_grep_candidates_never_miss_a_chunk_the_pattern_matches(pattern: str) -> None:
    """literal_words reads RE2's syntax: a text RE2 matches always holds every word it gives, as the index sees it
    (each term a prefix of one of the text's terms: what ``candidates`` looks up)."""
    compiled, words = grep_pattern(pattern), literal_words(pattern)
    assert words
    for text in (DOCUMENT, SENTENCE, *DOCUMENT.split("\n")):
        if compiled.starting_lines(text, ScanBudget()):
            terms = search_tokens(text)
            for word in words:
                assert all(any(t.startswith(w) for t in terms) for w in search_tokens(word)), (word, text)
