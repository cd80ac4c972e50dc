"""Scope step-up (SEP-835) for agent tool calls, end to end with the in-process workflow: a real authorization server
and the MCP server it protects (``tests/support/oauth_server.py``), whose ``tools/call`` needs a wider scope than
the user's first authorization granted and answers 403 ``WWW-Authenticate: Bearer error="insufficient_scope",
scope="mcp mcp:write"`` until it gets it.

The call that meets that refusal was refused before anything ran, so it waits for the user, like a call waiting for
a first authorization (``awaiting_oauth``, with an authorization URL asking for the union of the scopes); the
user's consent resumes it and it runs once. A step-up happens once per call: a second refusal is a failure. A call
that may not pause (non-interactive) fails at once with ``oauth_required``. On AWS (moto's Step Functions), a call
whose first run is the state machine's Invoke task goes from there to the OAuth wait of the same execution.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest
from fastapi.testclient import TestClient
from moto import mock_aws

from mcpbridge.agent.calls import call_key
from mcpbridge.agent.lambda_steps import make_steps_handler
from mcpbridge.bootstrap import Container
from mcpbridge.http.apps import create_combined_app
from mcpbridge.settings import Settings
from tests.functional.test_agent_oauth_calls import CALLS, RESOLVE
from tests.functional.test_oauth_flow import SETTINGS, Api, approve, instances, query_of, stored_token
from tests.support.aws import create_aws_resources, set_fake_aws_env
from tests.support.clock import FakeClock
from tests.support.local_calls import wait_for_call
from tests.support.moto_atomic import atomic_dynamodb
from tests.support.oauth_server import SCOPE, OAuthTestServer, oauth_server
from tests.support.stepfunctions import (
    MOTO_WORKFLOW_CONFIG,
    route_lambda_invocations,
    stop_executions,
    wait_for_execution,
    wait_until,
)

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


# ---------------------------------------------------------------------------------------------------- on AWS

REGION = "eu-west-1"


@dataclass
class AwsWorld:
    container: Container
    client: TestClient
    sfn: Any

    @property
    def workspace_id(self) -> str:
        workspace = self.container.identity.installed_workspace_id()
        assert workspace is not None
        return workspace

    def record(self, call_id: str) -> dict[str, Any]:
        item = self.container.store.get(call_key(self.workspace_id, call_id))
        assert item is not None
        return item

    def authorize(self, authorization_url: str) -> None:
        """The user's browser: the authorization server approves, mcpbridge's callback takes the code."""
        location = approve(authorization_url)
        parts = urlsplit(location)
        finished = self.client.get(f"{parts.path}?{parts.query}", follow_redirects=False)
        assert finished.status_code == 303, finished.text


@pytest.fixture
def aws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[AwsWorld]:
    set_fake_aws_env(monkeypatch)
    with mock_aws(config=MOTO_WORKFLOW_CONFIG), atomic_dynamodb():
        resources = create_aws_resources(table_name="mcpbridge-step-up", tool_call_workflow=True)
        container = Container(
            Settings(
                backend="aws",
                table_name=resources.table_name,
                kms_key_id=resources.kms_key_id,
                bucket_name=resources.bucket_name,
                aws_region=REGION,
                state_machine_arn=resources.state_machine_arn,
                index_cache_dir=tmp_path / "index-cache",
                **SETTINGS,
            )
        )
        routes = {resources.tool_calls_function: make_steps_handler(lambda: container.tool_call_steps)}
        try:
            with (
                route_lambda_invocations(routes),
                TestClient(create_combined_app(container), raise_server_exceptions=False) as client,
            ):
                client.headers["Authorization"] = f"Bearer {container.identity.initialize().api_key}"
                yield AwsWorld(container, client, boto3.client("stepfunctions", region_name=REGION))
                stop_executions(REGION)
        finally:
            container.close()


@pytest.mark.slow
def test_on_step_functions_the_invoke_step_hands_a_step_up_to_the_oauth_wait(aws: AwsWorld) -> None:
    """The call needs an approval, so its first run is the state machine's Invoke task; the 403 there moves it to
    the OAuth wait (Invoke's answer is routed), and the user's consent resumes the same execution."""
    client = aws.client
    with oauth_server(step_up_scope=WRITE) as server:
        body = {"name": "protected", "url": server.mcp_url, "auth_config": {"auth_type": "oauth"}}
        service_id = client.post("/api/v1/mcp-services", json=body).json()["id"]
        started = client.post(f"/api/v1/mcp-services/{service_id}/oauth/authorize-url", json={})
        assert started.status_code == 200, started.text
        aws.authorize(started.json()["authorization_url"])
        assert client.post(f"/api/v1/mcp-services/{service_id}/metadata/refresh").status_code == 200
        approval = {"require_approval": True}
        assert client.put(f"/api/v1/mcp-services/{service_id}/tool-approvals/whoami", json=approval).status_code == 200
        params = {"service_id": service_id, "tool_name": "whoami"}
        ref = client.get("/api/v1/agent/tools/describe", params=params).json()["tool_ref"]

        call_id = client.post(CALLS, json={"tool_ref": ref, "arguments": {}}).json()["pending_id"]
        wait_until(lambda: aws.record(call_id).get("sealed_task_token"), what="the approval wait")
        assert client.post(f"/api/v1/agent/tool-approvals/{call_id}", json={"decision": "approve"}).status_code == 200

        def waiting_for_oauth() -> dict[str, Any] | None:
            shown: dict[str, Any] = client.get(f"{CALLS}/{call_id}").json()
            return shown if shown["status"] == "awaiting_oauth" and shown.get("authorization_url") else None

        waiting = wait_until(waiting_for_oauth, what="the step-up's OAuth wait")
        assert set(query_of(waiting["authorization_url"])["scope"].split()) == {SCOPE, WRITE}
        assert server.mcp_requests["insufficient_scope"] == 1
        aws.authorize(waiting["authorization_url"])

        def settled() -> dict[str, Any] | None:
            shown: dict[str, Any] = client.get(f"{CALLS}/{call_id}").json()
            return shown if shown["status"] in ("completed", "failed", "cancelled", "uncertain") else None

        done = wait_until(settled, what="the call's end")
        assert done["status"] == "completed", done
        assert "hello alice" in str(done["result"])
        machine = aws.container.settings.state_machine_arn
        execution = wait_for_execution(aws.sfn, machine.replace(":stateMachine:", ":execution:") + f":{call_id}")
        assert execution["status"] == "SUCCEEDED"
        assert json.loads(execution["output"])["status"] == "completed"
