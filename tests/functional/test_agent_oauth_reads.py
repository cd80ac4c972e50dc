"""An agent reads a per-user OAuth service's resource with its own user's token, on both backends: a real
authorization server and the MCP server it protects (``tests/support/oauth_server.py``, whose resource reads as the
token's subject), mcpbridge's REST API and its OAuth callback."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcpbridge.bootstrap import Container
from tests.functional.test_oauth_flow import Api, instances
from tests.support.clock import FakeClock
from tests.support.oauth_server import SUBJECT_URI, OAuthTestServer, oauth_server

RESOURCES = "/api/v1/agent/resources"
READ = "/api/v1/agent/resources/read"
REFRESH = "/api/v1/agent/catalog/refresh"


@pytest.fixture(params=["local", "aws"])
def api(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    with instances(request.param, tmp_path, monkeypatch, FakeClock(time.time())) as built:
        container: Container = built[0]
        client_api = Api(container)
        with client_api.client:
            yield client_api


@pytest.fixture
def server() -> Iterator[OAuthTestServer]:
    with oauth_server() as started:
        yield started


def _as(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _tokens(api: Api, service_id: str) -> list[str]:
    partition = f"WS#{api.workspace_id}"
    return [i["sk"] for i in api.container.store.query(partition, sk_prefix=f"OAUTHTOKEN#{service_id}#").items]


def _read(api: Api, service_id: str, key: str | None = None) -> Any:
    headers = _as(key) if key else None
    return api.client.get(READ, params={"service_id": service_id, "uri": SUBJECT_URI}, headers=headers)


def test_a_resource_is_read_with_the_callers_own_token(api: Api, server: OAuthTestServer) -> None:
    service_id = api.create_service(server)
    server.approving_user = "alice"
    api.complete(service_id)
    bob = api.user_key("usr_bob")

    # Bob never authorized the service: refused as a call is, with nothing sent and nothing stored for him.
    accepted = server.mcp_requests["accepted"]
    before = _tokens(api, service_id)
    for refused in (
        api.client.get(RESOURCES, params={"service_id": service_id}, headers=_as(bob)),
        _read(api, service_id, bob),
    ):
        assert refused.status_code == 403, refused.text
        assert refused.json()["code"] == "oauth_required"
        assert refused.json()["details"] == {"service_id": service_id, "reason": "not_authorized"}
    assert server.mcp_requests["accepted"] == accepted
    assert _tokens(api, service_id) == before

    # Bob authorizes (the authorization server knows him as bob-at-idp): his reads now carry his token.
    server.approving_user = "bob-at-idp"
    api.complete(service_id, key=bob)
    listed = api.client.get(RESOURCES, params={"service_id": service_id}, headers=_as(bob))
    assert listed.status_code == 200, listed.text
    assert [item["uri"] for item in listed.json()["items"]] == [SUBJECT_URI]
    as_bob = _read(api, service_id, bob)
    assert as_bob.status_code == 200, as_bob.text
    assert as_bob.json()["contents"][0]["text"] == "bob-at-idp"
    as_admin = _read(api, service_id)
    assert as_admin.status_code == 200, as_admin.text
    assert as_admin.json()["contents"][0]["text"] == "alice"

    # Bob's refresh pulls his own catalog of the service (none existed: he had never listed its tools).
    assert api.client.get(f"/api/v1/mcp-services/{service_id}/metadata", headers=_as(bob)).json()["data"] is None
    refreshed = api.client.post(REFRESH, json={"service_id": service_id}, headers=_as(bob))
    assert refreshed.status_code == 200, refreshed.text
    assert refreshed.json()["items"][0]["outcome"] == "refreshed"
    mine = api.client.get(f"/api/v1/mcp-services/{service_id}/metadata", headers=_as(bob)).json()["data"]
    assert [tool["name"] for tool in mine["tools"]] == ["whoami"]
