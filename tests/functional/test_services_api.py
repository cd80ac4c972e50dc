"""External MCP service registry through the REST API (``/api/v1/mcp-services``), on both backends."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from mcpbridge.bootstrap import Container
from mcpbridge.client.policies import ToolPolicies
from mcpbridge.client.registry import ServiceRegistry
from mcpbridge.client.service_items import service_key
from mcpbridge.domain import credentials
from mcpbridge.domain.external_services import STDIO_REFUSED
from mcpbridge.domain.identity import Scope
from mcpbridge.domain.items import Update
from mcpbridge.domain.secrets import SEALED_PREFIX, SecretContext
from mcpbridge.http.apps import create_combined_app
from mcpbridge.identity.accounts import _api_key_item, _workspace_item
from mcpbridge.outbound.policy import EgressPolicy
from tests.support.clock import FakeClock
from tests.support.containers import container_on

BASE = "/api/v1/mcp-services"
PUBLIC_URL = "https://mcp.example.com/mcp"
SECRETS = {
    "api_key": "plain-api-key-7f3a9c1e",
    "token": "plain-bearer-token-5d2b8e4f",
    "client_secret": "plain-client-secret-9a6c3d1b",
}
HOSTS = {
    "mcp.example.com": "93.184.216.34",
    "other.example.com": "93.184.216.35",
    "auth.example.com": "93.184.216.36",
    "internal.test": "10.0.0.5",
    "allowed.internal": "10.1.2.3",
}
REFUSED_URLS = [
    "http://127.0.0.1/",
    "http://169.254.169.254/",
    "http://[::1]/",
    "http://internal.test/mcp",
]


def _resolve(host: str, port: int) -> list[str]:
    if host in HOSTS:
        return [HOSTS[host]]
    raise socket.gaierror(f"unknown host {host}")


@pytest.fixture(params=["local", "aws"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def container(backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Container]:
    policy = EgressPolicy(["allowed.internal"], resolver=_resolve)
    with container_on(backend, tmp_path, monkeypatch, clock=FakeClock(), egress=policy) as built:
        yield built


@pytest.fixture
def bodies() -> list[str]:
    """Every response body the test's client received."""
    return []


@pytest.fixture
def client(container: Container, bodies: list[str]) -> Iterator[TestClient]:
    app = create_combined_app(container)

    def record(response: httpx.Response) -> None:
        response.read()
        bodies.append(response.text)

    key = container.identity.initialize().api_key
    with TestClient(app, raise_server_exceptions=False) as test_client:
        test_client.event_hooks["response"].append(record)
        test_client.headers["Authorization"] = f"Bearer {key}"
        yield test_client


@pytest.fixture
def registry(container: Container) -> ServiceRegistry:
    return container.services


@pytest.fixture
def workspace_id(container: Container, client: TestClient) -> str:
    installed = container.identity.installed_workspace_id()
    assert installed is not None
    return installed


def as_key(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def problem(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["code"] == code, body
    assert body["detail"]
    return body


def make_key(client: TestClient, **body: Any) -> str:
    response = client.post("/api/v1/api-keys", json={"name": "k", **body})
    assert response.status_code == 201, response.text
    return str(response.json()["key"])


def other_workspace_key(container: Container) -> str:
    issued = credentials.issue(credentials.API_KEY_PREFIX)
    container.store.put(_workspace_item("ws_other", "Other", "2027-01-01T00:00:00Z"))
    container.store.put(
        _api_key_item("ws_other", "key_other", "usr_other", "other", "admin", Scope(), issued, "2027-01-01T00:00:00Z")
    )
    return issued.plaintext


def created(client: TestClient, **body: Any) -> dict[str, Any]:
    response = client.post(BASE, json={"name": "Docs", "url": PUBLIC_URL, **body})
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def listed(client: TestClient, **params: str) -> list[dict[str, Any]]:
    response = client.get(BASE, params=params)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["next_cursor"] is None
    return body["items"]  # type: ignore[no-any-return]


def names(client: TestClient, **params: str) -> list[str]:
    return [s["name"] for s in listed(client, **params)]


NOT_CONFIGURED = {name: {"configured": False} for name in SECRETS}


# ---------------------------------------------------------------------------------------------------- CRUD


def test_create_list_get_update_delete(client: TestClient) -> None:
    body = created(
        client,
        name="  Tracker ",
        description="issues",
        transport="sse",
        headers={"X-Tenant": "acme"},
        auth_config={"auth_type": "api_key", "api_key_header": "X-Token"},
        advanced_config={"timeout": 10, "retry_count": 0},
        usage_instructions="Use for issues.",
    )
    assert body["id"].startswith("svc_")
    assert body["name"] == "Tracker"
    assert body["transport"] == "sse"
    assert body["url"] == PUBLIC_URL
    assert body["header_names"] == ["X-Tenant"]
    assert "headers" not in body
    assert body["auth_config"] == {
        "auth_type": "api_key",
        "api_key_header": "X-Token",
        "client_id": "",
        "scopes": [],
        "auth_server_metadata_url": "",
    }
    assert body["advanced_config"] == {"timeout": 10.0, "retry_count": 0, "retry_delay": 1.0}
    assert body["credentials"] == NOT_CONFIGURED
    assert body["builtin"] is False
    assert body["catalog_stale"] is True
    assert body["version"] == 1
    assert body["warnings"] == []

    defaults = created(client, name="Plain")
    assert defaults["transport"] == "http-streamable"
    assert defaults["auth_config"]["auth_type"] == "none"
    assert defaults["auth_config"]["api_key_header"] == "X-API-Key"
    assert defaults["advanced_config"] == {"timeout": 30.0, "retry_count": 3, "retry_delay": 1.0}
    assert defaults["enabled"] is True

    assert names(client) == ["Tracker", "Plain"]
    got = client.get(f"{BASE}/{body['id']}")
    assert got.status_code == 200
    assert got.json() == {k: v for k, v in body.items() if k != "warnings"}

    updated = client.put(
        f"{BASE}/{body['id']}",
        json={"description": "all issues", "auth_config": {"client_id": "cid"}, "advanced_config": {"timeout": 60}},
    )
    assert updated.status_code == 200, updated.text
    after = updated.json()
    assert after["description"] == "all issues"
    assert after["auth_config"]["auth_type"] == "api_key", "auth_config merges field by field"
    assert after["auth_config"]["client_id"] == "cid"
    assert after["advanced_config"] == {"timeout": 60.0, "retry_count": 0, "retry_delay": 1.0}
    assert after["header_names"] == ["X-Tenant"], "headers kept when not sent"
    assert after["version"] == 2

    same = client.put(f"{BASE}/{body['id']}", json={"description": "all issues"})
    assert same.json()["version"] == 2, "a no-op update does not bump the version"

    disabled = client.put(f"{BASE}/{body['id']}", json={"enabled": False, "headers": {}})
    assert disabled.json()["enabled"] is False
    assert disabled.json()["header_names"] == []

    assert client.delete(f"{BASE}/{body['id']}").status_code == 204
    problem(client.get(f"{BASE}/{body['id']}"), 404, "service_not_found")
    problem(client.delete(f"{BASE}/{body['id']}"), 404, "service_not_found")
    problem(client.put(f"{BASE}/{body['id']}", json={"name": "x"}), 404, "service_not_found")
    problem(client.get(f"{BASE}/not-an-id"), 404, "service_not_found")
    assert names(client) == ["Plain"]
    # The name is free again.
    assert created(client, name="tracker")["name"] == "tracker"


def test_catalog_goes_stale_on_connection_changes_only(
    client: TestClient, registry: ServiceRegistry, workspace_id: str
) -> None:
    sid = created(client)["id"]

    def mark_fresh() -> None:
        assert registry.clear_catalog_stale(registry.find(workspace_id, sid))
        assert client.get(f"{BASE}/{sid}").json()["catalog_stale"] is False

    for field, value in (
        ("url", "https://other.example.com/mcp"),
        ("transport", "sse"),
        ("headers", {"X-A": "b"}),
        ("auth_config", {"auth_type": "bearer"}),
    ):
        mark_fresh()
        assert client.put(f"{BASE}/{sid}", json={field: value}).json()["catalog_stale"] is True, field
    mark_fresh()
    renamed = client.put(f"{BASE}/{sid}", json={"name": "Renamed", "usage_instructions": "x"}).json()
    assert renamed["catalog_stale"] is False
    mark_fresh()
    assert client.put(f"{BASE}/{sid}/credentials", json={"token": "t"}).json()["catalog_stale"] is True
    # A refresh based on an outdated read does not clear the flag.
    outdated = registry.find(workspace_id, sid)
    client.put(f"{BASE}/{sid}", json={"url": PUBLIC_URL})
    assert not registry.clear_catalog_stale(outdated)


def test_duplicate_names_are_refused_case_insensitively(client: TestClient) -> None:
    first = created(client, name="Tracker")
    for name in ("Tracker", "tracker", " TRACKER "):
        problem(client.post(BASE, json={"name": name, "url": PUBLIC_URL}), 409, "service_name_taken")
    assert names(client) == ["Tracker"]

    second = created(client, name="Wiki")
    problem(client.put(f"{BASE}/{second['id']}", json={"name": "TRACKER"}), 409, "service_name_taken")
    assert client.get(f"{BASE}/{second['id']}").json()["name"] == "Wiki"
    # A change of case keeps its own name; a rename frees the old one.
    assert client.put(f"{BASE}/{first['id']}", json={"name": "TRACKER"}).json()["name"] == "TRACKER"
    assert client.put(f"{BASE}/{first['id']}", json={"name": "Issues"}).status_code == 200
    assert created(client, name="tracker")["name"] == "tracker"
    assert sorted(names(client)) == ["Issues", "Wiki", "tracker"]


def test_stdio_is_refused_on_create_update_and_import(client: TestClient) -> None:
    body = problem(
        client.post(BASE, json={"name": "x", "url": PUBLIC_URL, "transport": "stdio"}), 400, "stdio_disabled"
    )
    assert body["detail"] == STDIO_REFUSED
    existing = created(client)
    problem(client.put(f"{BASE}/{existing['id']}", json={"transport": "stdio"}), 400, "stdio_disabled")
    problem(
        client.post(BASE, json={"name": "y", "url": PUBLIC_URL, "transport": "websocket"}), 400, "invalid_transport"
    )

    response = client.post(
        f"{BASE}/import",
        json={
            "mcpServers": {
                "local-files": {"command": "npx", "args": ["-y", "server-filesystem"]},
                "typed-stdio": {"type": "stdio", "url": PUBLIC_URL},
                "remote": {"url": "https://other.example.com/sse"},
                "streamable": {"type": "http", "url": PUBLIC_URL, "headers": {"X-Team": "a"}},
            }
        },
    )
    assert response.status_code == 200, response.text
    result = response.json()
    assert [(s["name"], s["transport"]) for s in result["created"]] == [
        ("remote", "sse"),
        ("streamable", "http-streamable"),
    ]
    assert result["created"][1]["header_names"] == ["X-Team"]
    assert result["refused"] == [
        {"name": "local-files", "code": "stdio_disabled", "reason": STDIO_REFUSED},
        {"name": "typed-stdio", "code": "stdio_disabled", "reason": STDIO_REFUSED},
    ]
    assert sorted(names(client)) == ["Docs", "remote", "streamable"]


def test_import_reports_taken_names_and_bad_entries(client: TestClient) -> None:
    created(client, name="Docs")
    result = client.post(
        f"{BASE}/import",
        json={"mcpServers": {"docs": {"url": PUBLIC_URL}, "nourl": {"type": "sse"}, "odd": "text"}},
    ).json()
    assert result["created"] == []
    assert [(r["name"], r["code"]) for r in result["refused"]] == [
        ("docs", "service_name_taken"),
        ("nourl", "url_invalid"),
        ("odd", "invalid_import_entry"),
    ]
    assert names(client) == ["Docs"]
    problem(client.post(f"{BASE}/import", json={"servers": {}}), 422, "validation_failed")


# ---------------------------------------------------------------------------------------------------- SSRF


@pytest.mark.parametrize("url", REFUSED_URLS)
def test_private_urls_are_refused_everywhere(client: TestClient, url: str) -> None:
    problem(client.post(BASE, json={"name": "x", "url": url}), 400, "url_forbidden_address")
    existing = created(client)
    problem(client.put(f"{BASE}/{existing['id']}", json={"url": url}), 400, "url_forbidden_address")
    assert client.get(f"{BASE}/{existing['id']}").json()["url"] == PUBLIC_URL
    metadata = {"auth_config": {"auth_type": "oauth", "auth_server_metadata_url": url}}
    problem(client.post(BASE, json={"name": "y", "url": PUBLIC_URL, **metadata}), 400, "url_forbidden_address")
    problem(client.put(f"{BASE}/{existing['id']}", json=metadata), 400, "url_forbidden_address")
    result = client.post(f"{BASE}/import", json={"mcpServers": {"evil": {"url": url}}}).json()
    assert result["created"] == []
    assert [(r["name"], r["code"]) for r in result["refused"]] == [("evil", "url_forbidden_address")]
    assert names(client) == ["Docs"]
    assert client.get(f"{BASE}/{existing['id']}").json()["version"] == 1


def test_bad_urls_and_allowlisted_private_hosts(client: TestClient) -> None:
    problem(client.post(BASE, json={"name": "x", "url": "ftp://mcp.example.com/"}), 400, "url_scheme_not_allowed")
    problem(
        client.post(BASE, json={"name": "x", "url": "https://u:p@mcp.example.com/"}), 400, "url_credentials_not_allowed"
    )
    problem(client.post(BASE, json={"name": "x", "url": "https://nowhere.test/"}), 400, "url_unresolvable")
    problem(client.post(BASE, json={"name": "x", "url": ""}), 400, "url_invalid")
    allowed = created(client, name="Internal", url="http://allowed.internal:8080/mcp")
    assert allowed["url"] == "http://allowed.internal:8080/mcp"
    moved = client.put(f"{BASE}/{allowed['id']}", json={"url": "http://allowed.internal/sse"})
    assert moved.status_code == 200, moved.text
    meta = {"auth_type": "oauth", "auth_server_metadata_url": "https://auth.example.com/.well-known/oauth"}
    assert (
        created(client, name="OAuth", auth_config=meta)["auth_config"]["auth_server_metadata_url"]
        == meta["auth_server_metadata_url"]
    )


# ---------------------------------------------------------------------------------------------------- roles


def test_a_viewer_reads_but_does_not_write(client: TestClient) -> None:
    existing = created(client)
    viewer = as_key(make_key(client, role="viewer"))
    sid = existing["id"]
    assert client.get(BASE, headers=viewer).status_code == 200
    assert client.get(f"{BASE}/{sid}", headers=viewer).status_code == 200
    assert client.get(f"{BASE}/{sid}/tool-approvals", headers=viewer).status_code == 200
    for response in (
        client.post(BASE, headers=viewer, json={"name": "x", "url": PUBLIC_URL}),
        client.post(f"{BASE}/import", headers=viewer, json={"mcpServers": {}}),
        client.put(f"{BASE}/{sid}", headers=viewer, json={"name": "y"}),
        client.delete(f"{BASE}/{sid}", headers=viewer),
        client.put(f"{BASE}/{sid}/credentials", headers=viewer, json={"token": "t"}),
        client.delete(f"{BASE}/{sid}/credentials/token", headers=viewer),
        client.put(f"{BASE}/{sid}/tool-approvals/search", headers=viewer, json={"enabled": False}),
    ):
        problem(response, 403, "admin_required")
    assert [(s["name"], s["version"]) for s in listed(client)] == [("Docs", 1)]


def test_a_scoped_key_needs_manage_services(client: TestClient) -> None:
    existing = created(client)
    sid = existing["id"]
    h = as_key(make_key(client, role="admin", capabilities=["read", "manage_channels"]))
    for response in (
        client.get(BASE, headers=h),
        client.get(f"{BASE}/{sid}", headers=h),
        client.get(f"{BASE}/{sid}/tool-approvals", headers=h),
        client.post(BASE, headers=h, json={"name": "x", "url": PUBLIC_URL}),
        client.post(f"{BASE}/import", headers=h, json={"mcpServers": {}}),
        client.put(f"{BASE}/{sid}", headers=h, json={"name": "y"}),
        client.delete(f"{BASE}/{sid}", headers=h),
        client.put(f"{BASE}/{sid}/credentials", headers=h, json={"token": "t"}),
        client.delete(f"{BASE}/{sid}/credentials/token", headers=h),
        client.put(f"{BASE}/{sid}/tool-approvals/search", headers=h, json={"enabled": False}),
    ):
        problem(response, 403, "capability_missing")
    allowed = as_key(make_key(client, role="admin", capabilities=["manage_services"]))
    assert client.put(f"{BASE}/{sid}", headers=allowed, json={"name": "y"}).status_code == 200


def test_services_of_another_workspace_look_missing(client: TestClient, container: Container) -> None:
    theirs = created(client)
    h = as_key(other_workspace_key(container))
    assert client.get(BASE, headers=h).json() == {"items": [], "next_cursor": None}
    for response in (
        client.get(f"{BASE}/{theirs['id']}", headers=h),
        client.put(f"{BASE}/{theirs['id']}", headers=h, json={"enabled": False}),
        client.delete(f"{BASE}/{theirs['id']}", headers=h),
        client.put(f"{BASE}/{theirs['id']}/credentials", headers=h, json={"token": "t"}),
        client.get(f"{BASE}/{theirs['id']}/tool-approvals", headers=h),
    ):
        problem(response, 404, "service_not_found")
    # The same name is free in another workspace.
    assert client.post(BASE, headers=h, json={"name": "Docs", "url": PUBLIC_URL}).status_code == 201


# ---------------------------------------------------------------------------------------------------- builtin


def test_builtin_services_are_shared_immutable_and_stripped(
    client: TestClient, container: Container, registry: ServiceRegistry
) -> None:
    builtin = registry.register_builtin(
        name="Web Search",
        url="https://mcp.example.com/builtin",
        description="search the web",
        headers={"X-Internal": "operator-only"},
        auth_config={"auth_type": "bearer"},
        usage_instructions="for fresh facts",
    )
    own = created(client, name="Own")
    for headers in ({}, as_key(other_workspace_key(container))):
        shown = {s["name"]: s for s in client.get(BASE, headers=headers).json()["items"]}
        assert "Web Search" in shown
        entry = shown["Web Search"]
        assert entry["builtin"] is True
        assert entry["url"] is None
        assert entry["header_names"] == []
        assert entry["auth_config"] is None
        assert entry["credentials"] == {}
        assert entry["usage_instructions"] == "for fresh facts"
        assert client.get(f"{BASE}/{builtin.id}", headers=headers).json() == entry
    assert "Own" not in names_with(client, as_key(other_workspace_key(container)))

    sid = builtin.id
    for response in (
        client.put(f"{BASE}/{sid}", json={"name": "Mine now"}),
        client.put(f"{BASE}/{sid}", json={"enabled": False}),
        client.delete(f"{BASE}/{sid}"),
        client.put(f"{BASE}/{sid}/credentials", json={"token": "t"}),
        client.delete(f"{BASE}/{sid}/credentials/token"),
    ):
        problem(response, 403, "builtin_immutable")
    stored = container.store.get(service_key(None, sid))
    assert stored is not None
    assert stored["version"] == 1
    assert stored["url"] == "https://mcp.example.com/builtin"
    # A workspace's admins may still set per-tool policies on a builtin service, for their workspace only (no
    # catalog was pulled here, so the tool is pre-registered).
    body = {"require_approval": True, "pre_register": True}
    assert client.put(f"{BASE}/{sid}/tool-approvals/search", json=body).status_code == 200
    assert own["builtin"] is False


def names_with(client: TestClient, headers: dict[str, str]) -> list[str]:
    return [s["name"] for s in client.get(BASE, headers=headers).json()["items"]]


# ---------------------------------------------------------------------------------------------------- credentials


def test_credentials_pointer_semantics_encryption_and_no_leaks(
    client: TestClient,
    container: Container,
    registry: ServiceRegistry,
    workspace_id: str,
    bodies: list[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    body = created(client, auth_config={"auth_type": "bearer"})
    sid = body["id"]
    url = f"{BASE}/{sid}/credentials"

    first = client.put(url, json={"token": SECRETS["token"], "api_key": SECRETS["api_key"]})
    assert first.status_code == 200, first.text
    assert first.json()["credentials"] == {
        "api_key": {"configured": True},
        "token": {"configured": True},
        "client_secret": {"configured": False},
    }
    assert first.json()["catalog_stale"] is True
    assert first.json()["version"] == 2
    item = container.store.get(service_key(workspace_id, sid))
    assert item is not None
    for name in ("token", "api_key"):
        sealed = item[f"secret_{name}"]
        assert sealed.startswith(SEALED_PREFIX)
        assert SECRETS[name] not in sealed
    assert "secret_client_secret" not in item

    # Absent = keep, "" = no-op, null = keep: nothing changes, not even the version.
    for noop in ({}, {"token": ""}, {"token": None}, {"api_key": "", "client_secret": None}):
        again = client.put(url, json=noop)
        assert again.status_code == 200, again.text
        assert again.json()["version"] == 2
        assert again.json()["credentials"]["token"] == {"configured": True}
    stored_again = container.store.get(service_key(workspace_id, sid))
    assert stored_again is not None
    assert stored_again["secret_token"] == item["secret_token"]

    # A value replaces only its own field.
    replaced = client.put(url, json={"client_secret": SECRETS["client_secret"]})
    assert replaced.json()["credentials"] == {name: {"configured": True} for name in SECRETS}
    service = registry.find(workspace_id, sid)
    assert registry.connection_secrets(service) == SECRETS
    rotated = client.put(url, json={"token": "rotated-token-0e1f"})
    assert registry.connection_secrets(registry.find(workspace_id, sid))["token"] == "rotated-token-0e1f"
    assert rotated.json()["version"] == 4

    # DELETE clears one field, idempotently.
    assert client.delete(f"{url}/api_key").status_code == 204
    assert client.delete(f"{url}/api_key").status_code == 204
    after = client.get(f"{BASE}/{sid}").json()
    assert after["credentials"]["api_key"] == {"configured": False}
    assert after["credentials"]["token"] == {"configured": True}
    assert after["version"] == 5
    problem(client.delete(f"{url}/password"), 400, "unknown_credential_field")
    problem(client.put(url, json={"password": "x"}), 422, "validation_failed")
    problem(client.put(url, json={"token": "line\nbreak"}), 400, "invalid_credential")

    # A value sealed under another row's context cannot be opened here: not configured.
    foreign = container.secrets.seal(SECRETS["token"], SecretContext(workspace_id, "mcp_service", "svc_other"))
    container.store.update(service_key(workspace_id, sid), Update(set={"secret_token": foreign}))
    assert client.get(f"{BASE}/{sid}").json()["credentials"]["token"] == {"configured": False}
    assert "token" not in registry.connection_secrets(registry.find(workspace_id, sid))

    client.get(BASE)
    assert bodies, "responses were recorded"
    for text in bodies:
        for secret in [*SECRETS.values(), "rotated-token-0e1f"]:
            assert secret not in text
    for record in caplog.records:
        line = record.getMessage()
        for secret in [*SECRETS.values(), "rotated-token-0e1f"]:
            assert secret not in line


def test_secrets_in_the_main_body_are_ignored_with_a_warning(
    client: TestClient,
    container: Container,
    workspace_id: str,
    bodies: list[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    body = created(client, auth_config={"auth_type": "api_key", "api_key": SECRETS["api_key"]})
    assert body["credentials"]["api_key"] == {"configured": False}
    assert len(body["warnings"]) == 1
    assert "auth_config.api_key" in body["warnings"][0]
    sid = body["id"]
    client.put(f"{BASE}/{sid}/credentials", json={"api_key": SECRETS["api_key"]})
    before = container.store.get(service_key(workspace_id, sid))
    assert before is not None

    update = client.put(
        f"{BASE}/{sid}",
        json={
            "description": "edited",
            "auth_config": {"token": SECRETS["token"], "client_secret": SECRETS["client_secret"], "api_key": "x"},
        },
    )
    assert update.status_code == 200, update.text
    result = update.json()
    assert result["description"] == "edited"
    assert sorted(result["warnings"]) == sorted(
        f"auth_config.{name} is deprecated here and was ignored; set it with PUT /credentials"
        for name in ("token", "client_secret", "api_key")
    )
    assert result["credentials"] == {
        "api_key": {"configured": True},
        "token": {"configured": False},
        "client_secret": {"configured": False},
    }
    after = container.store.get(service_key(workspace_id, sid))
    assert after is not None
    assert after["secret_api_key"] == before["secret_api_key"], "the main PUT never changes a secret"
    assert all(SECRETS[name] not in str(after) for name in ("token", "client_secret"))
    warned = [r.getMessage() for r in caplog.records if "deprecated" in r.getMessage()]
    assert len(warned) == 4
    for text in [*bodies, *(r.getMessage() for r in caplog.records)]:
        assert all(secret not in text for secret in SECRETS.values())


# ---------------------------------------------------------------------------------------------------- tool policies


def test_tool_approvals(client: TestClient, container: Container, workspace_id: str) -> None:
    sid = created(client)["id"]
    url = f"{BASE}/{sid}/tool-approvals"
    assert client.get(url).json() == {"items": [], "next_cursor": None}
    policies = container.tool_policies
    assert isinstance(policies, ToolPolicies)
    default = policies.policy_for(workspace_id, sid, "search")
    assert (default.enabled, default.require_approval) == (True, False)

    problem(client.put(f"{url}/search", json={}), 400, "nothing_to_update")
    problem(client.put(f"{url}/search", json={"enabled": None, "require_approval": None}), 400, "nothing_to_update")
    problem(client.put(f"{url}/search", json={"enabled": "no"}), 422, "validation_failed")
    problem(client.put(f"{url}/search", json={"enabled": True, "other": 1}), 422, "validation_failed")

    # No catalog was pulled for this service: a name is refused unless pre-registered, and nothing is stored.
    unchecked = problem(client.put(f"{url}/search", json={"require_approval": True}), 404, "tool_not_found")
    assert "pre_register" in unchecked["detail"]
    assert client.get(url).json() == {"items": [], "next_cursor": None}
    first = client.put(f"{url}/search", json={"require_approval": True, "pre_register": True})
    assert first.status_code == 200, first.text
    assert first.json()["enabled"] is True
    assert first.json()["require_approval"] is True
    second = client.put(f"{url}/search", json={"enabled": False}).json()
    assert (second["enabled"], second["require_approval"]) == (False, True), "omitted field unchanged"
    client.put(f"{url}/delete_all", json={"enabled": False, "pre_register": True})
    listed_policies = client.get(url).json()["items"]
    assert [(p["tool_name"], p["enabled"], p["require_approval"]) for p in listed_policies] == [
        ("delete_all", False, False),
        ("search", False, True),
    ]
    stored = policies.policy_for(workspace_id, sid, "search")
    assert (stored.enabled, stored.require_approval) == (False, True)
    problem(
        client.put(f"{BASE}/svc_00000000000000000000000000/tool-approvals/x", json={"enabled": True}),
        404,
        "service_not_found",
    )

    # Deleting the service drops its policies.
    assert client.delete(f"{BASE}/{sid}").status_code == 204
    gone = policies.policy_for(workspace_id, sid, "search")
    assert (gone.enabled, gone.require_approval) == (True, False)


# ---------------------------------------------------------------------------------------------- validation, search


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"name": "x", "url": 5}, 422, "validation_failed"),
        ({"name": "x", "url": PUBLIC_URL, "enabled": "yes"}, 422, "validation_failed"),
        ({"name": "x", "url": PUBLIC_URL, "headers": {"X-A": 1}}, 422, "validation_failed"),
        ({"name": "x", "url": PUBLIC_URL, "advanced_config": {"timeout": "30"}}, 422, "validation_failed"),
        ({"name": "x", "url": PUBLIC_URL, "auth_config": {"scopes": "read"}}, 422, "validation_failed"),
        ({"name": "x", "url": PUBLIC_URL, "stdio_config": {}}, 422, "validation_failed"),
        ({"name": "x"}, 422, "validation_failed"),
        ({"name": " ", "url": PUBLIC_URL}, 400, "invalid_name"),
        ({"name": "x", "url": PUBLIC_URL, "headers": {"Bad Name": "v"}}, 400, "invalid_headers"),
        ({"name": "x", "url": PUBLIC_URL, "headers": {"Host": "evil"}}, 400, "invalid_headers"),
        ({"name": "x", "url": PUBLIC_URL, "headers": {"X-A": "a\r\nX-B: b"}}, 400, "invalid_headers"),
        ({"name": "x", "url": PUBLIC_URL, "auth_config": {"auth_type": "magic"}}, 400, "invalid_auth_config"),
        ({"name": "x", "url": PUBLIC_URL, "auth_config": {"api_key_header": "a b"}}, 400, "invalid_headers"),
        ({"name": "x", "url": PUBLIC_URL, "advanced_config": {"timeout": 0}}, 400, "invalid_advanced_config"),
        ({"name": "x", "url": PUBLIC_URL, "advanced_config": {"timeout": 301}}, 400, "invalid_advanced_config"),
        ({"name": "x", "url": PUBLIC_URL, "advanced_config": {"retry_count": 11}}, 400, "invalid_advanced_config"),
        ({"name": "x", "url": PUBLIC_URL, "advanced_config": {"retry_delay": -1}}, 400, "invalid_advanced_config"),
    ],
)
def test_bad_input_is_a_clear_4xx_and_stores_nothing(
    client: TestClient, body: dict[str, Any], status: int, code: str
) -> None:
    problem(client.post(BASE, json=body), status, code)
    assert listed(client) == []


def test_bad_updates_change_nothing(client: TestClient) -> None:
    sid = created(client)["id"]
    for body, status, code in (
        ({"name": None}, 422, "validation_failed"),
        ({"enabled": 1}, 422, "validation_failed"),
        ({"headers": {"X-A": None}}, 422, "validation_failed"),
        ({"unknown": 1}, 422, "validation_failed"),
        ({"advanced_config": {"retry_count": -1}}, 400, "invalid_advanced_config"),
    ):
        problem(client.put(f"{BASE}/{sid}", json=body), status, code)
    assert client.get(f"{BASE}/{sid}").json()["version"] == 1


def test_search_needs_every_keyword_in_name_usage_or_description(client: TestClient) -> None:
    created(client, name="GitHub Issues", usage_instructions="Track bugs and Pull Requests.")
    created(client, name="Jira", description="Issue tracker for the ops team")
    created(client, name="Wiki", usage_instructions="Company handbook")
    assert names(client, search="issue") == ["GitHub Issues", "Jira"]
    assert names(client, search="  ISSUES   bugs ") == ["GitHub Issues"]
    assert names(client, search="issue ops") == ["Jira"]
    assert names(client, search="github handbook") == []
    assert names(client, search="") == ["GitHub Issues", "Jira", "Wiki"]
