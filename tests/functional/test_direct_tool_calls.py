"""Tool calls sent directly on a Streamable HTTP session (:mod:`mcpbridge.client.streamable_call`) end as the same
calls sent by the MCP SDK's session: the same result, or the same error of mcpbridge's tree, and the same answers
to what the server asks meanwhile.

The upstream is a handshake-era Streamable HTTP server on 127.0.0.1 whose tool answers as its ``scenario`` argument
says: JSON or an event stream, notifications and requests from the server (ping, sampling) before the answer, a
JSON-RPC error in a 200 or a 4xx body, plain HTTP failures, 202, an unexpected content type, a redirect elsewhere, a
stream that ends without the answer (with and without an event id to resume from), a session it no longer knows,
structured content that breaks the tool's output schema. And the SDK's own server in the 2026-07-28 era, whose
tool reads an argument from an ``Mcp-Param-*`` header. Each scenario runs through both paths, one after the other.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from mcp import types
from mcp.server.lowlevel import Server
from starlette.types import Receive, Scope, Send

from mcpbridge.client.connection import Connection, ConnectionSpec
from mcpbridge.errors import MCPBridgeError
from mcpbridge.outbound.policy import EgressPolicy
from tests.support.everything import handle_stateless
from tests.support.live_server import live_server

pytestmark = [pytest.mark.slow]

POLICY = EgressPolicy(["127.0.0.1"])
CLIENT_TIMEOUT = 30.0
"""The clients' read timeout: no scenario waits for it, so it only ends a call that went wrong."""
OUTPUT_SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
TOOLS = [
    {"name": "probe", "inputSchema": {"type": "object"}},
    {"name": "shaped", "inputSchema": {"type": "object"}, "outputSchema": OUTPUT_SCHEMA},
]


def _result(text: str, **extra: Any) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": False, **extra}


class Upstream:
    """A handshake-era Streamable HTTP MCP server (sessions, JSON and event-stream answers), its tools answering as
    the ``scenario`` argument says; it keeps what the client answered to its own requests."""

    def __init__(self) -> None:
        self.replies: list[dict[str, Any]] = []
        self.sessions = 0
        self.rejections_left = 0
        self.pending_id: Any = None
        self._replied: asyncio.Event | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {name.decode(): value.decode() for name, value in scope["headers"]}
        if scope["method"] == "GET":
            if "last-event-id" in headers:  # the resumed stream of the call that lost its own
                answer = {"jsonrpc": "2.0", "id": self.pending_id, "result": _result("resumed")}
                await _events(send, [f"id: e2\ndata: {json.dumps(answer)}\n\n"])
            else:
                await _reply(send, 405)
            return
        if scope["method"] == "DELETE":
            await _reply(send, 200)
            return
        body = b""
        while True:
            part = await receive()
            body += part.get("body", b"")
            if not part.get("more_body"):
                break
        message = json.loads(body)
        if "method" not in message:  # the client's answer to a request of ours
            self.replies.append(message)
            self._event().set()
            await _reply(send, 202)
            return
        await self._request(message, send)

    def _event(self) -> asyncio.Event:
        if self._replied is None:
            self._replied = asyncio.Event()
        return self._replied

    async def _request(self, message: dict[str, Any], send: Send) -> None:
        method, request_id = message["method"], message.get("id")
        if method == "server/discover":
            await _json(send, {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "no"}})
        elif method == "initialize":
            self.sessions += 1
            result = {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "scenarios", "version": "1"},
            }
            session = {"mcp-session-id": f"session-{self.sessions}"}
            await _json(send, {"jsonrpc": "2.0", "id": request_id, "result": result}, headers=session)
        elif method.startswith("notifications/"):
            await _reply(send, 202)
        elif method == "tools/list":
            await _json(send, {"jsonrpc": "2.0", "id": request_id, "result": {"tools": TOOLS}})
        else:
            await self._call(message["params"], request_id, send)

    async def _call(self, params: dict[str, Any], request_id: Any, send: Send) -> None:
        scenario = params["arguments"]["scenario"]
        answer = {"jsonrpc": "2.0", "id": request_id, "result": _result(f"done: {scenario}")}
        if scenario == "json":
            await _json(send, answer)
        elif scenario == "events":
            progress = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": 1}}
            await _events(send, [f"data: {json.dumps(progress)}\n\n", f"id: e1\ndata: {json.dumps(answer)}\n\n"])
        elif scenario in ("ping", "sampling", "unknown request"):
            asked = {"ping": "ping", "sampling": "sampling/createMessage", "unknown request": "tasks/frobnicate"}
            params_of = {"messages": [], "maxTokens": 5} if scenario == "sampling" else {}
            request = {"jsonrpc": "2.0", "id": f"s-{scenario}", "method": asked[scenario], "params": params_of}
            await _events(send, [f"data: {json.dumps(request)}\n\n"], more=True)
            with anyio.move_on_after(CLIENT_TIMEOUT):  # by then the client has given up the call, and says so
                await self._event().wait()
            self._event().clear()
            await send({"type": "http.response.body", "body": f"data: {json.dumps(answer)}\n\n".encode()})
        elif scenario == "shaped":
            await _json(send, {"jsonrpc": "2.0", "id": request_id, "result": _result("{}", structuredContent={"n": 2})})
        elif scenario == "misshaped":
            wrong = _result("{}", structuredContent={"n": "two"})
            await _json(send, {"jsonrpc": "2.0", "id": request_id, "result": wrong})
        else:
            await self._failure(scenario, request_id, answer, send)

    async def _failure(self, scenario: str, request_id: Any, answer: dict[str, Any], send: Send) -> None:
        error = {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32602, "message": "a must be a number"}}
        if scenario == "error":
            await _json(send, error)
        elif scenario == "error in a 400":
            await _json(send, error, status=400)
        elif scenario == "plain 500":
            await _reply(send, 500, b"oops", b"text/plain")
        elif scenario == "accepted":
            await _reply(send, 202)
        elif scenario == "text":
            await _reply(send, 200, b"hello", b"text/plain")
        elif scenario == "redirect":
            await send({"type": "http.response.start", "status": 302, "headers": [(b"location", b"http://x.test/")]})
            await send({"type": "http.response.body", "body": b""})
        elif scenario == "cut":
            await _events(send, [": nothing but a comment\n\n"])
        elif scenario == "resumable":
            self.pending_id = request_id
            await _events(send, ["retry: 10\nid: e1\ndata: \n\n"])
        elif scenario == "forgotten" and self.rejections_left:
            self.rejections_left -= 1  # this session is unknown now; the client starts another
            await _reply(send, 404, b'{"error": "Session not found"}', b"application/json")
        else:
            await _json(send, answer)


async def _reply(send: Send, status: int, body: bytes = b"", content_type: bytes | None = None) -> None:
    headers = [(b"content-type", content_type)] if content_type else []
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _json(send: Send, message: Any, *, status: int = 200, headers: dict[str, str] | None = None) -> None:
    extra = [(name.encode(), value.encode()) for name, value in (headers or {}).items()]
    await send(
        {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json"), *extra]}
    )
    await send({"type": "http.response.body", "body": json.dumps(message).encode()})


async def _events(send: Send, events: list[str], *, more: bool = False) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    await send({"type": "http.response.body", "body": "".join(events).encode(), "more_body": more})


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[str, Upstream]]:
    app = Upstream()
    with live_server(app) as base_url:
        yield f"{base_url}/mcp", app


async def _outcome(url: str, direct: bool, tool: str, arguments: dict[str, Any]) -> tuple[Any, ...]:
    spec = ConnectionSpec(url, "http-streamable", timeout=CLIENT_TIMEOUT)
    try:
        async with Connection(spec, POLICY, direct_calls=direct) as connection:
            result = await connection.call_tool(tool, arguments)
            return ("result", result.model_dump(mode="json", by_alias=True, exclude_none=True), connection.reconnects)
    except MCPBridgeError as error:
        return ("error", type(error).__name__, error.code, error.details, error.message)


ANSWERED = {
    "ping": [{"jsonrpc": "2.0", "result": {}}],
    "sampling": [{"jsonrpc": "2.0", "error": {"code": -32600, "message": "Sampling not supported"}}],
    "unknown request": [
        {"jsonrpc": "2.0", "error": {"code": -32601, "message": "Method not found", "data": "tasks/frobnicate"}}
    ],
}
"""What the client answers to the server's own requests (their ids aside)."""

SCENARIOS = [
    "json",
    "events",
    "ping",
    "sampling",
    "unknown request",
    "error",
    "error in a 400",
    "plain 500",
    "accepted",
    "text",
    "redirect",
    "cut",
    "resumable",
    "forgotten",
]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_direct_call_ends_as_the_sdks(upstream: tuple[str, Upstream], scenario: str) -> None:
    url, server = upstream
    outcomes, replies = [], []
    for direct in (True, False):
        server.replies.clear()
        server.rejections_left = 1
        outcomes.append(anyio.run(_outcome, url, direct, "probe", {"scenario": scenario}))
        replies.append([{k: v for k, v in reply.items() if k != "id"} for reply in server.replies])
    assert outcomes[0] == outcomes[1]
    assert replies[0] == replies[1]
    assert replies[0] == ANSWERED.get(scenario, [])
    if scenario in ("json", "events", "ping", "sampling", "unknown request", "resumable", "forgotten"):
        assert outcomes[0][0] == "result", outcomes[0]


@pytest.mark.parametrize("scenario", ["shaped", "misshaped"])
def test_structured_content_is_checked_against_the_output_schema_alike(
    upstream: tuple[str, Upstream], scenario: str
) -> None:
    url, _ = upstream
    direct, sdk = (anyio.run(_outcome, url, way, "shaped", {"scenario": scenario}) for way in (True, False))
    assert direct == sdk
    assert direct[0] == ("result" if scenario == "shaped" else "error"), direct


# ---------------------------------------------------------------------------------------------------- 2026-07-28


def _modern_server() -> Any:
    schema = {"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region"}}}

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool(name="where", input_schema=schema)])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        region = ctx.request.headers.get("mcp-param-region")
        return types.CallToolResult(content=[types.TextContent(type="text", text=f"{params.arguments} {region}")])

    server: Server[Any] = Server("modern", version="1", on_list_tools=list_tools, on_call_tool=call_tool)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await handle_stateless(server, scope, receive, send, json_response=False)

    return app


def test_a_modern_call_carries_its_param_headers_as_the_sdks_does() -> None:
    with live_server(_modern_server()) as base_url:
        direct, sdk = (anyio.run(_outcome, f"{base_url}/", way, "where", {"region": "é-west"}) for way in (True, False))
    assert direct == sdk
    assert direct[0] == "result"
    assert direct[1]["content"][0]["text"] == "{'region': 'é-west'} =?base64?w6ktd2VzdA==?="
