"""A published endpoint's documents as resources, its prompts and completion, through the official SDK client over
real HTTP on 2025-11-25 and 2026-07-28: against the combined app served on 127.0.0.1 (what ``mcpbridge serve``
runs) and against the template's Lambda functions behind an emulated HTTP API on moto. A KB-scoped endpoint, and an
OAuth user whose key reaches one knowledge base, each see (list, read, complete, prompt) only their documents."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import PromptReference, ResourceTemplateReference

from mcpbridge.http.mcp.resources import DOCUMENT_TEMPLATE, LIST_PAGE_SIZE, READ_MAX_CHARS, document_uri
from tests.support.oauth_flow import Browser, Hub, OAuthClient, close_clients, hub_on, lambda_hub

BACKENDS = ["serve", "lambda"]
MODES = ["legacy", "2026-07-28"]
"""The SDK client's modes: ``legacy`` negotiates 2025-11-25 through ``initialize``; 2026-07-28 has no handshake."""
ARCTIC = "\n".join(f"Line {n}: walruses and seals share the ice." for n in range(1, 301))


@dataclass
class World:
    hub: Hub
    field_kb: str
    private_kb: str
    arctic: str
    tundra: str
    secret: str
    wide: dict[str, Any]
    narrow: dict[str, Any]
    oauth_token: str
    """An OAuth access token on ``wide`` of a user whose key reaches ``Private`` only."""


@contextlib.contextmanager
def _hub(backend: str, tmp: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Hub]:
    if backend == "serve":
        with hub_on("local", tmp, monkeypatch) as hub:
            yield hub
    else:
        with lambda_hub(monkeypatch, jobs="inline") as hub:
            yield hub


@pytest.fixture(scope="module", params=BACKENDS)
def world(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with (
        pytest.MonkeyPatch.context() as monkeypatch,
        _hub(request.param, tmp_path_factory.mktemp("res"), monkeypatch) as hub,
    ):
        field = hub.post("/api/v1/knowledge-bases", {"name": "Field notes"})["id"]
        private = hub.post("/api/v1/knowledge-bases", {"name": "Private"})["id"]

        def add(kb: str, title: str, content: str) -> str:
            return str(hub.post(f"/api/v1/knowledge-bases/{kb}/documents", {"title": title, "content": content})["id"])

        arctic = add(field, "Arctic", ARCTIC)
        tundra = add(field, "Tundra", "# Tundra\n\nLemmings under the snow.\nFoxes follow them.")
        secret = add(private, "Secret", "Walruses in the private base.")
        wide = hub.publish(name="Everything")
        narrow = hub.publish(name="Field only", knowledge_base_ids=[field])
        _, key = hub.user_with_key("Ann", knowledge_base_ids=[private])
        client = OAuthClient(wide["url"])
        client.discover()
        assert client.register().status_code == 201
        token = str(client.tokens(Browser(), key)["access_token"])
        close_clients()
        yield World(hub, field, private, arctic, tundra, secret, wide, narrow, token)


async def _session(url: str, token: str, mode: str, work: Any) -> Any:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        return await work(client)


def session(url: str, token: str, mode: str, work: Any) -> Any:
    return asyncio.run(_session(url, token, mode, work))


async def _all_uris(client: Client) -> list[str]:
    uris: list[str] = []
    cursor = None
    while True:
        page = await client.list_resources(cursor=cursor)
        uris.extend(str(r.uri) for r in page.resources)
        cursor = page.next_cursor
        if cursor is None:
            return uris


@pytest.mark.parametrize("mode", MODES)
def test_documents_are_listed_read_and_windowed(world: World, mode: str) -> None:
    arctic_uri = document_uri(world.field_kb, world.arctic)

    async def work(client: Client) -> Any:
        listed = await client.list_resources()
        templates = await client.list_resource_templates()
        whole = await client.read_resource(arctic_uri)
        lines = await client.read_resource(document_uri(world.field_kb, world.arctic, "10-12"))
        kb_list = await client.read_resource(f"mcpbridge://kb/{world.field_kb}/documents?page=1")
        return listed, templates, whole, lines, kb_list

    listed, templates, whole, lines, kb_list = session(world.wide["url"], world.wide["token"], mode, work)
    by_uri = {str(r.uri): r for r in listed.resources}
    assert set(by_uri) == {
        arctic_uri,
        document_uri(world.field_kb, world.tundra),
        document_uri(world.private_kb, world.secret),
    }
    assert by_uri[arctic_uri].title == "Arctic"
    assert by_uri[arctic_uri].mime_type == "text/markdown"
    assert by_uri[arctic_uri].meta["mcpbridge/document"]["line_count"] == 300
    assert {t.uri_template for t in templates.resource_templates} >= {DOCUMENT_TEMPLATE}
    (content,) = whole.contents
    assert content.text == ARCTIC
    assert content.mime_type == "text/markdown"
    assert content.meta["mcpbridge/window"] == {
        "first_line": 1,
        "last_line": 300,
        "total_lines": 300,
        "truncated": False,
        "max_chars": READ_MAX_CHARS,
        "next": None,
    }
    (window,) = lines.contents
    assert window.text.splitlines() == [f"Line {n}: walruses and seals share the ice." for n in (10, 11, 12)]
    assert '"title": "Tundra"' in kb_list.contents[0].text
    assert "Secret" not in kb_list.contents[0].text


@pytest.mark.parametrize("mode", MODES)
def test_completion_and_prompts(world: World, mode: str) -> None:
    async def work(client: Client) -> Any:
        template = ResourceTemplateReference(type="ref/resource", uri=DOCUMENT_TEMPLATE)
        by_title = await client.complete(template, {"name": "document_id", "value": "tund"}, {"kb_id": world.field_kb})
        bases = await client.complete(template, {"name": "kb_id", "value": "fie"})
        prompt_ref = PromptReference(type="ref/prompt", name="summarise_document")
        for_prompt = await client.complete(prompt_ref, {"name": "document", "value": "Arc"})
        prompts = await client.list_prompts()
        summary = await client.get_prompt("summarise_document", {"document": world.tundra})
        cited = await client.get_prompt(
            "answer_with_citations", {"question": "walruses ice", "knowledge_base": "Field notes"}
        )
        return by_title, bases, for_prompt, prompts, summary, cited

    by_title, bases, for_prompt, prompts, summary, cited = session(world.wide["url"], world.wide["token"], mode, work)
    assert by_title.completion.values == [world.tundra]
    assert bases.completion.values == [world.field_kb]
    assert for_prompt.completion.values == [world.arctic]
    assert {p.name for p in prompts.prompts} == {"answer_with_citations", "summarise_document", "compare_documents"}
    assert summary.messages[1].content.resource.text.startswith("# Tundra")
    passages = [m.content.resource for m in cited.messages[1:]]
    assert passages
    assert all(str(p.uri).startswith(f"mcpbridge://kb/{world.field_kb}/documents/") for p in passages)


def _scope_seen(world: World, url: str, token: str, mode: str) -> tuple[set[str], list[str], list[int]]:
    """What a caller sees: the URIs listed, the ids completed from nothing, and the error codes of reading
    the three documents (0: read)."""

    async def work(client: Client) -> Any:
        uris = set(await _all_uris(client))
        ref = ResourceTemplateReference(type="ref/resource", uri=DOCUMENT_TEMPLATE)
        completed = (await client.complete(ref, {"name": "document_id", "value": ""})).completion.values
        codes = []
        for kb, doc in (
            (world.field_kb, world.arctic),
            (world.field_kb, world.tundra),
            (world.private_kb, world.secret),
        ):
            try:
                await client.read_resource(document_uri(kb, doc))
                codes.append(0)
            except MCPError as exc:
                codes.append(exc.error.code)
        return uris, sorted(completed), codes

    return session(url, token, mode, work)  # type: ignore[no-any-return]


@pytest.mark.parametrize("mode", MODES)
def test_a_kb_scoped_endpoint_sees_only_its_documents(world: World, mode: str) -> None:
    uris, completed, codes = _scope_seen(world, world.narrow["url"], world.narrow["token"], mode)
    not_found = -32602 if mode == "2026-07-28" else -32002
    assert uris == {document_uri(world.field_kb, world.arctic), document_uri(world.field_kb, world.tundra)}
    assert completed == sorted([world.arctic, world.tundra])
    assert codes == [0, 0, not_found]


@pytest.mark.parametrize("mode", MODES)
def test_an_oauth_user_sees_only_what_their_key_reaches(world: World, mode: str) -> None:
    uris, completed, codes = _scope_seen(world, world.wide["url"], world.oauth_token, mode)
    not_found = -32602 if mode == "2026-07-28" else -32002
    assert uris == {document_uri(world.private_kb, world.secret)}
    assert completed == [world.secret]
    assert codes == [not_found, not_found, 0]


def _rpc(
    world: World,
    method: str,
    params: dict[str, Any],
    headers: dict[str, str] | None = None,
    *,
    token: str | None = None,
    url: str | None = None,
) -> httpx.Response:
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
    sent = {
        "accept": "application/json",
        "authorization": f"Bearer {token or world.wide['token']}",
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": method,
        **(headers or {}),
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}}
    return httpx.post(url or world.wide["url"], json=body, headers=sent, timeout=30)


def test_bad_uris_and_windows_are_named_and_a_long_listing_pages(world: World) -> None:
    arctic = document_uri(world.field_kb, world.arctic)
    for uri, fault in (
        (f"{arctic}?lines=9-3", "lines must be a-b"),
        (f"{arctic}?lines=400-", "the document has 300 lines"),
        (f"{arctic}?page=2", "query parameter"),
        (f"{arctic}?lines=1-2&lines=3-4", "query parameter"),
    ):
        answer = _rpc(world, "resources/read", {"uri": uri}, {"mcp-name": uri})
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["code"] == -32602, answer.text
        assert fault in error["message"], answer.text
    unknown = _rpc(world, "resources/read", {"uri": "file:///etc/passwd"}, {"mcp-name": "file:///etc/passwd"})
    assert unknown.json()["error"] == {
        "code": -32602,
        "message": "Resource not found",
        "data": {"uri": "file:///etc/passwd"},
    }
    bad_cursor = _rpc(world, "resources/list", {"cursor": "not-a-cursor"})
    assert bad_cursor.status_code == 400
    assert bad_cursor.json()["error"]["code"] == -32602
    assert LIST_PAGE_SIZE >= 3  # the listing above fits one page; paging is covered by the unit tests


def test_reads_and_prompts_count_in_the_rate_limit_and_listings_do_not(world: World) -> None:
    limited = world.hub.publish(name="Slow", knowledge_base_ids=[world.field_kb], rate_limit_per_minute=2)
    uri = document_uri(world.field_kb, world.tundra)
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}

    def call(method: str, params: dict[str, Any], name: str | None = None) -> httpx.Response:
        headers = {
            "accept": "application/json",
            "authorization": f"Bearer {limited['token']}",
            "mcp-protocol-version": "2026-07-28",
            "mcp-method": method,
            **({"mcp-name": name} if name else {}),
        }
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}}
        return httpx.post(limited["url"], json=body, headers=headers, timeout=30)

    read = call("resources/read", {"uri": uri}, uri)
    prompt = call(
        "prompts/get", {"name": "summarise_document", "arguments": {"document": world.tundra}}, "summarise_document"
    )
    refused = call("resources/read", {"uri": uri}, uri)
    assert [read.status_code, prompt.status_code] == [200, 200]
    error = refused.json()["error"]
    assert error["code"] == -32029, refused.text
    assert error["data"]["retry_after_seconds"] >= 1
    assert "contents" not in refused.text
    assert call("resources/list", {}).status_code == 200, "listing is never limited"


def test_capabilities_are_declared_only_where_the_tools_allow_them(world: World) -> None:
    seen = {}
    for tools in (["list_knowledge_bases"], ["search_knowledge"], ["read_document"]):
        endpoint = world.hub.publish(name="Some", tools=tools)
        discovered = _rpc(world, "server/discover", {}, token=endpoint["token"], url=endpoint["url"])
        listing = _rpc(world, "resources/list", {}, token=endpoint["token"], url=endpoint["url"])
        prompts = _rpc(world, "prompts/list", {}, token=endpoint["token"], url=endpoint["url"])
        names = [p["name"] for p in prompts.json()["result"]["prompts"]] if prompts.status_code == 200 else None
        seen[tools[0]] = (sorted(discovered.json()["result"]["capabilities"]), listing.status_code, names)
    assert seen == {
        "list_knowledge_bases": (["tools"], 404, None),
        "search_knowledge": (["completions", "prompts", "tools"], 404, ["answer_with_citations"]),
        "read_document": (
            ["completions", "prompts", "resources", "tools"],
            200,
            ["summarise_document", "compare_documents"],
        ),
    }


def test_an_oauth_user_gets_no_prompt_of_a_document_beyond_their_key(world: World) -> None:
    async def work(client: Client) -> Any:
        try:
            return await client.get_prompt("summarise_document", {"document": world.arctic})
        except MCPError as refused:
            return refused

    refused = session(world.wide["url"], world.oauth_token, "2026-07-28", work)
    assert isinstance(refused, MCPError)
    assert refused.error.code == -32602
    assert world.arctic in refused.error.message
