"""The connection layer against real MCP servers on 127.0.0.1 (harness in :mod:`tests.support.everything`).

* ``@modelcontextprotocol/server-everything`` (npm, run with the wheel's node) over Streamable HTTP and SSE: full
  tool schemas, plain / structured / error results, a server restart (one reconnect), a server killed during a slow
  call (OutcomeUnknown, never replayed), a refused connection (upstream_unreachable).
* A small Python SDK server that reports the headers it received (the auth header reaches the server).
* Raw ASGI apps answering 401 with and without RFC 9728 metadata (``probe`` and ``oauth_required``).
* SSRF: forbidden URLs are refused before any connection is opened.
"""

from __future__ import annotations

import contextlib
import json
import socket
from typing import Any

import anyio
import httpx2
import pytest
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.transport_security import TransportSecuritySettings

from mcpbridge.client.connection import (
    Connection,
    ConnectionSpec,
    OutcomeUnknown,
    Transport,
    open_session,
    probe,
)
from mcpbridge.errors import InvalidInput, UpstreamError
from mcpbridge.outbound import http as outbound_http
from mcpbridge.outbound.policy import EgressPolicy
from tests.support.everything import Everything, free_port, serve

pytestmark = [pytest.mark.slow]

POLICY = EgressPolicy(["127.0.0.1"])


def spec_for(server: Everything, **overrides: Any) -> ConnectionSpec:
    values: dict[str, Any] = {"url": server.url, "transport": server.transport, "timeout": 15.0}
    values.update(overrides)
    return ConnectionSpec(**values)


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


# ---------------------------------------------------------------------------------------------- server-everything


def test_lists_and_calls_tools(everything: Everything) -> None:
    async def scenario() -> None:
        async with Connection(spec_for(everything), POLICY) as connection:
            assert connection.server_info is not None
            assert connection.server_info.name == "mcp-servers/everything"
            assert connection.capabilities.tools is not None
            tools = {tool.name: tool for tool in await connection.list_tools()}
            assert {"echo", "get-structured-content", "trigger-long-running-operation"} <= set(tools)
            echo_schema = tools["echo"].input_schema
            assert echo_schema["properties"]["message"]["type"] == "string"
            assert echo_schema["required"] == ["message"]

            echoed = await connection.call_tool("echo", {"message": "hello"})
            assert echoed.is_error is False
            assert echoed.content[0].model_dump()["text"] == "Echo: hello"

            structured = await connection.call_tool("get-structured-content", {"location": "New York"})
            assert structured.is_error is False
            assert structured.structured_content is not None
            assert set(structured.structured_content) >= {"temperature", "conditions", "humidity"}

            failed = await connection.call_tool("echo", {})
            assert failed.is_error is True

            assert len(await connection.list_resources()) > 0

    anyio.run(scenario)


def test_open_session_yields_a_connected_client(everything: Everything) -> None:
    async def scenario() -> None:
        async with open_session(spec_for(everything), POLICY) as client:
            assert client.protocol_version  # negotiated (discover, falling back to initialize)
            result = await client.call_tool("echo", {"message": "direct"})
            assert result.is_error is False

    anyio.run(scenario)


def test_server_restart_reconnects_once(everything: Everything, tool_calls: list[str]) -> None:
    async def scenario() -> None:
        async with Connection(spec_for(everything), POLICY) as connection:
            assert (await connection.call_tool("echo", {"message": "before"})).is_error is False
            await anyio.to_thread.run_sync(everything.kill)
            await anyio.to_thread.run_sync(everything.start)
            after = await connection.call_tool("echo", {"message": "after"})
            assert after.is_error is False
            assert after.content[0].model_dump()["text"] == "Echo: after"
            assert connection.reconnects == 1
            assert (await connection.call_tool("echo", {"message": "again"})).is_error is False
            assert connection.reconnects == 1

    anyio.run(scenario)
    assert tool_calls.count("echo") in (3, 4)  # the rejected "after" may reach the new server once, never run


def test_killed_mid_call_is_outcome_unknown_and_not_replayed(everything: Everything, tool_calls: list[str]) -> None:
    async def scenario() -> None:
        async with Connection(spec_for(everything), POLICY) as connection:
            await connection.list_tools()

            async def kill_soon() -> None:
                await anyio.sleep(1.0)
                await anyio.to_thread.run_sync(everything.kill)

            async with anyio.create_task_group() as group:
                group.start_soon(kill_soon)
                with pytest.raises(OutcomeUnknown) as raised:
                    await connection.call_tool("trigger-long-running-operation", {"duration": 5, "steps": 5})
            assert raised.value.code == "outcome_unknown"
            assert raised.value.retryable is False

            # The next operation reconnects: with the server gone that is a clean, retryable refusal.
            with pytest.raises(UpstreamError) as refused:
                await connection.call_tool("echo", {"message": "x"})
            assert refused.value.code == "upstream_unreachable"
            assert refused.value.retryable is True

    anyio.run(scenario)
    assert tool_calls.count("trigger-long-running-operation") == 1


def test_refused_connection_is_unreachable() -> None:
    spec = ConnectionSpec(f"http://127.0.0.1:{free_port()}/mcp", "http-streamable", timeout=5)

    async def scenario() -> None:
        with pytest.raises(UpstreamError) as raised:
            async with Connection(spec, POLICY):
                pass
        assert raised.value.code == "upstream_unreachable"
        assert raised.value.retryable is True
        result = await probe(spec, POLICY)
        assert result.ok is False
        assert result.error is not None
        assert result.error.code == "upstream_unreachable"
        assert result.oauth_required is False

    anyio.run(scenario)


def test_probe_reports_tools_and_resources(everything: Everything) -> None:
    result = anyio.run(probe, spec_for(everything), POLICY)
    assert result.ok, result.error
    assert result.oauth_required is False
    assert "echo" in {tool.name for tool in result.tools}
    assert result.resources
    assert result.server_info is not None


# ---------------------------------------------------------------------------------------------- our own servers


def header_server() -> Any:
    server = MCPServer("headers", version="1.0.0", instructions="Reports request headers.")

    @server.tool()
    async def whoami(ctx: Context) -> dict[str, Any]:
        """The headers of this request."""
        headers = dict(ctx.headers or {})
        return {"authorization": headers.get("authorization"), "x_api_key": headers.get("x-api-key")}

    return server.streamable_http_app(
        json_response=True,
        stateless_http=True,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )


def test_auth_headers_reach_the_server() -> None:
    with serve(header_server()) as base:
        spec = ConnectionSpec(
            f"{base}/mcp",
            "http-streamable",
            headers={"Authorization": "Bearer tok-123", "X-API-Key": "key-456"},
        )
        assert "tok-123" not in repr(spec)

        async def scenario() -> dict[str, Any]:
            async with Connection(spec, POLICY) as connection:
                assert connection.instructions == "Reports request headers."
                result = await connection.call_tool("whoami", {})
                assert result.structured_content is not None
                return dict(result.structured_content)

        seen = anyio.run(scenario)
    assert seen == {"authorization": "Bearer tok-123", "x_api_key": "key-456"}


def unauthorized_app(*, challenge: str | None, well_known: bool = False) -> Any:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if well_known and scope["path"].startswith("/.well-known/oauth-protected-resource"):
            body = json.dumps({"resource": "http://127.0.0.1/mcp", "authorization_servers": ["https://a.test"]})
            headers = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": body.encode()})
            return
        headers = [(b"content-type", b"application/json")]
        if challenge is not None:
            headers.append((b"www-authenticate", challenge.encode()))
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": b'{"error":"unauthorized"}'})

    return app


@pytest.mark.parametrize("transport", ["http-streamable", "sse"])
def test_probe_detects_oauth_from_resource_metadata(transport: Transport) -> None:
    challenge = 'Bearer resource_metadata="http://127.0.0.1/.well-known/oauth-protected-resource/mcp"'
    with serve(unauthorized_app(challenge=challenge), lifespan="off") as base:
        result = anyio.run(probe, ConnectionSpec(f"{base}/mcp", transport, timeout=5), POLICY)
    assert result.oauth_required is True
    assert result.resource_metadata_url == "http://127.0.0.1/.well-known/oauth-protected-resource/mcp"
    assert result.ok is False


def test_probe_detects_oauth_from_well_known_document() -> None:
    with serve(unauthorized_app(challenge='Bearer realm="x"', well_known=True), lifespan="off") as base:
        result = anyio.run(probe, ConnectionSpec(f"{base}/mcp", "http-streamable", timeout=5), POLICY)
    assert result.oauth_required is True
    assert result.resource_metadata_url == f"{base}/.well-known/oauth-protected-resource/mcp"


@pytest.mark.parametrize("transport", ["http-streamable", "sse"])
def test_bare_401_is_an_auth_failure(transport: Transport) -> None:
    with serve(unauthorized_app(challenge=None), lifespan="off") as base:
        spec = ConnectionSpec(f"{base}/mcp", transport, timeout=5)
        result = anyio.run(probe, spec, POLICY)

        async def connect() -> None:
            async with Connection(spec, POLICY):
                pass

        with pytest.raises(UpstreamError) as raised:
            anyio.run(connect)
    assert result.oauth_required is False
    assert result.error is not None
    assert result.error.code == "upstream_unauthorized"
    assert raised.value.code == "upstream_unauthorized"


# ---------------------------------------------------------------------------------------------- SSRF


def fake_resolver(host: str, port: int) -> list[str]:
    answers = {"internal.test": ["10.0.0.5"], "metadata.test": ["169.254.169.254"]}
    if host not in answers:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    return answers[host]


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data",
        "http://internal.test/mcp",
        "http://metadata.test/sse",
        "http://10.1.2.3:8080/mcp",
    ],
)
@pytest.mark.parametrize("transport", ["http-streamable", "sse"])
def test_forbidden_urls_are_refused_before_connecting(
    url: str, transport: Transport, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = EgressPolicy(["127.0.0.1"], resolver=fake_resolver)
    dialled: list[str] = []

    async def no_dial(self: Any, host: str, port: int, *args: Any, **kwargs: Any) -> Any:
        dialled.append(host)
        raise AssertionError("a connection was attempted")

    monkeypatch.setattr(outbound_http.PinnedAsyncBackend, "connect_tcp", no_dial)
    spec = ConnectionSpec(url, transport, timeout=5)

    async def scenario() -> None:
        with pytest.raises(InvalidInput) as raised:
            async with open_session(spec, policy):
                pass
        assert raised.value.code == "url_forbidden_address"
        with pytest.raises(InvalidInput):
            async with Connection(spec, policy):
                pass
        with pytest.raises(InvalidInput):
            await probe(spec, policy)

    anyio.run(scenario)
    assert dialled == []


def test_pinned_transport_rechecks_every_connection() -> None:
    """A name that resolves to a private address is refused by the transport itself (the DNS-rebinding guard)."""
    policy = EgressPolicy(["127.0.0.1"], resolver=fake_resolver)

    async def scenario() -> None:
        async with outbound_http.guarded_async_client(policy, timeout=5) as http:
            with pytest.raises(InvalidInput) as raised:
                await http.get("http://internal.test/")
        assert raised.value.code == "url_forbidden_address"

    anyio.run(scenario)


def test_spec_rules() -> None:
    with pytest.raises(InvalidInput, match="stdio transport is disabled for security reasons"):
        ConnectionSpec("http://127.0.0.1/", "stdio")  # type: ignore[arg-type]
    assert ConnectionSpec("http://127.0.0.1/", "sse", initialize_timeout=600).initialize_timeout == 60.0
    assert ConnectionSpec("http://127.0.0.1/", "sse").timeout == 30.0


def test_an_error_inside_the_block_comes_out_as_itself(everything: Everything) -> None:
    """The connection's task group must not wrap the caller's own exception in an ExceptionGroup."""

    class Mine(Exception):
        pass

    async def use_then_fail() -> None:
        async with Connection(spec_for(everything), POLICY) as connection:
            await connection.list_tools()
            raise Mine

    async def scenario() -> None:
        with pytest.raises(Mine):
            await use_then_fail()

    anyio.run(scenario)


@pytest.mark.parametrize("transport", ["http-streamable", "sse"])
def test_a_redirect_to_a_private_address_is_not_followed(transport: Transport, monkeypatch: pytest.MonkeyPatch) -> None:
    """An allowed server answering 307 towards the metadata address: nothing is sent there, the connection fails."""

    async def redirecting(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        location = b"http://169.254.169.254/latest/meta-data"
        await send({"type": "http.response.start", "status": 307, "headers": [(b"location", location)]})
        await send({"type": "http.response.body", "body": b""})

    dialled: list[str] = []
    original = outbound_http.PinnedAsyncBackend.connect_tcp

    async def recording(self: Any, host: str, port: int, *args: Any, **kwargs: Any) -> Any:
        dialled.append(host)
        return await original(self, host, port, *args, **kwargs)

    monkeypatch.setattr(outbound_http.PinnedAsyncBackend, "connect_tcp", recording)
    with serve(redirecting, lifespan="off") as base:
        spec = ConnectionSpec(f"{base}/mcp", transport, timeout=5)

        async def scenario() -> None:
            with pytest.raises((UpstreamError, InvalidInput)):
                async with Connection(spec, POLICY):
                    pass

        anyio.run(scenario)
    assert dialled
    assert set(dialled) == {"127.0.0.1"}
