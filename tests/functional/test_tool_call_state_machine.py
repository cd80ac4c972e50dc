"""The tool-call state machine (``infra/tool_call_state_machine.asl.json``, as ``template.yaml`` deploys it) executed
by moto, its Lambda tasks running the real step dispatcher (``mcpbridge.agent.lambda_steps``) in this process over a
fake steps object, and resumed through the real adapter (``StepFunctionsWorkflow``).

The fake keeps each call's state in a dict and decides like the real steps do (the record says what is next), so
these tests pin the workflow around the steps: the event contract, the waits and their timeouts, the routing, the
error handling (an upstream call is never replayed) and the adapter's answers. The hook that routes moto's Lambda
invocations to Python is described in ``tests/support/stepfunctions.py``.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import threading
import traceback
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import boto3
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from moto import mock_aws

from mcpbridge.adapters.aws.stepfunctions import StepFunctionsWorkflow
from mcpbridge.agent.lambda_steps import make_steps_handler, run_step
from mcpbridge.errors import Conflict, InvalidInput, MCPBridgeError, Unavailable
from mcpbridge.ports import CallStart
from tests.support.aws import REPO_ROOT, create_aws_resources, set_fake_aws_env
from tests.support.stepfunctions import (
    MOTO_WORKFLOW_CONFIG,
    FakeLambdaContext,
    Invocation,
    LambdaServiceFault,
    LambdaThrottled,
    ToolCallWorkflow,
    create_tool_call_workflow,
    current_state,
    route_lambda_invocations,
    stop_executions,
    wait_for_execution,
    wait_until,
)

REGION = "eu-west-1"
WORKSPACE = "ws_test"
WAITING = {"approval": "awaiting_approval", "oauth": "awaiting_oauth"}
TERMINAL = {"completed", "rejected", "cancelled", "failed", "uncertain"}


# ------------------------------------------------------------------------------------------------ the fake steps


@dataclass
class FakeCall:
    status: str
    needs_oauth: bool = False
    tokens: dict[str, str] = field(default_factory=dict)
    error: dict[str, str] | None = None
    result: dict[str, Any] | None = None
    invoke_raises: list[BaseException] = field(default_factory=list)
    prepare_raises: list[BaseException] = field(default_factory=list)
    resolve_before_await: str | None = None
    upstream_runs: int = 0


class FakeSteps:
    """The steps over a dict of calls; thread-safe (moto runs executions on its own threads)."""

    def __init__(self, workflow: StepFunctionsWorkflow) -> None:
        self.workflow = workflow
        self.calls: dict[str, FakeCall] = {}
        self.log: list[tuple[str, str, str | None]] = []
        self._lock = threading.Lock()

    def add(self, status: str, **options: Any) -> str:
        call_id = f"tc_{uuid.uuid4().hex[:20]}"
        self.calls[call_id] = FakeCall(status, **options)
        return call_id

    def steps_of(self, call_id: str) -> list[tuple[str, str | None]]:
        with self._lock:
            return [(step, kind) for cid, step, kind in self.log if cid == call_id]

    def _enter(self, call_id: str, workspace_id: str, step: str, kind: str | None = None) -> FakeCall:
        assert workspace_id == WORKSPACE
        self.log.append((call_id, step, kind))
        return self.calls[call_id]

    def _advance(self, call: FakeCall) -> str:
        if call.status in TERMINAL:
            return "finish"
        if call.status in WAITING.values():
            return "approval" if call.status == WAITING["approval"] else "oauth"
        if call.status == "approved":
            call.status = WAITING["oauth"] if call.needs_oauth else "ready"
            return self._advance(call)
        return "invoke"

    # -- the Steps protocol -----------------------------------------------------------------------------------

    def prepare(self, call_id: str, workspace_id: str) -> dict[str, str]:
        with self._lock:
            call = self._enter(call_id, workspace_id, "prepare")
            if call.prepare_raises:
                raise call.prepare_raises.pop(0)
            return {"next": self._advance(call)}

    def await_resolution(self, call_id: str, workspace_id: str, kind: str, task_token: str) -> None:
        with self._lock:
            call = self._enter(call_id, workspace_id, "await", kind)
            if call.resolve_before_await is not None:  # a person was faster than the workflow
                call.status, call.resolve_before_await = call.resolve_before_await, None
            parked = call.status == WAITING[kind]
            if parked:
                call.tokens[kind] = task_token
        if not parked:  # nobody will resume a token that was never parked: resume it now (as the real steps do)
            self.workflow.send_success(task_token, {"resolved": True})

    def timeout(self, call_id: str, workspace_id: str, kind: str) -> dict[str, str]:
        with self._lock:
            call = self._enter(call_id, workspace_id, "timeout", kind)
            if call.status == WAITING[kind]:
                call.status = "rejected" if kind == "approval" else "cancelled"
                reason = "approval timeout" if kind == "approval" else "authorization timeout"
                call.error = {"code": reason.replace(" ", "_"), "message": reason}
            return {"next": self._advance(call)}

    def invoke(self, call_id: str, workspace_id: str) -> dict[str, str]:
        with self._lock:
            call = self._enter(call_id, workspace_id, "invoke")
            if call.invoke_raises:
                failure = call.invoke_raises.pop(0)
                if not isinstance(failure, LambdaThrottled):  # a throttled invocation never ran
                    call.upstream_runs += 1
                    call.status = "running"
                raise failure
            assert call.status == "ready", call.status
            call.upstream_runs += 1
            call.status, call.result = "completed", {"content": [{"type": "text", "text": "42"}]}
            return {"next": "finish"}

    def finish(self, call_id: str, workspace_id: str) -> dict[str, Any]:
        with self._lock:
            call = self._enter(call_id, workspace_id, "finish")
            if call.status == "running":
                call.status, call.error = "uncertain", {"code": "outcome_unknown", "message": "it may have run"}
            elif call.status not in TERMINAL:
                call.status, call.error = "failed", {"code": "call_interrupted", "message": "stopped before running"}
            return {"call_id": call_id, "status": call.status, "result": call.result, "error": call.error}

    # -- what a resolution does (the resolutions function) ----------------------------------------------------

    def token(self, call_id: str, kind: str) -> str:
        def parked() -> str | None:
            with self._lock:
                return self.calls[call_id].tokens.get(kind)

        return wait_until(parked, what=f"the {kind} token of {call_id}")

    def resolve(self, call_id: str, kind: str, to: str, error: dict[str, str] | None = None) -> str:
        """Move the waiting call and return the parked token, to resume the workflow with."""
        token = self.token(call_id, kind)
        with self._lock:
            call = self.calls[call_id]
            assert call.status == WAITING[kind]
            call.status, call.error = to, error
        return token


# ------------------------------------------------------------------------------------------------ fixtures


def ours(caplog: pytest.LogCaptureFixture) -> str:
    """What mcpbridge logged (botocore's DEBUG lines show request bodies, tokens included, whoever sends them)."""
    return "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("mcpbridge"))


@dataclass
class Harness:
    workflow: ToolCallWorkflow
    sfn: Any
    adapter: StepFunctionsWorkflow
    steps: FakeSteps
    invocations: list[Invocation]

    def start(self, call_id: str, *, approval: int = 60, oauth: int = 60) -> str:
        return self.adapter.start(CallStart(call_id, WORKSPACE, approval, oauth))

    def wait_in(self, execution_arn: str, state: str) -> None:
        wait_until(lambda: current_state(self.sfn, execution_arn) == state, what=f"state {state}")
        assert self.sfn.describe_execution(executionArn=execution_arn)["status"] == "RUNNING"

    def finished(self, execution_arn: str, status: str = "SUCCEEDED") -> dict[str, Any]:
        described = wait_for_execution(self.sfn, execution_arn)
        assert described["status"] == status, described
        output: dict[str, Any] = json.loads(described.get("output") or "null")
        return output

    def failed_tasks(self, execution_arn: str) -> list[str]:
        events = self.sfn.get_execution_history(executionArn=execution_arn, maxResults=1000)["events"]
        return [e["taskFailedEventDetails"]["error"] for e in events if e["type"] == "TaskFailed"]


@pytest.fixture
def harness(monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    set_fake_aws_env(monkeypatch, REGION)
    with mock_aws(config=MOTO_WORKFLOW_CONFIG):
        workflow = create_tool_call_workflow(region=REGION)
        sfn = boto3.client("stepfunctions", region_name=REGION)
        adapter = StepFunctionsWorkflow(sfn, workflow.state_machine_arn)
        steps = FakeSteps(adapter)
        routes = {workflow.function_name: make_steps_handler(lambda: steps)}
        with route_lambda_invocations(routes) as invocations:
            try:
                yield Harness(workflow, sfn, adapter, steps, invocations)
            finally:
                stop_executions(REGION)


# ------------------------------------------------------------------------------------------------ flows


def test_approval_resumes_the_execution_which_invokes_and_finishes(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="mcpbridge")
    call_id = harness.steps.add(WAITING["approval"])
    execution = harness.start(call_id)
    assert execution == harness.adapter.execution_arn(call_id)
    harness.wait_in(execution, "WaitForApproval")

    token = harness.steps.resolve(call_id, "approval", "approved")
    harness.adapter.send_success(token, {"resolved": True})

    output = harness.finished(execution)
    # The outcome without the tool's result (it stays on the record; history is capped at 256 KiB).
    assert output == {"call_id": call_id, "status": "completed", "error": None}
    assert harness.steps.steps_of(call_id) == [
        ("prepare", None),
        ("await", "approval"),
        ("prepare", None),
        ("invoke", None),
        ("finish", None),
    ]
    assert harness.steps.calls[call_id].upstream_runs == 1
    # The tasks invoked the live alias with the documented events; the token went to the await step only.
    events = [i.event for i in harness.invocations]
    assert {i.qualifier for i in harness.invocations} == {None}
    assert events[1] == {
        "step": "await",
        "kind": "approval",
        "call_id": call_id,
        "workspace_id": WORKSPACE,
        "task_token": token,
    }
    assert all(set(e) == {"step", "call_id", "workspace_id"} for i, e in enumerate(events) if i != 1)
    assert token not in ours(caplog)


def test_rejection_finishes_with_the_reason_without_invoking(harness: Harness) -> None:
    call_id = harness.steps.add(WAITING["approval"])
    execution = harness.start(call_id)
    reason = {"code": "rejected", "message": "not on a Friday"}
    token = harness.steps.resolve(call_id, "approval", "rejected", reason)
    harness.adapter.send_success(token, {"resolved": True})

    assert harness.finished(execution) == {"call_id": call_id, "status": "rejected", "error": reason}
    assert harness.steps.steps_of(call_id) == [
        ("prepare", None),
        ("await", "approval"),
        ("prepare", None),
        ("finish", None),
    ]
    assert harness.steps.calls[call_id].upstream_runs == 0


def test_an_approved_call_may_still_wait_for_oauth(harness: Harness) -> None:
    call_id = harness.steps.add(WAITING["approval"], needs_oauth=True)
    execution = harness.start(call_id)
    approval = harness.steps.resolve(call_id, "approval", "approved")
    harness.adapter.send_success(approval, {"resolved": True})

    harness.wait_in(execution, "WaitForOAuth")
    oauth = harness.steps.resolve(call_id, "oauth", "ready")
    assert oauth != approval
    harness.adapter.send_success(oauth, {"resolved": True})

    assert harness.finished(execution)["status"] == "completed"
    assert harness.steps.steps_of(call_id) == [
        ("prepare", None),
        ("await", "approval"),
        ("prepare", None),
        ("await", "oauth"),
        ("prepare", None),
        ("invoke", None),
        ("finish", None),
    ]


@pytest.mark.parametrize(
    ("kind", "ended", "reason"),
    [("approval", "rejected", "approval timeout"), ("oauth", "cancelled", "authorization timeout")],
)
def test_a_wait_times_out_into_the_timeout_step(harness: Harness, kind: str, ended: str, reason: str) -> None:
    call_id = harness.steps.add(WAITING[kind])
    execution = harness.start(call_id, **{kind: 1})
    token = harness.steps.token(call_id, kind)

    output = harness.finished(execution)
    assert output["status"] == ended
    assert output["error"]["message"] == reason
    assert harness.steps.steps_of(call_id) == [("prepare", None), ("await", kind), ("timeout", kind), ("finish", None)]
    assert harness.failed_tasks(execution) == []  # a timeout is TaskTimedOut, caught
    # The token of the expired wait is refused with a clear error.
    with pytest.raises(Conflict) as refused:
        harness.adapter.send_success(token, {"resolved": True})
    assert refused.value.code == "pause_not_waiting"


def test_a_failed_resolution_goes_to_finish(harness: Harness) -> None:
    call_id = harness.steps.add(WAITING["approval"])
    execution = harness.start(call_id)
    harness.adapter.send_failure(harness.steps.token(call_id, "approval"), "ToolCall.cancelled", "cancelled")

    assert harness.finished(execution)["error"]["code"] == "call_interrupted"
    assert harness.steps.steps_of(call_id) == [("prepare", None), ("await", "approval"), ("finish", None)]
    assert harness.failed_tasks(execution) == ["ToolCall.cancelled"]


def test_the_await_step_resumes_its_own_wait_when_the_call_was_resolved_first(harness: Harness) -> None:
    # The person approved between Prepare and the token being parked: the await step sends success itself, from
    # inside the task's own invocation.
    call_id = harness.steps.add(WAITING["approval"], resolve_before_await="approved")
    execution = harness.start(call_id)

    assert harness.finished(execution)["status"] == "completed"
    assert harness.steps.steps_of(call_id) == [
        ("prepare", None),
        ("await", "approval"),
        ("prepare", None),
        ("invoke", None),
        ("finish", None),
    ]


@pytest.mark.parametrize(
    ("failure", "error"),
    [(RuntimeError("connection reset"), "RuntimeError"), (LambdaServiceFault("500"), "Lambda.ServiceException")],
)
def test_a_failed_invoke_is_caught_and_never_retried(harness: Harness, failure: Exception, error: str) -> None:
    call_id = harness.steps.add("ready", invoke_raises=[failure])
    execution = harness.start(call_id)

    output = harness.finished(execution)
    assert output["status"] == "uncertain"  # it may have run: reported, not replayed
    assert harness.steps.steps_of(call_id) == [("prepare", None), ("invoke", None), ("finish", None)]
    assert harness.steps.calls[call_id].upstream_runs == 1
    assert harness.failed_tasks(execution) == [error]


def test_a_throttled_invoke_is_retried(harness: Harness) -> None:
    # Lambda refused the invocation before running anything: trying again cannot replay an upstream call.
    call_id = harness.steps.add("ready", invoke_raises=[LambdaThrottled("rate exceeded")])
    execution = harness.start(call_id)

    assert harness.finished(execution)["status"] == "completed"
    assert harness.steps.steps_of(call_id) == [("prepare", None), ("invoke", None), ("invoke", None), ("finish", None)]
    assert harness.steps.calls[call_id].upstream_runs == 1
    assert harness.failed_tasks(execution) == ["Lambda.TooManyRequestsException"]


def test_prepare_is_retried_on_lambda_service_errors(harness: Harness) -> None:
    call_id = harness.steps.add("ready", prepare_raises=[LambdaServiceFault("500")])
    execution = harness.start(call_id)

    assert harness.finished(execution)["status"] == "completed"
    assert harness.steps.steps_of(call_id)[:2] == [("prepare", None), ("prepare", None)]


def test_a_step_that_raises_ends_in_finish(harness: Harness) -> None:
    call_id = harness.steps.add(WAITING["approval"], prepare_raises=[KeyError("no such call")])
    execution = harness.start(call_id)

    assert harness.finished(execution)["status"] == "failed"
    assert harness.steps.steps_of(call_id) == [("prepare", None), ("finish", None)]
    assert harness.failed_tasks(execution) == ["KeyError"]


# ------------------------------------------------------------------------------------------------ the adapter


def test_start_is_idempotent_per_call(harness: Harness) -> None:
    call_id = harness.steps.add(WAITING["approval"])
    first = harness.start(call_id)
    assert harness.start(call_id) == first  # same input while running: the same execution
    assert harness.start(call_id, approval=5) == first  # other input: ExecutionAlreadyExists, still that one
    token = harness.steps.resolve(call_id, "approval", "approved")
    harness.adapter.send_success(token, {"resolved": True})
    harness.finished(first)
    assert harness.start(call_id) == first  # ended: not run again

    executions = harness.sfn.list_executions(stateMachineArn=harness.workflow.state_machine_arn)["executions"]
    assert [e["executionArn"] for e in executions] == [first]
    assert [step for step, _ in harness.steps.steps_of(call_id)].count("invoke") == 1


def test_a_used_or_unknown_token_is_a_clear_conflict(harness: Harness) -> None:
    call_id = harness.steps.add(WAITING["approval"])
    execution = harness.start(call_id)
    token = harness.steps.resolve(call_id, "approval", "approved")
    harness.adapter.send_success(token, {"resolved": True})
    harness.finished(execution)

    bogus = f"bogus-{uuid.uuid4().hex}"

    # (moto accepts SendTaskFailure with the used token of an ended execution, where AWS answers TaskTimedOut or
    # InvalidToken: that mapping is covered with a stub client below.)
    def succeed(t: str) -> None:
        harness.adapter.send_success(t, {"resolved": True})

    def fail(t: str) -> None:
        harness.adapter.send_failure(t, "ToolCall.rejected", "too late")

    resumes: list[tuple[Callable[[str], None], str]] = [(succeed, token), (succeed, bogus), (fail, bogus)]
    for resume, used in resumes:
        with pytest.raises(Conflict) as refused:
            resume(used)
        assert refused.value.code == "pause_not_waiting"
        assert refused.value.message == "the paused tool call was already resolved or has expired"
        assert used not in "".join(traceback.format_exception(refused.value))


class StubSfn:
    """A Step Functions client that records calls and raises what it is told to."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def _call(self, name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        self.calls.append((name, kwargs))
        if self.error is not None:
            raise self.error
        return {"executionArn": "arn:aws:states:eu-west-1:123456789012:execution:m:x"}

    def start_execution(self, **kwargs: Any) -> dict[str, Any]:
        return self._call("start_execution", kwargs)

    def send_task_success(self, **kwargs: Any) -> dict[str, Any]:
        return self._call("send_task_success", kwargs)

    def send_task_failure(self, **kwargs: Any) -> dict[str, Any]:
        return self._call("send_task_failure", kwargs)


MACHINE = "arn:aws:states:eu-west-1:123456789012:stateMachine:stack-tool-calls"


def stub_workflow(stub: StubSfn, machine: str = MACHINE) -> StepFunctionsWorkflow:
    return StepFunctionsWorkflow(cast(Any, stub), machine)


SECRET_TOKEN = "AQB4AAAAKgAAAAMAAAAAAAAAAc3VwZXItc2VjcmV0LXRhc2stdG9rZW4"


def test_the_adapter_needs_a_state_machine() -> None:
    workflow = stub_workflow(StubSfn(), "")
    with pytest.raises(Unavailable) as missing:
        workflow.start(CallStart("tc_1", WORKSPACE, 60, 60))
    assert missing.value.code == "workflow_unconfigured"


def client_error(code: str, operation: str = "SendTaskSuccess") -> ClientError:
    # AWS may quote the token in its message: the adapter must not pass it on.
    return ClientError({"Error": {"Code": code, "Message": f"Invalid Token: '{SECRET_TOKEN}'"}}, operation)


@pytest.mark.parametrize(
    ("error", "expected", "code"),
    [
        (client_error("TaskTimedOut"), Conflict, "pause_not_waiting"),
        (client_error("TaskDoesNotExist"), Conflict, "pause_not_waiting"),
        (client_error("InvalidToken"), Conflict, "pause_not_waiting"),
        (client_error("InvalidOutput"), InvalidInput, "workflow_invalid_output"),
        (client_error("ThrottlingException"), Unavailable, "workflow_unavailable"),
        (client_error("AccessDeniedException"), Unavailable, "workflow_unconfigured"),
        (
            EndpointConnectionError(endpoint_url="https://states.eu-west-1.amazonaws.com"),
            Unavailable,
            "workflow_unavailable",
        ),
    ],
)
def test_resolution_errors_map_to_the_error_tree_without_the_token(
    error: Exception, expected: type[MCPBridgeError], code: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="mcpbridge")
    workflow = stub_workflow(StubSfn(error))
    resumes: list[Callable[[], None]] = [
        lambda: workflow.send_success(SECRET_TOKEN, {"resolved": True}),
        lambda: workflow.send_failure(SECRET_TOKEN, "ToolCall.failed", "it failed"),
    ]
    for resume in resumes:
        with pytest.raises(expected) as raised:
            resume()
        assert raised.value.code == code
        assert SECRET_TOKEN not in "".join(traceback.format_exception(raised.value))
        assert SECRET_TOKEN not in repr(raised.value.details)
    assert SECRET_TOKEN not in ours(caplog)


def test_start_sends_the_documented_input_and_checks_it() -> None:
    stub = StubSfn()
    workflow = stub_workflow(stub)
    assert workflow.start(CallStart("tc_01abc", WORKSPACE, 600, 900)).endswith(":execution:m:x")
    ((name, kwargs),) = stub.calls
    assert name == "start_execution"
    assert kwargs["stateMachineArn"] == MACHINE
    assert kwargs["name"] == "tc_01abc"
    assert json.loads(kwargs["input"]) == {
        "call_id": "tc_01abc",
        "workspace_id": WORKSPACE,
        "approval_timeout_seconds": 600,
        "oauth_timeout_seconds": 900,
    }
    assert (
        workflow.execution_arn("tc_01abc")
        == "arn:aws:states:eu-west-1:123456789012:execution:stack-tool-calls:tc_01abc"
    )
    for bad in (CallStart("tc 1", WORKSPACE, 60, 60), CallStart("x" * 81, WORKSPACE, 60, 60)):
        with pytest.raises(InvalidInput):
            workflow.start(bad)
    for approval, oauth in ((0, 60), (60, -1), (True, 60), (60, 100_000_000)):
        with pytest.raises(InvalidInput):
            workflow.start(CallStart("tc_1", WORKSPACE, approval, oauth))
    assert len(stub.calls) == 1
    stub.error = client_error("StateMachineDoesNotExist", "StartExecution")
    with pytest.raises(Unavailable) as missing:
        workflow.start(CallStart("tc_2", WORKSPACE, 60, 60))
    assert missing.value.code == "workflow_unconfigured"


def test_send_failure_fits_the_limits_and_success_output_is_bounded() -> None:
    stub = StubSfn()
    workflow = stub_workflow(stub)
    workflow.send_failure("t", "E" * 300, "c" * 40_000)
    ((_, kwargs),) = stub.calls
    assert (len(kwargs["error"]), len(kwargs["cause"])) == (256, 32_768)
    with pytest.raises(InvalidInput):
        workflow.send_success("t", {"blob": "x" * (256 * 1024)})
    workflow.send_success("t", {"resolved": True})
    assert json.loads(stub.calls[-1][1]["output"]) == {"resolved": True}


# ------------------------------------------------------------------------------------------------ the dispatcher


class RecordingSteps:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.next = "invoke"

    def prepare(self, call_id: str, workspace_id: str) -> dict[str, str]:
        self.calls.append(("prepare", call_id, workspace_id))
        return {"next": self.next}

    def await_resolution(self, call_id: str, workspace_id: str, kind: str, task_token: str) -> None:
        self.calls.append(("await", call_id, workspace_id, kind, task_token))

    def timeout(self, call_id: str, workspace_id: str, kind: str) -> dict[str, str]:
        self.calls.append(("timeout", call_id, workspace_id, kind))
        return {"next": "finish"}

    def invoke(self, call_id: str, workspace_id: str) -> dict[str, str]:
        self.calls.append(("invoke", call_id, workspace_id))
        return {"next": "finish"}

    def finish(self, call_id: str, workspace_id: str) -> dict[str, Any]:
        self.calls.append(("finish", call_id, workspace_id))
        return {"call_id": call_id, "status": "completed", "result": {"content": []}, "error": None}

    def fail(self, call_id: str, workspace_id: str, error: str) -> dict[str, Any]:
        self.calls.append(("fail", call_id, workspace_id, error))
        return {"call_id": call_id, "status": "failed", "result": None, "error": {"code": "finish_failed"}}


def test_every_step_reaches_its_method() -> None:
    steps = RecordingSteps()
    ids = {"call_id": "tc_1", "workspace_id": WORKSPACE}
    assert run_step(steps, {"step": "prepare", **ids}) == {"next": "invoke"}
    assert run_step(steps, {"step": "await", "kind": "oauth", "task_token": "tok", **ids}) == {"status": "waiting"}
    assert run_step(steps, {"step": "timeout", "kind": "approval", **ids}) == {"next": "finish"}
    assert run_step(steps, {"step": "invoke", **ids}) == {"next": "finish"}
    assert run_step(steps, {"step": "finish", **ids}) == {"call_id": "tc_1", "status": "completed", "error": None}
    assert run_step(steps, {"step": "fail", "error": "Unavailable", **ids}) == {
        "call_id": "tc_1",
        "status": "failed",
        "error": {"code": "finish_failed"},
    }
    assert steps.calls == [
        ("prepare", "tc_1", WORKSPACE),
        ("await", "tc_1", WORKSPACE, "oauth", "tok"),
        ("timeout", "tc_1", WORKSPACE, "approval"),
        ("invoke", "tc_1", WORKSPACE),
        ("finish", "tc_1", WORKSPACE),
        ("fail", "tc_1", WORKSPACE, "Unavailable"),
    ]


@pytest.mark.parametrize(
    "event",
    [
        {},
        {"step": "explode", "call_id": "tc_1", "workspace_id": WORKSPACE},
        {"step": "prepare", "workspace_id": WORKSPACE},
        {"step": "prepare", "call_id": "", "workspace_id": WORKSPACE},
        {"step": "prepare", "call_id": 7, "workspace_id": WORKSPACE},
        {"step": "invoke", "call_id": "tc_1"},
        {"step": "await", "call_id": "tc_1", "workspace_id": WORKSPACE, "kind": "approval"},
        {"step": "await", "call_id": "tc_1", "workspace_id": WORKSPACE, "kind": "payment", "task_token": "t"},
        {"step": "timeout", "call_id": "tc_1", "workspace_id": WORKSPACE},
        {"step": "fail", "call_id": "tc_1", "workspace_id": WORKSPACE},
    ],
)
def test_malformed_events_are_invalid_input(event: dict[str, Any]) -> None:
    steps = RecordingSteps()
    with pytest.raises(InvalidInput) as invalid:
        run_step(steps, event)
    assert invalid.value.code == "invalid_step_event"
    assert steps.calls == []


def test_a_step_without_a_valid_next_is_refused() -> None:
    steps = RecordingSteps()
    steps.next = "dance"
    with pytest.raises(MCPBridgeError) as refused:
        run_step(steps, {"step": "prepare", "call_id": "tc_1", "workspace_id": WORKSPACE})
    assert refused.value.code == "invalid_step_result"


def test_the_handler_builds_the_steps_once_and_never_logs_the_token(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="mcpbridge")
    built: list[RecordingSteps] = []

    def factory() -> RecordingSteps:
        built.append(RecordingSteps())
        return built[-1]

    handler = make_steps_handler(factory)
    assert built == []  # nothing is built before the first invocation
    context = FakeLambdaContext("arn:aws:lambda:eu-west-1:123456789012:function:f:live", "f", 300)
    for _ in range(3):
        handler(
            {
                "step": "await",
                "call_id": "tc_1",
                "workspace_id": WORKSPACE,
                "kind": "approval",
                "task_token": SECRET_TOKEN,
            },
            context,
        )
    assert len(built) == 1
    assert len(built[0].calls) == 3

    def broken(*args: Any) -> None:
        raise RuntimeError("store down")

    built[0].await_resolution = broken  # type: ignore[method-assign,assignment]
    with pytest.raises(RuntimeError):
        handler(
            {
                "step": "await",
                "call_id": "tc_1",
                "workspace_id": WORKSPACE,
                "kind": "approval",
                "task_token": SECRET_TOKEN,
            },
            context,
        )
    assert "RuntimeError" in ours(caplog)
    assert SECRET_TOKEN not in ours(caplog)


# ------------------------------------------------------------------------------------------------ the function


@pytest.fixture
def restore_logging() -> Iterator[None]:
    logger = logging.getLogger("mcpbridge")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    try:
        yield
    finally:
        logger.handlers[:], logger.level, logger.propagate = saved


def load_tool_calls_handler() -> Callable[[dict[str, Any], Any], dict[str, Any]]:
    path = REPO_ROOT / "functions" / "tool_calls" / "handler.py"
    spec = importlib.util.spec_from_file_location(f"mcpbridge_lambda_tool_calls_{uuid.uuid4().hex}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    handler: Callable[[dict[str, Any], Any], dict[str, Any]] = module.handler
    return handler


def test_the_function_runs_the_containers_steps(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, restore_logging: None
) -> None:
    from mcpbridge.bootstrap import Container

    for name in ("MCPBRIDGE_BACKEND", "MCPBRIDGE_STATE_MACHINE_ARN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MCPBRIDGE_DATA_DIR", str(tmp_path))
    steps = RecordingSteps()
    monkeypatch.setattr(Container, "tool_call_steps", property(lambda self: steps), raising=False)

    handler = load_tool_calls_handler()
    context = FakeLambdaContext("arn:aws:lambda:eu-west-1:123456789012:function:f:live", "f", 300)
    assert handler({"step": "prepare", "call_id": "tc_1", "workspace_id": WORKSPACE}, context) == {"next": "invoke"}
    assert steps.calls == [("prepare", "tc_1", WORKSPACE)]


def test_create_aws_resources_can_add_the_workflow(monkeypatch: pytest.MonkeyPatch) -> None:
    set_fake_aws_env(monkeypatch, REGION)
    with mock_aws(config=MOTO_WORKFLOW_CONFIG):
        resources = create_aws_resources(table_name="mcpbridge-wf", region=REGION, tool_call_workflow=True)
        env = resources.settings_env()
        assert env["MCPBRIDGE_STATE_MACHINE_ARN"] == resources.state_machine_arn
        assert resources.state_machine_arn.endswith(":stateMachine:mcpbridge-wf-tool-calls")
        described = boto3.client("stepfunctions", region_name=REGION).describe_state_machine(
            stateMachineArn=resources.state_machine_arn
        )
        assert described["type"] == "STANDARD"
        assert f"function:{resources.tool_calls_function}:live" in described["definition"]
