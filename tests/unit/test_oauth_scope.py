"""OAuth scope strings: the step-up scope a server names is used only when it is RFC 6749 well formed, and a
re-authorization asks for the union of the scopes, each once."""

from __future__ import annotations

import pytest

from mcpbridge.domain.oauth_scope import MAX_SCOPE_CHARS, scope_union, valid_scope


@pytest.mark.parametrize("scope", ["mcp:basic", "mcp:basic mcp:write", "files.read offline_access", "a!#[]~"])
def test_well_formed_scopes(scope: str) -> None:
    assert valid_scope(scope)


@pytest.mark.parametrize(
    "scope", ["", " ", "a  b", " a", "a\\b", 'a"b', "a\tb", "é", "a\nb", "x" * (MAX_SCOPE_CHARS + 1)]
)
def test_malformed_scopes(scope: str) -> None:
    assert not valid_scope(scope)


def test_the_union_keeps_each_scope_once_in_first_seen_order() -> None:
    assert scope_union("mcp:basic", None, "mcp:basic mcp:write", "") == "mcp:basic mcp:write"
    assert scope_union(None, "") is None
