"""A cached connection that is replaced while its first user still waits for it to open: that user must get a
working connection, not one closing under its call.

This is what happens when concurrent OAuth calls refresh a token: the first caller with the new token opens a new
connection, and a slower caller still holding the old token replaces it before it is ready (and is itself refused
and retried). A real SDK server on 127.0.0.1 (stateless Streamable HTTP) whose handshake the test holds back, so the
order of events is fixed: no timing involved.
"""

from __future__ import annotations

import threading
from typing import Any

import anyio
import pytest
from mcp import types
from mcp.server.lowlevel import Server
from starlette.types import Receive, Scope, Send

from mcpbridge.client.connection import ConnectionSpec
from mcpbridge.client.pool import ConnectionPool, PoolKey
from mcpbridge.outbound.policy import EgressPolicy
from tests.support.everything import handle_stateless, serve

pytestmark = [pytest.mark.slow]

POLICY = EgressPolicy(["127.0.0.1"])
KEY = PoolKey("svc_a", "user:u1")


class HeldBack:
    """An echo server whose answers to requests with ``X-Token: new`` wait until :attr:`release` is set."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.held = threading.Event()
        self.calls: list[str] = []

        async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            return types.ListToolsResult(tools=[types.Tool(name="echo", input_schema={"type": "object"})])

        async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            text = str((params.arguments or {}).get("text"))
            self.calls.append(text)
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

        self.server: Server[Any] = Server("held", version="1", on_list_tools=list_tools, on_call_tool=call_tool)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if dict(scope["headers"]).get(b"x-token") == b"new":
            self.held.set()
            while not self.release.is_set():
                await anyio.sleep(0.01)
        await handle_stateless(self.server, scope, receive, send)


def test_a_connection_replaced_before_it_opened_still_serves_its_first_user() -> None:
    upstream = HeldBack()

    with serve(upstream, lifespan="off") as base:
        url = f"{base}/mcp"
        new = ConnectionSpec(url, "http-streamable", headers={"X-Token": "new"}, timeout=10)
        old = ConnectionSpec(url, "http-streamable", headers={"X-Token": "old"}, timeout=10)
        results: list[str] = []

        async def call(spec: ConnectionSpec, text: str, pool: ConnectionPool) -> None:
            async with pool.session(KEY, spec) as connection:
                result = await connection.call_tool("echo", {"text": text})
            content = result.content[0]
            assert content.type == "text"
            results.append(content.text)

        async def scenario() -> None:
            pool = ConnectionPool(POLICY)
            try:
                async with anyio.create_task_group() as group:
                    group.start_soon(call, new, "first", pool)  # opens the "new" connection; its handshake is held
                    await anyio.to_thread.run_sync(upstream.held.wait, 10)
                    # A caller with another spec replaces that connection before it is ready...
                    async with pool.session(KEY, old) as replacing:
                        assert pool.opened == 2
                        upstream.release.set()
                        await replacing.call_tool("echo", {"text": "second"})
            finally:
                await pool.aclose()

        anyio.run(scenario)
    # ... and the first caller's call still ran on the connection it waited for.
    assert sorted(results) == ["first"]
    assert sorted(upstream.calls) == ["first", "second"]
