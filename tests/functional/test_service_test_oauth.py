"""``POST /api/v1/mcp-services/{id}/test`` for an OAuth service: the test connects with the calling user's token
(refreshed once when the server refuses it) and says ``oauth_required`` only when the user has no usable token.

A real authorization server and the MCP server it protects (``tests/support/oauth_server.py``), mcpbridge's REST API
and its OAuth callback (the helpers of ``test_oauth_flow.py``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcpbridge.bootstrap import Container
from tests.functional.test_oauth_flow import BASE, Api, instances, stored_token
from tests.support.clock import FakeClock
from tests.support.oauth_server import OAuthTestServer, oauth_server


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    with instances("local", tmp_path, monkeypatch, FakeClock(time.time())) as built:
        container: Container = built[0]
        client_api = Api(container)
        with client_api.client:
            yield client_api


@pytest.fixture
def server() -> Iterator[OAuthTestServer]:
    with oauth_server() as started:
        yield started


def check_connection(api: Api, service_id: str) -> dict[str, Any]:
    answer = api.client.post(f"{BASE}/{service_id}/test")
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def test_the_test_uses_the_callers_token_once_authorized(api: Api, server: OAuthTestServer) -> None:
    service_id = api.create_service(server)
    before = check_connection(api, service_id)
    assert (before["success"], before["oauth_required"], before["error_code"]) == (False, True, "oauth_required")
    assert before["tools"] == []

    api.complete(service_id)
    after = check_connection(api, service_id)
    assert after["success"] is True, after
    assert (after["oauth_required"], after["error_code"], after["message"]) == (False, None, "connected")
    assert [tool["name"] for tool in after["tools"]] == ["whoami"]
    assert after["server_name"] == "protected"
    assert server.token_requests["refresh_token"] == 0
    assert not any(token in str(after) for token in server.issued)


def test_a_refused_token_is_refreshed_once_and_the_test_retried(api: Api, server: OAuthTestServer) -> None:
    service_id = api.create_service(server)
    api.complete(service_id)
    server.expire_access_tokens()  # the MCP server now refuses the token mcpbridge thinks is valid
    body = check_connection(api, service_id)
    assert body["success"] is True, body
    assert [tool["name"] for tool in body["tools"]] == ["whoami"]
    assert server.token_requests["refresh_token"] == 1


def test_a_refused_refresh_means_oauth_required_again(api: Api, server: OAuthTestServer) -> None:
    service_id = api.create_service(server)
    api.complete(service_id)
    server.expire_access_tokens()
    server.fail_token_requests(400, {"error": "invalid_grant"})
    body = check_connection(api, service_id)
    assert (body["success"], body["oauth_required"], body["error_code"]) == (False, True, "oauth_required")
    assert server.token_requests["refresh_token"] == 1
    assert stored_token(api, service_id) is None, "the refused token is gone: the user authorizes again"


def test_another_users_token_is_not_used(api: Api, server: OAuthTestServer) -> None:
    service_id = api.create_service(server)
    api.complete(service_id)
    other_admin = api.user_key("usr_other_admin", role="admin")
    answer = api.client.post(f"{BASE}/{service_id}/test", headers={"Authorization": f"Bearer {other_admin}"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["success"], body["oauth_required"], body["error_code"]) == (False, True, "oauth_required")
