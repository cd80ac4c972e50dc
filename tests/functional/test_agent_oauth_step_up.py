"""Scope step-up (SEP-835) for agent tool calls, end to end with the in-process workflow: a real authorization server
and the MCP server it protects (``tests/support/oauth_server.py``), whose ``tools/call`` needs a wider scope than
the user's first authorization granted and answers 403 ``WWW-Authenticate: Bearer error="insufficient_scope",
scope="mcp mcp:write"`` until it gets it.

The call that meets that refusal was refused before anything ran, so it waits for the user, like a call waiting for
a first authorization (``awaiting_oauth``, with an authorization URL asking for the union of the scopes); the
user's consent resumes it and it runs once. A step-up happens once per call: a second refusal is a failure. A call
that may not pause (non-interactive) fails at once with ``oauth_required``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcpbridge.agent.calls import call_key
from tests.functional.test_agent_oauth_calls import CALLS, RESOLVE
from tests.functional.test_oauth_flow import Api, approve, instances, query_of, stored_token
from tests.support.clock import FakeClock
from tests.support.local_calls import wait_for_call
from tests.support.oauth_server import SCOPE, OAuthTestServer, oauth_server

WRITE = "mcp:write"


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    with instances("local", tmp_path, monkeypatch, FakeClock(time.time())) as built:
        client_api = Api(built[0])
        with client_api.client:
            yield client_api
        built[0].workflow.close()  # type: ignore[attr-defined]


def _ref(api: Api, server: OAuthTestServer) -> tuple[str, str]:
    """The admin authorizes (the discovered scope, ``mcp`` only), pulls the catalog and describes ``whoami``."""
    service_id = api.create_service(server)
    api.complete(service_id)
    assert api.client.post(f"/api/v1/mcp-services/{service_id}/metadata/refresh").status_code == 200
    described = api.client.get("/api/v1/agent/tools/describe", params={"service_id": service_id, "tool_name": "whoami"})
    assert described.status_code == 200, described.text
    return service_id, str(described.json()["tool_ref"])


def _settled(api: Api, call_id: str) -> dict[str, Any]:
    def final() -> dict[str, Any] | None:
        body: dict[str, Any] = api.client.get(f"{CALLS}/{call_id}").json()
        return body if body["status"] in ("completed", "failed", "rejected", "cancelled", "uncertain") else None

    return wait_for_call(call_id, final, what="a final status")


def test_a_call_refused_for_its_scope_waits_for_the_wider_authorization_and_then_runs(api: Api) -> None:
    with oauth_server(step_up_scope=WRITE) as server:
        service_id, ref = _ref(api, server)
        assert server.authorizations[-1]["scopes"] == [SCOPE]

        paused = api.client.post(CALLS, json={"tool_ref": ref, "arguments": {}})
        assert paused.status_code == 202, paused.text
        pending = paused.json()
        assert (pending["status"], pending["kind"]) == ("awaiting_oauth", "oauth")
        assert server.mcp_requests["insufficient_scope"] == 1, "refused once, not retried with the same token"
        url = pending["authorization_url"]
        assert url.startswith(f"{server.issuer}/authorize?")
        assert set(query_of(url)["scope"].split()) == {SCOPE, WRITE}, "the union of the scopes"
        stored = api.container.store.get(call_key(api.workspace_id, pending["pending_id"]))
        assert stored is not None
        assert stored["oauth"]["step_up_scope"] == f"{SCOPE} {WRITE}"
        assert url not in str(stored), "the URL (its state) is sealed at rest"
        # It shows in the user's pending list like any OAuth pause.
        listed = api.client.get("/api/v1/agent/pending").json()["items"]
        assert [item["pending_id"] for item in listed] == [pending["pending_id"]]

        # "Authorize" before the wider token exists: the narrow token the user holds does not count.
        early = api.client.post(
            f"{RESOLVE}/{pending['pending_id']}", json={"service_id": service_id, "decision": "authorize"}
        )
        assert early.status_code == 409, early.text
        assert early.json()["code"] == "oauth_not_completed"

        finished = api.callback(approve(url))
        assert finished.status_code == 303, finished.text
        done = _settled(api, pending["pending_id"])
        assert done["status"] == "completed", done
        assert done["result"]["isError"] is False
        assert "hello alice" in str(done["result"])
        assert set(server.authorizations[-1]["scopes"]) == {SCOPE, WRITE}
        token = stored_token(api, service_id)
        assert token is not None
        assert set(str(token["scope"]).split()) == {SCOPE, WRITE}
        assert server.mcp_requests["insufficient_scope"] == 1


def test_a_second_refusal_after_the_step_up_fails_the_call(api: Api) -> None:
    """The server grants ``mcp`` whatever is asked: the call steps up once, is refused again, and fails (nothing
    ran), without a third authorization."""
    with oauth_server(step_up_scope=WRITE, granted_scopes=[SCOPE]) as server:
        _, ref = _ref(api, server)
        pending = api.client.post(CALLS, json={"tool_ref": ref, "arguments": {}}).json()
        assert pending["status"] == "awaiting_oauth"
        assert api.callback(approve(pending["authorization_url"])).status_code == 303
        done = _settled(api, pending["pending_id"])
        assert done["status"] == "failed", done
        assert done["error"]["code"] == "oauth_required"
        assert server.mcp_requests["insufficient_scope"] == 2
        assert len(server.authorizations) == 2, "the first authorization and one step-up"
        assert api.client.get("/api/v1/agent/pending").json()["items"] == []


def test_a_non_interactive_call_refused_for_its_scope_fails_at_once(api: Api) -> None:
    with oauth_server(step_up_scope=WRITE) as server:
        _, ref = _ref(api, server)
        answer = api.client.post(CALLS, json={"tool_ref": ref, "arguments": {}, "interactive": False})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert (body["status"], body["error"]["code"]) == ("failed", "oauth_required")
        assert "more scopes" in body["error"]["message"]
        assert len(server.authorizations) == 1, "no new authorization started"
        assert api.client.get("/api/v1/agent/pending").json()["items"] == []
