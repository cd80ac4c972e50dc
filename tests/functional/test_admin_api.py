"""The admin REST API through the real ASGI app, on both backends: auth, roles, scopes, bad input, problem+json."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from mcpbridge.bootstrap import Container
from mcpbridge.http.apps import create_combined_app
from mcpbridge.settings import Settings
from tests.support.clock import FakeClock


@pytest.fixture(params=["local", "aws"])
def container(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Container]:
    clock = FakeClock()
    if request.param == "local":
        built = Container(Settings(data_dir=tmp_path / "data"), clock=clock)
        yield built
        built.close()
        return
    from moto import mock_aws

    from tests.support.aws import create_aws_resources

    request.getfixturevalue("aws_credentials")
    with mock_aws():
        resources = create_aws_resources(table_name="admin-api")
        settings = Settings(
            backend="aws", table_name=resources.table_name, kms_key_id=resources.kms_key_id, aws_region="eu-west-1"
        )
        yield Container(settings, clock=clock)


@pytest.fixture
def client(container: Container) -> Iterator[TestClient]:
    # 127.0.0.1: a host the MCP endpoint serves (it answers 421 to any other).
    app = create_combined_app(container)
    with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture
def admin_key(container: Container) -> str:
    key = container.identity.initialize().api_key
    assert key is not None
    return key


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def assert_problem(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["code"] == code
    assert body["status"] == status
    assert body["detail"]
    return body


def key_ids(client: TestClient, admin_key: str) -> list[str]:
    response = client.get("/api/v1/api-keys", headers=bearer(admin_key))
    assert response.status_code == 200
    return [k["id"] for k in response.json()["items"]]


def create_key(client: TestClient, admin_key: str, **body: Any) -> Any:
    return client.post("/api/v1/api-keys", headers=bearer(admin_key), json={"name": "k", **body})


# ---------------------------------------------------------------------------------------------------- authentication


def test_no_key_is_401_with_a_bearer_challenge(client: TestClient, admin_key: str) -> None:
    response = client.get("/api/v1/api-keys")
    assert_problem(response, 401, "unauthenticated")
    assert response.headers["www-authenticate"] == 'Bearer realm="mcpbridge"'


@pytest.mark.parametrize(
    "headers",
    [
        {"Authorization": "Bearer sk_short"},
        {"Authorization": "Bearer sk_" + "A" * 43},
        {"X-API-Key": "mcp_" + "A" * 43},
    ],
    ids=["malformed", "unknown", "wrong-kind"],
)
def test_bad_keys_are_401(client: TestClient, admin_key: str, headers: dict[str, str]) -> None:
    assert_problem(client.get("/api/v1/me", headers=headers), 401, "invalid_api_key")


def test_a_key_in_another_scheme_is_refused(client: TestClient, admin_key: str) -> None:
    response = client.get("/api/v1/me", headers={"Authorization": f"Basic {admin_key}"})
    assert_problem(response, 401, "invalid_authorization_header")


def test_a_key_in_the_query_string_is_not_accepted(client: TestClient, admin_key: str) -> None:
    assert_problem(client.get(f"/api/v1/me?api_key={admin_key}"), 401, "unauthenticated")


def test_either_header_authenticates(client: TestClient, admin_key: str, container: Container) -> None:
    me = client.get("/api/v1/me", headers={"X-API-Key": admin_key})
    assert me.status_code == 200
    assert me.json()["role"] == "admin"
    assert me.json()["workspace_id"] == container.identity.installed_workspace_id()
    assert client.get("/api/v1/me", headers=bearer(admin_key)).json() == me.json()


# ---------------------------------------------------------------------------------------------------- keys


def test_list_shows_hints_never_keys_or_hashes(client: TestClient, admin_key: str) -> None:
    response = client.get("/api/v1/api-keys", headers=bearer(admin_key))
    assert response.status_code == 200
    (listed,) = response.json()["items"]
    assert listed["hint"] == admin_key[:12]
    assert listed["status"] == "active"
    assert "key" not in listed
    assert "sha256" not in listed
    assert admin_key not in response.text


def test_created_key_is_shown_once_and_works(client: TestClient, admin_key: str) -> None:
    created = create_key(client, admin_key, name="reporting", role="viewer", capabilities=["read"])
    assert created.status_code == 201
    assert created.headers["cache-control"] == "no-store"
    body = created.json()
    assert body["key"].startswith("sk_")
    assert body["capabilities"] == ["read"]
    assert body["knowledge_base_ids"] is None
    me = client.get("/api/v1/me", headers=bearer(body["key"]))
    assert me.json()["role"] == "viewer"
    fetched = client.get(f"/api/v1/api-keys/{body['id']}", headers=bearer(admin_key)).json()
    assert "key" not in fetched
    assert body["key"] not in client.get("/api/v1/api-keys", headers=bearer(admin_key)).text


def test_a_viewer_key_on_an_admin_route_is_403(client: TestClient, admin_key: str) -> None:
    viewer = create_key(client, admin_key, role="viewer").json()["key"]
    before = key_ids(client, admin_key)
    assert_problem(client.get("/api/v1/api-keys", headers=bearer(viewer)), 403, "admin_required")
    assert_problem(create_key(client, viewer, role="viewer"), 403, "admin_required")
    assert key_ids(client, admin_key) == before


def test_revocation_takes_effect_on_the_next_request(client: TestClient, admin_key: str) -> None:
    created = create_key(client, admin_key, role="admin").json()
    assert client.get("/api/v1/me", headers=bearer(created["key"])).status_code == 200
    assert client.delete(f"/api/v1/api-keys/{created['id']}", headers=bearer(admin_key)).status_code == 204
    assert_problem(client.get("/api/v1/me", headers=bearer(created["key"])), 401, "invalid_api_key")
    listed = client.get(f"/api/v1/api-keys/{created['id']}", headers=bearer(admin_key)).json()
    assert listed["status"] == "revoked"
    assert listed["revoked_at"]
    # Revoking again changes nothing; an unknown key is 404.
    assert client.delete(f"/api/v1/api-keys/{created['id']}", headers=bearer(admin_key)).status_code == 204
    assert client.get(f"/api/v1/api-keys/{created['id']}", headers=bearer(admin_key)).json() == listed
    assert_problem(client.delete("/api/v1/api-keys/key_nope", headers=bearer(admin_key)), 404, "api_key_not_found")


def test_a_scoped_key_cannot_mint_a_broader_one(client: TestClient, admin_key: str) -> None:
    scoped = create_key(
        client,
        admin_key,
        role="admin",
        capabilities=["read", "manage_channels", "manage_keys"],
        knowledge_base_ids=["kb_1"],
    ).json()["key"]
    before = key_ids(client, admin_key)
    for broader in (
        {},
        {"capabilities": ["read", "write"], "knowledge_base_ids": ["kb_1"]},
        {"capabilities": ["read"]},
        {"capabilities": ["read"], "knowledge_base_ids": ["kb_1", "kb_2"]},
    ):
        assert_problem(create_key(client, scoped, role="viewer", **broader), 403, "scope_exceeded")
    assert key_ids(client, admin_key) == before
    narrower = create_key(client, scoped, role="viewer", capabilities=["read"], knowledge_base_ids=["kb_1"])
    assert narrower.status_code == 201


def test_pages_of_keys(client: TestClient, admin_key: str) -> None:
    for i in range(4):
        assert create_key(client, admin_key, name=f"k{i}").status_code == 201
    seen: list[str] = []
    url = "/api/v1/api-keys?limit=2"
    while True:
        page = client.get(url, headers=bearer(admin_key)).json()
        seen += [k["id"] for k in page["items"]]
        if page["next_cursor"] is None:
            break
        url = f"/api/v1/api-keys?limit=2&cursor={page['next_cursor']}"
    assert len(seen) == len(set(seen)) == 5
    assert_problem(client.get("/api/v1/api-keys?cursor=bogus", headers=bearer(admin_key)), 400, "invalid_cursor")


def test_last_used_is_recorded_at_most_once_a_minute(client: TestClient, admin_key: str, container: Container) -> None:
    clock = container.clock
    assert isinstance(clock, FakeClock)

    def last_used() -> str | None:
        (listed,) = client.get("/api/v1/api-keys", headers=bearer(admin_key)).json()["items"]
        return listed["last_used_at"]  # type: ignore[no-any-return]

    first = last_used()
    assert first is not None
    clock.advance(30)
    assert last_used() == first
    clock.advance(31)
    assert last_used() != first


# ---------------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("content", "status", "code"),
    [
        (b'{"name": "k",', 400, "malformed_json"),
        (b'{"name": 5}', 422, "validation_failed"),
        (b'{"name": "k", "role": "owner"}', 422, "validation_failed"),
        (b'{"name": "k", "capabilities": "read"}', 422, "validation_failed"),
        (b'{"name": "k", "extra": 1}', 422, "validation_failed"),
        (b'{"name": ""}', 422, "validation_failed"),
        (b'{"name": "k", "capabilities": ["fly"]}', 400, "unknown_capability"),
        (b'{"name": "   "}', 400, "invalid_name"),
    ],
)
def test_bad_input_is_a_clear_4xx_and_stores_nothing(
    client: TestClient, admin_key: str, content: bytes, status: int, code: str
) -> None:
    before = key_ids(client, admin_key)
    response = client.post(
        "/api/v1/api-keys", headers={**bearer(admin_key), "Content-Type": "application/json"}, content=content
    )
    body = assert_problem(response, status, code)
    if status == 422:
        assert body["errors"]
        assert all("input" not in e for e in body["errors"])
    assert key_ids(client, admin_key) == before


# ---------------------------------------------------------------------------------------------------- surfaces


def test_health_and_readiness(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready", "checks": {"store": "ok", "secrets": "ok"}}


def test_readiness_fails_when_the_store_cannot_open(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    container = Container(Settings(data_dir=blocker))
    with TestClient(create_combined_app(container), raise_server_exceptions=False) as test_client:
        response = test_client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["store"] == "store_unavailable"
    assert test_client.get("/healthz").status_code == 200


def test_openapi_is_served_and_no_schema_can_hold_a_key_hash(client: TestClient) -> None:
    spec = client.get("/api/v1/openapi.json").json()
    assert "/api/v1/api-keys" in spec["paths"]
    schemas = spec["components"]["schemas"]
    assert "sha256" not in str(schemas)
    assert "key" in schemas["CreatedApiKey"]["properties"]
    assert "key" not in schemas["ApiKeyOut"]["properties"]


def test_unknown_routes_and_methods_are_problems(client: TestClient) -> None:
    assert_problem(client.get("/api/v1/nothing-here"), 404, "not_found")
    assert_problem(client.put("/healthz"), 405, "method_not_allowed")


def test_mcp_route_demands_a_bearer_token_from_the_header(client: TestClient) -> None:
    missing = client.post("/mcp/ep_1", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert_problem(missing, 401, "missing_token")
    assert missing.headers["www-authenticate"] == 'Bearer realm="mcpbridge"'
    token = "mcp_" + "B" * 43
    in_query = client.post(f"/mcp/ep_1?token={token}", json={})
    assert_problem(in_query, 401, "query_token_refused")
    unknown = client.post("/mcp/ep_1", headers=bearer(token), json={})
    assert_problem(unknown, 401, "invalid_token")
    assert 'error="invalid_token"' in unknown.headers["www-authenticate"]


def test_oauth_callback_and_resolutions_answer_honestly(client: TestClient, admin_key: str) -> None:
    assert_problem(client.get("/api/v1/mcp-oauth/callback"), 400, "oauth_state_missing")
    assert_problem(client.get("/api/v1/mcp-oauth/callback?state=s&code=c"), 400, "oauth_state_invalid")
    approval = {"decision": "approve"}
    assert_problem(client.post("/api/v1/agent/tool-approvals/p_1", json=approval), 401, "unauthenticated")
    assert_problem(
        client.post("/api/v1/agent/tool-approvals/p_1", headers=bearer(admin_key), json=approval),
        404,
        "pending_not_found",
    )
    assert_problem(
        client.post("/api/v1/agent/tool-approvals/p_1", headers=bearer(admin_key), json={"decision": "maybe"}),
        422,
        "validation_failed",
    )
    resolution = {"service_id": "svc_1", "decision": "authorize"}
    assert_problem(
        client.post("/api/v1/agent/mcp-oauth-resolutions/p_1", headers=bearer(admin_key), json=resolution),
        404,
        "pending_not_found",
    )
