"""No answer an upstream MCP server sends is read past the cap (``upstream_max_answer_bytes``).

A hostile or broken upstream answers ``tools/list`` or ``tools/call`` with a body that does not end: a JSON body that
promises 300 MB in its ``Content-Length``, a chunked JSON body, an event stream whose one event never ends. Each
path that reads such answers (``POST .../test``, a catalog refresh, an agent's tool call) ends with
``answer_too_large``, which names the limit and the setting, and the connection is closed: the upstream sees its
client leave long before it has written what it meant to (it stops by itself at :data:`CEILING`, which is what an
unbounded reader would take in). The cap is small here (256 KiB) to keep the tests short; the default is 16 MiB.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from mcpbridge.bootstrap import Container
from mcpbridge.settings import Settings
from tests.support.admin_api import admin_api
from tests.support.everything import serve
from tests.support.oversize_upstream import CEILING, SHAPES, Oversize

pytestmark = [pytest.mark.slow]

CAP = 256 * 1024


@pytest.fixture
def container(tmp_path: Path) -> Iterator[Container]:
    built = Container(Settings(data_dir=tmp_path / "data", ssrf_allowlist=["127.0.0.1"], upstream_max_answer_bytes=CAP))
    yield built
    built.close()


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
        async with admin_api(container) as client:
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
        async with admin_api(container) as client:
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
        async with admin_api(container) as client:
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
