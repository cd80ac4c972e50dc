"""No answer an upstream MCP server sends is read past the cap (``upstream_max_answer_bytes``).

A hostile or broken upstream answers ``tools/list`` or ``tools/call`` with a body that does not end: a JSON body that
promises 300 MB in its ``Content-Length``, a chunked JSON body, an event stream whose one event never ends. Each
path that reads such answers (``POST .../test``, a catalog refresh, an agent's tool call) ends with
``answer_too_large``, which names the limit and the setting, and the connection is closed: the upstream sees its
client leave long before it has written what it meant to (it stops by itself at :data:`CEILING`, which is what an
unbounded reader would take in). The cap is small here (256 KiB) to keep the tests short; the default is 16 MiB.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import types
from mcp.server.lowlevel import Server

from mcpbridge.bootstrap import Container
from mcpbridge.http.apps import create_combined_app
from mcpbridge.settings import Settings
from tests.support.everything import handle_stateless, serve

pytestmark = [pytest.mark.slow]

CAP = 256 * 1024
CEILING = 64 * 1024 * 1024
"""The most an oversize answer writes before giving up on its own (an unbounded reader takes all of it)."""
FILLER = b'{"name":"t","inputSchema":{"type":"object"}},' * 1400
SHAPES = ("json-length", "json-chunked", "event-stream")


class Oversize:
    """An SDK server with one tool, ``echo``, except that ``method`` is answered with an answer of ``shape`` that
    goes on until its client leaves (or :data:`CEILING`)."""

    def __init__(self, method: str, shape: str) -> None:
        self.method = method
        self.shape = shape
        self.sent = 0
        self.left = anyio.Event()

        async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
            return types.ListToolsResult(tools=[types.Tool(name="echo", input_schema={"type": "object"})])

        async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            return types.CallToolResult(content=[types.TextContent(type="text", text="hi")])

        self.server: Server[Any] = Server("oversize", version="1", on_list_tools=list_tools, on_call_tool=call_tool)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await handle_stateless(self.server, scope, receive, send)
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        request = json.loads(body)
        if request.get("method") != self.method:
            replayed = [{"type": "http.request", "body": body, "more_body": False}]

            async def replay() -> Any:
                return replayed.pop() if replayed else await receive()

            await handle_stateless(self.server, scope, replay, send)
            return
        await self._oversize(request["id"], receive, send)

    async def _oversize(self, request_id: Any, receive: Any, send: Any) -> None:
        headers = [(b"content-type", b"application/json")]
        opening = json.dumps({"jsonrpc": "2.0", "id": request_id}).encode()[:-1] + b',"result":{"tools":['
        if self.shape == "json-length":
            headers.append((b"content-length", b"300000000"))
        elif self.shape == "event-stream":
            headers = [(b"content-type", b"text/event-stream")]
            opening = b"event: message\ndata: " + opening
        await send({"type": "http.response.start", "status": 200, "headers": headers})

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            self.left.set()

        async with anyio.create_task_group() as group:
            group.start_soon(watch)
            await send({"type": "http.response.body", "body": opening, "more_body": True})
            while not self.left.is_set() and self.sent < CEILING:
                await send({"type": "http.response.body", "body": FILLER, "more_body": True})
                self.sent += len(FILLER)
            group.cancel_scope.cancel()


@pytest.fixture
def container(tmp_path: Path) -> Iterator[Container]:
    built = Container(Settings(data_dir=tmp_path / "data", ssrf_allowlist=["127.0.0.1"], upstream_max_answer_bytes=CAP))
    yield built
    built.close()


@contextlib.asynccontextmanager
async def api(container: Container) -> AsyncIterator[httpx.AsyncClient]:
    key = container.identity.initialize().api_key
    transport = httpx.ASGITransport(app=create_combined_app(container))
    async with httpx.AsyncClient(
        transport=transport, base_url="http://mcpbridge.test", headers={"Authorization": f"Bearer {key}"}
    ) as client:
        yield client


async def register(client: httpx.AsyncClient, url: str) -> str:
    created = await client.post(
        "/api/v1/mcp-services",
        json={"name": "oversize", "transport": "http-streamable", "url": url, "advanced_config": {"retry_count": 0}},
    )
    assert created.status_code == 201, created.text
    service_id: str = created.json()["id"]
    return service_id


def assert_refused_for_size(error_code: str, message: str, upstream: Oversize) -> None:
    assert error_code == "answer_too_large", message
    assert "256 KiB" in message, message
    assert "MCPBRIDGE_UPSTREAM_MAX_ANSWER_BYTES" in message, message
    for _ in range(3000):  # the upstream notices that its client left (the connection was closed)
        if upstream.left.is_set():
            break
        time.sleep(0.02)
    assert upstream.left.is_set(), "the connection stayed open"
    assert upstream.sent < CEILING, "the answer was read to its end, not stopped at the cap"


@pytest.mark.parametrize("shape", SHAPES)
def test_a_listing_past_the_cap_fails_the_connection_test(container: Container, shape: str) -> None:
    upstream = Oversize("tools/list", shape)

    async def scenario(base: str) -> dict[str, Any]:
        async with api(container) as client:
            service_id = await register(client, f"{base}/mcp")
            answer = await client.post(f"/api/v1/mcp-services/{service_id}/test")
        assert answer.status_code == 200, answer.text
        body: dict[str, Any] = answer.json()
        return body

    with serve(upstream, lifespan="off") as base:
        body = anyio.run(scenario, base)
        assert body["success"] is False, body
        assert_refused_for_size(body["error_code"], body["message"], upstream)


@pytest.mark.parametrize("shape", SHAPES)
def test_a_listing_past_the_cap_fails_the_catalog_refresh_and_keeps_nothing(container: Container, shape: str) -> None:
    upstream = Oversize("tools/list", shape)

    async def scenario(base: str) -> tuple[httpx.Response, httpx.Response]:
        async with api(container) as client:
            service_id = await register(client, f"{base}/mcp")
            refreshed = await client.post(f"/api/v1/mcp-services/{service_id}/metadata/refresh")
            catalog = await client.get(f"/api/v1/mcp-services/{service_id}/metadata")
        return refreshed, catalog

    with serve(upstream, lifespan="off") as base:
        refreshed, catalog = anyio.run(scenario, base)
        assert refreshed.status_code == 502, refreshed.text
        problem = refreshed.json()
        assert_refused_for_size(problem["code"], problem["detail"], upstream)
    shown = catalog.json()
    assert shown["data"] is None, "nothing of the refused answer is kept"
    assert shown["last_error"]["code"] == "answer_too_large", shown


@pytest.mark.parametrize("shape", SHAPES)
def test_a_tool_answer_past_the_cap_fails_the_agent_call(container: Container, shape: str) -> None:
    upstream = Oversize("tools/call", shape)

    async def scenario(base: str) -> httpx.Response:
        async with api(container) as client:
            service_id = await register(client, f"{base}/mcp")
            refreshed = await client.post(f"/api/v1/mcp-services/{service_id}/metadata/refresh")
            assert refreshed.status_code == 200, refreshed.text
            described = await client.get(
                "/api/v1/agent/tools/describe", params={"service_id": service_id, "tool_name": "echo"}
            )
            assert described.status_code == 200, described.text
            return await client.post(
                "/api/v1/agent/tool-calls", json={"tool_ref": described.json()["tool_ref"], "arguments": {}}
            )

    with serve(upstream, lifespan="off") as base:
        called = anyio.run(scenario, base)
        body = called.json()
        error = body.get("error") or {}
        assert (called.status_code, body.get("status")) == (200, "failed"), called.text
        assert_refused_for_size(error.get("code", ""), error.get("message", ""), upstream)
