"""A JSON-RPC error the upstream MCP server answers is reported as that error (``upstream_error``, its code, its
message without our secrets), not as a broken connection or an outcome in doubt.

The SDK makes up ``-32000`` ("Connection closed", "SSE stream ended without a response") when a connection or an
answer stream is lost, and many servers answer ``-32000`` for their own failures: both must be told apart, and a
lost answer must stay :class:`~mcpbridge.client.connection.OutcomeUnknown` (it may have run). Real servers on
127.0.0.1: the SDK's low-level server over Streamable HTTP (JSON answers and event-stream answers), the legacy
HTTP+SSE server of ``tests/support/legacy_sse.py``, and a bare ASGI app for a stream that ends without its answer.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from mcpbridge.client.connection import Connection, ConnectionSpec, OutcomeUnknown
from mcpbridge.errors import UpstreamError
from mcpbridge.outbound.policy import EgressPolicy
from tests.support.everything import serve
from tests.support.legacy_sse import LegacySSEServer

pytestmark = [pytest.mark.slow]

POLICY = EgressPolicy(["127.0.0.1"])
SECRET = "sk-upstream-0123456789abcdef"
QUERY_SECRET = "q-secret-9876543210"
ERRORS = [(-32000, "the backend exploded"), (-32602, "invalid params: a must be a number"), (-32601, "no such tool")]
_request_echo: contextvars.ContextVar[str] = contextvars.ContextVar("request_echo", default="")


class Failing:
    """An SDK server whose tool ``fail`` answers the JSON-RPC error its arguments name; the message also repeats the
    request's Authorization header and query (as a careless server would) and a control character."""

    def __init__(self, *, json_response: bool) -> None:
        self.json_response = json_response

        async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            schema = {"type": "object", "properties": {"code": {"type": "integer"}, "message": {"type": "string"}}}
            return types.ListToolsResult(tools=[types.Tool(name="fail", input_schema=schema)])

        async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            arguments = params.arguments or {}
            echoed = _request_echo.get()
            raise MCPError(code=int(arguments["code"]), message=f"{arguments['message']}\x07 (you sent {echoed})")

        self.server: Server[Any] = Server("failing", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope)
        marker = _request_echo.set(f"{request.headers.get('authorization')} ?{request.url.query}")
        try:
            manager = StreamableHTTPSessionManager(
                app=self.server,
                json_response=self.json_response,
                stateless=True,
                security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
            )
            async with manager.run():
                await manager.handle_request(scope, receive, send)
        finally:
            _request_echo.reset(marker)


class LegacyFailing(LegacySSEServer):
    """The legacy HTTP+SSE server, its tool ``fail`` answering the JSON-RPC error its arguments name."""

    def _answer(self, request: dict[str, Any]) -> dict[str, Any]:
        params = request.get("params") or {}
        if request["method"] == "tools/call" and params.get("name") == "fail":
            arguments = params.get("arguments") or {}
            return {"error": {"code": arguments["code"], "message": arguments["message"]}}
        return super()._answer(request)


@contextlib.contextmanager
def upstream(kind: str) -> Iterator[ConnectionSpec]:
    headers = {"Authorization": f"Bearer {SECRET}"}
    if kind == "legacy-sse":
        legacy = LegacyFailing()
        with serve(legacy) as base:
            try:
                yield ConnectionSpec(f"{base}/sse?key={QUERY_SECRET}", "sse", headers=headers, timeout=10)
            finally:
                legacy.close()
        return
    with serve(Failing(json_response=kind == "json"), lifespan="off") as base:
        yield ConnectionSpec(f"{base}/mcp?key={QUERY_SECRET}", "http-streamable", headers=headers, timeout=10)


async def call_and_fail(spec: ConnectionSpec, arguments: dict[str, Any]) -> UpstreamError:
    async with Connection(spec, POLICY) as connection:
        with pytest.raises(UpstreamError) as raised:
            await connection.call_tool("fail", arguments)
        # The session is still good: the error was an answer, not a failure of the connection.
        with pytest.raises(UpstreamError) as again:
            await connection.call_tool("fail", arguments)
        assert again.value.code == raised.value.code
        assert connection.reconnects == 0
    return raised.value


@pytest.mark.parametrize("kind", ["json", "event-stream", "legacy-sse"])
@pytest.mark.parametrize(("code", "text"), ERRORS)
def test_a_jsonrpc_error_answer_is_reported_as_that_error(kind: str, code: int, text: str) -> None:
    with upstream(kind) as spec:
        error = anyio.run(call_and_fail, spec, {"code": code, "message": text})
    assert not isinstance(error, OutcomeUnknown), error
    assert error.code == "upstream_error"
    assert error.details == {"jsonrpc_code": code}
    assert error.message.startswith(f"127.0.0.1 answered with JSON-RPC error {code}: {text}")
    assert error.retryable is True


@pytest.mark.parametrize("kind", ["json", "event-stream"])
def test_the_servers_text_comes_without_our_secrets_or_control_characters(kind: str) -> None:
    long = "x" * 1000
    with upstream(kind) as spec:
        error = anyio.run(call_and_fail, spec, {"code": -32000, "message": f"failed {long}"})
        short = anyio.run(call_and_fail, spec, {"code": -32000, "message": "failed"})
    assert error.code == short.code == "upstream_error"
    assert len(error.message) < 400
    assert error.message.endswith("…")
    assert SECRET not in short.message
    assert QUERY_SECRET not in short.message
    assert "[redacted]" in short.message
    assert "\x07" not in short.message


class RawStreamable:
    """A bare Streamable HTTP server: the handshake answered in JSON, ``tools/call`` answered with the event-stream
    body ``call_answer(request_id)`` sent in small chunks (the stream then ends)."""

    def __init__(self, call_answer: Callable[[Any], bytes], chunk: int = 97) -> None:
        self.call_answer = call_answer
        self.chunk = chunk

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        request = json.loads(body or b"{}")
        if "id" not in request:  # a notification
            await send({"type": "http.response.start", "status": 202, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        if request.get("method") == "tools/call":
            stream = self.call_answer(request["id"])
            headers = [(b"content-type", b"text/event-stream")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            for start in range(0, len(stream), self.chunk):
                await send(
                    {"type": "http.response.body", "body": stream[start : start + self.chunk], "more_body": True}
                )
            await send({"type": "http.response.body", "body": b""})
            return
        if request.get("method") == "initialize":
            result = {
                "protocolVersion": "2025-06-18",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "raw", "version": "1"},
            }
            answer: dict[str, Any] = {"jsonrpc": "2.0", "id": request["id"], "result": result}
        else:
            answer = {"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32601, "message": "Method not found"}}
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": json.dumps(answer).encode()})


def _event(message: dict[str, Any]) -> bytes:
    return b"event: message\r\ndata: " + json.dumps(message).encode() + b"\r\n\r\n"


def test_an_error_event_after_a_large_one_in_small_chunks_is_the_servers() -> None:
    def answer(request_id: Any) -> bytes:
        # A large progress-like notification first (it mentions "error", and is too large to be looked at).
        chatter = {
            "jsonrpc": "2.0",
            "method": "notifications/message",
            "params": {"level": "info", "data": '"error"' * 20_000},
        }
        error = {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32000, "message": "quota exhausted"}}
        return b": keep-alive\r\n\r\n" + _event(chatter) + _event(error)

    async def scenario(spec: ConnectionSpec) -> UpstreamError:
        async with Connection(spec, POLICY) as connection:
            with pytest.raises(UpstreamError) as raised:
                await connection.call_tool("anything", {})
        return raised.value

    with serve(RawStreamable(answer), lifespan="off") as base:
        error = anyio.run(scenario, ConnectionSpec(f"{base}/mcp", "http-streamable", timeout=10))
    assert not isinstance(error, OutcomeUnknown), error
    assert (error.code, error.details) == ("upstream_error", {"jsonrpc_code": -32000})
    assert "quota exhausted" in error.message


def test_an_answer_stream_that_ends_without_the_answer_stays_outcome_unknown() -> None:
    async def scenario(spec: ConnectionSpec) -> None:
        async with Connection(spec, POLICY) as connection:
            with pytest.raises(OutcomeUnknown) as raised:
                await connection.call_tool("anything", {})
        assert raised.value.code == "outcome_unknown"

    # The stream says it is working, then ends: the call may have run.
    with serve(RawStreamable(lambda request_id: b": working\n\n"), lifespan="off") as base:
        anyio.run(scenario, ConnectionSpec(f"{base}/mcp", "http-streamable", timeout=10))
