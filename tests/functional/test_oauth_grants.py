"""Per-user access on published endpoints, on both backends: an OAuth call runs as its user, within the endpoint's
scope, the token's scopes, the user's access and the key signed in with; rate limits per user; the user in the log;
admins list and revoke grants per user, endpoint and client; a deleted user leaves no grant or token behind."""

from __future__ import annotations

import json
import logging
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
def bases(hub: Hub) -> tuple[str, str]:
    first = hub.post("/api/v1/knowledge-bases", {"name": "Arctic"})["id"]
    second = hub.post("/api/v1/knowledge-bases", {"name": "Payroll"})["id"]
    for kb, text in ((first, "Walruses haul out on the ice."), (second, "Walrus salaries are confidential.")):
        hub.post(f"/api/v1/knowledge-bases/{kb}/documents", {"title": "Notes", "content": text})
    return first, second


def connect(endpoint: dict[str, Any], key: str, name: str = "Field client", scope: str | None = None) -> dict[str, Any]:
    client = OAuthClient(endpoint["url"])
    client.discover()
    assert client.register(client_name=name).status_code == 201
    browser = Browser()
    code, verifier, _ = client.sign_in(browser, key, scope=scope)
    tokens = client.exchange(code, verifier).json()
    return {**tokens, "client_id": client.client_id}


def tools(endpoint: dict[str, Any], token: str) -> list[str]:
    response = mcp_post(endpoint["url"], token)
    assert response.status_code == 200, response.text
    return [tool["name"] for tool in response.json()["result"]["tools"]]


def call(endpoint: dict[str, Any], token: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    response = mcp_post(endpoint["url"], token, "tools/call", {"name": name, "arguments": arguments})
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["result"]
    return result


def bases_seen(endpoint: dict[str, Any], token: str) -> list[str]:
    result = call(endpoint, token, "list_knowledge_bases", {})
    return sorted(kb["id"] for kb in json.loads(result["content"][0]["text"])["knowledge_bases"])


ENDPOINT_TOOLS = ["list_knowledge_bases", "search_knowledge", "read_document", "ask", "add_document"]


def test_a_call_runs_within_the_users_access(hub: Hub, bases: tuple[str, str]) -> None:
    arctic, payroll = bases
    endpoint = hub.publish(tools=ENDPOINT_TOOLS)
    user_id, key = hub.user_with_key("Ada")
    tokens = connect(endpoint, key)
    token = tokens["access_token"]
    # A viewer key approves no write tool: the REST API would not let it write either.
    assert tools(endpoint, token) == ["list_knowledge_bases", "search_knowledge", "read_document", "ask"]
    assert bases_seen(endpoint, token) == sorted([arctic, payroll])
    with hub.api() as api:
        refused = api.put(f"/api/v1/users/{user_id}/access", json={"capabilities": ["read", "flying"]})
        assert refused.status_code == 400
        assert refused.json()["code"] == "unknown_capability"
        assert api.get(f"/api/v1/users/{user_id}/access").json()["capabilities"] is None, "nothing changed"
        assert tools(endpoint, token)[-1] == "ask"
        limited = api.put(
            f"/api/v1/users/{user_id}/access", json={"capabilities": ["read"], "knowledge_base_ids": [arctic]}
        )
        assert limited.status_code == 200, limited.text
    # Narrowing the user's access applies to the very next call of the same token.
    assert tools(endpoint, token) == ["list_knowledge_bases", "search_knowledge", "read_document"]
    assert bases_seen(endpoint, token) == [arctic]
    hidden = call(endpoint, token, "search_knowledge", {"query": "walrus", "knowledge_base_ids": [payroll]})
    assert hidden["isError"] is True
    # A tool the person's access no longer allows is not listed, so calling it is an unknown tool: -32602.
    refused = mcp_post(endpoint["url"], token, "tools/call", {"name": "ask", "arguments": {"question": "salaries?"}})
    assert refused.json()["error"]["code"] == -32602, refused.text
    with hub.api() as api:
        assert api.put(f"/api/v1/users/{user_id}/access", json={}).status_code == 200
    # Widening gives back what the person approved, never more.
    assert tools(endpoint, token)[-1] == "ask"
    assert bases_seen(endpoint, token) == sorted([arctic, payroll])


def test_the_key_signed_in_with_and_the_scopes_asked_bound_the_grant(hub: Hub, bases: tuple[str, str]) -> None:
    arctic, _ = bases
    endpoint = hub.publish(tools=ENDPOINT_TOOLS)
    _, key = hub.user_with_key("Grace", knowledge_base_ids=[arctic], capabilities=["read", "ask"])
    tokens = connect(endpoint, key)
    assert bases_seen(endpoint, tokens["access_token"]) == [arctic]
    assert tokens["scope"] == "read ask"
    narrow = connect(endpoint, hub.admin_key, name="Reader", scope="read")
    assert narrow["scope"] == "read"
    assert "ask" not in tools(endpoint, narrow["access_token"])
    full = connect(endpoint, hub.admin_key, name="Writer")
    assert "add_document" in tools(endpoint, full["access_token"]), "an admin key approves write tools"


def test_calls_are_logged_with_their_user_and_limited_per_user(
    hub: Hub, bases: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mcpbridge")
    endpoint = hub.publish(rate_limit_per_minute=2, rate_limit_scope="user")
    ada_id, ada_key = hub.user_with_key("Ada L")
    _, bob_key = hub.user_with_key("Bob")
    ada, bob = connect(endpoint, ada_key), connect(endpoint, bob_key)
    for _ in range(2):
        assert call(endpoint, ada["access_token"], "list_knowledge_bases", {}).get("isError") is not True
    limited = call(endpoint, ada["access_token"], "list_knowledge_bases", {})
    assert limited["isError"] is True
    assert json.loads(limited["content"][0]["text"])["error"]["code"] == "rate_limited"
    assert call(endpoint, bob["access_token"], "list_knowledge_bases", {}).get("isError") is not True
    assert any(ada_id in r.getMessage() and endpoint["id"] in r.getMessage() for r in caplog.records)


def test_admins_list_and_revoke_grants_per_endpoint_and_client(hub: Hub) -> None:
    first, second = hub.publish(name="First"), hub.publish(name="Second")
    user_id, key = hub.user_with_key("Hopper")
    desktop, web = connect(first, key, name="Desktop"), connect(first, key, name="Web")
    other = connect(second, key, name="Desktop")
    with hub.api() as api:
        listed = api.get(f"/api/v1/users/{user_id}/oauth-grants").json()
        assert len(listed["items"]) == 3
        assert listed["next_cursor"] is None
        on_first = api.get(f"/api/v1/users/{user_id}/oauth-grants", params={"endpoint_id": first["id"]}).json()
        assert sorted(g["client_name"] for g in on_first["items"]) == ["Desktop", "Web"]
        paged = api.get(f"/api/v1/users/{user_id}/oauth-grants", params={"limit": 2}).json()
        assert len(paged["items"]) == 2
        rest = api.get(f"/api/v1/users/{user_id}/oauth-grants", params={"limit": 2, "cursor": paged["next_cursor"]})
        assert len(rest.json()["items"]) == 1
        by_endpoint = api.get(f"/api/v1/mcp-endpoints/{first['id']}/oauth-grants").json()["items"]
        assert {g["user_id"] for g in by_endpoint} == {user_id}

        # Per client: the web client's tokens stop, the desktop client's go on.
        revoked = api.delete(
            f"/api/v1/users/{user_id}/oauth-grants",
            params={"endpoint_id": first["id"], "client_id": web["client_id"]},
        )
        assert [g["client_name"] for g in revoked.json()["items"]] == ["Web"]
        assert mcp_post(first["url"], web["access_token"]).status_code == 401
        assert tools(first, desktop["access_token"])
        # One grant by id; unknown ids are 404 and change nothing.
        grant_id = next(g["id"] for g in on_first["items"] if g["client_name"] == "Desktop")
        assert api.delete(f"/api/v1/users/{user_id}/oauth-grants/oag_nothing").status_code == 404
        assert tools(first, desktop["access_token"])
        assert api.delete(f"/api/v1/users/{user_id}/oauth-grants/{grant_id}").status_code == 204
        assert mcp_post(first["url"], desktop["access_token"]).status_code == 401
        assert tools(second, other["access_token"]), "the grant on the other endpoint stands"

    # A user reviews and revokes their own; a viewer key may not see another user's.
    with hub.api(key) as mine:
        own = mine.get("/api/v1/me/oauth-grants").json()["items"]
        assert [g["endpoint_id"] for g in own] == [second["id"]]
        assert mine.get(f"/api/v1/users/{hub_user(hub)}/oauth-grants").status_code == 403
        assert mine.delete(f"/api/v1/me/oauth-grants/{own[0]['id']}").status_code == 204
    assert mcp_post(second["url"], other["access_token"]).status_code == 401
    # Approving again later gives a new grant: the revoked tokens stay dead.
    again = connect(second, key, name="Desktop")
    assert tools(second, again["access_token"])
    assert mcp_post(second["url"], other["access_token"]).status_code == 401


def hub_user(hub: Hub) -> str:
    with hub.api() as api:
        return str(api.get("/api/v1/me").json()["user_id"])


def test_deleting_a_user_removes_their_grants_and_tokens(hub: Hub) -> None:
    endpoint = hub.publish()
    user_id, key = hub.user_with_key("Lovelace")
    with hub.api() as api:
        assert api.put(f"/api/v1/users/{user_id}/access", json={"email": "ada@example.com"}).status_code == 200
        taken = api.put(f"/api/v1/users/{hub_user(hub)}/access", json={"email": "ADA@example.com"})
        assert taken.status_code == 409
        assert taken.json()["code"] == "email_taken"
    tokens = connect(endpoint, key)
    assert [i for i in hub.items("OAGRANT#") if i["user_id"] == user_id]
    with hub.api() as api:
        assert api.delete(f"/api/v1/users/{user_id}").status_code in (202, 204)
    assert mcp_post(endpoint["url"], tokens["access_token"]).status_code in (401, 403)
    left = [
        item
        for prefix in ("OAGRANT#", "OAACCESS#", "OAREFRESH#", "USEREMAIL#", "USERSUB#")
        for item in hub.items(prefix)
        if item.get("user_id") == user_id
    ]
    assert left == []


def test_a_scoped_key_cannot_widen_a_users_access(hub: Hub, bases: tuple[str, str]) -> None:
    arctic, _ = bases
    # (A key never acts on a user holding a key broader than itself: Turing's is within the scoped key's.)
    user_id, _ = hub.user_with_key("Turing", capabilities=["read"], knowledge_base_ids=[arctic])
    scoped = hub.post(
        "/api/v1/api-keys",
        {
            "name": "scoped admin",
            "role": "admin",
            "capabilities": ["manage_users", "read"],
            "knowledge_base_ids": [arctic],
        },
    )["key"]
    with httpx.Client(base_url=hub.base_url, headers={"Authorization": f"Bearer {scoped}"}) as api:
        wide = api.put(f"/api/v1/users/{user_id}/access", json={"capabilities": ["read"]})
        assert wide.status_code == 403
        assert wide.json()["code"] == "scope_exceeded"
        narrow = api.put(
            f"/api/v1/users/{user_id}/access", json={"capabilities": ["read"], "knowledge_base_ids": [arctic]}
        )
        assert narrow.status_code == 200, narrow.text
