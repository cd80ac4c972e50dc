"""MCP endpoint management through the REST API, and endpoint token authentication, on both backends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from mcpbridge.bootstrap import Container
from mcpbridge.domain import credentials
from mcpbridge.domain.identity import Principal, Scope
from mcpbridge.domain.items import Update
from mcpbridge.errors import Conflict, Forbidden, Unauthenticated
from mcpbridge.http.apps import create_combined_app
from mcpbridge.http.routes import endpoints as endpoint_routes
from mcpbridge.identity.accounts import _api_key_item, _workspace_item, workspace_key
from mcpbridge.publishing.endpoints import Endpoint, EndpointService, endpoint_key
from mcpbridge.publishing.offered_tools import CATALOG, DEFAULT_TOOLS
from tests.support.clock import FakeClock
from tests.support.containers import container_on

BASE = "/api/v1/mcp-endpoints"
READ_TOOLS = [
    "list_knowledge_bases",
    "list_shared_knowledge_bases",
    "search_knowledge",
    "grep_chunks",
    "list_documents",
    "read_document",
    "find_documents",
]


@pytest.fixture(params=["local", "aws"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def settings() -> dict[str, Any]:
    return {}


@pytest.fixture
def container(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: dict[str, Any]
) -> Iterator[Container]:
    with container_on(backend, tmp_path, monkeypatch, settings=settings, clock=FakeClock()) as built:
        yield built


@pytest.fixture
def service(container: Container) -> EndpointService:
    built: EndpointService = container.endpoints  # type: ignore[attr-defined]
    return built


@pytest.fixture
def admin_key(container: Container) -> str:
    key = container.identity.initialize().api_key
    assert key is not None
    return key


@pytest.fixture
def client(container: Container, admin_key: str) -> Iterator[TestClient]:
    with TestClient(create_combined_app(container), raise_server_exceptions=False) as test_client:
        test_client.headers["Authorization"] = f"Bearer {admin_key}"
        yield test_client


def as_key(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def problem(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["code"] == code, body
    assert body["detail"]
    return body


def make_kb(client: TestClient, name: str) -> str:
    response = client.post("/api/v1/knowledge-bases", json={"name": name})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def make_key(client: TestClient, **body: Any) -> str:
    response = client.post("/api/v1/api-keys", json={"name": "k", **body})
    assert response.status_code == 201, response.text
    return str(response.json()["key"])


def create(client: TestClient, **body: Any) -> Any:
    return client.post(BASE, json={"name": "Docs", **body})


def created(client: TestClient, **body: Any) -> dict[str, Any]:
    response = create(client, **body)
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def listed(client: TestClient) -> list[dict[str, Any]]:
    response = client.get(BASE)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["next_cursor"] is None
    return body["items"]  # type: ignore[no-any-return]


def admin_principal(container: Container, admin_key: str) -> Principal:
    return container.identity.authenticate(admin_key)


# ---------------------------------------------------------------------------------------------------- create


def test_create_returns_the_token_once_with_url_and_client_configs(client: TestClient) -> None:
    response = create(client, name="Product Docs", description="  the manuals  ")
    assert response.status_code == 201, response.text
    assert response.headers["cache-control"] == "no-store"
    body = response.json()
    token = body["token"]
    assert credentials.well_formed(token, credentials.ENDPOINT_TOKEN_PREFIX)
    assert len(token) == 47
    assert body["token_hint"] == token[:12]
    assert body["id"].startswith("ep_")
    assert body["description"] == "the manuals"
    assert body["enabled"] is True
    assert body["knowledge_base_ids"] == []
    assert body["tools"] == list(DEFAULT_TOOLS)
    assert body["rate_limit_per_minute"] == 60
    assert body["default_agent_id"] is None
    assert body["last_used_at"] is None
    assert body["version"] == 1
    assert "sha256" not in body
    url = body["url"]
    assert url == f"http://testserver/mcp/{body['id']}"

    configs = body["client_configs"]
    auth = {"Authorization": f"Bearer {token}"}
    assert configs["cursor"] == {"mcpServers": {"product-docs": {"url": url, "headers": auth}}}
    assert configs["vscode"] == {"servers": {"product-docs": {"type": "http", "url": url, "headers": auth}}}
    assert configs["claude_code"] == (
        f'claude mcp add --transport http product-docs {url} --header "Authorization: Bearer {token}"'
    )
    remote = configs["mcp_remote"]["mcpServers"]["product-docs"]
    assert remote["command"] == "npx"
    assert remote["args"][:5] == ["-y", "mcp-remote@0.15.1", url, "--header", "Authorization:${MCPBRIDGE_TOKEN}"]
    assert remote["args"][5:] == ["--allow-http"], "mcp-remote refuses plain http beyond localhost without it"
    assert remote["env"] == {"MCPBRIDGE_TOKEN": f"Bearer {token}"}
    assert not any(token in arg for arg in remote["args"]), "the token must never be in the process arguments"


@pytest.mark.parametrize("settings", [{"public_base_url": "https://mcp.example.com/"}])
def test_urls_use_the_public_base_url(client: TestClient) -> None:
    body = created(client, name="Équipe Produit ✨")
    url = f"https://mcp.example.com/mcp/{body['id']}"
    assert body["url"] == url
    remote = body["client_configs"]["mcp_remote"]["mcpServers"]["equipe-produit"]
    assert remote["args"] == ["-y", "mcp-remote@0.15.1", url, "--header", "Authorization:${MCPBRIDGE_TOKEN}"]
    assert list(body["client_configs"]["cursor"]["mcpServers"]) == ["equipe-produit"]


def test_slugs_and_loopback_urls() -> None:
    assert endpoint_routes.slug("知识库") == "mcpbridge"
    assert endpoint_routes.slug("  My KB -- (prod) ") == "my-kb-prod"
    local = endpoint_routes.client_configs("kb", "http://127.0.0.1:8080/mcp/ep_1", "mcp_x")
    assert "--allow-http" not in local.mcp_remote["mcpServers"]["kb"]["args"]


def test_list_and_get_never_show_the_token_or_its_hash(client: TestClient, container: Container) -> None:
    body = created(client)
    token = body["token"]
    for response in (client.get(BASE), client.get(f"{BASE}/{body['id']}")):
        assert response.status_code == 200
        assert token not in response.text
        assert credentials.digest(token) not in response.text
        assert "sha256" not in response.text
    (item,) = listed(client)
    assert "token" not in item
    assert item["token_hint"] == token[:12]
    fetched = client.get(f"{BASE}/{body['id']}").json()
    assert fetched == item
    assert fetched == {k: v for k, v in body.items() if k not in ("token", "url", "client_configs")}
    stored = container.store.get(endpoint_key(container.identity.installed_workspace_id() or "", body["id"]))
    assert stored is not None
    assert stored["sha256"] == credentials.digest(token)
    assert token not in str(stored)


def test_names_are_trimmed_and_limited_in_bytes(client: TestClient) -> None:
    assert created(client, name="  Docs  ")["name"] == "Docs"
    assert created(client, name="a" * 255)["name"] == "a" * 255
    problem(create(client, name="é" * 128), 400, "invalid_name")  # 128 characters, 256 bytes


def test_tools_are_normalised_and_the_rate_defaults(client: TestClient) -> None:
    body = created(client, tools=[" ask", "search_knowledge", "ask", "delete_document"], rate_limit_per_minute=0)
    assert body["tools"] == ["search_knowledge", "ask", "delete_document"]
    assert body["rate_limit_per_minute"] == 60
    assert created(client, rate_limit_per_minute=6000)["rate_limit_per_minute"] == 6000


def test_knowledge_bases_are_checked_and_deduplicated(client: TestClient) -> None:
    kb_a, kb_b = make_kb(client, "A"), make_kb(client, "B")
    body = created(client, knowledge_base_ids=[kb_a, f" {kb_b} ", kb_a, ""])
    assert body["knowledge_base_ids"] == [kb_a, kb_b]


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"name": ""}, 400, "invalid_name"),
        ({"name": "   "}, 400, "invalid_name"),
        ({"name": "x" * 256}, 400, "invalid_name"),
        ({"name": "x", "tools": []}, 400, "no_tools"),
        ({"name": "x", "tools": ["fly", "teleport"]}, 400, "unknown_tool"),
        ({"name": "x", "tools": ["ask", "fly"]}, 400, "unknown_tool"),
        ({"name": "x", "rate_limit_per_minute": 6001}, 400, "invalid_rate_limit"),
        ({"name": "x", "rate_limit_per_minute": -1}, 400, "invalid_rate_limit"),
        ({"name": "x", "knowledge_base_ids": ["kb_00000000000000000000000000"]}, 404, "kb_not_found"),
        ({"name": "x", "knowledge_base_ids": ["not an id"]}, 404, "kb_not_found"),
        ({"name": "x", "default_agent_id": "agent_1"}, 404, "agent_not_found"),
        ({"name": "x", "description": "d" * 2001}, 400, "invalid_description"),
        ({"name": 5}, 422, "validation_failed"),
        ({}, 422, "validation_failed"),
        ({"name": "x", "rate_limit_per_minute": "60"}, 422, "validation_failed"),
        ({"name": "x", "rate_limit_per_minute": True}, 422, "validation_failed"),
        ({"name": "x", "rate_limit_per_minute": 1.5}, 422, "validation_failed"),
        ({"name": "x", "tools": "ask"}, 422, "validation_failed"),
        ({"name": "x", "knowledge_base_ids": "kb_1"}, 422, "validation_failed"),
        ({"name": "x", "enabled": "yes"}, 422, "validation_failed"),
        ({"name": "x", "token": "mcp_mine"}, 422, "validation_failed"),
    ],
)
def test_bad_input_is_a_clear_4xx_and_stores_nothing(
    client: TestClient, body: dict[str, Any], status: int, code: str
) -> None:
    response = client.post(BASE, json=body)
    details = problem(response, status, code)
    if code == "kb_not_found":
        assert details["detail"].startswith("knowledge base not found: ")
    if code == "no_tools":
        assert details["detail"] == "at least one tool must be enabled"
    if code == "invalid_rate_limit":
        assert details["detail"] == "rate_limit_per_minute is out of range"
    assert listed(client) == []


def test_malformed_json_is_400(client: TestClient) -> None:
    response = client.post(BASE, content=b'{"name": ', headers={"Content-Type": "application/json"})
    problem(response, 400, "malformed_json")
    assert listed(client) == []


def test_catalog_lists_groups_in_order_with_default_ticks(client: TestClient) -> None:
    response = client.get(f"{BASE}/tools")
    assert response.status_code == 200
    groups = response.json()["groups"]
    assert [g["name"] for g in groups] == ["read", "ask", "wiki", "write"]
    assert all(g["title"] for g in groups)
    tools = [t for g in groups for t in g["tools"]]
    assert [t["name"] for t in tools] == [t.name for t in CATALOG]
    assert all(set(t) == {"name", "title", "group", "default"} for t in tools)
    assert {t["name"] for t in tools if not t["default"]} == {"add_document", "update_document", "delete_document"}
    assert all(t["group"] == g["name"] for g in groups for t in g["tools"])


# ---------------------------------------------------------------------------------------------------- access


def test_a_viewer_may_read_but_not_write(client: TestClient) -> None:
    existing = created(client)
    viewer = make_key(client, role="viewer")
    assert client.get(BASE, headers=as_key(viewer)).status_code == 200
    assert client.get(f"{BASE}/tools", headers=as_key(viewer)).status_code == 200
    assert client.get(f"{BASE}/{existing['id']}", headers=as_key(viewer)).status_code == 200
    problem(client.post(BASE, headers=as_key(viewer), json={"name": "x"}), 403, "admin_required")
    problem(client.put(f"{BASE}/{existing['id']}", headers=as_key(viewer), json={"name": "y"}), 403, "admin_required")
    problem(client.post(f"{BASE}/{existing['id']}/rotate-token", headers=as_key(viewer)), 403, "admin_required")
    problem(client.delete(f"{BASE}/{existing['id']}", headers=as_key(viewer)), 403, "admin_required")
    assert [e["id"] for e in listed(client)] == [existing["id"]]
    assert listed(client)[0]["version"] == 1


def test_a_scoped_key_needs_manage_channels_everywhere(client: TestClient) -> None:
    existing = created(client)
    key = make_key(client, role="admin", capabilities=["read", "ask", "wiki", "write"])
    h = as_key(key)
    for response in (
        client.get(BASE, headers=h),
        client.get(f"{BASE}/tools", headers=h),
        client.get(f"{BASE}/{existing['id']}", headers=h),
        client.post(BASE, headers=h, json={"name": "x"}),
        client.put(f"{BASE}/{existing['id']}", headers=h, json={"name": "y"}),
        client.post(f"{BASE}/{existing['id']}/rotate-token", headers=h),
        client.delete(f"{BASE}/{existing['id']}", headers=h),
    ):
        problem(response, 403, "capability_missing")
    assert [(e["id"], e["version"]) for e in listed(client)] == [(existing["id"], 1)]


def test_a_scoped_key_cannot_mint_more_authority_than_it_has(client: TestClient) -> None:
    kb_a, kb_b = make_kb(client, "A"), make_kb(client, "B")
    key = make_key(client, role="admin", capabilities=["read", "manage_channels"], knowledge_base_ids=[kb_a])
    h = as_key(key)
    for body in (
        {"tools": READ_TOOLS},  # every knowledge base
        {"tools": READ_TOOLS, "knowledge_base_ids": [kb_b]},
        {"tools": READ_TOOLS, "knowledge_base_ids": [kb_a, kb_b]},
        {"tools": ["search_knowledge", "add_document"], "knowledge_base_ids": [kb_a]},
        {"tools": ["ask"], "knowledge_base_ids": [kb_a]},
    ):
        problem(client.post(BASE, headers=h, json={"name": "x", **body}), 403, "scope_exceeded")
    assert listed(client) == []

    mine = client.post(BASE, headers=h, json={"name": "mine", "knowledge_base_ids": [kb_a]})
    assert mine.status_code == 201, mine.text
    assert mine.json()["tools"] == READ_TOOLS, "the default tools are cut to what the key may publish"
    mine_id = mine.json()["id"]
    problem(client.put(f"{BASE}/{mine_id}", headers=h, json={"knowledge_base_ids": []}), 403, "scope_exceeded")
    problem(client.put(f"{BASE}/{mine_id}", headers=h, json={"tools": ["wiki_search"]}), 403, "scope_exceeded")
    renamed = client.put(f"{BASE}/{mine_id}", headers=h, json={"name": "renamed"})
    assert renamed.status_code == 200
    assert client.post(f"{BASE}/{mine_id}/rotate-token", headers=h).status_code == 200

    broad = created(client, name="broad")  # the admin's: every knowledge base, ask and wiki tools
    problem(client.put(f"{BASE}/{broad['id']}", headers=h, json={"name": "z"}), 403, "scope_exceeded")
    problem(client.post(f"{BASE}/{broad['id']}/rotate-token", headers=h), 403, "scope_exceeded")
    after = {e["id"]: e for e in listed(client)}
    assert after[broad["id"]] == {k: v for k, v in broad.items() if k not in ("token", "url", "client_configs")}
    assert after[mine_id]["knowledge_base_ids"] == [kb_a]
    assert after[mine_id]["tools"] == READ_TOOLS


def test_a_scoped_key_can_neither_see_nor_delete_endpoints_beyond_its_authority(client: TestClient) -> None:
    kb_a, kb_b = make_kb(client, "A"), make_kb(client, "B")
    key = make_key(client, role="admin", capabilities=["read", "manage_channels"], knowledge_base_ids=[kb_a])
    h = as_key(key)
    broad = created(client, name="broad")  # every knowledge base, with ask and wiki tools
    other = created(client, name="other", knowledge_base_ids=[kb_b], tools=READ_TOOLS)
    asks = created(client, name="asks", knowledge_base_ids=[kb_a], tools=["search_knowledge", "ask"])
    mine = client.post(BASE, headers=h, json={"name": "mine", "knowledge_base_ids": [kb_a]}).json()

    for outside in (broad, other, asks):
        problem(client.get(f"{BASE}/{outside['id']}", headers=h), 403, "scope_exceeded")
        problem(client.delete(f"{BASE}/{outside['id']}", headers=h), 403, "scope_exceeded")
    seen = client.get(BASE, headers=h).json()
    assert [e["id"] for e in seen["items"]] == [mine["id"]], "the list shows only endpoints within the key's scope"
    assert seen["next_cursor"] is None
    assert client.get(f"{BASE}/{mine['id']}", headers=h).status_code == 200
    # Nothing was deleted; the key's own endpoint it may delete.
    assert {e["id"] for e in listed(client)} == {broad["id"], other["id"], asks["id"], mine["id"]}
    assert client.delete(f"{BASE}/{mine['id']}", headers=h).status_code == 204
    assert {e["id"] for e in listed(client)} == {broad["id"], other["id"], asks["id"]}


def test_a_kb_limited_key_sees_unknown_and_foreign_kbs_differently(client: TestClient) -> None:
    kb_a = make_kb(client, "A")
    key = make_key(client, role="admin", capabilities=["read", "manage_channels"], knowledge_base_ids=[kb_a])
    missing = "kb_00000000000000000000000000"
    # Outside the key's list: refused for scope before any lookup, so the key learns nothing about other bases.
    response = client.post(BASE, headers=as_key(key), json={"name": "x", "knowledge_base_ids": [missing]})
    problem(response, 403, "scope_exceeded")
    # Unrestricted admin: an unknown base is simply not found.
    problem(create(client, knowledge_base_ids=[kb_a, missing]), 404, "kb_not_found")


def test_endpoints_of_another_workspace_look_missing(client: TestClient, container: Container) -> None:
    theirs = created(client)
    # A second workspace with its own admin key, written as Accounts would.
    issued = credentials.issue(credentials.API_KEY_PREFIX)
    container.store.put(_workspace_item("ws_other", "Other", "2027-01-01T00:00:00Z"))
    container.store.put(
        _api_key_item("ws_other", "key_other", "usr_other", "other", "admin", Scope(), issued, "2027-01-01T00:00:00Z")
    )
    h = as_key(issued.plaintext)
    assert client.get(BASE, headers=h).json() == {"items": [], "next_cursor": None}
    for response in (
        client.get(f"{BASE}/{theirs['id']}", headers=h),
        client.put(f"{BASE}/{theirs['id']}", headers=h, json={"enabled": False}),
        client.post(f"{BASE}/{theirs['id']}/rotate-token", headers=h),
        client.delete(f"{BASE}/{theirs['id']}", headers=h),
        client.get(f"{BASE}/ep_00000000000000000000000000", headers=h),
        client.get(f"{BASE}/whatever", headers=h),
    ):
        problem(response, 404, "endpoint_not_found")
    assert listed(client)[0]["enabled"] is True


# ---------------------------------------------------------------------------------------------------- update


def test_update_changes_only_what_is_sent(client: TestClient) -> None:
    kb = make_kb(client, "A")
    body = created(client, knowledge_base_ids=[kb], rate_limit_per_minute=10)
    url = f"{BASE}/{body['id']}"
    updated = client.put(url, json={"name": " New name ", "tools": [" ask", "ask"], "rate_limit_per_minute": 0})
    assert updated.status_code == 200, updated.text
    after = updated.json()
    assert after["name"] == "New name"
    assert after["tools"] == ["ask"]
    assert after["rate_limit_per_minute"] == 60
    assert after["knowledge_base_ids"] == [kb]
    assert after["version"] == 2
    assert after["token_hint"] == body["token_hint"]
    assert "token" not in after
    assert client.put(url, json={"knowledge_base_ids": [], "default_agent_id": None}).json()["knowledge_base_ids"] == []
    agent = client.post("/api/v1/agents", json={"name": "support"})
    assert agent.status_code == 201, agent.text
    with_agent = client.put(url, json={"default_agent_id": agent.json()["id"]})
    assert with_agent.status_code == 200, with_agent.text
    assert with_agent.json()["default_agent_id"] == agent.json()["id"]
    assert client.put(url, json={"default_agent_id": None}).json()["default_agent_id"] is None
    assert client.put(url, json={}).json()["version"] == 5, "an empty update changes nothing"
    assert client.put(url, json={"name": "New name"}).json()["version"] == 5, "nor does an update to the same values"


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"name": ""}, 400, "invalid_name"),
        ({"tools": []}, 400, "no_tools"),
        ({"tools": ["fly"]}, 400, "unknown_tool"),
        ({"tools": ["ask", " search_knowledge ", "nope"]}, 400, "unknown_tool"),
        ({"tools": [""]}, 400, "no_tools"),
        ({"rate_limit_per_minute": 6001}, 400, "invalid_rate_limit"),
        ({"knowledge_base_ids": ["kb_00000000000000000000000000"]}, 404, "kb_not_found"),
        ({"default_agent_id": "agent_1"}, 404, "agent_not_found"),
        ({"name": None}, 422, "validation_failed"),
        ({"tools": None}, 422, "validation_failed"),
        ({"enabled": "false"}, 422, "validation_failed"),
        ({"token": "x"}, 422, "validation_failed"),
    ],
)
def test_bad_updates_change_nothing(client: TestClient, body: dict[str, Any], status: int, code: str) -> None:
    before = created(client)
    problem(client.put(f"{BASE}/{before['id']}", json=body), status, code)
    (after,) = listed(client)
    assert after == {k: v for k, v in before.items() if k not in ("token", "url", "client_configs")}


def test_an_unknown_tool_name_is_refused_naming_it_and_nothing_changes(client: TestClient) -> None:
    """A typo in the tools refuses the whole change (it would publish less than was meant), naming the tool."""
    before = created(client, tools=["ask", "search_knowledge"])
    refused = problem(
        client.put(f"{BASE}/{before['id']}", json={"name": "renamed", "tools": ["ask", "serch_knowledge"]}),
        400,
        "unknown_tool",
    )
    assert "serch_knowledge" in refused["detail"]
    assert refused["details"]["unknown"] == ["serch_knowledge"]
    assert "search_knowledge" in refused["details"]["known"]
    (after,) = listed(client)
    assert after == {k: v for k, v in before.items() if k not in ("token", "url", "client_configs")}
    assert (after["name"], after["tools"]) == (before["name"], ["search_knowledge", "ask"])
    problem(client.post(BASE, json={"name": "typo", "tools": ["asc"]}), 400, "unknown_tool")
    assert len(listed(client)) == 1


def test_updates_of_unknown_endpoints_are_404(client: TestClient) -> None:
    problem(client.put(f"{BASE}/ep_00000000000000000000000000", json={"name": "x"}), 404, "endpoint_not_found")
    problem(client.post(f"{BASE}/ep_00000000000000000000000000/rotate-token"), 404, "endpoint_not_found")
    problem(client.delete(f"{BASE}/ep_00000000000000000000000000"), 404, "endpoint_not_found")


def test_an_expected_version_guards_against_lost_updates(
    client: TestClient, container: Container, service: EndpointService, admin_key: str
) -> None:
    body = created(client)
    principal = admin_principal(container, admin_key)
    service.update(principal, body["id"], name="first", expected_version=1)
    with pytest.raises(Conflict) as lost:
        service.update(principal, body["id"], name="second", expected_version=1)
    assert lost.value.code == "endpoint_version_conflict"
    assert service.get(principal, body["id"]).name == "first"


# ---------------------------------------------------------------------------------------------------- tokens


def test_rotation_replaces_the_token_at_once(client: TestClient, service: EndpointService) -> None:
    body = created(client)
    old = body["token"]
    assert service.authenticate(body["id"], old).id == body["id"]
    response = client.post(f"{BASE}/{body['id']}/rotate-token")
    assert response.status_code == 200, response.text
    assert response.headers["cache-control"] == "no-store"
    rotated = response.json()
    new = rotated["token"]
    assert new != old
    assert rotated["token_hint"] == new[:12]
    assert rotated["version"] == 2
    assert rotated["url"] == body["url"]
    assert rotated["client_configs"]["mcp_remote"]["mcpServers"]["docs"]["env"] == {"MCPBRIDGE_TOKEN": f"Bearer {new}"}
    with pytest.raises(Unauthenticated) as refused:
        service.authenticate(body["id"], old)
    assert refused.value.code == "invalid_token"
    assert service.authenticate(body["id"], new).token_hint == new[:12]
    assert new not in client.get(BASE).text


def test_disabling_cuts_clients_off_and_enabling_lets_them_back(client: TestClient, service: EndpointService) -> None:
    body = created(client)
    assert client.put(f"{BASE}/{body['id']}", json={"enabled": False}).json()["enabled"] is False
    with pytest.raises(Forbidden) as refused:
        service.authenticate(body["id"], body["token"])
    assert refused.value.code == "endpoint_disabled"
    assert client.put(f"{BASE}/{body['id']}", json={"enabled": True}).status_code == 200
    assert service.authenticate(body["id"], body["token"]).enabled


def test_deletion_cuts_clients_off(client: TestClient, service: EndpointService) -> None:
    body = created(client)
    assert client.delete(f"{BASE}/{body['id']}").status_code == 204
    with pytest.raises(Unauthenticated) as refused:
        service.authenticate(body["id"], body["token"])
    assert refused.value.code == "invalid_token"
    problem(client.get(f"{BASE}/{body['id']}"), 404, "endpoint_not_found")
    problem(client.delete(f"{BASE}/{body['id']}"), 404, "endpoint_not_found")
    assert listed(client) == []


def test_a_token_opens_only_its_own_endpoint(client: TestClient, service: EndpointService) -> None:
    first, second = created(client, name="one"), created(client, name="two")
    assert service.authenticate(second["id"], second["token"]).name == "two"
    for endpoint_id, token in (
        (second["id"], first["token"]),
        (first["id"], second["token"]),
        (first["id"], "mcp_" + "A" * 43),
        (first["id"], first["token"][:-1]),
        (first["id"], first["token"] + "A"),
        (first["id"], "sk_" + first["token"][4:]),
        (first["id"], ""),
        ("", first["token"]),
        ("ep_nope", first["token"]),
    ):
        with pytest.raises(Unauthenticated) as refused:
            service.authenticate(endpoint_id, token)
        assert refused.value.code == "invalid_token"


def test_an_inactive_workspace_closes_its_endpoints(
    client: TestClient, container: Container, service: EndpointService
) -> None:
    body = created(client)
    workspace_id = container.identity.installed_workspace_id()
    assert workspace_id is not None
    container.store.update(workspace_key(workspace_id), Update(set={"status": "inactive"}))
    with pytest.raises(Forbidden) as refused:
        service.authenticate(body["id"], body["token"])
    assert refused.value.code == "workspace_inactive"


def test_find_locates_an_endpoint_from_its_id_alone(client: TestClient, service: EndpointService) -> None:
    body = created(client)
    found = service.find(body["id"])
    assert found is not None
    assert found.name == "Docs"
    assert service.find("ep_00000000000000000000000000") is None
    assert service.find("nonsense") is None


def test_use_is_recorded_at_most_once_a_minute(
    client: TestClient, container: Container, service: EndpointService
) -> None:
    clock = container.clock
    assert isinstance(clock, FakeClock)
    body = created(client)

    def use() -> Endpoint:
        endpoint = service.authenticate(body["id"], body["token"])
        service.touch(endpoint)
        return endpoint

    def last_used() -> str | None:
        return client.get(f"{BASE}/{body['id']}").json()["last_used_at"]  # type: ignore[no-any-return]

    assert use().last_used_at is None
    first = last_used()
    assert first is not None
    clock.advance(30)
    assert use().last_used_at == first
    assert last_used() == first
    clock.advance(31)
    use()
    assert last_used() not in (None, first)
    assert client.get(f"{BASE}/{body['id']}").json()["version"] == 1, "recording use is not a configuration change"


def test_touching_a_deleted_endpoint_does_not_bring_it_back(
    client: TestClient, container: Container, service: EndpointService
) -> None:
    body = created(client)
    endpoint = service.authenticate(body["id"], body["token"])
    assert client.delete(f"{BASE}/{body['id']}").status_code == 204
    service.touch(endpoint)
    assert container.store.get(endpoint_key(endpoint.workspace_id, endpoint.id)) is None


def test_openapi_has_no_field_for_a_hash_and_a_token_only_where_issued(client: TestClient) -> None:
    spec = client.get("/api/v1/openapi.json").json()
    assert f"{BASE}/{{endpoint_id}}/rotate-token" in spec["paths"]
    schemas = spec["components"]["schemas"]
    assert "sha256" not in str(schemas)
    assert "token" not in schemas["EndpointOut"]["properties"]
    assert "token" in schemas["IssuedEndpoint"]["properties"]
