"""An endpoint's search mode through the real ``mcpbridge serve`` and the official MCP SDK client: ``tools/list``
offers ``search_tools`` and ``call_tool`` in place of server-everything's tools, a search finds only what the
endpoint publishes and the workspace leaves enabled, and ``call_tool`` of a tool that needs approval pauses exactly
as a call of the listed tool does."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support.everything_hub import Hub, everything_hub
from tests.support.serve import SERVE_TEST_TIMEOUT, bearer, http_client

pytestmark = [pytest.mark.slow, pytest.mark.timeout(SERVE_TEST_TIMEOUT)]

ENDPOINTS = "/api/v1/mcp-endpoints"
SERVICES = "/api/v1/mcp-services"


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    with everything_hub(tmp_path_factory, "search-mode") as served:
        yield served


def _endpoint(hub: Hub, tools: list[str], mode: str) -> dict[str, Any]:
    with http_client(hub.process.base_url) as http:
        http.headers.update(bearer(hub.admin_key))
        created = http.post(
            ENDPOINTS,
            json={
                "name": f"tools by {mode}",
                "services": [{"service_id": hub.service_id, "tools": tools}],
                "external_tool_mode": mode,
            },
        )
    assert created.status_code == 201, created.text
    body: dict[str, Any] = created.json()
    assert body["external_tool_mode"] == mode
    return body


def _policy(hub: Hub, tool: str, **policy: bool) -> None:
    with http_client(hub.process.base_url) as http:
        http.headers.update(bearer(hub.admin_key))
        changed = http.put(f"{SERVICES}/{hub.service_id}/tool-approvals/{tool}", json=policy)
        assert changed.status_code == 200, changed.text


async def _session(endpoint: dict[str, Any], work: Any) -> Any:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {endpoint['token']}"}, timeout=30)
    async with http, Client(streamable_http_client(endpoint["url"], http_client=http), mode="legacy") as mcp:
        return await work(mcp)


def _found(result: Any) -> list[str]:
    assert result.is_error is False, result
    return [tool["name"] for tool in result.structured_content["tools"]]


def test_search_mode_lists_two_tools_and_finds_only_published_enabled_ones(hub: Hub) -> None:
    endpoint = _endpoint(hub, ["echo", "get-sum"], "search")

    async def work(mcp: Any) -> tuple[list[str], dict[str, Any]]:
        names = [tool.name for tool in (await mcp.list_tools()).tools]
        searched = {
            query: await mcp.call_tool("search_tools", {"query": query, "limit": 10})
            for query in ("echo a message back", "add two numbers", "environment variables", "get-env", "tiny image")
        }
        return names, searched

    names, searched = asyncio.run(_session(endpoint, work))
    assert {"search_tools", "call_tool", "check_call", "search_knowledge"} <= set(names)
    assert not [name for name in names if name.startswith("mcp_")], "no external tool is listed in search mode"

    echo = searched["echo a message back"].structured_content["tools"][0]
    assert echo["name"].startswith("mcp_everything_echo_")
    assert echo["description"].startswith("[MCP Service: everything (external)] ")
    assert echo["inputSchema"]["properties"]["message"]["type"] == "string"
    assert echo["requiresApproval"] is False
    assert _found(searched["add two numbers"])[0].startswith("mcp_everything_get_sum_")
    # Outside the allowlist: never found, however exactly the request names it.
    for query in ("environment variables", "get-env", "tiny image"):
        found = _found(searched[query])
        assert all(name.startswith(("mcp_everything_echo_", "mcp_everything_get_sum_")) for name in found), found

    _policy(hub, "get-sum", enabled=False)
    try:

        async def again(mcp: Any) -> Any:
            return await mcp.call_tool("search_tools", {"query": "add two numbers", "limit": 10})

        assert not [n for n in _found(asyncio.run(_session(endpoint, again))) if "get_sum" in n]
    finally:
        _policy(hub, "get-sum", enabled=True)


def test_call_tool_runs_a_found_tool_and_refuses_what_is_not_published(hub: Hub) -> None:
    endpoint = _endpoint(hub, ["echo"], "search")

    async def every_name(mcp: Any) -> list[str]:
        return [tool.name for tool in (await mcp.list_tools()).tools if tool.name.startswith("mcp_")]

    (env_name,) = [n for n in asyncio.run(_session(_endpoint(hub, ["*"], "list"), every_name)) if "_get_env_" in n]

    async def work(mcp: Any) -> tuple[Any, Any, Any, Any]:
        found = await mcp.call_tool("search_tools", {"query": "echo"})
        name = found.structured_content["tools"][0]["name"]
        ran = await mcp.call_tool("call_tool", {"name": name, "arguments": {"message": "found and run"}})
        outside = await mcp.call_tool("call_tool", {"name": env_name, "arguments": {}})
        bad = await mcp.call_tool("call_tool", {"name": 7, "arguments": {}})
        return ran, outside, bad, await mcp.call_tool("search_tools", {"query": " "})

    ran, outside, bad, empty = asyncio.run(_session(endpoint, work))
    assert ran.is_error is False
    assert "Echo: found and run" in "\n".join(block.text for block in ran.content)
    assert outside.is_error is True
    assert "tool_not_found" in outside.content[0].text
    assert "ENV" not in outside.content[0].text
    assert bad.is_error is True
    assert "invalid_tool_name" in bad.content[0].text
    assert empty.is_error is True
    assert "invalid_query" in empty.content[0].text


def test_call_tool_of_a_tool_needing_approval_pauses_like_the_listed_tool(hub: Hub) -> None:
    listing, searching = _endpoint(hub, ["echo"], "list"), _endpoint(hub, ["echo"], "search")
    _policy(hub, "echo", require_approval=True)

    async def by_name(mcp: Any) -> Any:
        (echo,) = [tool for tool in (await mcp.list_tools()).tools if tool.name.startswith("mcp_")]
        return await mcp.call_tool(echo.name, {"message": "wait for me"})

    async def by_search(mcp: Any) -> tuple[Any, Any]:
        found = await mcp.call_tool("search_tools", {"query": "echo"})
        name = found.structured_content["tools"][0]["name"]
        assert found.structured_content["tools"][0]["requiresApproval"] is True
        paused = await mcp.call_tool("call_tool", {"name": name, "arguments": {"message": "wait for me"}})
        return paused, await mcp.call_tool("check_call", {"call_id": paused.structured_content["call_id"]})

    try:
        listed = asyncio.run(_session(listing, by_name))
        searched, checked = asyncio.run(_session(searching, by_search))
    finally:
        _policy(hub, "echo", require_approval=False)
    for paused in (listed, searched):
        assert paused.is_error is False
        data = paused.structured_content
        assert data["status"] == "awaiting_approval"
        assert data["approval_url"] == f"{hub.process.base_url}/console/approvals/{data['call_id']}"
        assert "check_call" in paused.content[0].text
    assert set(searched.structured_content) == set(listed.structured_content)
    assert checked.structured_content["status"] == "awaiting_approval"
    with http_client(hub.process.base_url) as http:
        http.headers.update(bearer(hub.admin_key))
        trail = http.get("/api/v1/calls", params={"endpoint_id": searching["id"]})
        assert trail.status_code == 200, trail.text
        (entry,) = trail.json()["items"]
        assert entry["call_id"] == searched.structured_content["call_id"]
        assert entry["tool"] == "echo"


def test_a_bad_external_tool_mode_is_refused_and_changes_nothing(hub: Hub) -> None:
    endpoint = _endpoint(hub, ["echo"], "list")
    with http_client(hub.process.base_url) as http:
        http.headers.update(bearer(hub.admin_key))
        refused = http.put(f"{ENDPOINTS}/{endpoint['id']}", json={"external_tool_mode": "everything"})
        assert refused.status_code == 422, refused.text
        assert "external_tool_mode" in refused.text
        after = http.get(f"{ENDPOINTS}/{endpoint['id']}").json()
        assert after["external_tool_mode"] == "list"
        assert after["version"] == endpoint["version"]
        switched = http.put(f"{ENDPOINTS}/{endpoint['id']}", json={"external_tool_mode": "search"})
        assert switched.status_code == 200, switched.text
        assert switched.json()["external_tool_mode"] == "search"
