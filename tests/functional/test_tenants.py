"""Tenants and users through the REST API only, on both backends: the platform admin creates two workspaces, each
workspace's admin creates its users and their keys, and every other item (knowledge bases, documents, endpoints,
services, agents, tool calls, OAuth tokens) is made by those users with their own keys. Nothing is written into the
store by the test: it only reads the store (and the blob and index directories) to prove a deletion left nothing.

Background jobs (indexing, the purge of a deleted workspace) are held until the test runs them, so "refused at once,
before the purge" is observed without any timing.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from mcpbridge.bootstrap import Container
from mcpbridge.http.apps import create_combined_app
from tests.functional.test_agent_calls import Upstream
from tests.functional.test_header_secrets import everything_at_rest
from tests.functional.test_oauth_flow import approve
from tests.support.clock import FakeClock
from tests.support.containers import container_on
from tests.support.everything import serve
from tests.support.local_calls import wait_for_call, wait_idle
from tests.support.oauth_server import OAuthTestServer, oauth_server
from tests.support.serve import SERVE_TEST_TIMEOUT, ServeProcess, bearer, cli_env, http_client

PUBLIC = "http://127.0.0.1:8080"
SETTINGS: dict[str, Any] = {
    "ssrf_allowlist": ["127.0.0.1"],
    "public_base_url": PUBLIC,
    "frontend_urls": ["https://app.example"],
}
WORKSPACES = "/api/v1/workspaces"
USERS = "/api/v1/users"
SERVICES = "/api/v1/mcp-services"
CALLS = "/api/v1/agent/tool-calls"
APPROVALS = "/api/v1/agent/tool-approvals"
FINAL = ("completed", "failed", "rejected", "cancelled", "uncertain")


class HeldJobs:
    """``ports.Jobs`` that keeps every job until the test runs them (in the test's thread)."""

    def __init__(self) -> None:
        self.queue: list[tuple[str, dict[str, str]]] = []
        self.runner: Any = None
        self._lock = threading.Lock()

    def submit(self, kind: str, payload: dict[str, str]) -> None:
        with self._lock:
            self.queue.append((kind, dict(payload)))

    def kinds(self) -> list[str]:
        with self._lock:
            return [kind for kind, _ in self.queue]

    def drain(self, only: str | None = None) -> None:
        """Run the held jobs in order (only those of kind ``only`` when given), and the jobs they submit."""
        while True:
            with self._lock:
                chosen = [i for i, (kind, _) in enumerate(self.queue) if only is None or kind == only]
                if not chosen:
                    return
                kind, payload = self.queue.pop(chosen[0])
            self.runner(kind, payload)


@dataclass
class Hub:
    container: Container
    client: TestClient
    jobs: HeldJobs
    platform_key: str

    def call(self, method: str, path: str, key: str, **kwargs: Any) -> httpx.Response:
        return self.client.request(method, path, headers={"Authorization": f"Bearer {key}"}, **kwargs)

    def ok(self, method: str, path: str, key: str, status: int = 200, **kwargs: Any) -> Any:
        answer = self.call(method, path, key, **kwargs)
        assert answer.status_code == status, f"{method} {path}: {answer.text}"
        return answer.json() if answer.content else None

    def mcp(self, endpoint_id: str, token: str) -> httpx.Response:
        """One stateless ``tools/call`` on a published endpoint."""
        return self.client.post(
            f"/mcp/{endpoint_id}",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "list_knowledge_bases"}},
            headers={
                "Authorization": f"Bearer {token}",
                "Accept": "application/json, text/event-stream",
                "MCP-Protocol-Version": "2025-11-25",
            },
        )


@dataclass
class Tenant:
    """A workspace made through the API, with what its users made in it (ids, keys, marker text)."""

    id: str
    name: str
    marker: str
    admin: str
    admin_user: str
    users: dict[str, tuple[str, str]] = field(default_factory=dict)
    """name -> (user id, API key)"""
    kb: str = ""
    document: str = ""
    endpoint: str = ""
    endpoint_token: str = ""
    service: str = ""
    agent: str = ""
    tool_ref: str = ""
    key_ids: list[str] = field(default_factory=list)

    def key(self, name: str) -> str:
        return self.users[name][1]

    def user(self, name: str) -> str:
        return self.users[name][0]


@pytest.fixture(params=["local", "aws"])
def hub(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Hub]:
    jobs = HeldJobs()
    # The clock starts at the real time: the OAuth test server judges expiry by its own clock.
    with container_on(
        request.param, tmp_path, monkeypatch, settings=SETTINGS, clock=FakeClock(time.time()), jobs=jobs, embedder=None
    ) as container:
        jobs.runner = container.run_job
        platform_key = container.identity.initialize().api_key  # what `mcpbridge init` prints
        assert platform_key is not None
        with TestClient(
            create_combined_app(container), base_url="http://127.0.0.1", raise_server_exceptions=False
        ) as client:
            yield Hub(container, client, jobs, platform_key)
        container.workflow.close()  # type: ignore[attr-defined]


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    app = Upstream()
    with serve(app, lifespan="off") as base:
        app.url = f"{base}/mcp"  # type: ignore[attr-defined]
        yield app


def problem(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["code"] == code, response.text


def settled(hub: Hub, call_id: str, key: str) -> dict[str, Any]:
    """The call once its workflow (a thread, waited for while it works) has finished it."""

    def final() -> dict[str, Any] | None:
        body: dict[str, Any] = hub.ok("GET", f"{CALLS}/{call_id}", key)
        return body if body["status"] in FINAL else None

    return wait_for_call(call_id, final, what="a final status")


# ---------------------------------------------------------------------------------------------------- building


def new_workspace(hub: Hub, name: str) -> Tenant:
    marker = f"{name.lower()}{secrets.token_hex(6)}"
    created = hub.ok("POST", WORKSPACES, hub.platform_key, 201, json={"name": f"{name} {marker}"})
    assert created["status"] == "active"
    key = created["admin_api_key"]
    assert key["key"].startswith("sk_")
    assert key["role"] == "admin"
    assert key["capabilities"] is None
    tenant = Tenant(created["id"], created["name"], marker, key["key"], created["admin_user_id"])
    tenant.key_ids.append(key["id"])
    return tenant


def add_user(hub: Hub, tenant: Tenant, name: str, **key: Any) -> None:
    user = hub.ok("POST", USERS, tenant.admin, 201, json={"name": f"{name} {tenant.marker}"})
    minted = hub.ok("POST", f"{USERS}/{user['id']}/api-keys", tenant.admin, 201, json={"name": f"{name}'s key", **key})
    assert minted["user_id"] == user["id"]
    tenant.users[name] = (user["id"], minted["key"])
    tenant.key_ids.append(minted["id"])


def furnish(hub: Hub, tenant: Tenant, upstream: Upstream) -> None:
    """What a workspace's people make: two users, a knowledge base with an indexed document and a wiki page, an
    endpoint, a service whose ``echo`` needs approval, an agent."""
    add_user(hub, tenant, "alice", role="viewer")
    add_user(hub, tenant, "bob", role="viewer")
    admin = tenant.admin
    tenant.kb = hub.ok("POST", "/api/v1/knowledge-bases", admin, 201, json={"name": f"handbook {tenant.marker}"})["id"]
    tenant.document = hub.ok(
        "POST",
        f"/api/v1/knowledge-bases/{tenant.kb}/documents",
        admin,
        201,
        json={"title": f"policy {tenant.marker}", "content": f"# Refunds\n\nThe refund code is {tenant.marker}.\n"},
    )["id"]
    hub.jobs.drain()
    assert hub.ok("GET", f"/api/v1/documents/{tenant.document}", admin)["parse_status"] == "completed"
    page = {"slug": "refunds", "type": "concept", "title": "Refunds", "content": f"wiki {tenant.marker}"}
    hub.ok("POST", f"/api/v1/knowledge-bases/{tenant.kb}/wiki/pages", admin, 201, json=page)
    endpoint = hub.ok("POST", "/api/v1/mcp-endpoints", admin, 201, json={"name": f"claude {tenant.marker}"})
    tenant.endpoint, tenant.endpoint_token = endpoint["id"], endpoint["token"]
    service = hub.ok("POST", SERVICES, admin, 201, json={"name": f"pages {tenant.marker}", "url": upstream.url})  # type: ignore[attr-defined]
    tenant.service = service["id"]
    hub.ok("POST", f"{SERVICES}/{tenant.service}/metadata/refresh", admin)
    hub.ok("PUT", f"{SERVICES}/{tenant.service}/tool-approvals/echo", admin, json={"require_approval": True})
    tenant.agent = hub.ok("POST", "/api/v1/agents", admin, 201, json={"name": f"helper {tenant.marker}"})["id"]
    described = hub.ok(
        "GET", "/api/v1/agent/tools/describe", admin, params={"service_id": tenant.service, "tool_name": "echo"}
    )
    tenant.tool_ref = described["tool_ref"]


def pause_a_call(hub: Hub, tenant: Tenant, user: str, text: str = "hi") -> str:
    paused = hub.ok(
        "POST", CALLS, tenant.key(user), 202, json={"tool_ref": tenant.tool_ref, "arguments": {"text": text}}
    )
    assert paused["status"] == "awaiting_approval"
    return str(paused["pending_id"])


@pytest.fixture
def two(hub: Hub, upstream: Upstream) -> tuple[Tenant, Tenant]:
    acme, beta = new_workspace(hub, "Acme"), new_workspace(hub, "Beta")
    furnish(hub, acme, upstream)
    furnish(hub, beta, upstream)
    return acme, beta


# ---------------------------------------------------------------------------------------------------- operators


def test_only_the_platform_admin_manages_workspaces(hub: Hub) -> None:
    acme, beta = new_workspace(hub, "Acme"), new_workspace(hub, "Beta")
    listed = hub.ok("GET", WORKSPACES, hub.platform_key)["items"]
    assert {w["id"] for w in listed} >= {acme.id, beta.id}
    before = {w["id"]: (w["name"], w["status"]) for w in listed}

    # A workspace's own unrestricted admin is no operator: not of its own workspace, never of another.
    for method, path, body in (
        ("GET", WORKSPACES, None),
        ("POST", WORKSPACES, {"name": "mine"}),
        ("GET", f"{WORKSPACES}/{beta.id}", None),
        ("PUT", f"{WORKSPACES}/{beta.id}", {"name": "taken over"}),
        ("POST", f"{WORKSPACES}/{beta.id}/disable", None),
        ("DELETE", f"{WORKSPACES}/{beta.id}", None),
        ("DELETE", f"{WORKSPACES}/{acme.id}", None),
    ):
        problem(hub.call(method, path, acme.admin, json=body), 403, "platform_admin_required")
    # A key of the platform's workspace without manage_workspaces is no operator either; nor can Acme's admin grant
    # itself the capability to become one.
    reader = hub.ok(
        "POST", "/api/v1/api-keys", hub.platform_key, 201, json={"name": "r", "role": "admin", "capabilities": ["read"]}
    )
    problem(hub.call("GET", WORKSPACES, reader["key"]), 403, "platform_admin_required")
    scoped = hub.ok(
        "POST",
        "/api/v1/api-keys",
        acme.admin,
        201,
        json={"name": "x", "role": "admin", "capabilities": ["manage_workspaces"]},
    )
    problem(hub.call("GET", WORKSPACES, scoped["key"]), 403, "platform_admin_required")

    # Bad input: a clear 4xx naming what is wrong, and nothing changed.
    problem(hub.call("POST", WORKSPACES, hub.platform_key, json={"name": "   "}), 400, "invalid_name")
    problem(
        hub.call("POST", WORKSPACES, hub.platform_key, json={"name": "x", "plan": "gold"}), 422, "validation_failed"
    )
    problem(hub.call("PUT", f"{WORKSPACES}/{beta.id}", hub.platform_key, json={"name": ""}), 422, "validation_failed")
    problem(hub.call("GET", f"{WORKSPACES}/ws_nope", hub.platform_key), 404, "workspace_not_found")
    platform = hub.ok("GET", "/api/v1/me", hub.platform_key)["workspace_id"]
    for action in ("disable", "delete"):
        method, path = (
            ("DELETE", f"{WORKSPACES}/{platform}")
            if action == "delete"
            else ("POST", f"{WORKSPACES}/{platform}/disable")
        )
        problem(hub.call(method, path, hub.platform_key), 409, "platform_workspace")
    after = {w["id"]: (w["name"], w["status"]) for w in hub.ok("GET", WORKSPACES, hub.platform_key)["items"]}
    assert after == before
    assert hub.jobs.kinds() == []

    renamed = hub.ok("PUT", f"{WORKSPACES}/{beta.id}", hub.platform_key, json={"name": "Beta renamed"})
    assert renamed["name"] == "Beta renamed"
    assert hub.ok("GET", "/api/v1/me", beta.admin)["workspace_name"] == "Beta renamed"


@pytest.mark.timeout(SERVE_TEST_TIMEOUT)
def test_the_operator_manages_workspaces_with_the_platform_key_and_recovers_keys_on_the_data(tmp_path: Path) -> None:
    """``workspaces`` commands are REST requests with the platform admin's key (to the ``serve`` on the data);
    ``keys create --admin`` mints a key straight in the data directory, for any workspace and user named by id or
    name."""
    data = tmp_path / "data"
    run = [sys.executable, "-m", "mcpbridge.cli"]
    server = ServeProcess.start(
        cwd=tmp_path,
        env=cli_env({"MCPBRIDGE_DATA_DIR": str(data), "MCPBRIDGE_EMBEDDING_PROVIDER": "none"}),
        args=["--json"],
        log_dir=tmp_path,
        tag="serve",
    )
    try:
        server.wait_ready()
        platform_key = json.loads(server.stdout().splitlines()[0])["api_key"]
        client_env = cli_env({"MCPBRIDGE_URL": server.base_url, "MCPBRIDGE_API_KEY": platform_key})

        def cli(*args: str, on_data: bool = False) -> Any:
            argv = [*run, *args, "--json", *(["--data-dir", str(data)] if on_data else [])]
            done = subprocess.run(argv, capture_output=True, text=True, env=client_env)
            assert done.returncode == 0, done.stderr
            return json.loads(done.stdout)

        created = cli("workspaces", "create", "Gamma", "--admin-name", "gina")
        assert created["admin_api_key"]["key"].startswith("sk_")
        workspace = created["id"]
        assert cli("workspaces", "disable", "gamma")["status"] == "disabled"
        assert {w["id"]: w["status"] for w in cli("workspaces", "list")["items"]}[workspace] == "disabled"
        assert cli("workspaces", "enable", workspace)["status"] == "active"
        recovered = cli("keys", "create", "--admin", "--workspace", workspace, "--user", "gina", on_data=True)
        assert (recovered["user_id"], recovered["role"], recovered["capabilities"]) == (
            created["admin_user_id"],
            "admin",
            None,
        )
        with http_client(server.base_url) as client:
            me = client.get("/api/v1/me", headers=bearer(recovered["key"]))
        assert me.status_code == 200
        assert me.json()["workspace_id"] == workspace

        assert cli("workspaces", "delete", workspace)["status"] == "deleting"

        def purged() -> bool:  # by serve's background job
            with http_client(server.base_url) as client:
                listed = client.get(WORKSPACES, headers=bearer(platform_key))
            assert listed.status_code == 200, listed.text
            return workspace not in {w["id"] for w in listed.json()["items"]}

        server.wait_for(purged, "purging the deleted workspace")
        gone = subprocess.run([*run, "workspaces", "enable", workspace], capture_output=True, text=True, env=client_env)
        assert gone.returncode == 1
        assert "no such workspace" in gone.stderr
    finally:
        server.kill()


# ---------------------------------------------------------------------------------------------------- isolation


def test_workspaces_see_nothing_of_each_other(hub: Hub, two: tuple[Tenant, Tenant]) -> None:
    acme, beta = two
    acme_call = pause_a_call(hub, acme, "alice")
    for reader in (beta.admin, beta.key("alice")):
        lists = {
            "/api/v1/knowledge-bases": "items",
            "/api/v1/mcp-endpoints": "items",
            SERVICES: "items",
            "/api/v1/agents": "items",
            "/api/v1/agent/pending": "items",
        }
        for path, field_name in lists.items():
            shown = json.dumps(hub.ok("GET", path, reader)[field_name])
            assert acme.marker not in shown, path
            assert acme.id not in shown, path
        found = hub.ok(
            "POST", "/api/v1/knowledge/search", reader, json={"query": f"refund code {acme.marker}", "mode": "keyword"}
        )
        assert acme.marker not in json.dumps(found)
    # Every route family answers 404 for the other workspace's ids, reading or changing.
    b = beta.admin
    for method, path, body in (
        ("GET", f"/api/v1/knowledge-bases/{acme.kb}", None),
        ("PUT", f"/api/v1/knowledge-bases/{acme.kb}", {"name": "mine"}),
        ("DELETE", f"/api/v1/knowledge-bases/{acme.kb}", None),
        ("GET", f"/api/v1/knowledge-bases/{acme.kb}/documents", None),
        ("GET", f"/api/v1/documents/{acme.document}", None),
        ("GET", f"/api/v1/documents/{acme.document}/read", None),
        ("DELETE", f"/api/v1/documents/{acme.document}", None),
        ("GET", f"/api/v1/knowledge-bases/{acme.kb}/wiki", None),
        ("GET", f"/api/v1/mcp-endpoints/{acme.endpoint}", None),
        ("POST", f"/api/v1/mcp-endpoints/{acme.endpoint}/rotate-token", None),
        ("DELETE", f"/api/v1/mcp-endpoints/{acme.endpoint}", None),
        ("GET", f"{SERVICES}/{acme.service}", None),
        ("GET", f"{SERVICES}/{acme.service}/tools", None),
        ("DELETE", f"{SERVICES}/{acme.service}", None),
        ("GET", f"/api/v1/agents/{acme.agent}", None),
        ("DELETE", f"/api/v1/agents/{acme.agent}", None),
        ("GET", f"{CALLS}/{acme_call}", None),
        ("POST", f"{APPROVALS}/{acme_call}", {"decision": "approve"}),
        ("GET", f"{USERS}/{acme.user('alice')}", None),
        ("POST", f"{USERS}/{acme.user('alice')}/disable", None),
        ("DELETE", f"{USERS}/{acme.user('alice')}", None),
        ("POST", f"{USERS}/{acme.user('alice')}/api-keys", {"name": "k"}),
        ("GET", f"/api/v1/api-keys/{acme.key_ids[0]}", None),
        ("DELETE", f"/api/v1/api-keys/{acme.key_ids[0]}", None),
    ):
        answer = hub.call(method, path, b, json=body)
        assert answer.status_code == 404, f"{method} {path}: {answer.text}"
    problem(
        hub.call("POST", "/api/v1/knowledge/search", b, json={"query": "refund", "knowledge_base_ids": [acme.kb]}),
        404,
        "kb_not_found",
    )
    # An endpoint token opens its own endpoint only.
    assert hub.mcp(acme.endpoint, beta.endpoint_token).status_code == 401
    answered = hub.mcp(acme.endpoint, acme.endpoint_token)
    assert answered.status_code == 200
    assert beta.marker not in answered.text
    assert acme.marker in answered.text
    # Acme is intact and its call still waits for Acme's people.
    assert hub.ok("GET", f"/api/v1/documents/{acme.document}", acme.admin)["id"] == acme.document
    assert hub.ok("GET", f"{CALLS}/{acme_call}", acme.admin)["status"] == "awaiting_approval"
    assert {u["name"] for u in hub.ok("GET", USERS, beta.admin)["items"]} == {
        "admin",
        f"alice {beta.marker}",
        f"bob {beta.marker}",
    }


# ---------------------------------------------------------------------------------------------------- authority


def key_states(hub: Hub, key: str) -> dict[str, tuple[str, str, str, Any]]:
    listed = hub.ok("GET", "/api/v1/api-keys", key)["items"]
    return {k["id"]: (k["user_id"], k["status"], k["role"], k["capabilities"]) for k in listed}


def test_a_key_never_exceeds_its_maker_and_the_last_admin_stays(hub: Hub, upstream: Upstream) -> None:
    acme = new_workspace(hub, "Acme")
    add_user(hub, acme, "carol", role="admin", capabilities=["manage_users", "manage_keys", "read"])
    add_user(hub, acme, "dave", role="viewer", capabilities=["read"])
    carol, dave = acme.key("carol"), acme.key("dave")
    users_before = hub.ok("GET", USERS, acme.admin)["items"]
    keys_before = key_states(hub, acme.admin)

    problem(hub.call("GET", USERS, dave), 403, "admin_required")
    problem(hub.call("POST", USERS, dave, json={"name": "eve"}), 403, "admin_required")
    # Carol manages users, within her own authority only.
    problem(
        hub.call("POST", f"{USERS}/{acme.user('dave')}/api-keys", carol, json={"name": "k", "role": "admin"}),
        403,
        "scope_exceeded",
    )
    problem(
        hub.call("POST", f"{USERS}/{acme.user('dave')}/api-keys", carol, json={"name": "k", "capabilities": ["write"]}),
        403,
        "scope_exceeded",
    )
    problem(hub.call("POST", f"{USERS}/{acme.admin_user}/disable", carol), 403, "scope_exceeded")
    problem(hub.call("DELETE", f"{USERS}/{acme.admin_user}", carol), 403, "scope_exceeded")
    problem(hub.call("POST", f"{USERS}/{acme.user('carol')}/disable", carol), 403, "own_user")
    problem(hub.call("POST", f"{USERS}/usr_missing/api-keys", carol, json={"name": "k"}), 404, "user_not_found")
    problem(hub.call("POST", USERS, carol, json={"name": " "}), 400, "invalid_name")
    problem(hub.call("POST", USERS, carol, json={"name": "x", "role": "admin"}), 422, "validation_failed")
    problem(
        hub.call("POST", f"{USERS}/{acme.user('dave')}/api-keys", carol, json={"name": "k", "capabilities": ["fly"]}),
        400,
        "unknown_capability",
    )
    assert hub.ok("GET", USERS, acme.admin)["items"] == users_before
    assert key_states(hub, acme.admin) == keys_before

    # Within it she may: a narrower key for Dave, Dave disabled and enabled.
    narrow = hub.ok(
        "POST", f"{USERS}/{acme.user('dave')}/api-keys", carol, 201, json={"name": "k", "capabilities": ["read"]}
    )
    assert narrow["user_id"] == acme.user("dave")
    assert hub.ok("POST", f"{USERS}/{acme.user('dave')}/disable", carol)["status"] == "disabled"
    problem(
        hub.call("POST", f"{USERS}/{acme.user('dave')}/api-keys", carol, json={"name": "k2", "capabilities": ["read"]}),
        409,
        "user_inactive",
    )
    assert hub.ok("POST", f"{USERS}/{acme.user('dave')}/enable", carol)["status"] == "active"

    # A second unrestricted admin (Frank) disables the first; Frank's key is then the last usable one, even though
    # the first admin's keys are not revoked.
    add_user(hub, acme, "frank", role="admin")
    frank = acme.key("frank")
    assert hub.ok("POST", f"{USERS}/{acme.admin_user}/disable", frank)["status"] == "disabled"
    problem(hub.call("GET", "/api/v1/me", acme.admin), 403, "user_inactive")
    frank_key = hub.ok("GET", "/api/v1/me", frank)["api_key_id"]
    problem(hub.call("DELETE", f"/api/v1/api-keys/{frank_key}", frank), 409, "last_admin_key")
    assert hub.ok("GET", "/api/v1/me", frank)["user_id"] == acme.user("frank")
    # Enabled again, the first admin counts again: now Frank's key may go.
    assert hub.ok("POST", f"{USERS}/{acme.admin_user}/enable", frank)["status"] == "active"
    assert hub.call("DELETE", f"/api/v1/api-keys/{frank_key}", frank).status_code == 204
    problem(hub.call("GET", "/api/v1/me", frank), 401, "invalid_api_key")


# ---------------------------------------------------------------------------------------------------- disabling


def test_disabling_takes_effect_on_the_very_next_request(hub: Hub, two: tuple[Tenant, Tenant]) -> None:
    acme, beta = two
    alice = acme.key("alice")
    assert hub.call("GET", "/api/v1/knowledge-bases", alice).status_code == 200
    hub.ok("POST", f"{USERS}/{acme.user('alice')}/disable", acme.admin)
    for path in ("/api/v1/me", "/api/v1/knowledge-bases", "/api/v1/agent/pending", "/api/v1/me/oauth-connections"):
        problem(hub.call("GET", path, alice), 403, "user_inactive")
    problem(
        hub.call("POST", CALLS, alice, json={"tool_ref": acme.tool_ref, "arguments": {"text": "x"}}),
        403,
        "user_inactive",
    )
    # An agent acting for her (act_as) is refused too; Bob is not affected.
    problem(
        hub.call(
            "POST",
            CALLS,
            acme.admin,
            json={"tool_ref": acme.tool_ref, "arguments": {"text": "x"}, "principal": {"user_id": acme.user("alice")}},
        ),
        403,
        "user_inactive",
    )
    assert hub.call("GET", "/api/v1/me", acme.key("bob")).status_code == 200
    hub.ok("POST", f"{USERS}/{acme.user('alice')}/enable", acme.admin)
    assert hub.call("GET", "/api/v1/me", alice).status_code == 200

    # A disabled workspace: every key and the endpoint token, on their next request; the other workspace goes on.
    assert hub.mcp(acme.endpoint, acme.endpoint_token).status_code == 200
    assert hub.ok("POST", f"{WORKSPACES}/{acme.id}/disable", hub.platform_key)["status"] == "disabled"
    for key in (acme.admin, alice, acme.key("bob")):
        problem(hub.call("GET", "/api/v1/me", key), 403, "workspace_inactive")
    refused = hub.mcp(acme.endpoint, acme.endpoint_token)
    assert refused.status_code == 403
    assert refused.json()["code"] == "workspace_inactive"
    assert hub.mcp(beta.endpoint, beta.endpoint_token).status_code == 200
    assert hub.call("GET", "/api/v1/me", beta.admin).status_code == 200
    assert hub.ok("POST", f"{WORKSPACES}/{acme.id}/enable", hub.platform_key)["status"] == "active"
    assert hub.mcp(acme.endpoint, acme.endpoint_token).status_code == 200
    assert hub.call("GET", "/api/v1/me", alice).status_code == 200


# ---------------------------------------------------------------------------------------------------- approvals


def test_approvals_are_resolved_only_by_those_allowed(hub: Hub, two: tuple[Tenant, Tenant], upstream: Upstream) -> None:
    acme, beta = two
    bobs = pause_a_call(hub, acme, "bob", "from bob")
    alices = pause_a_call(hub, acme, "alice", "from alice")
    # Each user sees their own; the workspace's admin (approve_calls) sees both; the other workspace sees none.
    assert [c["pending_id"] for c in hub.ok("GET", "/api/v1/agent/pending", acme.key("bob"))["items"]] == [bobs]
    assert [c["pending_id"] for c in hub.ok("GET", "/api/v1/agent/pending", acme.key("alice"))["items"]] == [alices]
    assert {c["pending_id"] for c in hub.ok("GET", "/api/v1/agent/pending", acme.admin)["items"]} == {bobs, alices}
    assert hub.ok("GET", "/api/v1/agent/pending", beta.admin)["items"] == []

    problem(
        hub.call("POST", f"{APPROVALS}/{bobs}", acme.key("alice"), json={"decision": "approve"}), 403, "user_mismatch"
    )
    problem(hub.call("POST", f"{APPROVALS}/{bobs}", beta.admin, json={"decision": "approve"}), 404, "pending_not_found")
    problem(
        hub.call("POST", f"{APPROVALS}/{bobs}", acme.key("bob"), json={"decision": "approve", "modified_args": None}),
        400,
        "invalid_modified_args",
    )
    assert hub.ok("GET", f"{CALLS}/{bobs}", acme.key("bob"))["status"] == "awaiting_approval"
    assert upstream.ran == []

    assert hub.ok("POST", f"{APPROVALS}/{bobs}", acme.key("bob"), json={"decision": "approve"})["status"] == "approved"
    assert settled(hub, bobs, acme.key("bob"))["status"] == "completed"
    problem(hub.call("POST", f"{APPROVALS}/{bobs}", acme.admin, json={"decision": "reject"}), 409, "already_resolved")
    # Alice's call, approved by the workspace's approver.
    approved = hub.ok("POST", f"{APPROVALS}/{alices}", acme.admin, json={"decision": "approve"})
    assert approved["approval"]["by"] == acme.admin_user
    assert settled(hub, alices, acme.key("alice"))["status"] == "completed"
    assert upstream.ran == [("echo", {"text": "from bob"}), ("echo", {"text": "from alice"})]


# ---------------------------------------------------------------------------------------------------- OAuth


def oauth_call(hub: Hub, tenant: Tenant, user: str, ref: str, server: OAuthTestServer) -> dict[str, Any]:
    """A call of ``whoami`` by ``user``: if it pauses for OAuth, the user authorizes in the browser (the server
    signs them in under their own name) and the call resumes by itself."""
    key = tenant.key(user)
    submitted = hub.call("POST", CALLS, key, json={"tool_ref": ref, "arguments": {}})
    if submitted.status_code == 200:
        return dict(submitted.json())
    assert submitted.status_code == 202, submitted.text
    body = submitted.json()
    assert body["status"] == "awaiting_oauth"
    server.approving_user = user
    location = approve(body["authorization_url"])
    parts = httpx.URL(location)
    assert hub.client.get(f"{parts.path}?{parts.query.decode()}", follow_redirects=False).status_code == 303
    return settled(hub, body["pending_id"], key)


def test_oauth_tokens_are_each_users_own(hub: Hub, upstream: Upstream) -> None:
    acme, beta = new_workspace(hub, "Acme"), new_workspace(hub, "Beta")
    add_user(hub, acme, "alice", role="viewer")
    add_user(hub, acme, "bob", role="viewer")
    with oauth_server() as server:
        service = hub.ok(
            "POST",
            SERVICES,
            acme.admin,
            201,
            json={
                "name": "protected",
                "url": server.mcp_url,
                "transport": "http-streamable",
                "auth_config": {"auth_type": "oauth"},
            },
        )["id"]
        # The admin authorizes (as "root"), pulls a catalog and describes the tool: the reference agents hold.
        server.approving_user = "root"
        started = hub.ok("POST", f"{SERVICES}/{service}/oauth/authorize-url", acme.admin, json={})
        location = httpx.URL(approve(started["authorization_url"]))
        hub.client.get(f"{location.path}?{location.query.decode()}", follow_redirects=False)
        hub.ok("POST", f"{SERVICES}/{service}/metadata/refresh", acme.admin)
        ref = hub.ok(
            "GET", "/api/v1/agent/tools/describe", acme.admin, params={"service_id": service, "tool_name": "whoami"}
        )["tool_ref"]

        for user in ("alice", "bob"):
            done = oauth_call(hub, acme, user, ref, server)
            assert done["status"] == "completed", done
            assert f"hello {user}" in json.dumps(done["result"])
        # Each sees their own connection only; a call runs with its caller's own token.
        for user in ("alice", "bob"):
            listed = hub.ok("GET", "/api/v1/me/oauth-connections", acme.key(user))["items"]
            assert [(c["service_id"], c["service_name"], c["status"]) for c in listed] == [
                (service, "protected", "authorized")
            ]
            assert "token" not in json.dumps(listed).replace("oauth-connections", "")
        again = hub.ok("POST", CALLS, acme.key("bob"), json={"tool_ref": ref, "arguments": {}})
        assert "hello bob" in json.dumps(again["result"])

        # Alice disconnects: her token goes (and is revoked upstream), Bob's stays.
        revocations = server.revocations
        assert hub.call("DELETE", f"/api/v1/me/oauth-connections/{service}", acme.key("alice")).status_code == 204
        assert server.revocations > revocations
        assert hub.ok("GET", "/api/v1/me/oauth-connections", acme.key("alice"))["items"] == []
        problem(
            hub.call("DELETE", f"/api/v1/me/oauth-connections/{service}", acme.key("alice")),
            404,
            "oauth_connection_not_found",
        )
        assert len(hub.ok("GET", "/api/v1/me/oauth-connections", acme.key("bob"))["items"]) == 1
        paused = hub.call("POST", CALLS, acme.key("alice"), json={"tool_ref": ref, "arguments": {}})
        assert paused.status_code == 202
        assert paused.json()["status"] == "awaiting_oauth"
        hub.ok("POST", f"/api/v1/agent/mcp-oauth-resolutions/{paused.json()['pending_id']}/cancel", acme.key("alice"))
        assert "hello bob" in json.dumps(
            hub.ok("POST", CALLS, acme.key("bob"), json={"tool_ref": ref, "arguments": {}})["result"]
        )

        # Another workspace neither sees nor touches them.
        assert hub.ok("GET", "/api/v1/me/oauth-connections", beta.admin)["items"] == []
        problem(hub.call("DELETE", f"/api/v1/me/oauth-connections/{service}", beta.admin), 404, "service_not_found")
        problem(hub.call("DELETE", "/api/v1/me/oauth-connections/svc_nope", acme.key("bob")), 404, "service_not_found")
        assert len(hub.ok("GET", "/api/v1/me/oauth-connections", acme.key("bob"))["items"]) == 1

        # Deleting Bob removes his token; the admin's stays.
        assert hub.call("DELETE", f"{USERS}/{acme.user('bob')}", acme.admin).status_code == 204
        problem(hub.call("GET", "/api/v1/me", acme.key("bob")), 401, "invalid_api_key")
        assert f"OAUTHTOKEN#{service}#user#{acme.user('bob')}" not in everything_at_rest(hub.container)
        assert len(hub.ok("GET", "/api/v1/me/oauth-connections", acme.admin)["items"]) == 1


# ---------------------------------------------------------------------------------------------------- deletion


def test_deleting_a_user_removes_what_they_own(hub: Hub, two: tuple[Tenant, Tenant]) -> None:
    acme, _ = two
    bob = acme.key("bob")
    waiting = pause_a_call(hub, acme, "bob")
    asked = hub.ok("POST", "/api/v1/knowledge/ask", bob, json={"question": "What is the refund code?"})
    assert asked["session_id"]
    bob_keys = [
        k["id"] for k in hub.ok("GET", "/api/v1/api-keys", acme.admin)["items"] if k["user_id"] == acme.user("bob")
    ]
    assert bob_keys

    problem(hub.call("DELETE", f"{USERS}/{acme.user('bob')}", acme.key("alice")), 403, "admin_required")
    problem(hub.call("DELETE", f"{USERS}/{acme.admin_user}", acme.admin), 403, "own_user")
    assert hub.call("GET", "/api/v1/me", bob).status_code == 200, "a refused deletion changed nothing"

    assert hub.call("DELETE", f"{USERS}/{acme.user('bob')}", acme.admin).status_code == 204
    problem(hub.call("GET", "/api/v1/me", bob), 401, "invalid_api_key")
    problem(hub.call("GET", f"{USERS}/{acme.user('bob')}", acme.admin), 404, "user_not_found")
    assert acme.user("bob") not in {k["user_id"] for k in hub.ok("GET", "/api/v1/api-keys", acme.admin)["items"]}
    # His waiting call is cancelled (kept for the record, as every finished call is), the session is gone.
    cancelled = settled(hub, waiting, acme.admin)
    assert (cancelled["status"], cancelled["error"]["code"]) == ("cancelled", "user_deleted")
    stored = everything_at_rest(hub.container)
    assert asked["session_id"] not in stored
    assert not any(f"APIKEY#{key_id}" in stored for key_id in bob_keys)
    assert f"USER#{acme.user('bob')}" not in stored
    problem(hub.call("DELETE", f"{USERS}/{acme.user('bob')}", acme.admin), 404, "user_not_found")


def stored_files(hub: Hub) -> dict[str, bytes]:
    """Every blob and index file, by name: the data directory's files locally, the bucket's objects and the index
    cache on AWS."""
    container = hub.container
    roots = [container.settings.blobs_dir, container.settings.indexes_dir]
    if container.settings.backend == "aws":
        s3 = container._aws_client("s3")
        bucket = container.settings.bucket_name
        found = {}
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for obj in page.get("Contents", []):
                found[obj["Key"]] = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
        roots = [container.settings.index_cache_dir]
    else:
        found = {}
    for root in roots:
        if root is not None and Path(root).exists():
            found |= {str(p): p.read_bytes() for p in Path(root).rglob("*") if p.is_file()}
    return found


def test_deleting_a_workspace_leaves_nothing_of_it(hub: Hub, two: tuple[Tenant, Tenant], upstream: Upstream) -> None:
    acme, beta = two
    waiting = pause_a_call(hub, acme, "alice")
    asked = hub.ok("POST", "/api/v1/knowledge/ask", acme.key("bob"), json={"question": "What is the refund code?"})
    assert hub.mcp(acme.endpoint, acme.endpoint_token).status_code == 200  # a rate-limit log of the endpoint
    with oauth_server() as server:
        body = {"name": f"protected {acme.marker}", "url": server.mcp_url, "transport": "http-streamable"}
        oauth_service = hub.ok("POST", SERVICES, acme.admin, 201, json={**body, "auth_config": {"auth_type": "oauth"}})
        authorize = f"{SERVICES}/{oauth_service['id']}/oauth/authorize-url"
        started = hub.ok("POST", authorize, acme.admin, json={})
        location = httpx.URL(approve(started["authorization_url"]))
        assert hub.client.get(f"{location.path}?{location.query.decode()}", follow_redirects=False).status_code == 303
        dangling = hub.ok("POST", authorize, acme.key("alice"), json={})  # its state is still pending
    # A knowledge base deleted just before, whose own purge has not run yet: its document outlives it for now.
    old_kb = hub.ok("POST", "/api/v1/knowledge-bases", acme.admin, 201, json={"name": f"old {acme.marker}"})["id"]
    old_doc = hub.ok(
        "POST",
        f"/api/v1/knowledge-bases/{old_kb}/documents",
        acme.admin,
        201,
        json={"title": "old", "content": f"old notes {acme.marker}"},
    )["id"]
    hub.jobs.drain()
    assert hub.call("DELETE", f"/api/v1/knowledge-bases/{old_kb}", acme.admin).status_code == 204
    acme_ids = [
        *(acme.id, acme.kb, acme.document, old_kb, old_doc, acme.endpoint, acme.service, acme.agent),
        *(oauth_service["id"], waiting, asked["session_id"], acme.admin_user, *acme.key_ids),
        *(started["authorization_attempt"], dangling["authorization_attempt"]),
        *(user_id for user_id, _ in acme.users.values()),
    ]

    def leftovers() -> tuple[list[str], list[str]]:
        stored, files = everything_at_rest(hub.container), stored_files(hub)
        items = [i for i in (*acme_ids, acme.marker) if i in stored]
        named = [n for n, data in files.items() if acme.marker.encode() in data or any(i in n for i in acme_ids)]
        return items, named

    items, files = leftovers()
    assert len(items) == len(acme_ids) + 1, "the scan sees every item of the workspace"
    assert files, "and its blobs and index files"

    deleted = hub.ok("DELETE", f"{WORKSPACES}/{acme.id}", hub.platform_key, 202)
    assert deleted["status"] == "deleting"
    assert hub.jobs.kinds() == ["purge_knowledge_base", "purge_workspace"]
    # Refused at once, before the purge has run: every key and the endpoint token.
    for key in (acme.admin, acme.key("alice"), acme.key("bob")):
        problem(hub.call("GET", "/api/v1/knowledge-bases", key), 403, "workspace_inactive")
    refused = hub.mcp(acme.endpoint, acme.endpoint_token)
    assert refused.status_code == 403
    assert refused.json()["code"] == "workspace_inactive"
    problem(hub.call("POST", f"{WORKSPACES}/{acme.id}/enable", hub.platform_key), 409, "workspace_deleting")
    assert hub.ok("GET", f"{WORKSPACES}/{acme.id}", hub.platform_key)["status"] == "deleting"

    hub.jobs.drain(only="purge_workspace")  # before the old knowledge base's own purge: it must not be needed
    problem(hub.call("GET", f"{WORKSPACES}/{acme.id}", hub.platform_key), 404, "workspace_not_found")
    assert acme.id not in {w["id"] for w in hub.ok("GET", WORKSPACES, hub.platform_key)["items"]}
    problem(hub.call("GET", "/api/v1/me", acme.admin), 401, "invalid_api_key")
    assert hub.mcp(acme.endpoint, acme.endpoint_token).status_code == 401
    # The paused call's workflow was woken and ended; the upstream never ran it.
    wait_idle(waiting)
    assert upstream.ran == []
    assert leftovers() == ([], []), "items or files of the deleted workspace remain"
    hub.jobs.drain()  # the old knowledge base's late purge finds nothing and leaves nothing
    assert leftovers() == ([], [])

    # The other workspace is whole.
    after = everything_at_rest(hub.container)
    assert all(i in after for i in (beta.id, beta.kb, beta.document, beta.endpoint, beta.service, beta.marker))
    assert any(beta.marker.encode() in data for data in stored_files(hub).values())
    hits = hub.ok(
        "POST", "/api/v1/knowledge/search", beta.admin, json={"query": f"refund code {beta.marker}", "mode": "keyword"}
    )
    assert hits["results"]
    assert beta.marker in json.dumps(hits)
    assert hub.mcp(beta.endpoint, beta.endpoint_token).status_code == 200
