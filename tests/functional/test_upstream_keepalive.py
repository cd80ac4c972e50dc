"""Tool calls to an external MCP server reuse their TCP connection: the SDK stops reading a POST's event stream at
the answer it waits for, and the rest of it is read so the connection goes back to the pool."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from mcpbridge.client.connection import ConnectionSpec
from mcpbridge.client.pool import ConnectionPool, PoolKey
from mcpbridge.outbound import http as outbound_http
from mcpbridge.outbound.policy import EgressPolicy
from tests.support.everything import Everything, serve

POLICY = EgressPolicy(["127.0.0.1"])
HARD_STOP = 60.0
"""A test that reads an endless stream gives up here, under its own timeout."""


@pytest.fixture(scope="module")
def everything(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Everything]:
    server = Everything("streamableHttp", tmp_path_factory.mktemp("everything"))
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def connects(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The TCP connections the guarded transport opens, by host."""
    opened: list[str] = []
    original = outbound_http.PinnedAsyncBackend.connect_tcp

    async def counting(self: outbound_http.PinnedAsyncBackend, host: str, *args: Any, **kwargs: Any) -> Any:
        opened.append(host)
        return await original(self, host, *args, **kwargs)

    monkeypatch.setattr(outbound_http.PinnedAsyncBackend, "connect_tcp", counting)
    return opened


def test_pooled_tool_calls_reuse_their_connection(everything: Everything, connects: list[str]) -> None:
    spec = ConnectionSpec(everything.url, "http-streamable", timeout=15)

    async def calls() -> list[str]:
        pool = ConnectionPool(POLICY)
        answers = []
        try:
            for i in range(20):
                async with pool.session(PoolKey("svc_keepalive"), spec) as connection:
                    result = await connection.call_tool("echo", {"message": f"m{i}"})
                answers.append(result.content[0].text)  # type: ignore[union-attr]
            async with anyio.create_task_group() as group:
                for i in range(10):

                    async def one(i: int = i) -> None:
                        async with pool.session(PoolKey("svc_keepalive"), spec) as connection:
                            await connection.call_tool("echo", {"message": f"c{i}"})

                    group.start_soon(one)
        finally:
            await pool.aclose()
        return answers

    answers = anyio.run(calls)
    assert answers == [f"Echo: m{i}" for i in range(20)]
    # The handshake's connections, then at most one more per call in flight at once (10), never one per call (30).
    assert len(connects) <= 14, connects


def test_an_answer_that_goes_on_is_closed_after_a_short_wait(tmp_path: Path) -> None:
    """A POST whose event stream the server keeps open is not read for ever: it is closed after the drain's time."""

    async def endless(request: Request) -> StreamingResponse:
        async def events() -> Any:
            yield b'event: message\ndata: {"jsonrpc": "2.0", "id": 1, "result": {}}\n\n'
            while True:
                await anyio.sleep(0.05)
                yield b": keep-alive\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/mcp", endless, methods=["POST"])])

    async def call(base: str) -> float:
        client = outbound_http.guarded_async_client(POLICY, timeout=10)
        # The stream never ends by itself: a drain without its bound would read it until this hard stop.
        with anyio.fail_after(HARD_STOP):
            async with client, client.stream("POST", f"{base}/mcp", json={}) as response:
                async for line in response.aiter_lines():
                    if line.startswith("data:"):
                        break
                started = time.monotonic()  # the answer is in: the response is closed as the block ends
        return time.monotonic() - started

    with serve(app) as base:
        closed_after = anyio.run(call, base)
    drained = "the rest of the answer was drained before the stream was closed"
    assert closed_after >= outbound_http.DRAIN_SECONDS, drained
