"""Tool search marks the tools of an OAuth service (each user's own token) with the caller's connection, end to
end: a real authorization server and the MCP server it protects (``tests/support/oauth_server.py``), mcpbridge's
REST API and OAuth callback. Connected after authorizing; not connected once the user disconnects, while the
catalog pulled with the token still lets search find the tool."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcpbridge.bootstrap import Container
from tests.functional.test_oauth_flow import Api, instances
from tests.support.clock import FakeClock
from tests.support.oauth_server import OAuthTestServer, oauth_server

TOOLS = "/api/v1/agent/tools"


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    with instances("local", tmp_path, monkeypatch, FakeClock(time.time())) as built:
        container: Container = built[0]
        client_api = Api(container)
        with client_api.client:
            yield client_api
        container.workflow.close()  # type: ignore[attr-defined]


@pytest.fixture
def server() -> Iterator[OAuthTestServer]:
    with oauth_server() as started:
        yield started


def _searched(api: Api, service_id: str) -> dict[str, dict[str, Any]]:
    answer = api.client.get(TOOLS, params={"query": "whoami", "mode": "keyword", "limit": 50})
    assert answer.status_code == 200, answer.text
    return {item["name"]: item for item in answer.json()["items"] if item["service_id"] == service_id}


def test_search_marks_tools_of_an_oauth_service_with_the_callers_connection(api: Api, server: OAuthTestServer) -> None:
    service_id = api.create_service(server)
    api.complete(service_id)
    assert api.client.post(f"/api/v1/mcp-services/{service_id}/metadata/refresh").status_code == 200

    assert _searched(api, service_id)["whoami"]["oauth_connection"] == "connected"
    # A listing without a query carries no mark: the field belongs to searches.
    listed = api.client.get(TOOLS, params={"limit": 50})
    assert listed.status_code == 200, listed.text
    (whoami,) = [item for item in listed.json()["items"] if item["name"] == "whoami"]
    assert whoami["oauth_connection"] is None

    gone = api.client.delete(f"/api/v1/me/oauth-connections/{service_id}")
    assert gone.status_code in (200, 204), gone.text
    assert _searched(api, service_id)["whoami"]["oauth_connection"] == "not_connected"
