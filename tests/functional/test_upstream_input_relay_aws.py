"""An upstream's own question during an agent call on the AWS backend, in moto: the call pauses in a Step Functions
execution (the tool-call state machine of ``template.yaml``, its Lambda tasks the real steps), the answer resumes the
execution and the tool runs again with it (server-everything's ``trigger-elicitation-request`` on 127.0.0.1)."""

from __future__ import annotations

import json

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
