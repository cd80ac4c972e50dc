"""The resource URIs, line windows and listing pages of :mod:`mcpbridge.http.mcp.resources` on a real container
(SQLite, inline indexing), and the modern envelope's header comparison without field whitespace."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mcpbridge.bootstrap import Container
from mcpbridge.domain.knowledge import KnowledgeAccess
from mcpbridge.http.mcp import protocol
from mcpbridge.http.mcp.jsonrpc import INVALID_PARAMS, JsonRpcError
from mcpbridge.http.mcp.params import CLIENT_CAPABILITIES_META, PROTOCOL_VERSION_META
from mcpbridge.http.mcp.resources import (
    LIST_PAGE_SIZE,
    READ_MAX_CHARS,
    RESOURCE_NOT_FOUND_HANDSHAKE,
    Resources,
    Target,
    document_uri,
    parse_lines,
    parse_uri,
)
from mcpbridge.settings import Settings
from tests.support.embedder import HashingEmbedder


@pytest.mark.parametrize(("text", "window"), [("3-9", (3, 9)), ("4", (4, 4)), ("12-", (12, None)), ("1-1", (1, 1))])
def test_line_windows(text: str, window: tuple[int, int | None]) -> None:
    assert parse_lines(text) == window


@pytest.mark.parametrize(
    "text", ["", "0-3", "9-3", "-4", "a-b", "1-2-3", "1 - 2", "1234567890-", "+1-2", "²", "١-٣", "1-²"]
)
def test_malformed_line_windows_are_invalid_params(text: str) -> None:
    with pytest.raises(JsonRpcError) as refused:
        parse_lines(text)
    assert refused.value.code == INVALID_PARAMS


def test_uris_of_the_scheme_and_the_rest() -> None:
    assert parse_uri(document_uri("kb 1", "d/2", "5-6"), modern=True) == Target("kb 1", "d/2", (5, 6))
    assert parse_uri("mcpbridge://kb/k/documents?page=3", modern=True) == Target("k", None, page=3)
    for page in ("0", "²", "-1", "x", "99999999"):
        with pytest.raises(JsonRpcError) as refused:
            parse_uri(f"mcpbridge://kb/k/documents?page={page}", modern=False)
        assert refused.value.code == INVALID_PARAMS
    for other in ("file:///etc/passwd", "mcpbridge://kb/k", "mcpbridge://x/k/documents", "mcpbridge://kb/k/docs/d"):
        for modern, code in ((True, INVALID_PARAMS), (False, RESOURCE_NOT_FOUND_HANDSHAKE)):
            with pytest.raises(JsonRpcError) as refused:
                parse_uri(other, modern=modern)
            assert (refused.value.code, refused.value.data) == (code, {"uri": other})


@pytest.fixture
def container(tmp_path: Path) -> Iterator[Container]:
    built = Container(Settings(data_dir=tmp_path / "data", jobs="inline"), embedder=HashingEmbedder(16))
    built.identity.initialize()
    yield built
    built.close()


def test_listing_pages_cover_every_readable_document_once(container: Container) -> None:
    access = KnowledgeAccess(container.identity.installed_workspace_id())
    made = set()
    for name, count in (("A", LIST_PAGE_SIZE + 3), ("B", 4)):
        kb = container.knowledge_bases.create(access, name=name)
        for n in range(count):
            document = container.documents.create_from_text(access, kb.id, title=f"{name}{n}", content=f"text {n}")
            made.add(document_uri(kb.id, document.id))
    resources = Resources(container, access)
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = resources.listing(cursor)
        pages += 1
        seen.extend(r["uri"] for r in page["resources"])
        cursor = page.get("nextCursor")
        if cursor is None:
            break
    assert pages == 2
    assert sorted(seen) == sorted(made)
    assert len(seen) == len(made)


def test_a_long_document_is_read_in_windows_that_name_the_next(container: Container) -> None:
    access = KnowledgeAccess(container.identity.installed_workspace_id())
    kb = container.knowledge_bases.create(access, name="Long")
    line = "x" * 999
    lines = READ_MAX_CHARS // 1000 * 2 + 5
    document = container.documents.create_from_text(access, kb.id, title="Long", content="\n".join([line] * lines))
    resources = Resources(container, access)
    uri: str | None = document_uri(kb.id, document.id)
    got: list[str] = []
    while uri is not None:
        (content,) = resources.read(uri, modern=True)["contents"]
        assert len(content["text"]) <= READ_MAX_CHARS
        got.extend(content["text"].split("\n"))
        uri = content["_meta"]["mcpbridge/window"]["next"]
    assert got == [line] * lines


def _headers(**values: str) -> protocol.Headers:
    return protocol.Headers([(name.replace("_", "-").encode(), value.encode()) for name, value in values.items()])


def test_routing_headers_are_compared_without_the_whitespace_around_them() -> None:
    meta = {PROTOCOL_VERSION_META: "2026-07-28", CLIENT_CAPABILITIES_META: {}}
    body = {"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": "mcpbridge://kb/k", "_meta": meta}}
    padded = _headers(mcp_protocol_version="2026-07-28", mcp_method=" resources/read\t", mcp_name="\tmcpbridge://kb/k ")
    assert protocol.modern_rejection(body, padded) is None
    other = _headers(mcp_protocol_version="2026-07-28", mcp_method="resources/read", mcp_name="mcpbridge://kb/j")
    rejection = protocol.modern_rejection(body, other)
    assert rejection is not None
    assert rejection.code == protocol.HEADER_MISMATCH
    assert "'uri'" in rejection.message
