"""The persistent tool catalog of external services (``/metadata``, ``/metadata/refresh``, ``/tools``,
``/resources``) over REST, on both backends, against real MCP servers on 127.0.0.1:

* an SDK low-level server whose tool list the test changes (pages, definitions, sizes, failures);
* npm ``@modelcontextprotocol/server-everything`` (its real tools, schemas and resources).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mcp import types
from mcp.server.lowlevel import Server
from starlette.types import Receive, Scope, Send

from mcpbridge.bootstrap import Container
from mcpbridge.client.tool_catalog import MAX_DEFINITION_BYTES, head_key
from mcpbridge.outbound.policy import EgressPolicy
from tests.support.admin_api import admin_client
from tests.support.clock import FakeClock
from tests.support.containers import container_on
from tests.support.everything import Everything, handle_stateless, serve

BASE = "/api/v1/mcp-services"


def schema(*fields: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: {"type": "string", "description": f"the {name}"} for name in fields},
        "required": list(fields),
    }


class Upstream:
    """A Streamable HTTP MCP server (stateless, JSON answers) whose catalog the test edits between refreshes.

    ``tools`` is served ``page_size`` per page; ``repeat_cursor`` makes page 2 point back at itself; ``down`` makes
    every request fail with HTTP 503.
    """

    def __init__(self) -> None:
        self.tools: list[types.Tool] = [
            types.Tool(name="search", description="Search the docs", input_schema=schema("query")),
            types.Tool(
                name="delete_page",
                description="Delete a page",
                input_schema={
                    "type": "object",
                    "properties": {"id": {"oneOf": [{"type": "string"}, {"type": "integer"}]}},
                    "$defs": {"unused": {"type": "null"}},
                },
            ),
            types.Tool(name="stats", description="Statistics", input_schema=schema()),
        ]
        self.page_size = 1000
        self.repeat_cursor = False
        self.down = False
        self.instructions = "Use search before delete_page."

        async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
            start = int(params.cursor) if params is not None and params.cursor else 0
            page = self.tools[start : start + self.page_size]
            following = start + self.page_size
            cursor = str(following) if following < len(self.tools) else None
            if self.repeat_cursor and start > 0:
                cursor = str(start)
            return types.ListToolsResult(tools=copy.deepcopy(page), next_cursor=cursor)

        async def list_resources(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
            return types.ListResourcesResult(
                resources=[types.Resource(uri="docs://index", name="index", mime_type="text/markdown")]
            )

        self.server: Server[Any] = Server(
            "docs-upstream",
            version="2.1.0",
            instructions=self.instructions,
            on_list_tools=list_tools,
            on_list_resources=list_resources,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.down and scope["type"] == "http":
            await send({"type": "http.response.start", "status": 503, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"maintenance"})
            return
        await handle_stateless(self.server, scope, receive, send)


@pytest.fixture(params=["local", "aws"])
def container(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Container]:
    policy = EgressPolicy(["127.0.0.1"])
    with container_on(request.param, tmp_path, monkeypatch, clock=FakeClock(), egress=policy) as built:
        yield built


@pytest.fixture
def client(container: Container) -> Iterator[TestClient]:
    with admin_client(container) as test_client:
        yield test_client


@pytest.fixture
def upstream() -> Iterator[tuple[Upstream, str]]:
    app = Upstream()
    with serve(app, lifespan="off") as base:
        yield app, f"{base}/mcp"


def register(client: TestClient, url: str, **body: Any) -> str:
    response = client.post(BASE, json={"name": "docs", "transport": "http-streamable", "url": url, **body})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def refresh(client: TestClient, service_id: str) -> dict[str, Any]:
    response = client.post(f"{BASE}/{service_id}/metadata/refresh")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def metadata(client: TestClient, service_id: str) -> dict[str, Any]:
    response = client.get(f"{BASE}/{service_id}/metadata")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def tools_of(catalog: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {tool["name"]: tool for tool in catalog["data"]["tools"]}


def snapshot_blobs(container: Container, workspace_id: str, service_id: str) -> list[str]:
    """The snapshot blobs that exist for a service (through the head items and the blob port)."""
    head = container.store.get(head_key(workspace_id, service_id, "workspace"))
    return [head["snapshot_key"]] if head and head.get("snapshot_key") else []


# ---------------------------------------------------------------------------------------------- the snapshot


def test_a_refresh_saves_the_full_catalog(client: TestClient, upstream: tuple[Upstream, str]) -> None:
    server, url = upstream
    service_id = register(client, url, usage_instructions="Admins say: prefer search.")

    before = metadata(client, service_id)
    assert before == {"data": None, "stale": True, "last_error": None, "last_attempt_at": None}

    catalog = refresh(client, service_id)
    data = catalog["data"]
    assert catalog["stale"] is False
    assert catalog["last_error"] is None
    assert data["server"] == {"name": "docs-upstream", "version": "2.1.0", "title": None}
    assert data["instructions"] == server.instructions
    assert data["protocol_version"]
    assert data["changes"] == {"first": True, "added": [], "changed": [], "removed": []}
    tools = tools_of(catalog)
    assert list(tools) == ["search", "delete_page", "stats"]
    # The full JSON Schema survives, keywords the SDK has no field for included.
    delete_schema = tools["delete_page"]["definition"]["inputSchema"]
    assert delete_schema["properties"]["id"]["oneOf"] == [{"type": "string"}, {"type": "integer"}]
    assert delete_schema["$defs"] == {"unused": {"type": "null"}}
    assert all(len(tool["definition_hash"]) == 64 and tool["changed"] is False for tool in tools.values())
    assert data["resources"] == [{"uri": "docs://index", "name": "index", "mimeType": "text/markdown"}]

    # The admin's usage instructions are the service's own field: the refresh did not touch them.
    service = client.get(f"{BASE}/{service_id}").json()
    assert service["usage_instructions"] == "Admins say: prefer search."
    assert service["catalog_stale"] is False
    assert metadata(client, service_id) == catalog

    listed = client.get(f"{BASE}/{service_id}/tools").json()
    assert [t["name"] for t in listed["items"]] == ["search", "delete_page", "stats"]
    assert listed["items"][0]["input_schema"] == schema("query")
    assert (listed["items"][0]["enabled"], listed["items"][0]["require_approval"]) == (True, False)
    resources = client.get(f"{BASE}/{service_id}/resources").json()
    assert resources["items"][0]["uri"] == "docs://index"


def test_tools_pulls_the_first_catalog_and_pages_are_followed(
    client: TestClient, upstream: tuple[Upstream, str]
) -> None:
    server, url = upstream
    server.tools = [types.Tool(name=f"tool_{i:03d}", input_schema=schema("x")) for i in range(45)]
    server.page_size = 10
    service_id = register(client, url)
    listed = client.get(f"{BASE}/{service_id}/tools")
    assert listed.status_code == 200, listed.text
    assert [t["name"] for t in listed.json()["items"]] == [f"tool_{i:03d}" for i in range(45)]
    assert metadata(client, service_id)["data"]["tools"][44]["name"] == "tool_044"


def test_a_policy_must_name_a_tool_the_catalog_lists(client: TestClient, upstream: tuple[Upstream, str]) -> None:
    _, url = upstream
    service_id = register(client, url)
    refresh(client, service_id)
    policies = f"{BASE}/{service_id}/tool-approvals"
    for name, near in (("Search", ["search"]), ("delete-page", ["delete_page"]), ("no-such-tool", [])):
        response = client.put(f"{policies}/{name}", json={"require_approval": True})
        assert response.status_code == 404, response.text
        body = response.json()
        assert body["code"] == "tool_not_found"
        assert body["details"]["near_matches"] == near
        for match in near:
            assert match in body["detail"]
    assert client.get(policies).json() == {"items": [], "next_cursor": None}, "a refused name stores nothing"

    assert client.put(f"{policies}/search", json={"require_approval": True}).status_code == 200
    # A tool the server will add later is pre-registered explicitly, then changed like any other policy.
    later = client.put(f"{policies}/export", json={"require_approval": True, "pre_register": True})
    assert later.status_code == 200, later.text
    assert client.put(f"{policies}/export", json={"enabled": False}).status_code == 200
    stored = {p["tool_name"]: (p["enabled"], p["require_approval"]) for p in client.get(policies).json()["items"]}
    assert stored == {"search": (True, True), "export": (False, True)}


def test_a_changed_definition_is_flagged_and_re_requires_approval(
    client: TestClient, upstream: tuple[Upstream, str]
) -> None:
    server, url = upstream
    service_id = register(client, url)
    first = tools_of(refresh(client, service_id))
    for tool, body in (
        ("delete_page", {"require_approval": True}),
        ("stats", {"enabled": False}),
        ("search", {"require_approval": False}),
    ):
        assert client.put(f"{BASE}/{service_id}/tool-approvals/{tool}", json=body).status_code == 200

    # A silent change: same names, new behaviour described, and a new tool; one tool removed.
    server.tools[1] = server.tools[1].model_copy(update={"description": "Delete a page AND its history"})
    server.tools[0] = server.tools[0].model_copy(update={"input_schema": schema("query", "scope")})
    server.tools = [t for t in server.tools if t.name != "stats"] + [types.Tool(name="export", input_schema=schema())]
    second = refresh(client, service_id)
    tools = tools_of(second)
    assert second["data"]["changes"] == {
        "first": False,
        "added": ["export"],
        "changed": ["search", "delete_page"],
        "removed": ["stats"],
    }
    assert tools["delete_page"]["changed"] is True
    assert tools["delete_page"]["definition_hash"] != first["delete_page"]["definition_hash"]
    assert tools["export"]["changed"] is False

    policies = {p["tool_name"]: p for p in client.get(f"{BASE}/{service_id}/tool-approvals").json()["items"]}
    # The approval-requiring tool that changed is marked: approvals count for its new definition only.
    assert policies["delete_page"]["require_approval"] is True
    assert policies["delete_page"]["definition_changed_at"] is not None
    # Policies are independent of refreshes: the others keep their values and get no mark.
    assert policies["search"]["definition_changed_at"] is None
    assert policies["stats"]["enabled"] is False

    # The same catalog again: nothing flagged.
    third = refresh(client, service_id)
    assert third["data"]["changes"]["changed"] == []
    assert not any(t["changed"] for t in third["data"]["tools"])


# ---------------------------------------------------------------------------------------------- failures


def test_an_oversized_definition_rejects_the_whole_refresh(
    client: TestClient, container: Container, upstream: tuple[Upstream, str]
) -> None:
    server, url = upstream
    service_id = register(client, url)
    good = refresh(client, service_id)
    workspace_id = container.identity.installed_workspace_id()
    assert workspace_id is not None
    kept_blob = snapshot_blobs(container, workspace_id, service_id)

    huge = {"type": "object", "description": "x" * (MAX_DEFINITION_BYTES + 1)}
    server.tools.append(types.Tool(name="huge", input_schema=huge))
    response = client.post(f"{BASE}/{service_id}/metadata/refresh")
    assert response.status_code == 502, response.text
    assert response.json()["code"] == "upstream_limit_exceeded"

    after = metadata(client, service_id)
    assert after["data"] == good["data"]  # the last complete snapshot stands
    assert after["last_error"]["code"] == "upstream_limit_exceeded"
    assert "huge" not in tools_of(after)
    assert snapshot_blobs(container, workspace_id, service_id) == kept_blob


@pytest.mark.parametrize("failure", ["down", "repeat_cursor", "too_many"])
def test_a_failed_refresh_keeps_the_last_snapshot(
    client: TestClient, upstream: tuple[Upstream, str], failure: str
) -> None:
    server, url = upstream
    service_id = register(client, url)
    good = refresh(client, service_id)
    if failure == "down":
        server.down = True
        expected = 502
    elif failure == "repeat_cursor":
        server.tools = [types.Tool(name=f"t{i}", input_schema=schema()) for i in range(5)]
        server.page_size, server.repeat_cursor = 2, True
        expected = 502
    else:
        server.tools = [types.Tool(name=f"t{i}", input_schema=schema()) for i in range(2001)]
        expected = 502
    response = client.post(f"{BASE}/{service_id}/metadata/refresh")
    assert response.status_code == expected, response.text
    code = response.json()["code"]
    after = metadata(client, service_id)
    assert after["data"] == good["data"]
    assert after["last_error"]["code"] == code
    assert after["stale"] is False

    # The next complete refresh clears the error.
    server.down, server.repeat_cursor, server.page_size = False, False, 1000
    server.tools = server.tools[:3]
    assert refresh(client, service_id)["last_error"] is None


def test_configuration_changes_mark_the_catalog_stale(client: TestClient, upstream: tuple[Upstream, str]) -> None:
    _, url = upstream
    service_id = register(client, url, auth_config={"auth_type": "bearer"})
    assert refresh(client, service_id)["stale"] is False

    changes = [
        lambda: client.put(f"{BASE}/{service_id}", json={"headers": {"X-Tenant": "a"}}),
        lambda: client.put(f"{BASE}/{service_id}/credentials", json={"token": "tok-123456"}),
        lambda: client.delete(f"{BASE}/{service_id}/credentials/token"),
    ]
    for change in changes:
        assert change().status_code in (200, 204)
        assert metadata(client, service_id)["stale"] is True
        assert refresh(client, service_id)["stale"] is False

    # Name or usage text are not connection settings.
    client.put(f"{BASE}/{service_id}", json={"name": "docs-2", "usage_instructions": "hello"})
    assert metadata(client, service_id)["stale"] is False


def test_old_snapshots_are_deleted_and_delete_removes_the_catalog(
    client: TestClient, container: Container, upstream: tuple[Upstream, str]
) -> None:
    _, url = upstream
    service_id = register(client, url)
    workspace_id = container.identity.installed_workspace_id()
    assert workspace_id is not None
    refresh(client, service_id)
    (first_blob,) = snapshot_blobs(container, workspace_id, service_id)
    refresh(client, service_id)
    (second_blob,) = snapshot_blobs(container, workspace_id, service_id)
    assert first_blob != second_blob
    assert container.blobs.get(first_blob) is None
    assert json.loads(container.blobs.get(second_blob) or b"{}")["service_id"] == service_id

    assert client.delete(f"{BASE}/{service_id}").status_code == 204
    assert container.store.get(head_key(workspace_id, service_id, "workspace")) is None
    assert container.blobs.get(second_blob) is None


def test_roles_and_unknown_services(client: TestClient, container: Container, upstream: tuple[Upstream, str]) -> None:
    _, url = upstream
    service_id = register(client, url)
    viewer = client.post("/api/v1/api-keys", json={"name": "v", "role": "viewer"}).json()["key"]
    as_viewer = {"Authorization": f"Bearer {viewer}"}
    refused = client.post(f"{BASE}/{service_id}/metadata/refresh", headers=as_viewer)
    assert refused.status_code == 403
    assert metadata(client, service_id)["last_attempt_at"] is None  # nothing happened
    assert client.get(f"{BASE}/{service_id}/metadata", headers=as_viewer).status_code == 200
    for path in ("metadata", "tools", "resources"):
        assert client.get(f"{BASE}/svc_00000000000000000000000000/{path}").status_code == 404
    assert client.post(f"{BASE}/svc_00000000000000000000000000/metadata/refresh").status_code == 404
    assert client.post(f"{BASE}/not-an-id/metadata/refresh").status_code == 404


# ---------------------------------------------------------------------------------------------- server-everything


@pytest.mark.slow
def test_catalog_of_server_everything(client: TestClient, tmp_path: Path) -> None:
    server = Everything("streamableHttp", tmp_path)
    server.start()
    try:
        service_id = register(client, server.url)
        catalog = refresh(client, service_id)
    finally:
        server.kill()
    data = catalog["data"]
    assert data["server"]["name"] == "mcp-servers/everything"
    tools = tools_of(catalog)
    assert {"echo", "get-structured-content", "trigger-long-running-operation"} <= set(tools)
    echo = tools["echo"]["definition"]
    assert echo["inputSchema"]["properties"]["message"]["type"] == "string"
    assert echo["inputSchema"]["required"] == ["message"]
    assert tools["get-structured-content"]["definition"]["outputSchema"]["type"] == "object"
    assert len(data["resources"]) > 0
    assert "tools" in data["capabilities"]
