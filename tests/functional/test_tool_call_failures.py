"""A tool call whose ``finish`` step fails for good: the state machine's Catch on Finish runs ``RecordFailure``
(the ``fail`` step), which records the failure on the call, then the execution fails; the embedded workflow does the
same. Real steps over real records (moto's DynamoDB and KMS, the state machine executed by moto), with the events
port made to fail, which is what ``finish`` calls after moving the call.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from mcpbridge.agent.calls import ToolCall, call_key
from mcpbridge.agent.lambda_steps import make_steps_handler
from mcpbridge.bootstrap import Container
from mcpbridge.domain.ids import new_id
from mcpbridge.ports import CallStart
from mcpbridge.settings import Settings
from tests.support.aws import create_aws_resources, set_fake_aws_env
from tests.support.local_calls import wait_idle
from tests.support.moto_atomic import atomic_dynamodb
from tests.support.stepfunctions import (
    MOTO_WORKFLOW_CONFIG,
    route_lambda_invocations,
    stop_executions,
    wait_for_execution,
)

REGION = "eu-west-1"
WORKSPACE = "ws_failures"


class BrokenEvents:
    """An events port whose bus is down: ``finish`` fails after it has moved the call."""

    def __init__(self) -> None:
        self.attempts = 0

    def publish(self, kind: str, detail: Mapping[str, Any]) -> None:
        self.attempts += 1
        raise RuntimeError("the event bus is down")


def new_call(container: Container, status: str) -> ToolCall:
    item = {
        "id": new_id("call"),
        "workspace_id": WORKSPACE,
        "owner_user_id": "usr_1",
        "service_id": "svc_1",
        "service_name": "everything",
        "tool_name": "echo",
        "tool_ref": "ref_1",
        "arguments": {"message": "hi"},
        "status": status,
        "approval_timeout_seconds": 60,
        "oauth_timeout_seconds": 60,
    }
    return container.tool_call_records.create(item)


def record(container: Container, call_id: str) -> dict[str, Any]:
    item = container.store.get(call_key(WORKSPACE, call_id))
    assert item is not None
    return item


@pytest.fixture
def aws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Container, str, str]]:
    set_fake_aws_env(monkeypatch)
    with mock_aws(config=MOTO_WORKFLOW_CONFIG), atomic_dynamodb():
        resources = create_aws_resources(table_name="mcpbridge-fail", tool_call_workflow=True)
        container = Container(
            Settings(
                backend="aws",
                table_name=resources.table_name,
                kms_key_id=resources.kms_key_id,
                bucket_name=resources.bucket_name,
                aws_region=REGION,
                state_machine_arn=resources.state_machine_arn,
                index_cache_dir=tmp_path / "index-cache",
            )
        )
        try:
            yield container, resources.tool_calls_function, resources.state_machine_arn
            stop_executions(REGION)
        finally:
            container.close()


def test_a_finish_that_fails_for_good_is_recorded_on_the_call_and_fails_the_execution(
    aws: tuple[Container, str, str],
) -> None:
    container, function, _ = aws
    container.__dict__["events"] = broken = BrokenEvents()
    call = new_call(container, "ready")
    container.tool_call_records.move(call, "rejected", sets={"error": {"code": "rejected", "message": "no"}})
    routes = {function: make_steps_handler(lambda: container.tool_call_steps)}
    with route_lambda_invocations(routes) as invocations:
        arn = container.workflow.start(CallStart(call.id, WORKSPACE, 60, 60))
        execution = wait_for_execution(boto3.client("stepfunctions", region_name=REGION), arn)

    assert execution["status"] == "FAILED"
    assert execution["error"] == "ToolCall.FinishFailed"
    steps = [(i.event["step"], i.error_type) for i in invocations]
    assert steps == [("prepare", None), ("finish", "RuntimeError"), ("fail", None)]
    assert invocations[-1].event["error"] == "RuntimeError"
    assert broken.attempts == 1  # the fail step publishes nothing (that is what failed)
    stored = record(container, call.id)
    assert stored["status"] == "rejected"  # an ended call keeps its outcome
    assert stored["error"] == {"code": "rejected", "message": "no"}
    assert stored["finish_error"]["error"] == "RuntimeError"


@pytest.mark.parametrize(
    ("status", "ended", "code"),
    [
        ("running", "uncertain", "outcome_unknown"),  # it may have run: reported, never replayed
        ("ready", "failed", "finish_failed"),
        ("awaiting_approval", "failed", "finish_failed"),
    ],
)
def test_the_fail_step_ends_an_unfinished_call_once(
    aws: tuple[Container, str, str], status: str, ended: str, code: str
) -> None:
    container, _, _ = aws
    call = new_call(container, status)
    steps = container.tool_call_steps

    first = steps.fail(call.id, WORKSPACE, "Unavailable")
    assert (first["status"], first["error"]["code"]) == (ended, code)
    assert "result" not in first
    stored = record(container, call.id)
    assert stored["status"] == ended
    assert "gsi2pk" not in stored  # out of the open calls
    assert stored["finish_error"]["error"] == "Unavailable"

    again = steps.fail(call.id, WORKSPACE, "RuntimeError")  # Step Functions may run a task twice
    assert again == first
    assert record(container, call.id) == stored


def test_the_fail_step_of_a_deleted_call_just_ends(aws: tuple[Container, str, str]) -> None:
    container, _, _ = aws
    assert container.tool_call_steps.fail(new_id("call"), WORKSPACE, "RuntimeError")["status"] == "deleted"


def test_the_embedded_workflow_records_a_finish_that_fails(tmp_path: Path) -> None:
    container = Container(Settings(data_dir=tmp_path / "data"))
    try:
        container.__dict__["events"] = broken = BrokenEvents()
        call = new_call(container, "ready")
        container.tool_call_records.move(call, "cancelled", sets={"error": {"code": "cancelled", "message": "x"}})
        workflow = container.workflow
        workflow.start(CallStart(call.id, WORKSPACE, 60, 60))
        wait_idle(call.id)
        stored = record(container, call.id)
        assert stored["status"] == "cancelled"
        assert stored["finish_error"]["error"] == "RuntimeError"
        assert broken.attempts == 2  # finish, tried again once (as Finish's retry), then fail
    finally:
        container.close()
