"""Function names and tool references of external tools (pure rules)."""

from __future__ import annotations

import re

import pytest

from mcpbridge.domain.tool_names import (
    HASH_CHARS,
    MAX_FUNCTION_NAME_CHARS,
    FunctionNames,
    function_name,
    is_tool_ref,
    sanitize,
    tool_ref,
)

SVC = "svc_01jd0000000000000000000000"
OTHER = "svc_01jd0000000000000000000001"
OPENAI_NAME = re.compile(r"[a-z0-9_]{1,64}")


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("Docs Search", "docs_search"),
        ("get-page.v2", "get_page_v2"),
        ("Café Münster", "cafe_munster"),
        ("a  -  b", "a_b"),
        ("weird!@#$%^&*()+=name", "weirdname"),
        ("__x__", "x"),
        ("知识库", ""),
    ],
)
def test_sanitize_keeps_lowercase_letters_digits_and_underscores(raw: str, clean: str) -> None:
    assert sanitize(raw) == clean


def test_function_names_have_the_documented_shape() -> None:
    name = function_name("Docs Hub", SVC, "search-pages")
    assert re.fullmatch(rf"mcp_docs_hub_search_pages_[0-9a-f]{{{HASH_CHARS}}}", name)
    assert name == function_name("Docs Hub", SVC, "search-pages")  # stable
    assert OPENAI_NAME.fullmatch(name)


def test_names_that_sanitise_alike_stay_distinct() -> None:
    names = {
        function_name("docs", SVC, "get-page"),
        function_name("docs", SVC, "get.page"),
        function_name("docs", SVC, "get page"),
        function_name("docs", OTHER, "get-page"),
    }
    assert len(names) == 4
    assert all(n.startswith("mcp_docs_get_page_") for n in names)


def test_the_service_part_is_cut_first_and_keeps_four_characters() -> None:
    long_service = "a" * 80
    name = function_name(long_service, SVC, "search")
    assert len(name) == MAX_FUNCTION_NAME_CHARS
    assert name.startswith("mcp_" + "a" * 44 + "_search_")

    long_tool = "t" * 100
    name = function_name("knowledge", SVC, long_tool)
    assert len(name) == MAX_FUNCTION_NAME_CHARS
    assert name.startswith("mcp_know_" + "t" * 46 + "_")
    assert OPENAI_NAME.fullmatch(name)

    # A short service part is kept whole while the tool is cut.
    assert function_name("db", SVC, long_tool).startswith("mcp_db_" + "t" * 48 + "_")


def test_names_made_of_nothing_sanitisable_still_work() -> None:
    name = function_name("知识库", SVC, "搜索")
    assert re.fullmatch(rf"mcp_svc_tool_[0-9a-f]{{{HASH_CHARS}}}", name)
    assert name != function_name("知识库", SVC, "读取")


def test_first_registration_wins_and_later_collisions_get_a_distinct_name() -> None:
    def colliding(service_name: str, service_id: str, tool_name: str, attempt: int) -> str:
        return "mcp_same" if attempt == 0 else function_name(service_name, service_id, tool_name, attempt)

    names = FunctionNames(colliding)
    first = names.register("a", SVC, "x")
    second = names.register("b", OTHER, "x")
    third = names.register("c", OTHER, "y")
    assert first == "mcp_same"
    assert second not in (first, third)
    assert third != first
    assert names.owner_of("mcp_same") == (SVC, "x")
    # The same identity registered again keeps its name; the same order gives the same names on every pass.
    assert names.register("a", SVC, "x") == first
    again = FunctionNames(colliding)
    assert [again.register(*t) for t in (("a", SVC, "x"), ("b", OTHER, "x"), ("c", OTHER, "y"))] == [
        first,
        second,
        third,
    ]
    # Registered the other way round, the other tool wins the name.
    reversed_order = FunctionNames(colliding)
    assert reversed_order.register("b", OTHER, "x") == "mcp_same"
    assert reversed_order.register("a", SVC, "x") != "mcp_same"


def test_a_retry_attempt_changes_only_the_hash() -> None:
    plain = function_name("docs", SVC, "search")
    retried = function_name("docs", SVC, "search", attempt=1)
    assert plain != retried
    assert plain[: -HASH_CHARS - 1] == retried[: -HASH_CHARS - 1]


def test_tool_refs_bind_service_tool_and_schema() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    ref = tool_ref(SVC, "search", schema)
    assert is_tool_ref(ref)
    assert ref.startswith("mcpt_")
    assert len(ref) == 5 + 64
    # Canonical JSON: key order does not matter; any change of the schema does.
    reordered = {"required": ["q"], "properties": {"q": {"type": "string"}}, "type": "object"}
    assert tool_ref(SVC, "search", reordered) == ref
    assert tool_ref(SVC, "search", {**schema, "required": []}) != ref
    assert tool_ref(OTHER, "search", schema) != ref
    assert tool_ref(SVC, "Search", schema) != ref
    # The separator keeps (service, tool) pairs apart.
    assert tool_ref("ab", "c", {}) != tool_ref("a", "bc", {})
    assert tool_ref(SVC, "x", None) == tool_ref(SVC, "x", {})


@pytest.mark.parametrize("bad", ["", "mcpt_", "mcpt_" + "g" * 64, "mcpt_" + "a" * 63, "MCPT_" + "a" * 64, "x" * 69])
def test_malformed_tool_refs_are_refused(bad: str) -> None:
    assert not is_tool_ref(bad)
