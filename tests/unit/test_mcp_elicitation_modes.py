"""Which elicitation modes a 2026-07-28 request's client declares (``_meta``'s client capabilities)."""

from __future__ import annotations

from typing import Any

import pytest

from mcpbridge.http.mcp.params import CLIENT_CAPABILITIES_META, elicitation_modes


@pytest.mark.parametrize(
    ("declared", "modes"),
    [
        (None, set()),
        ({}, set()),
        ({"elicitation": {}}, {"form"}),  # before modes had names: form
        ({"elicitation": {"form": {}}}, {"form"}),
        ({"elicitation": {"url": {}}}, {"url"}),
        ({"elicitation": {"form": {}, "url": {}}}, {"form", "url"}),
        ({"elicitation": {"url": True}}, {"form"}),  # not an object: not a declared mode
        ({"elicitation": "yes"}, set()),
    ],
)
def test_the_declared_modes(declared: dict[str, Any] | None, modes: set[str]) -> None:
    meta = None if declared is None else {CLIENT_CAPABILITIES_META: declared}
    assert elicitation_modes(meta) == modes
