"""An endpoint's rate limit over real HTTP, on both backends: exactly N of M concurrent tool calls are admitted in a
window, the rest answered ``rate_limited``; another endpoint's calls count apart; listing tools is never limited."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mcpbridge.bootstrap import Container
from mcpbridge.http.apps import create_combined_app
from tests.support.containers import container_on
from tests.support.live_server import live_server

LIMIT = 7
CALLS = 40
HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
CALL = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {"name": "list_knowledge_bases", "arguments": {}},
}


@pytest.fixture(params=["local", "aws"])
def served(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, str, Container]]:
    with container_on(request.param, tmp_path, monkeypatch, settings={"jobs": "inline"}) as container:
        admin_key = container.identity.initialize().api_key
        assert admin_key is not None
        with live_server(create_combined_app(container)) as base_url:
            yield base_url, admin_key, container


def publish(base_url: str, admin_key: str) -> tuple[str, dict[str, str]]:
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {admin_key}"}, timeout=30) as api:
        created = api.post(
            "/api/v1/mcp-endpoints",
            json={"name": "Limited", "tools": ["list_knowledge_bases"], "rate_limit_per_minute": LIMIT},
        )
    assert created.status_code == 201, created.text
    endpoint = created.json()
    return endpoint["url"], {**HEADERS, "Authorization": f"Bearer {endpoint['token']}"}


async def burst(targets: list[tuple[str, dict[str, str]]]) -> list[list[dict[str, Any]]]:
    """``CALLS`` concurrent tool calls on each target, all in flight together; each call's JSON-RPC result."""
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=CALLS * len(targets))) as client:
        answers = await asyncio.gather(
            *[client.post(url, json=CALL, headers=headers) for url, headers in targets for _ in range(CALLS)]
        )
    assert all(answer.status_code == 200 for answer in answers), [a.text for a in answers if a.status_code != 200]
    results = [answer.json()["result"] for answer in answers]
    return [results[i * CALLS : (i + 1) * CALLS] for i in range(len(targets))]


def refused_code(result: dict[str, Any]) -> str:
    error: str = json.loads(result["content"][0]["text"])["error"]["code"]
    return error


def test_exactly_the_limit_of_concurrent_calls_is_admitted(served: tuple[str, str, Container]) -> None:
    base_url, admin_key, _ = served
    first, second = publish(base_url, admin_key), publish(base_url, admin_key)

    results = asyncio.run(burst([first, second]))

    for calls in results:
        admitted = [r for r in calls if not r.get("isError")]
        refused = [r for r in calls if r.get("isError")]
        assert len(admitted) == LIMIT
        assert len(refused) == CALLS - LIMIT
        assert {refused_code(r) for r in refused} == {"rate_limited"}
    url, headers = first
    listing = httpx.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=headers, timeout=30)
    assert [t["name"] for t in listing.json()["result"]["tools"]] == ["list_knowledge_bases"]
    again = httpx.post(url, json=CALL, headers=headers, timeout=30).json()["result"]
    assert refused_code(again) == "rate_limited", "the window is still full"
