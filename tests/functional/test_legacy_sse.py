"""The connection layer against a server that speaks only the legacy 2024-11-05 HTTP+SSE protocol.

The server (:mod:`tests.support.legacy_sse`) is written by hand, not with the SDK: it answers ``initialize`` with
2024-11-05 whatever the client proposes and knows nothing of ``server/discover``. The SDK client (``mode="auto"``)
probes ``server/discover`` first, gets -32601 Method not found, and falls back to the ``initialize`` handshake.
"""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest

from mcpbridge.client.connection import Connection, ConnectionSpec, probe
from mcpbridge.outbound.policy import EgressPolicy
from tests.support.everything import serve
from tests.support.legacy_sse import INSTRUCTIONS, SCHEDULE_TOOL, SERVER_INFO, LegacySSEServer

pytestmark = [pytest.mark.slow]

POLICY = EgressPolicy(["127.0.0.1"])


@pytest.fixture
def legacy() -> Iterator[tuple[LegacySSEServer, str]]:
    """The server and its ``/sse`` URL; open streams are ended before uvicorn stops (it waits for them)."""
    server = LegacySSEServer()
    with serve(server) as base:
        try:
            yield server, base + "/sse"
        finally:
            server.close()


def spec(url: str, timeout: float = 10) -> ConnectionSpec:
    return ConnectionSpec(url=url, transport="sse", timeout=timeout)


def test_handshake_falls_back_to_initialize(legacy: tuple[LegacySSEServer, str]) -> None:
    server, url = legacy

    async def scenario() -> None:
        async with Connection(spec(url), POLICY) as connection:
            assert connection.protocol_version == "2024-11-05"
            assert connection.server_info is not None
            assert connection.server_info.model_dump(include={"name", "version"}) == SERVER_INFO
            assert connection.instructions == INSTRUCTIONS
            assert connection.capabilities.tools is not None
            assert connection.capabilities.resources is None
            # The SDK posts messages one after another, so once this answer is back the server has every handshake
            # message (notifications/initialized is fire-and-forget and could still be in flight before it).
            await connection.list_tools()

    anyio.run(scenario)
    # The SDK's mode="auto" sends server/discover (at the newest modern version) first; a legacy server answers
    # -32601, which is not evidence of a modern server, so the client falls back to initialize on the same session
    # and confirms with notifications/initialized. One discover attempt only, and no ping.
    assert server.methods == ["server/discover", "initialize", "notifications/initialized", "tools/list"]
    discover, initialize = server.received[0], server.received[1]
    assert discover["params"]["_meta"]  # the probe carries its version, client info and capabilities in _meta
    # The client proposes its newest handshake version; the server answered 2024-11-05 and the client accepted it.
    assert initialize["params"]["protocolVersion"] != "2024-11-05"
    assert initialize["params"]["clientInfo"]["name"] == "mcpbridge"


def test_lists_and_calls_tools(legacy: tuple[LegacySSEServer, str]) -> None:
    server, url = legacy

    async def scenario() -> None:
        async with Connection(spec(url), POLICY) as connection:
            tools = {tool.name: tool for tool in await connection.list_tools()}
            assert list(tools) == ["add", "schedule"]
            assert tools["add"].input_schema["required"] == ["a", "b"]
            assert tools["add"].input_schema["additionalProperties"] is False
            # Nested and composed schema fields come through untouched.
            assert tools["schedule"].input_schema == SCHEDULE_TOOL["inputSchema"]
            assert tools["schedule"].input_schema["properties"]["when"]["oneOf"][1]["required"] == ["minutes"]

            added = await connection.call_tool("add", {"a": 2, "b": 3.5})
            assert not added.is_error
            assert [(block.type, getattr(block, "text", None)) for block in added.content] == [("text", "5.5")]

            refused = await connection.call_tool("add", {"a": "two"})
            assert refused.is_error is True
            assert [getattr(block, "text", None) for block in refused.content] == ["a and b must be numbers"]
            assert connection.reconnects == 0

    anyio.run(scenario)
    calls = [message["params"] for message in server.received if message.get("method") == "tools/call"]
    assert calls == [{"name": "add", "arguments": {"a": 2, "b": 3.5}}, {"name": "add", "arguments": {"a": "two"}}]


def test_probe_reports_tools(legacy: tuple[LegacySSEServer, str]) -> None:
    server, url = legacy
    result = anyio.run(probe, spec(url), POLICY)
    assert result.ok, result.error
    assert result.error is None
    assert result.protocol_version == "2024-11-05"
    assert result.server_info is not None
    assert result.server_info.name == SERVER_INFO["name"]
    assert result.instructions == INSTRUCTIONS
    assert [tool.name for tool in result.tools] == ["add", "schedule"]
    assert result.resources == []  # no resources capability: not asked
    assert not result.oauth_required
    assert "resources/list" not in server.methods


# The SDK's SSE transport swallows a 404 (its POST writer logs the error and stops for good) and never fails the
# pending request; the connection layer sees the 404 for that operation's own request and reconnects at once.
SESSION_LOSS_TIMEOUT = 10.0


def test_forgotten_session_reconnects_once(legacy: tuple[LegacySSEServer, str]) -> None:
    server, url = legacy

    async def scenario() -> None:
        async with Connection(spec(url, timeout=SESSION_LOSS_TIMEOUT), POLICY) as connection:
            first = await connection.call_tool("add", {"a": 1, "b": 1})
            assert [getattr(block, "text", None) for block in first.content] == ["2"]
            server.drop_sessions()  # the next POST gets 404 "Session not found": the call never ran
            again = await connection.call_tool("add", {"a": 2, "b": 2})
            assert [getattr(block, "text", None) for block in again.content] == ["4"]
            assert connection.reconnects == 1
            assert connection.protocol_version == "2024-11-05"
            tools = await connection.list_tools()  # the new session keeps working without another reconnect
            assert len(tools) == 2
            assert connection.reconnects == 1

    anyio.run(scenario)
    # The rejected call reached the server only as a 404, so each call ran once: the first, then (after a new
    # discover + initialize handshake) the retry. The SDK lists the tools by itself after the first call of a tool it
    # has not listed on a session (to validate the result against the tool's output schema): one tools/list per
    # session, inside the call; the last tools/list is the test's own.
    session = ["server/discover", "initialize", "notifications/initialized", "tools/call", "tools/list"]
    assert server.methods == [*session, *session, "tools/list"]
    calls = [message["params"]["arguments"] for message in server.received if message.get("method") == "tools/call"]
    assert calls == [{"a": 1, "b": 1}, {"a": 2, "b": 2}]
