"""Who may see and revoke OAuth grants, on both backends over real HTTP: the grant routes follow the authority rules
of the key and endpoint routes (a key's knowledge bases and capabilities bound what it sees and revokes, a key never
acts on a user broader than itself) and a user or endpoint of another workspace is not found. Every refusal leaves
the grants, and their tokens, as they were."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.oauth_flow import Browser, Hub, OAuthClient, close_clients, hub_on, mcp_post

BACKENDS = ["local", "aws"]


@pytest.fixture(scope="module", params=BACKENDS)
def hub(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    with (
        pytest.MonkeyPatch.context() as monkeypatch,
        hub_on(request.param, tmp_path_factory.mktemp(request.param), monkeypatch) as served,
    ):
        yield served


@pytest.fixture(autouse=True)
def _closed_clients() -> Iterator[None]:
    yield
    close_clients()


@pytest.fixture(scope="module")
def arctic(hub: Hub) -> str:
    return str(hub.post("/api/v1/knowledge-bases", {"name": "Arctic"})["id"])


@pytest.fixture(scope="module")
def owner(hub: Hub) -> str:
    with hub.api() as api:
        return str(api.get("/api/v1/me").json()["user_id"])


def connect(endpoint: dict[str, Any], key: str) -> str:
    """A client approved on the endpoint with ``key``: its access token."""
    client = OAuthClient(endpoint["url"])
    client.discover()
    assert client.register().status_code == 201
    return str(client.tokens(Browser(), key)["access_token"])


def own_key(hub: Hub, **scope: Any) -> str:
    """Another admin key of the install's owner, narrowed by ``scope``."""
    return str(hub.post("/api/v1/api-keys", {"name": "narrow", "role": "admin", **scope})["key"])


def listed(hub: Hub, user_id: str) -> list[dict[str, Any]]:
    """The user's grants as the install's unrestricted admin key sees them."""
    with hub.api() as api:
        answer = api.get(f"/api/v1/users/{user_id}/oauth-grants", params={"limit": 200})
    assert answer.status_code == 200, answer.text
    return list(answer.json()["items"])


def grant_ids(hub: Hub, user_id: str) -> set[str]:
    return {grant["id"] for grant in listed(hub, user_id)}


def refused(answer: httpx.Response, status: int, code: str) -> None:
    assert answer.status_code == status, answer.text
    assert answer.json()["code"] == code


def test_a_key_limited_to_one_knowledge_base_revokes_nothing_beyond_it(hub: Hub, arctic: str, owner: str) -> None:
    wide, narrow = hub.publish(name="Everything"), hub.publish(name="Arctic only", knowledge_base_ids=[arctic])
    wide_token, narrow_token = connect(wide, hub.admin_key), connect(narrow, hub.admin_key)
    before = grant_ids(hub, owner)
    limited = own_key(hub, knowledge_base_ids=[arctic])

    with hub.api(limited) as api:
        refused(api.delete(f"/api/v1/users/{owner}/oauth-grants"), 403, "scope_exceeded")
        assert grant_ids(hub, owner) == before, "a refused revocation revokes nothing"
        seen = api.get(f"/api/v1/users/{owner}/oauth-grants").json()["items"]
        assert {g["endpoint_id"] for g in seen} == {narrow["id"]}, "grants beyond the key's scope are not shown"
        refused(api.get(f"/api/v1/mcp-endpoints/{wide['id']}/oauth-grants"), 403, "scope_exceeded")
        assert len(api.get(f"/api/v1/mcp-endpoints/{narrow['id']}/oauth-grants").json()["items"]) == 1
        wide_grant = next(g["id"] for g in listed(hub, owner) if g["endpoint_id"] == wide["id"])
        refused(api.delete(f"/api/v1/users/{owner}/oauth-grants/{wide_grant}"), 403, "scope_exceeded")
        # Within its scope it acts: the endpoint filter narrows the revocation to what the key covers.
        revoked = api.delete(f"/api/v1/users/{owner}/oauth-grants", params={"endpoint_id": narrow["id"]})
        assert revoked.status_code == 200, revoked.text
        assert [g["endpoint_id"] for g in revoked.json()["items"]] == [narrow["id"]]
    assert mcp_post(wide["url"], wide_token).status_code == 200
    assert mcp_post(narrow["url"], narrow_token).status_code == 401


def test_a_read_only_admin_key_neither_revokes_nor_reads_beyond_its_capabilities(hub: Hub, owner: str) -> None:
    endpoint = hub.publish(name="Default tools")
    token = connect(endpoint, hub.admin_key)
    before = grant_ids(hub, owner)
    reader = own_key(hub, capabilities=["read"])
    member, _ = hub.user_with_key("Member")

    with hub.api(reader) as api:
        refused(api.delete(f"/api/v1/users/{owner}/oauth-grants"), 403, "scope_exceeded")
        shown = {g["endpoint_id"] for g in api.get(f"/api/v1/users/{owner}/oauth-grants").json()["items"]}
        assert endpoint["id"] not in shown, "an endpoint whose tools need more than read is beyond the key"
        refused(api.get(f"/api/v1/mcp-endpoints/{endpoint['id']}/oauth-grants"), 403, "capability_missing")
        refused(api.get(f"/api/v1/users/{member}/oauth-grants"), 403, "capability_missing")
        refused(api.delete(f"/api/v1/users/{member}/oauth-grants"), 403, "capability_missing")
    assert grant_ids(hub, owner) == before
    assert mcp_post(endpoint["url"], token).status_code == 200


def test_a_user_manager_never_revokes_the_grants_of_a_broader_user(hub: Hub, arctic: str, owner: str) -> None:
    endpoint = hub.publish(name="Arctic notes", knowledge_base_ids=[arctic])
    token = connect(endpoint, hub.admin_key)
    deputy = hub.post("/api/v1/users", {"name": "Deputy"})["id"]
    deputy_key = hub.post(
        f"/api/v1/users/{deputy}/api-keys", {"name": "deputy", "role": "admin", "knowledge_base_ids": [arctic]}
    )["key"]
    before = grant_ids(hub, owner)
    with hub.api(deputy_key) as api:
        refused(api.delete(f"/api/v1/users/{owner}/oauth-grants"), 403, "scope_exceeded")
        refused(
            api.delete(f"/api/v1/users/{owner}/oauth-grants", params={"endpoint_id": endpoint["id"]}),
            403,
            "scope_exceeded",
        )
    assert grant_ids(hub, owner) == before
    assert mcp_post(endpoint["url"], token).status_code == 200


def test_the_grants_of_another_workspace_are_not_found(hub: Hub, owner: str) -> None:
    endpoint = hub.publish(name="Home notes")
    token = connect(endpoint, hub.admin_key)
    tenant = hub.post("/api/v1/workspaces", {"name": "Elsewhere", "admin_name": "Elsewhere admin"})
    before = grant_ids(hub, owner)
    with hub.api(tenant["admin_api_key"]["key"]) as api:
        refused(api.get(f"/api/v1/users/{owner}/oauth-grants"), 404, "user_not_found")
        refused(api.delete(f"/api/v1/users/{owner}/oauth-grants"), 404, "user_not_found")
        refused(api.delete(f"/api/v1/users/{owner}/oauth-grants/{min(before)}"), 404, "user_not_found")
        refused(api.get(f"/api/v1/mcp-endpoints/{endpoint['id']}/oauth-grants"), 404, "endpoint_not_found")
    assert grant_ids(hub, owner) == before
    assert mcp_post(endpoint["url"], token).status_code == 200
