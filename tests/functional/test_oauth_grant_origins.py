"""A grant follows what it was made from, on both backends, over real HTTP: the API key signed in with, the user and
the workspace, read on every use of its tokens whatever route changed them; a sign-in's refresh tokens end at a fixed
time that rotation never moves; a grant stored before grants recorded their key is refused. The hub's clock is a
``FakeClock`` the tests move."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from mcpbridge.domain.items import Key, Update
from mcpbridge.identity.records import workspace_key
from tests.support.clock import FakeClock
from tests.support.oauth_flow import Browser, Hub, OAuthClient, close_clients, hub_on, mcp_post

BACKENDS = ["local", "aws"]
SESSION_SECONDS = 4 * 3600


@pytest.fixture(scope="module")
def clock() -> FakeClock:
    return FakeClock(time.time())


@pytest.fixture(scope="module", params=BACKENDS)
def hub(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, clock: FakeClock) -> Iterator[Hub]:
    with (
        pytest.MonkeyPatch.context() as monkeypatch,
        hub_on(
            request.param,
            tmp_path_factory.mktemp(request.param),
            monkeypatch,
            clock=clock,
            oauth_refresh_token_seconds=SESSION_SECONDS,
        ) as served,
    ):
        yield served


@pytest.fixture(autouse=True)
def _closed_clients() -> Iterator[None]:
    yield
    close_clients()


@pytest.fixture
def endpoint(hub: Hub) -> dict[str, Any]:
    return hub.publish()


def client_of(endpoint: dict[str, Any], name: str = "Field client") -> OAuthClient:
    client = OAuthClient(endpoint["url"])
    client.discover()
    assert client.register(client_name=name).status_code == 201
    return client


def minted(hub: Hub, user_id: str, name: str, key: str | None = None) -> dict[str, Any]:
    """A new viewer key of the user: the API's answer (``id``, ``key``)."""
    return hub.post(f"/api/v1/users/{user_id}/api-keys", {"name": name, "role": "viewer"}, key)


def works(endpoint: dict[str, Any], token: str) -> bool:
    return mcp_post(endpoint["url"], token).status_code == 200


def grant_items(hub: Hub, user_id: str) -> list[dict[str, Any]]:
    return [item for item in hub.items("OAGRANT#") if item["user_id"] == user_id]


def test_revoking_the_key_signed_in_with_ends_its_grants(hub: Hub, endpoint: dict[str, Any]) -> None:
    user = hub.post("/api/v1/users", {"name": "Leaky"})
    leaked, kept = minted(hub, user["id"], "leaked"), minted(hub, user["id"], "kept")
    stolen = client_of(endpoint, "Stolen")
    tokens = stolen.tokens(Browser(), leaked["key"])
    own = client_of(endpoint, "Own").tokens(Browser(), kept["key"])
    assert works(endpoint, tokens["access_token"])
    rotated = stolen.refresh(tokens["refresh_token"])
    assert rotated.status_code == 200, rotated.text

    with hub.api() as api:
        assert api.delete(f"/api/v1/api-keys/{leaked['id']}").status_code == 204
    refused = mcp_post(endpoint["url"], rotated.json()["access_token"])
    assert refused.status_code == 401
    assert refused.json()["code"] == "invalid_token"
    again = stolen.refresh(rotated.json()["refresh_token"])
    assert again.status_code == 400
    assert again.json()["error"] == "invalid_grant"
    assert [g["api_key_id"] for g in grant_items(hub, user["id"])] == [kept["id"]], "the grant is gone, not hidden"
    assert works(endpoint, own["access_token"]), "a grant made with another key of the user stands"


def test_approving_again_with_another_key_replaces_the_grant(hub: Hub, endpoint: dict[str, Any]) -> None:
    user = hub.post("/api/v1/users", {"name": "Twice"})
    first, second = minted(hub, user["id"], "first"), minted(hub, user["id"], "second")
    client = client_of(endpoint)
    before = client.tokens(Browser(), first["key"])
    after = client.tokens(Browser(), second["key"])
    # The grant now follows the second key: tokens made under the first do not ride on it.
    assert not works(endpoint, before["access_token"])
    assert client.refresh(before["refresh_token"]).json()["error"] == "invalid_grant"
    assert works(endpoint, after["access_token"])
    with hub.api() as api:
        assert api.delete(f"/api/v1/api-keys/{first['id']}").status_code == 204
    assert works(endpoint, after["access_token"]), "revoking the key it no longer follows changes nothing"


def test_refresh_tokens_end_with_their_sign_in_whatever_the_rotations(
    hub: Hub, endpoint: dict[str, Any], clock: FakeClock
) -> None:
    client = client_of(endpoint)
    tokens = client.tokens(Browser(), hub.admin_key)
    signed_in = clock.now()
    while clock.now() + 1800 < signed_in + SESSION_SECONDS:
        clock.advance(1800)
        answer = client.refresh(tokens["refresh_token"])
        assert answer.status_code == 200, answer.text
        tokens = answer.json()
        left = signed_in + SESSION_SECONDS - clock.now()
        assert tokens["expires_in"] <= left + 1, "no access token outlives the sign-in's session"
        assert works(endpoint, tokens["access_token"])
    clock.advance(1800)
    ended = client.refresh(tokens["refresh_token"])
    assert ended.status_code == 400
    assert ended.json()["error"] == "invalid_grant"
    assert not works(endpoint, tokens["access_token"])
    # Signing in again starts a new session for the same client.
    assert works(endpoint, client.tokens(Browser(), hub.admin_key)["access_token"])


def test_a_disabled_user_or_workspace_refuses_refreshes_until_enabled(hub: Hub) -> None:
    created = hub.post("/api/v1/workspaces", {"name": "Tenant", "admin_name": "Tenant admin"})
    tenant_key = created["admin_api_key"]["key"]
    endpoint = hub.post("/api/v1/mcp-endpoints", {"name": "Tenant notes"}, tenant_key)
    user = hub.post("/api/v1/users", {"name": "Member"}, tenant_key)
    member = minted(hub, user["id"], "member", tenant_key)
    client = client_of(endpoint)
    tokens = client.tokens(Browser(), member["key"])

    with hub.api() as api:
        assert api.post(f"/api/v1/workspaces/{created['id']}/disable").status_code == 200
    refused = client.refresh(tokens["refresh_token"])
    assert refused.status_code == 400
    assert refused.json()["error"] == "invalid_grant"
    assert mcp_post(endpoint["url"], tokens["access_token"]).status_code == 403
    with hub.api() as api:
        assert api.post(f"/api/v1/workspaces/{created['id']}/enable").status_code == 200
    # Suspended, not spent: the same refresh token works once the workspace is back.
    resumed = client.refresh(tokens["refresh_token"])
    assert resumed.status_code == 200, resumed.text
    tokens = resumed.json()

    with hub.api(tenant_key) as api:
        assert api.post(f"/api/v1/users/{user['id']}/disable").status_code == 200
        assert client.refresh(tokens["refresh_token"]).json()["error"] == "invalid_grant"
        assert api.post(f"/api/v1/users/{user['id']}/enable").status_code == 200
    assert client.refresh(tokens["refresh_token"]).status_code == 200


def test_a_workspace_being_deleted_ends_its_grants(hub: Hub) -> None:
    created = hub.post("/api/v1/workspaces", {"name": "Leaving", "admin_name": "Leaving admin"})
    tenant_key, workspace_id = created["admin_api_key"]["key"], created["id"]
    endpoint = hub.post("/api/v1/mcp-endpoints", {"name": "Leaving notes"}, tenant_key)
    client = client_of(endpoint)
    tokens = client.tokens(Browser(), tenant_key)
    store = hub.container.store
    # The state a purge is in while it runs: the workspace marked, its items still there.
    store.update(workspace_key(workspace_id), Update(set={"status": "deleting"}))
    refused = client.refresh(tokens["refresh_token"])
    assert refused.status_code == 400
    assert refused.json()["error"] == "invalid_grant"
    assert store.query(f"WS#{workspace_id}", sk_prefix="OAGRANT#").items == [], "the grant went at once"


def test_a_grant_stored_without_its_key_is_refused_and_removed(hub: Hub, endpoint: dict[str, Any]) -> None:
    user = hub.post("/api/v1/users", {"name": "Earlier"})
    key = minted(hub, user["id"], "earlier")
    client = client_of(endpoint)
    tokens = client.tokens(Browser(), key["key"])
    (grant,) = grant_items(hub, user["id"])
    # As an earlier release stored it: no record of the key signed in with.
    hub.container.store.update(Key(grant["pk"], grant["sk"]), Update(remove=["api_key_id"]))
    assert mcp_post(endpoint["url"], tokens["access_token"]).status_code == 401
    assert client.refresh(tokens["refresh_token"]).json()["error"] == "invalid_grant"
    assert grant_items(hub, user["id"]) == []
    # Signing in again makes a grant that follows its key.
    again = client.tokens(Browser(), key["key"])
    assert works(endpoint, again["access_token"])
    assert [g["api_key_id"] for g in grant_items(hub, user["id"])] == [key["id"]]


def test_deleting_the_endpoint_ends_its_grants(hub: Hub) -> None:
    endpoint = hub.publish(name="Short-lived")
    client = client_of(endpoint)
    tokens = client.tokens(Browser(), hub.admin_key)
    with hub.api() as api:
        assert api.delete(f"/api/v1/mcp-endpoints/{endpoint['id']}").status_code == 204
    assert mcp_post(endpoint["url"], tokens["access_token"]).status_code == 401
    refused = client.refresh(tokens["refresh_token"])
    assert refused.status_code == 404
    assert refused.json()["error"] == "not_found"
