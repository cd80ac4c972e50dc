"""In-conversation OAuth for agent tool calls, end to end with the in-process workflow: a real authorization server
and the MCP server it protects (``tests/support/oauth_server.py``), mcpbridge's REST API, its OAuth callback.

A user who never authorized an OAuth service calls one of its tools: the call pauses with an authorization URL;
resolving it before the authorization exists answers 409; completing the authorization in the browser resumes the
call by itself (the user's catalog is pulled, the arguments checked, the tool run). Non-interactive calls get a
notice instead of a pause; a pause can be cancelled.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcpbridge.agent.calls import call_key
from mcpbridge.bootstrap import Container
from tests.functional.test_oauth_flow import Api, approve, instances
from tests.support.clock import FakeClock
from tests.support.local_calls import wait_for_call
from tests.support.oauth_server import OAuthTestServer, oauth_server

CALLS = "/api/v1/agent/tool-calls"
RESOLVE = "/api/v1/agent/mcp-oauth-resolutions"


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


def _ref_from_admin(api: Api, server: OAuthTestServer) -> tuple[str, str]:
    """The admin authorizes, pulls their catalog and describes the tool: the reference an agent would hold."""
    service_id = api.create_service(server)
    api.complete(service_id)
    assert api.client.post(f"/api/v1/mcp-services/{service_id}/metadata/refresh").status_code == 200
    described = api.client.get("/api/v1/agent/tools/describe", params={"service_id": service_id, "tool_name": "whoami"})
    assert described.status_code == 200, described.text
    return service_id, str(described.json()["tool_ref"])


def _settled(api: Api, call_id: str, key: str) -> dict[str, Any]:
    """The call once it has reached a final status (the workflow runs it in a thread: waited for while it works)."""

    def final() -> dict[str, Any] | None:
        body: dict[str, Any] = api.client.get(f"{CALLS}/{call_id}", headers={"Authorization": f"Bearer {key}"}).json()
        return body if body["status"] in ("completed", "failed", "rejected", "cancelled", "uncertain") else None

    return wait_for_call(call_id, final, what="a final status")


def test_a_call_pauses_for_oauth_and_the_callback_resumes_it(api: Api, server: OAuthTestServer) -> None:
    service_id, ref = _ref_from_admin(api, server)
    bob = api.user_key("usr_bob")
    as_bob = {"Authorization": f"Bearer {bob}"}

    paused = api.client.post(CALLS, json={"tool_ref": ref, "arguments": {}}, headers=as_bob)
    assert paused.status_code == 202, paused.text
    pending = paused.json()
    assert (pending["status"], pending["kind"]) == ("awaiting_oauth", "oauth")
    assert pending["authorization_url"].startswith(server.issuer)
    # At rest the URL (its state is a secret) is sealed; the owner alone reads it.
    stored = api.container.store.get(call_key(api.workspace_id, pending["pending_id"]))
    assert stored is not None
    assert pending["authorization_url"] not in json.dumps(stored)
    assert str(stored["sealed_authorization_url"]).startswith("enc:v1:")
    # Not the owner: no authorization URL.
    assert api.client.get(f"{CALLS}/{pending['pending_id']}").json()["authorization_url"] is None

    early = api.client.post(
        f"{RESOLVE}/{pending['pending_id']}", json={"service_id": service_id, "decision": "authorize"}, headers=as_bob
    )
    assert early.status_code == 409, early.text
    assert early.json()["code"] == "oauth_not_completed"

    # Bob authorizes in the browser; the callback resumes his waiting call by itself.
    finished = api.callback(approve(pending["authorization_url"]))
    assert finished.status_code == 303, finished.text
    done = _settled(api, pending["pending_id"], bob)
    assert done["status"] == "completed", done
    assert done["result"]["isError"] is False
    late = api.client.post(
        f"{RESOLVE}/{pending['pending_id']}", json={"service_id": service_id, "decision": "authorize"}, headers=as_bob
    )
    assert late.status_code == 409
    assert late.json()["code"] == "already_resolved"
    # Bob now has his own catalog of the service, pulled for the call.
    assert api.client.get(f"/api/v1/mcp-services/{service_id}/metadata", headers=as_bob).json()["data"] is not None


def test_non_interactive_calls_get_a_notice_and_pauses_can_be_cancelled(api: Api, server: OAuthTestServer) -> None:
    _, ref = _ref_from_admin(api, server)
    carol_key = api.user_key("usr_carol")
    carol = {"Authorization": f"Bearer {carol_key}"}

    notice = api.client.post(CALLS, json={"tool_ref": ref, "arguments": {}, "interactive": False}, headers=carol)
    assert notice.status_code == 200, notice.text
    assert notice.json()["status"] == "cancelled"
    assert "Authorize" in notice.json()["notice"]
    assert api.client.get("/api/v1/agent/pending", headers=carol).json()["items"] == []

    paused = api.client.post(CALLS, json={"tool_ref": ref, "arguments": {}}, headers=carol).json()
    wrong = api.client.post(
        f"{RESOLVE}/{paused['pending_id']}", json={"service_id": "svc_other", "decision": "cancel"}, headers=carol
    )
    assert wrong.status_code == 400
    cancelled = api.client.post(f"{RESOLVE}/{paused['pending_id']}/cancel", headers=carol)
    assert cancelled.status_code == 200, cancelled.text
    assert _settled(api, paused["pending_id"], carol_key)["status"] == "cancelled"
    assert api.client.get("/api/v1/agent/pending", headers=carol).json()["items"] == []


def test_deleting_a_service_forgets_its_tokens_and_registration(api: Api, server: OAuthTestServer) -> None:
    service_id, _ = _ref_from_admin(api, server)
    partition = f"WS#{api.workspace_id}"

    def leftovers() -> list[str]:
        found = []
        for prefix in (f"OAUTHTOKEN#{service_id}#", f"OAUTHCLIENT#{service_id}#"):
            found += [item["sk"] for item in api.container.store.query(partition, sk_prefix=prefix).items]
        return found

    assert len(leftovers()) == 2  # the admin's token and the dynamic registration
    assert api.client.delete(f"/api/v1/mcp-services/{service_id}").status_code == 204
    assert leftovers() == []
