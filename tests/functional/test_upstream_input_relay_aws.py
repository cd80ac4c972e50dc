"""An upstream's own question during an agent call on the AWS backend, in moto: the call pauses in a Step Functions
execution (the tool-call state machine of ``template.yaml``, its Lambda tasks the real steps), the answer resumes the
execution and the tool runs again with it (server-everything's ``trigger-elicitation-request`` on 127.0.0.1)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.functional.test_agent_calls_step_functions import World, everything, world  # noqa: F401 - fixtures
from tests.support.everything import Everything

pytestmark = [pytest.mark.slow]

SERVICES = "/api/v1/mcp-services"
CALLS = "/api/v1/agent/tool-calls"
APPROVALS = "/api/v1/agent/tool-approvals"
TOOL = "trigger-elicitation-request"


def test_a_question_pauses_the_execution_and_its_answer_runs_the_tool_again(
    world: World,  # noqa: F811 - the fixture imported above
    everything: Everything,  # noqa: F811
) -> None:
    from tests.support.stepfunctions import wait_for_execution

    client = world.client
    created = client.post(SERVICES, json={"name": "everything", "url": everything.url})
    assert created.status_code == 201, created.text
    service_id = created.json()["id"]
    assert client.post(f"{SERVICES}/{service_id}/metadata/refresh").status_code == 200
    described = client.get("/api/v1/agent/tools/describe", params={"service_id": service_id, "tool_name": TOOL})
    assert described.status_code == 200, described.text

    paused = client.post(CALLS, json={"tool_ref": described.json()["tool_ref"], "arguments": {}})
    assert paused.status_code == 202, paused.text
    body = paused.json()
    call_id = body["pending_id"]
    assert body["status"] == "awaiting_approval"
    assert body["input_request"]["requested_schema"]["required"] == ["name"]
    world.parked(call_id)
    assert world.sfn.describe_execution(executionArn=world.execution_of(call_id))["status"] == "RUNNING"

    refused = client.post(f"{APPROVALS}/{call_id}", json={"decision": "approve", "content": {"name": ["Ada"]}})
    assert refused.status_code == 400, refused.text
    assert refused.json()["code"] == "invalid_content"
    assert world.record(call_id)["status"] == "awaiting_approval"

    answered = client.post(f"{APPROVALS}/{call_id}", json={"decision": "approve", "content": {"name": "Ada"}})
    assert answered.status_code == 200, answered.text
    done = world.settled(call_id)
    assert done["status"] == "completed", done
    assert any("- Name: Ada" in block.get("text", "") for block in done["result"]["content"])
    assert done["upstream_runs"] == 2
    record = world.record(call_id)
    assert str(record["sealed_input_answers"]).startswith("enc:v1:"), "the answer is kept sealed"
    assert "Ada" not in json.dumps({key: value for key, value in record.items() if key != "result"}, default=str)
    finished = wait_for_execution(world.sfn, world.execution_of(call_id))
    assert finished["status"] == "SUCCEEDED"


def test_a_gateway_clients_answer_resumes_the_execution_and_gets_the_upstreams_result(
    world: World,  # noqa: F811 - the fixture imported above
    everything: Everything,  # noqa: F811
) -> None:
    """The SDK client (2026-07-28, over real HTTP to the app the Lambda functions serve) gets the question as an
    ``InputRequiredResult`` at once while the call's execution waits; its answer resumes the execution."""
    import asyncio

    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp_types import ElicitResult

    from mcpbridge.http.apps import create_combined_app
    from tests.support.live_server import live_server
    from tests.support.stepfunctions import wait_for_execution

    created = world.client.post(SERVICES, json={"name": "everything", "url": everything.url})
    assert created.status_code == 201, created.text
    service_id = created.json()["id"]
    assert world.client.post(f"{SERVICES}/{service_id}/metadata/refresh").status_code == 200
    endpoint = world.client.post(
        "/api/v1/mcp-endpoints", json={"name": "relay", "services": [{"service_id": service_id, "tools": [TOOL]}]}
    )
    assert endpoint.status_code == 201, endpoint.text
    endpoint_id, token = endpoint.json()["id"], endpoint.json()["token"]
    asked: list[str] = []

    async def answer(context: Any, params: Any) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={"name": "Hedy Lamarr"})

    async def unused(context: Any, params: Any) -> ElicitResult:
        raise AssertionError("the first round is driven by hand")

    async def session(base: str, work: Any, callback: Any) -> Any:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
        transport = streamable_http_client(f"{base}/mcp/{endpoint_id}", http_client=http)
        client = Client(transport, mode="2026-07-28", elicitation_callback=callback, input_required_max_rounds=2000)
        async with http, client as mcp:
            return await work(mcp)

    with live_server(create_combined_app(world.container)) as base:

        async def first_round(mcp: Any) -> tuple[str, Any]:
            (tool,) = [t for t in (await mcp.list_tools()).tools if t.name.startswith("mcp_everything_trigger_")]
            return tool.name, await mcp.session.call_tool(tool.name, {}, allow_input_required=True)

        name, first = asyncio.run(session(base, first_round, unused))
        assert first.result_type == "input_required"
        (key,) = first.input_requests
        calls = world.client.get("/api/v1/agent/pending").json()["items"]
        (waiting,) = [c for c in calls if c.get("input_request")]
        call_id = waiting["pending_id"]
        world.parked(call_id)
        assert world.sfn.describe_execution(executionArn=world.execution_of(call_id))["status"] == "RUNNING"

        async def answered(mcp: Any) -> Any:
            response = await answer(None, first.input_requests[key].params)
            return await mcp.session.call_tool(
                name, {}, input_responses={key: response}, request_state=first.request_state, allow_input_required=True
            )

        after = asyncio.run(session(base, answered, unused))
        assert getattr(after, "result_type", "complete") in ("input_required", "complete")
        assert world.settled(call_id)["status"] == "completed"

        async def retry(mcp: Any) -> Any:
            return await mcp.session.call_tool(name, {}, request_state=first.request_state, allow_input_required=True)

        done = asyncio.run(session(base, retry, unused))
    assert asked == ["Please provide inputs for the following fields:"]
    assert done.is_error is False
    assert any("- Name: Hedy Lamarr" in block.text for block in done.content if block.type == "text")
    assert wait_for_execution(world.sfn, world.execution_of(call_id))["status"] == "SUCCEEDED"
