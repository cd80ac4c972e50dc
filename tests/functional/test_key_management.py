"""Who may manage API keys, over REST on both backends: the ``manage_keys`` capability, never a key broader than
the caller's, never the workspace's last unrestricted admin key; and the operator's way back from a lost admin key."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from mcpbridge.bootstrap import Container
from mcpbridge.http.apps import create_combined_app
from mcpbridge.settings import Settings
from tests.support.clock import FakeClock
from tests.support.containers import container_on

KEYS = "/api/v1/api-keys"


@pytest.fixture(params=["local", "aws"])
def container(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Container]:
    with container_on(request.param, tmp_path, monkeypatch, clock=FakeClock()) as built:
        yield built


@pytest.fixture
def owner(container: Container) -> str:
    key = container.identity.initialize().api_key
    assert key is not None
    return key


@pytest.fixture
def client(container: Container) -> Iterator[TestClient]:
    with TestClient(create_combined_app(container), raise_server_exceptions=False) as test_client:
        yield test_client


def h(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def problem(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["code"] == code, response.text


def make(client: TestClient, by: str, **body: Any) -> dict[str, Any]:
    response = client.post(KEYS, headers=h(by), json={"name": "k", **body})
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def states(client: TestClient, owner: str) -> dict[str, str]:
    response = client.get(KEYS, headers=h(owner))
    assert response.status_code == 200, response.text
    return {k["id"]: k["status"] for k in response.json()["items"]}


def test_an_admin_key_without_manage_keys_cannot_touch_keys(client: TestClient, owner: str) -> None:
    reader = make(client, owner, role="admin", capabilities=["read"])
    owner_id = client.get("/api/v1/me", headers=h(owner)).json()["api_key_id"]
    before = states(client, owner)
    for response in (
        client.get(KEYS, headers=h(reader["key"])),
        client.get(f"{KEYS}/{owner_id}", headers=h(reader["key"])),
        client.post(KEYS, headers=h(reader["key"]), json={"name": "x", "role": "viewer", "capabilities": ["read"]}),
        client.delete(f"{KEYS}/{owner_id}", headers=h(reader["key"])),
    ):
        problem(response, 403, "capability_missing")
    assert states(client, owner) == before
    assert client.get("/api/v1/me", headers=h(owner)).status_code == 200, "the owner is not locked out"


def test_a_key_never_revokes_a_broader_key(client: TestClient, owner: str) -> None:
    manager = make(client, owner, role="admin", capabilities=["read", "manage_keys"])
    broader = make(client, owner, role="admin", capabilities=["read", "write"])
    other_role = make(client, owner, role="admin", capabilities=["read"])
    narrower = make(client, owner, role="viewer", capabilities=["read"])
    owner_id = client.get("/api/v1/me", headers=h(owner)).json()["api_key_id"]
    before = states(client, owner)
    for target in (owner_id, broader["id"]):
        problem(client.delete(f"{KEYS}/{target}", headers=h(manager["key"])), 403, "scope_exceeded")
    assert states(client, owner) == before
    # Within its own authority it may revoke (a narrower key, an admin key of its scope, itself).
    for target in (narrower["id"], other_role["id"], manager["id"]):
        assert client.delete(f"{KEYS}/{target}", headers=h(manager["key"])).status_code == 204
    after = states(client, owner)
    assert [after[k] for k in (narrower["id"], other_role["id"], manager["id"])] == ["revoked"] * 3
    assert after[owner_id] == after[broader["id"]] == "active"


def test_the_last_unrestricted_admin_key_cannot_be_revoked(client: TestClient, owner: str) -> None:
    owner_id = client.get("/api/v1/me", headers=h(owner)).json()["api_key_id"]
    problem(client.delete(f"{KEYS}/{owner_id}", headers=h(owner)), 409, "last_admin_key")
    assert states(client, owner)[owner_id] == "active"
    # With a second unrestricted admin key, either may go, but not both.
    second = make(client, owner, role="admin")
    assert client.delete(f"{KEYS}/{owner_id}", headers=h(second["key"])).status_code == 204
    problem(client.delete(f"{KEYS}/{second['id']}", headers=h(second["key"])), 409, "last_admin_key")
    assert client.get("/api/v1/me", headers=h(second["key"])).status_code == 200


def test_a_workspace_from_before_the_admin_key_count_keeps_its_last_admin_key(
    client: TestClient, container: Container, owner: str
) -> None:
    from mcpbridge.identity.accounts import admin_keys_key

    workspace_id = container.identity.installed_workspace_id()
    assert workspace_id is not None
    container.store.delete(admin_keys_key(workspace_id))  # as initialised by an earlier release
    owner_id = client.get("/api/v1/me", headers=h(owner)).json()["api_key_id"]
    problem(client.delete(f"{KEYS}/{owner_id}", headers=h(owner)), 409, "last_admin_key")
    second = make(client, owner, role="admin")
    assert client.delete(f"{KEYS}/{owner_id}", headers=h(second["key"])).status_code == 204
    problem(client.delete(f"{KEYS}/{second['id']}", headers=h(second["key"])), 409, "last_admin_key")


def test_racing_revocations_keep_one_unrestricted_admin_key(client: TestClient, owner: str) -> None:
    keys = [make(client, owner, role="admin") for _ in range(4)]
    owner_id = client.get("/api/v1/me", headers=h(owner)).json()["api_key_id"]
    targets = [owner_id, *(k["id"] for k in keys)]
    statuses: list[int] = []
    start = threading.Barrier(len(targets))

    def revoke(target: str, by: str) -> None:
        start.wait()
        statuses.append(client.delete(f"{KEYS}/{target}", headers=h(by)).status_code)

    # Every key revokes another one at the same moment; at least one unrestricted admin key must survive.
    bys = [keys[0]["key"], keys[1]["key"], keys[2]["key"], keys[3]["key"], owner]
    threads = [threading.Thread(target=revoke, args=(t, b)) for t, b in zip(targets, bys, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    active = [k for k, status in states_any(client, [owner, *(k["key"] for k in keys)]).items() if status == "active"]
    assert len(active) >= 1
    assert statuses.count(204) == len(targets) - len(active)
    assert set(statuses) <= {204, 401, 409}


def states_any(client: TestClient, candidates: list[str]) -> dict[str, str]:
    for key in candidates:
        response = client.get(KEYS, headers=h(key))
        if response.status_code == 200:
            return {k["id"]: k["status"] for k in response.json()["items"] if k["role"] == "admin"}
    raise AssertionError("no key can list keys any more: the workspace is locked out")


def test_an_operator_mints_an_admin_key_from_the_machine_that_holds_the_data(tmp_path: Path) -> None:
    data = tmp_path / "data"
    run = [sys.executable, "-m", "mcpbridge.cli"]
    first = subprocess.run(
        [*run, "init", "--data-dir", str(data), "--json"], capture_output=True, text=True, check=True
    )
    lost = json.loads(first.stdout)["api_key"]
    again = subprocess.run(
        [*run, "init", "--data-dir", str(data), "--json"], capture_output=True, text=True, check=True
    )
    assert json.loads(again.stdout)["api_key"] is None, "init issues nothing the second time"

    minted = subprocess.run(
        [*run, "keys", "create", "--admin", "--data-dir", str(data), "--json"], capture_output=True, text=True
    )
    assert minted.returncode == 0, minted.stderr
    shown = json.loads(minted.stdout)
    assert shown["key"].startswith("sk_")
    assert shown["role"] == "admin"
    assert shown["capabilities"] is None
    assert shown["knowledge_base_ids"] is None
    assert shown["key"] != lost

    container = Container(Settings(data_dir=data))
    try:
        with TestClient(create_combined_app(container)) as client:
            assert client.get("/api/v1/me", headers=h(shown["key"])).status_code == 200
            # With two unrestricted keys now, the lost one can be revoked by the new one.
            lost_id = client.get("/api/v1/me", headers=h(lost)).json()["api_key_id"]
            assert client.delete(f"{KEYS}/{lost_id}", headers=h(shown["key"])).status_code == 204
            assert client.get("/api/v1/me", headers=h(lost)).status_code == 401
    finally:
        container.close()

    uninitialised = subprocess.run(
        [*run, "keys", "create", "--admin", "--data-dir", str(tmp_path / "empty"), "--json"],
        capture_output=True,
        text=True,
    )
    assert uninitialised.returncode == 1
    assert "init" in uninitialised.stderr
