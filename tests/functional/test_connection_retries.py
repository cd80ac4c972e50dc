"""Connect retries of :class:`~mcpbridge.client.connection.Connection` against real sockets on 127.0.0.1.

A registered service's ``advanced_config.retry_count`` / ``retry_delay`` apply only where nothing can have run
upstream: establishing the connection and its handshake, when it was refused or broke (``upstream_unreachable``),
timed out (``upstream_timeout``) or was answered 502/503/504. Never 401/403, policy refusals or other errors, and
never a request that was sent (a lost tool call stays :class:`OutcomeUnknown`).

Attempts are counted (``open_session`` calls, handshakes seen by the server), never timed.
"""

from __future__ import annotations

import contextlib
import json
import math
import socket
import threading
from collections.abc import Iterator
from typing import Any

import anyio
import httpx2
import pytest
from mcp import types
from mcp.server.lowlevel import Server
from starlette.types import Message, Receive, Scope, Send

from mcpbridge.client import connection as connection_module
from mcpbridge.client.connection import Connection, ConnectionSpec, OutcomeUnknown, Transport, probe
from mcpbridge.client.specs import connection_spec
from mcpbridge.domain.external_services import AdvancedConfig, AuthConfig, ExternalService
from mcpbridge.errors import InvalidInput, UpstreamError
from mcpbridge.outbound import http as outbound_http
from mcpbridge.outbound.policy import EgressPolicy
from tests.support.everything import Everything, free_port, handle_stateless, serve

pytestmark = [pytest.mark.slow]

POLICY = EgressPolicy(["127.0.0.1"])
SECRET_QUERY = "key=s3cret-query-value"


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """One entry per connect attempt: every attempt opens one session with :func:`open_session`."""
    attempts: list[str] = []
    original = connection_module.open_session

    def counting(spec: ConnectionSpec, policy: EgressPolicy, **kwargs: Any) -> Any:
        attempts.append(spec.host)
        return original(spec, policy, **kwargs)

    monkeypatch.setattr(connection_module, "open_session", counting)
    return attempts


@pytest.fixture
def tool_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the tools/call requests that left through the guarded transport."""
    calls: list[str] = []
    original = outbound_http.GuardedAsyncTransport.handle_async_request

    async def recording(self: outbound_http.GuardedAsyncTransport, request: httpx2.Request) -> httpx2.Response:
        if request.method == "POST":
            body = request.content if isinstance(request.stream, httpx2.ByteStream) else b""
            with contextlib.suppress(ValueError):
                message = json.loads(body or b"null")
                if isinstance(message, dict) and message.get("method") == "tools/call":
                    calls.append(message["params"]["name"])
        return await original(self, request)

    monkeypatch.setattr(outbound_http.GuardedAsyncTransport, "handle_async_request", recording)
    return calls


# ---------------------------------------------------------------------------------------------- servers


async def read_body(receive: Receive) -> bytes:
    body = b""
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return body
        body += bytes(message.get("body", b""))
        if not message.get("more_body", False):
            return body


async def answer(send: Send, status: int, body: bytes = b"unavailable") -> None:
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": body})


class Flaky:
    """A stateless Streamable HTTP MCP server that answers ``status`` to its first ``failures`` handshakes.

    A handshake starts with the client's ``server/discover`` POST (``mode="auto"``); while failing, every POST of
    that handshake (the ``initialize`` fallback too) gets ``status``. ``handshakes`` counts the starts.
    """

    def __init__(self, failures: int, status: int = 503) -> None:
        self.failures = failures
        self.status = status
        self.handshakes = 0
        self.tool_calls = 0

        async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            schema = {"type": "object", "properties": {"text": {"type": "string"}}}
            return types.ListToolsResult(tools=[types.Tool(name="echo", description="Echo", input_schema=schema)])

        async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            self.tool_calls += 1
            text = str((params.arguments or {}).get("text", ""))
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

        self.server: Server[Any] = Server("flaky", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["method"] == "POST":
            body = await read_body(receive)
            with contextlib.suppress(ValueError):
                message = json.loads(body or b"null")
                if isinstance(message, dict) and message.get("method") == "server/discover":
                    self.handshakes += 1
            if self.handshakes <= self.failures:
                await answer(send, self.status)
                return
            receive = replaying(body, receive)
        await handle_stateless(self.server, scope, receive, send)


def replaying(body: bytes, receive: Receive) -> Receive:
    """``receive`` with the already read request body handed out once more."""
    pending = [body]

    async def replay() -> Message:
        if pending:
            return {"type": "http.request", "body": pending.pop(), "more_body": False}
        return await receive()

    return replay


class Always:
    """Answers ``status`` to everything (any transport), counting the requests that open a session.

    Those are the POSTs starting a Streamable HTTP handshake (``server/discover``) and the GETs of an SSE stream.
    """

    def __init__(self, status: int) -> None:
        self.status = status
        self.handshakes = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["method"] == "GET":
            self.handshakes += 1
        elif scope["method"] == "POST":
            body = await read_body(receive)
            with contextlib.suppress(ValueError):
                message = json.loads(body or b"null")
                if isinstance(message, dict) and message.get("method") == "server/discover":
                    self.handshakes += 1
        await answer(send, self.status, b'{"error": "no"}')


@contextlib.contextmanager
def silent_listener() -> Iterator[int]:
    """A TCP port on 127.0.0.1 that accepts connections and never answers; yields the port."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.05)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            accepted.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in accepted:
            conn.close()
        listener.close()


async def connect_and_fail(spec: ConnectionSpec) -> UpstreamError:
    with pytest.raises(UpstreamError) as raised:
        async with Connection(spec, POLICY):
            pass
    return raised.value


# ---------------------------------------------------------------------------------------------- the spec


def service(**advanced: Any) -> ExternalService:
    return ExternalService(
        id="svc_1",
        workspace_id="ws_1",
        name="upstream",
        description="",
        enabled=True,
        transport="http-streamable",
        url="http://127.0.0.1:9/mcp",
        headers={},
        auth=AuthConfig(),
        advanced=AdvancedConfig(**advanced),
        usage_instructions="",
        catalog_stale=False,
        created_at="2026-01-01T00:00:00Z",
        updated_at="2026-01-01T00:00:00Z",
        version=1,
    )


def test_connection_spec_carries_the_services_retry_settings() -> None:
    spec = connection_spec(service(timeout=12.0, retry_count=7, retry_delay=2.5), {})
    assert (spec.timeout, spec.retry_count, spec.retry_delay) == (12.0, 7, 2.5)
    defaults = connection_spec(service(), {})
    assert (defaults.retry_count, defaults.retry_delay) == (3, 1.0)


def test_spec_retry_defaults_and_bounds() -> None:
    plain = ConnectionSpec("http://127.0.0.1/", "sse")
    assert (plain.retry_count, plain.retry_delay) == (0, 0.0)
    edge = ConnectionSpec("http://127.0.0.1/", "sse", retry_count=10, retry_delay=60)
    assert (edge.retry_count, edge.retry_delay) == (10, 60.0)
    assert isinstance(edge.retry_delay, float)


@pytest.mark.parametrize("count", [-1, 11, 1.5, True, "3", None])
def test_spec_refuses_bad_retry_counts(count: Any) -> None:
    with pytest.raises(InvalidInput, match="retry_count"):
        ConnectionSpec("http://127.0.0.1/", "sse", retry_count=count)


@pytest.mark.parametrize("delay", [-0.1, 60.5, math.nan, math.inf, True, "1", None])
def test_spec_refuses_bad_retry_delays(delay: Any) -> None:
    with pytest.raises(InvalidInput, match="retry_delay"):
        ConnectionSpec("http://127.0.0.1/", "sse", retry_delay=delay)


# ---------------------------------------------------------------------------------------------- retried


@pytest.mark.parametrize("status", [502, 503, 504])
def test_handshake_answered_unavailable_is_retried_until_it_connects(status: int, opened: list[str]) -> None:
    upstream = Flaky(failures=2, status=status)
    with serve(upstream, lifespan="off") as base:
        spec = ConnectionSpec(f"{base}/mcp", "http-streamable", timeout=10, retry_count=2, retry_delay=0.05)

        async def scenario() -> None:
            async with Connection(spec, POLICY) as connection:
                assert connection.server_info is not None
                assert connection.server_info.name == "flaky"
                assert [tool.name for tool in await connection.list_tools()] == ["echo"]
                result = await connection.call_tool("echo", {"text": "hi"})
                assert result.content[0].model_dump()["text"] == "hi"
                assert connection.reconnects == 0, "retries of the first connect are not reconnects"

        anyio.run(scenario)
    assert upstream.handshakes == 3
    assert len(opened) == 3
    assert upstream.tool_calls == 1


def test_handshake_answered_503_fails_after_retry_count_plus_one_attempts(opened: list[str]) -> None:
    upstream = Flaky(failures=5)
    with serve(upstream, lifespan="off") as base:
        spec = ConnectionSpec(f"{base}/mcp?{SECRET_QUERY}", "http-streamable", timeout=10, retry_count=2)
        error = anyio.run(connect_and_fail, spec)
    assert error.code == "upstream_http_error"
    assert error.details == {"status": 503}
    assert error.retryable is True
    assert "127.0.0.1" in error.message
    assert "s3cret" not in error.message
    assert "/mcp" not in error.message
    assert upstream.handshakes == 3
    assert len(opened) == 3


@pytest.mark.parametrize("transport", ["http-streamable", "sse"])
def test_always_unavailable_is_tried_retry_count_plus_one_times(transport: Transport, opened: list[str]) -> None:
    upstream = Always(503)
    with serve(upstream, lifespan="off") as base:
        spec = ConnectionSpec(f"{base}/mcp", transport, timeout=10, retry_count=1)
        error = anyio.run(connect_and_fail, spec)
    assert (error.code, error.details) == ("upstream_http_error", {"status": 503})
    assert upstream.handshakes == 2
    assert len(opened) == 2


@pytest.mark.parametrize("transport", ["http-streamable", "sse"])
def test_refused_connection_is_retried(transport: Transport, opened: list[str]) -> None:
    spec = ConnectionSpec(
        f"http://127.0.0.1:{free_port()}/mcp?{SECRET_QUERY}", transport, timeout=5, retry_count=2, retry_delay=0.05
    )
    error = anyio.run(connect_and_fail, spec)
    assert error.code == "upstream_unreachable"
    assert error.retryable is True
    assert "s3cret" not in error.message
    assert "/mcp" not in error.message
    assert len(opened) == 3

    result = anyio.run(probe, spec, POLICY)
    assert result.error is not None
    assert result.error.code == "upstream_unreachable"
    assert len(opened) == 6, "the connection test retries the same way"


def test_no_retries_means_one_attempt(opened: list[str]) -> None:
    spec = ConnectionSpec(f"http://127.0.0.1:{free_port()}/mcp", "http-streamable", timeout=5)
    assert anyio.run(connect_and_fail, spec).code == "upstream_unreachable"
    assert len(opened) == 1


def test_handshake_timeout_is_retried(opened: list[str]) -> None:
    with silent_listener() as port:
        spec = ConnectionSpec(
            f"http://127.0.0.1:{port}/mcp", "http-streamable", timeout=5, initialize_timeout=0.3, retry_count=1
        )
        error = anyio.run(connect_and_fail, spec)
    assert error.code == "upstream_timeout"
    assert error.details == {"timeout_seconds": 0.3}
    assert len(opened) == 2


# ---------------------------------------------------------------------------------------------- not retried


@pytest.mark.parametrize(
    ("status", "code"),
    [(401, "upstream_unauthorized"), (403, "upstream_forbidden"), (500, "upstream_error"), (404, "upstream_error")],
)
@pytest.mark.parametrize("transport", ["http-streamable", "sse"])
def test_other_answers_are_not_retried(status: int, code: str, transport: Transport, opened: list[str]) -> None:
    upstream = Always(status)
    with serve(upstream, lifespan="off") as base:
        spec = ConnectionSpec(f"{base}/mcp", transport, timeout=10, retry_count=3)
        error = anyio.run(connect_and_fail, spec)
    if transport == "sse" and status not in (401, 403):
        code = "upstream_http_error"  # the SSE stream's GET keeps its status
    assert error.code == code
    assert upstream.handshakes == 1
    assert len(opened) == 1


def test_policy_refusals_are_not_retried(opened: list[str]) -> None:
    spec = ConnectionSpec("http://10.1.2.3:8080/mcp", "http-streamable", timeout=5, retry_count=3)

    async def scenario() -> None:
        with pytest.raises(InvalidInput) as raised:
            async with Connection(spec, POLICY):
                pass
        assert raised.value.code == "url_forbidden_address"

    anyio.run(scenario)
    assert len(opened) == 1


def test_a_lost_tool_call_is_never_replayed(everything: Everything, tool_calls: list[str], opened: list[str]) -> None:
    values: dict[str, Any] = {"url": everything.url, "transport": everything.transport}
    spec = ConnectionSpec(**values, timeout=15, retry_count=2, retry_delay=0.05)

    async def scenario() -> None:
        async with Connection(spec, POLICY) as connection:
            await connection.list_tools()
            assert len(opened) == 1

            async def kill_soon() -> None:
                await anyio.sleep(1.0)
                await anyio.to_thread.run_sync(everything.kill)

            async with anyio.create_task_group() as group:
                group.start_soon(kill_soon)
                with pytest.raises(OutcomeUnknown) as raised:
                    await connection.call_tool("trigger-long-running-operation", {"duration": 5, "steps": 5})
            assert raised.value.code == "outcome_unknown"
            assert raised.value.retryable is False
            assert len(opened) == 1, "no connect attempt after the call was sent"

            # The next operation reconnects: with the server gone, each of the 3 attempts is refused.
            with pytest.raises(UpstreamError) as refused:
                await connection.call_tool("echo", {"message": "x"})
            assert refused.value.code == "upstream_unreachable"
            assert len(opened) == 4

    anyio.run(scenario)
    assert tool_calls.count("trigger-long-running-operation") == 1
    assert "echo" not in tool_calls
