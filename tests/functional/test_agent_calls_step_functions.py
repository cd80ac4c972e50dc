"""Agent tool calls on the AWS backend, end to end in moto: the REST API starts a Step Functions execution of the
tool-call state machine (``template.yaml``), whose Lambda tasks run the real steps in this process (the harness in
``tests/support/stepfunctions.py`` routes moto's invocations), and the upstream tool is the real npm
``@modelcontextprotocol/server-everything`` on 127.0.0.1.

Covered: approval with modified arguments resumes the waiting execution and the tool runs with them; reject and
timeout end it with the reason; an agent's own state machine, waiting on its task token, receives the outcome; a
gateway call through a published endpoint answers ``InputRequiredResult`` while its execution waits.
"""

from __future__ import annotations

import asyncio
import io
import json
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx2
import pytest
from fastapi.testclient import TestClient
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import ElicitResult
from moto import mock_aws

from mcpbridge.agent.calls import call_key
from mcpbridge.agent.lambda_steps import make_steps_handler
from mcpbridge.agent.profiles import agent_key
from mcpbridge.bootstrap import Container
from mcpbridge.domain.items import Update
from mcpbridge.http.apps import create_combined_app
from mcpbridge.settings import Settings
from tests.support.aws import create_aws_resources, set_fake_aws_env
from tests.support.everything import Everything
from tests.support.live_server import live_server
from tests.support.modern_rpc import TASKS, modern_request
from tests.support.moto_atomic import atomic_dynamodb
from tests.support.stepfunctions import (
    MOTO_WORKFLOW_CONFIG,
    route_lambda_invocations,
    stop_executions,
    wait_for_execution,
    wait_until,
)

pytestmark = [pytest.mark.slow]

REGION = "eu-west-1"
SERVICES = "/api/v1/mcp-services"
CALLS = "/api/v1/agent/tool-calls"
APPROVALS = "/api/v1/agent/tool-approvals"
AGENT_FUNCTION = "agent-runtime"


class World:
    def __init__(self, container: Container, client: TestClient, agent_tokens: list[str]) -> None:
        self.container = container
        self.client = client
        self.agent_tokens = agent_tokens
        self.sfn = boto3.client("stepfunctions", region_name=REGION)

    @property
    def workspace_id(self) -> str:
        workspace = self.container.identity.installed_workspace_id()
        assert workspace is not None
        return workspace

    def record(self, call_id: str) -> dict[str, Any]:
        item = self.container.store.get(call_key(self.workspace_id, call_id))
        assert item is not None
        return item

    def execution_of(self, call_id: str) -> str:
        machine = self.container.settings.state_machine_arn
        return machine.replace(":stateMachine:", ":execution:") + f":{call_id}"

    def parked(self, call_id: str) -> None:
        """Wait until the execution waits on its token (stored sealed on the record)."""
        wait_until(lambda: self.record(call_id).get("sealed_task_token"), what="the paused execution")

    def settled(self, call_id: str) -> dict[str, Any]:
        def final() -> dict[str, Any] | None:
            body: dict[str, Any] = self.client.get(f"{CALLS}/{call_id}").json()
            return body if body["status"] in ("completed", "failed", "rejected", "cancelled", "uncertain") else None

        return wait_until(final, what="the call's end")


@pytest.fixture(scope="module")
def everything(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Everything]:
    server = Everything("streamableHttp", tmp_path_factory.mktemp("everything"))
    server.start()
    try:
        yield server
    finally:
        server.kill()


def _agent_state_machine(resources_role: str) -> str:
    """An agent's own state machine: one task waiting on its token (handed to mcpbridge by the agent runtime)."""
    lambda_client = boto3.client("lambda", region_name=REGION)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("agent.py", "def handler(event, context):\n    return {}\n")
    lambda_client.create_function(
        FunctionName=AGENT_FUNCTION,
        Runtime="python3.13",
        Role=resources_role,
        Handler="agent.handler",
        Code={"ZipFile": buffer.getvalue()},
    )
    function_arn = lambda_client.get_function(FunctionName=AGENT_FUNCTION)["Configuration"]["FunctionArn"]
    definition = {
        "StartAt": "CallTool",
        "States": {
            "CallTool": {
                "Type": "Task",
                "Resource": "arn:aws:states:::lambda:invoke.waitForTaskToken",
                "Parameters": {"FunctionName": function_arn, "Payload": {"token.$": "$$.Task.Token"}},
                "TimeoutSeconds": 120,
                "End": True,
            }
        },
    }
    sfn = boto3.client("stepfunctions", region_name=REGION)
    created = sfn.create_state_machine(name="agent", definition=json.dumps(definition), roleArn=resources_role)
    return str(created["stateMachineArn"])


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, everything: Everything) -> Iterator[World]:
    set_fake_aws_env(monkeypatch)
    with mock_aws(config=MOTO_WORKFLOW_CONFIG), atomic_dynamodb():
        resources = create_aws_resources(table_name="mcpbridge-sfn", tool_call_workflow=True)
        container = Container(
            Settings(
                backend="aws",
                table_name=resources.table_name,
                kms_key_id=resources.kms_key_id,
                bucket_name=resources.bucket_name,
                aws_region=REGION,
                state_machine_arn=resources.state_machine_arn,
                index_cache_dir=tmp_path / "index-cache",
                ssrf_allowlist=["127.0.0.1"],
            )
        )
        agent_tokens: list[str] = []

        def agent_runtime(event: dict[str, Any], context: Any) -> dict[str, Any]:
            agent_tokens.append(event["token"])
            return {}

        routes = {
            resources.tool_calls_function: make_steps_handler(lambda: container.tool_call_steps),
            AGENT_FUNCTION: agent_runtime,
        }
        try:
            with (
                route_lambda_invocations(routes),
                TestClient(create_combined_app(container), raise_server_exceptions=False) as client,
            ):
                client.headers["Authorization"] = f"Bearer {container.identity.initialize().api_key}"
                yield World(container, client, agent_tokens)
                stop_executions(REGION)
        finally:
            container.close()


def _service(world: World, everything: Everything, *, approval: bool = True) -> tuple[str, str]:
    client = world.client
    created = client.post(SERVICES, json={"name": "everything", "url": everything.url})
    assert created.status_code == 201, created.text
    service_id = created.json()["id"]
    assert client.post(f"{SERVICES}/{service_id}/metadata/refresh").status_code == 200
    if approval:
        body = {"require_approval": True}
        assert client.put(f"{SERVICES}/{service_id}/tool-approvals/echo", json=body).status_code == 200
    described = client.get("/api/v1/agent/tools/describe", params={"service_id": service_id, "tool_name": "echo"})
    assert described.status_code == 200, described.text
    return service_id, described.json()["tool_ref"]


def test_approve_resumes_the_execution_and_runs_the_modified_call(world: World, everything: Everything) -> None:
    _, ref = _service(world, everything)
    paused = world.client.post(CALLS, json={"tool_ref": ref, "arguments": {"message": "original"}})
    assert paused.status_code == 202, paused.text
    call_id = paused.json()["pending_id"]
    world.parked(call_id)
    execution = world.sfn.describe_execution(executionArn=world.execution_of(call_id))
    assert execution["status"] == "RUNNING"

    approved = world.client.post(
        f"{APPROVALS}/{call_id}", json={"decision": "approve", "modified_args": {"message": "modified"}}
    )
    assert approved.status_code == 200, approved.text
    done = world.settled(call_id)
    assert done["status"] == "completed", done
    texts = [block.get("text") for block in done["result"]["content"]]
    assert "Echo: modified" in texts
    finished = wait_for_execution(world.sfn, world.execution_of(call_id))
    assert finished["status"] == "SUCCEEDED"
    assert json.loads(finished["output"])["status"] == "completed"
    record = world.record(call_id)
    assert "sealed_task_token" in record
    assert all("token" not in key or key.startswith("sealed_") for key in record)


def test_reject_and_timeout_end_the_execution_with_the_reason(world: World, everything: Everything) -> None:
    _, ref = _service(world, everything)
    rejected_call = world.client.post(CALLS, json={"tool_ref": ref, "arguments": {"message": "no"}}).json()
    world.parked(rejected_call["pending_id"])
    world.client.post(f"{APPROVALS}/{rejected_call['pending_id']}", json={"decision": "reject", "reason": "nope"})
    rejected = world.settled(rejected_call["pending_id"])
    assert rejected["status"] == "rejected"
    assert rejected["error"]["message"] == "nope"
    assert wait_for_execution(world.sfn, world.execution_of(rejected_call["pending_id"]))["status"] == "SUCCEEDED"

    # A profile whose approval wait is 2 s (written directly: the API's floor is 30 s, too slow for a test).
    profile = world.client.post("/api/v1/agents", json={"name": "impatient", "approval_timeout_seconds": 30}).json()
    world.container.store.update(
        agent_key(world.workspace_id, profile["id"]), Update(set={"approval_timeout_seconds": 2})
    )
    timed = world.client.post(
        CALLS, json={"tool_ref": ref, "arguments": {"message": "late"}, "agent_id": profile["id"]}
    ).json()
    done = world.settled(timed["pending_id"])
    assert done["status"] == "rejected"
    assert done["error"]["message"] == "approval timeout"
    late = world.client.post(f"{APPROVALS}/{timed['pending_id']}", json={"decision": "approve"})
    assert late.status_code == 409


def test_the_agents_callback_token_receives_the_outcome(world: World, everything: Everything) -> None:
    _, ref = _service(world, everything, approval=False)
    role = boto3.client("iam", region_name=REGION).create_role(
        RoleName="agent-role",
        AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []}),
    )["Role"]["Arn"]
    machine = _agent_state_machine(role)
    execution = world.sfn.start_execution(stateMachineArn=machine, input="{}")["executionArn"]
    token = wait_until(lambda: world.agent_tokens[0] if world.agent_tokens else None, what="the agent's token")
    answered = world.client.post(
        CALLS, json={"tool_ref": ref, "arguments": {"message": "to the agent"}, "callback_task_token": token}
    )
    assert answered.status_code == 200, answered.text
    assert token not in answered.text
    agent_run = wait_for_execution(world.sfn, execution)
    assert agent_run["status"] == "SUCCEEDED"
    output = json.loads(agent_run["output"])
    assert output["status"] == "completed"
    assert "Echo: to the agent" in json.dumps(output["result"])


def test_a_gateway_call_paused_in_step_functions_answers_input_required_then_the_approved_result(
    world: World, everything: Everything
) -> None:
    """Gateway mode on the AWS backend: an MCP client (the SDK, 2026-07-28, over real HTTP to the app the Lambda
    functions serve) calls server-everything's ``echo`` published by an endpoint; the call waits in its Step
    Functions execution while the answer, an ``InputRequiredResult``, is already back; the approver's modified
    arguments reach the upstream and the client's retry gets that result."""
    service_id, _ = _service(world, everything)
    created = world.client.post(
        "/api/v1/mcp-endpoints", json={"name": "gateway", "services": [{"service_id": service_id, "tools": ["echo"]}]}
    )
    assert created.status_code == 201, created.text
    endpoint_id, token = created.json()["id"], created.json()["token"]

    async def accept(context: Any, params: Any) -> ElicitResult:
        return ElicitResult(action="accept")

    async def session(base: str, work: Any) -> Any:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
        transport = streamable_http_client(f"{base}/mcp/{endpoint_id}", http_client=http)
        async with http, Client(transport, mode="2026-07-28", elicitation_callback=accept) as mcp:
            return await work(mcp)

    with live_server(create_combined_app(world.container)) as base:

        async def call(mcp: Any) -> tuple[str, Any]:
            (echo,) = [tool for tool in (await mcp.list_tools()).tools if tool.name.startswith("mcp_everything_echo")]
            return echo.name, await mcp.session.call_tool(echo.name, {"message": "original"}, allow_input_required=True)

        name, first = asyncio.run(session(base, call))
        assert first.result_type == "input_required"
        url = first.input_requests["approval"].params.url
        call_id = url.rsplit("/", 1)[-1]
        assert url == f"{base}/console/approvals/{call_id}"
        world.parked(call_id)
        assert world.sfn.describe_execution(executionArn=world.execution_of(call_id))["status"] == "RUNNING"

        approved = world.client.post(
            f"{APPROVALS}/{call_id}", json={"decision": "approve", "modified_args": {"message": "modified"}}
        )
        assert approved.status_code == 200, approved.text
        assert world.settled(call_id)["status"] == "completed"

        async def retry(mcp: Any) -> Any:
            return await mcp.session.call_tool(
                name, {"message": "original"}, request_state=first.request_state, allow_input_required=True
            )

        done = asyncio.run(session(base, retry))
    assert getattr(done, "result_type", "complete") == "complete"
    assert done.is_error is False
    texts = [block.text for block in done.content if block.type == "text"]
    assert any("Echo: modified" in text for text in texts), texts
    assert wait_for_execution(world.sfn, world.execution_of(call_id))["status"] == "SUCCEEDED"


def test_a_gateway_task_cancelled_by_its_caller_ends_its_execution(world: World, everything: Everything) -> None:
    """The Tasks extension on the AWS backend: the paused call is a task at once; ``tasks/cancel`` withdraws it and
    its Step Functions execution finishes with the call cancelled."""
    service_id, _ = _service(world, everything)
    created = world.client.post(
        "/api/v1/mcp-endpoints", json={"name": "gateway", "services": [{"service_id": service_id, "tools": ["echo"]}]}
    )
    assert created.status_code == 201, created.text
    endpoint = created.json()

    def rpc(base: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
        body, headers = modern_request(method, params, endpoint["token"], {"extensions": {TASKS: {}}})
        answer = httpx2.post(f"{base}/mcp/{endpoint['id']}", json=body, headers=headers, timeout=30)
        result: dict[str, Any] = answer.json()["result"]
        return result

    with live_server(create_combined_app(world.container)) as base:
        listed = rpc(base, "tools/list", {})["tools"]
        (echo,) = [tool["name"] for tool in listed if tool["name"].startswith("mcp_everything_echo")]
        task = rpc(base, "tools/call", {"name": echo, "arguments": {"message": "withdrawn"}})
        assert task["resultType"] == "task"
        world.parked(task["taskId"])
        assert rpc(base, "tasks/cancel", {"taskId": task["taskId"]})["resultType"] == "complete"
        finished = wait_for_execution(world.sfn, world.execution_of(task["taskId"]))
        assert rpc(base, "tasks/get", {"taskId": task["taskId"]})["status"] == "cancelled"
    assert finished["status"] == "SUCCEEDED"
    assert json.loads(finished["output"])["status"] == "cancelled"
