"""The knowledge tools declare what they answer: an ``outputSchema`` and an icon per tool in ``tools/list``, and every
successful call's ``structuredContent`` fits its tool's schema, with the same JSON kept in ``content[0].text`` for
clients that read text only.

Through the official SDK client over real HTTP against the combined app on 127.0.0.1 (what ``mcpbridge serve``
runs), on 2025-11-25 (``initialize``) and 2026-07-28: the SDK client itself validates each result against the schema
it listed (a result that does not fit raises), and the test validates it again with ``jsonschema``. A 2025-03-26
client (no structured output in its version) gets the text.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import httpx2
import pytest
from jsonschema import Draft202012Validator
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcpbridge.publishing.offered_tools import BY_NAME
from tests.support.oauth_flow import Hub, hub_on

MODES = ["legacy", "2026-07-28"]
ALL_TOOLS = list(BY_NAME)
NOTES = "# Seals\n\nSeals rest on the ice floe.\nWalruses dive for clams.\n\n## Diet\n\nSeals eat fish."


@dataclass
class World:
    hub: Hub
    kb: str
    document: str
    endpoint: dict[str, Any]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with (
        pytest.MonkeyPatch.context() as monkeypatch,
        hub_on("local", tmp_path_factory.mktemp("outputs"), monkeypatch) as hub,
    ):
        kb = hub.post("/api/v1/knowledge-bases", {"name": "Field notes", "description": "Polar notes"})["id"]
        document = hub.post(f"/api/v1/knowledge-bases/{kb}/documents", {"title": "Seals", "content": NOTES})["id"]
        page = {"slug": "concept/seal", "type": "concept", "title": "Seal", "content": "Seals rest on the ice."}
        hub.post(f"/api/v1/knowledge-bases/{kb}/wiki/pages", page)
        endpoint = hub.publish(name="Everything", tools=ALL_TOOLS)
        yield World(hub, kb, document, endpoint)


async def _session(url: str, token: str, mode: str, work: Any) -> Any:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        return await work(client)


def session(world: World, mode: str, work: Any) -> Any:
    return asyncio.run(_session(world.endpoint["url"], world.endpoint["token"], mode, work))


@pytest.mark.parametrize("mode", MODES)
def test_every_knowledge_tool_declares_its_output_and_its_icon(world: World, mode: str) -> None:
    async def work(client: Client) -> Any:
        return await client.list_tools()

    listed = {tool.name: tool for tool in session(world, mode, work).tools}
    assert set(listed) == set(ALL_TOOLS)
    for name, tool in listed.items():
        schema = tool.output_schema
        assert schema is not None, name
        Draft202012Validator.check_schema(schema)
        assert schema["type"] == "object", name
        assert tool.icons, name
        (icon,) = tool.icons
        assert icon.mime_type == "image/svg+xml"
        assert icon.sizes == ["any"]
        prefix = "data:image/svg+xml;base64,"
        assert icon.src.startswith(prefix), "inlined: nothing for a client to fetch"
        svg = base64.b64decode(icon.src.removeprefix(prefix)).decode()
        assert svg.startswith("<svg ")
        assert svg.endswith("</svg>")
        assert "<script" not in svg, "a plain drawing, nothing active"
        assert "href" not in svg, "nothing linked"
    assert listed["ask"].output_schema is not None
    assert set(listed["ask"].output_schema["required"]) >= {"answer", "references", "session_id"}


def _calls(world: World) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("list_knowledge_bases", {}),
        ("search_knowledge", {"query": "seals ice", "mode": "keyword"}),
        ("grep_chunks", {"pattern": "walrus(es)?"}),
        ("list_documents", {"knowledge_base_id": world.kb}),
        ("read_document", {"document_id": world.document}),
        ("read_document", {"document_id": world.document, "query": "fish"}),
        ("read_document", {"document_id": world.document, "line": 4}),
        ("ask", {"question": "Where do seals rest?"}),
        ("wiki_index", {"knowledge_base_id": world.kb}),
        ("wiki_search", {"query": "ice"}),
        ("wiki_read_page", {"slug": "concept/seal"}),
    ]


@pytest.mark.parametrize("mode", MODES)
def test_structured_results_fit_the_declared_schemas_and_the_text_says_the_same(world: World, mode: str) -> None:
    calls = _calls(world)

    async def work(client: Client) -> Any:
        schemas = {tool.name: tool.output_schema for tool in (await client.list_tools()).tools}
        # The SDK client validates each result against the schema it listed, and raises when it does not fit.
        return schemas, [await client.call_tool(name, arguments) for name, arguments in calls]

    schemas, results = session(world, mode, work)
    for (name, arguments), result in zip(calls, results, strict=True):
        assert result.is_error is False, (name, result)
        structured = result.structured_content
        assert isinstance(structured, dict), name
        errors = sorted(Draft202012Validator(schemas[name]).iter_errors(structured), key=str)
        assert not errors, (name, arguments, [e.message for e in errors])
        assert json.loads(result.content[0].text) == structured, name
    by_name = dict(zip([name for name, _ in calls], results, strict=False))
    assert by_name["search_knowledge"].structured_content["results"], "the search found the notes"
    assert by_name["ask"].structured_content["references"], "the answer cites the notes"


@pytest.mark.parametrize("mode", MODES)
def test_the_write_tools_answers_fit_their_schemas(world: World, mode: str) -> None:
    async def work(client: Client) -> Any:
        added = await client.call_tool(
            "add_document", {"knowledge_base_id": world.kb, "title": f"Walruses {mode}", "content": "# Walruses"}
        )
        document_id = added.structured_content["document"]["id"]
        updated = await client.call_tool("update_document", {"document_id": document_id, "content": "# Walruses!"})
        deleted = await client.call_tool("delete_document", {"document_id": document_id})
        return [added, updated, deleted]

    for result in session(world, mode, work):  # validated by the SDK client on the way
        assert result.is_error is False, result
        assert json.loads(result.content[0].text) == result.structured_content


def test_an_error_result_is_not_held_to_the_schema(world: World) -> None:
    """A failing call is an ``isError`` result naming the error; the SDK client does not validate it (nor does the
    spec ask it to), so a client gets the error rather than a schema failure."""

    async def work(client: Client) -> Any:
        return await client.call_tool("read_document", {"document_id": "doc_nosuchdocument"})

    result = session(world, "2026-07-28", work)
    assert result.is_error is True
    assert result.structured_content["error"]["code"] == "document_not_found"


def test_a_2025_03_26_client_reads_the_same_json_as_text(world: World) -> None:
    """Structured output came with 2025-06-18: an older client reads ``content[0].text``, the same JSON."""
    headers = {"authorization": f"Bearer {world.endpoint['token']}", "accept": "application/json, text/event-stream"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "list_knowledge_bases"}}
    with contextlib.closing(httpx.Client(timeout=60)) as http:
        answer = http.post(world.endpoint["url"], json=body, headers=headers)
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    listed = json.loads(result["content"][0]["text"])
    assert [kb["name"] for kb in listed["knowledge_bases"]] == ["Field notes"]
