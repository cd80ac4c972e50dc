"""The tool-call state machine of ``template.yaml`` executed by moto, its Lambda tasks run by Python in this process.

moto (5.2) executes state machines only when the outermost ``mock_aws`` carries :data:`MOTO_WORKFLOW_CONFIG`
(``stepfunctions.execute_state_machine``; in server mode, ``POST /moto-api/config`` with the same JSON). Executions
run on background threads, so tests poll (:func:`wait_for_execution`, :func:`wait_until`) for as long as those
threads are alive and working (tests.support.readiness: not for a fixed time, which a busy machine outlasts), and
stop what is still running before the mock ends (:func:`stop_executions`): a wait left behind would wake up later
and call AWS for real.

The hook that runs our code, found in moto's source: the ASL interpreter performs a ``lambda:invoke`` or
``lambda:invoke.waitForTaskToken`` task with an ordinary boto3 Lambda client
(``moto/stepfunctions/parser/asl/component/state/exec/state_task/lambda_eval_utils.py``, client from
``parser/asl/utils/boto_client.py``), so the invocation travels through moto's Lambda API like any client's. With
``lambda.use_docker`` off, the Lambda backend is ``moto.awslambda_simple.models.LambdaSimpleBackend``
(``moto/awslambda/utils.py: get_backend``), whose ``invoke(function_name, qualifier, body, headers,
response_headers)`` only echoes the payload. :func:`route_lambda_invocations` replaces that one method for the
duration of a ``with`` block by a router that looks the function up (a name or ARN the state machine uses must
exist), calls the Python callable registered for it with ``(event, context)`` and answers like the Lambda service:
the JSON result; for an exception, the Python runtime's error payload with ``X-Amz-Function-Error: Unhandled`` (the
state then sees the exception's class name as the error name, as on AWS); for :class:`LambdaServiceFault` and
:class:`LambdaThrottled`, the service errors ``Lambda.ServiceException`` and ``Lambda.TooManyRequestsException``.
Functions without a route keep moto's echo. The hook is process-wide: it also serves a ``ThreadedMotoServer`` in
this process, whose interpreter then reaches Lambda at ``http://localhost:$MOTO_PORT`` (default 5000), so set
``MOTO_PORT`` to the server's port.
"""

from __future__ import annotations

import contextlib
import io
import json
import threading
import time
import traceback
import uuid
import zipfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import boto3
from moto.awslambda_simple.models import LambdaSimpleBackend
from moto.core.config import DefaultConfig
from moto.core.exceptions import JsonRESTError
from moto.core.models import DEFAULT_ACCOUNT_ID

from tests.support.aws import REPO_ROOT, load_template
from tests.support.readiness import Worker, thread_cpu_seconds
from tests.support.readiness import wait_until as wait_for

MOTO_WORKFLOW_CONFIG: Final[DefaultConfig] = {
    "stepfunctions": {"execute_state_machine": True},
    "lambda": {"use_docker": False},
}
FUNCTION_RESOURCE: Final = "ToolCallsFunction"
STATE_MACHINE_RESOURCE: Final = "ToolCallsStateMachine"
TERMINAL_STATUSES: Final = frozenset({"SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"})

LambdaCallable = Callable[[dict[str, Any], Any], Any]
_T = TypeVar("_T")


class LambdaServiceFault(Exception):
    """Raised by a routed callable: the invocation fails as ``Lambda.ServiceException`` (HTTP 500)."""


class LambdaThrottled(Exception):
    """Raised by a routed callable: the invocation is refused as ``Lambda.TooManyRequestsException`` (HTTP 429)."""


class _ServiceException(JsonRESTError):
    code = 500

    def __init__(self, message: str) -> None:
        super().__init__("ServiceException", message)


class _TooManyRequests(JsonRESTError):
    code = 429

    def __init__(self, message: str) -> None:
        super().__init__("TooManyRequestsException", message)


@dataclass(frozen=True)
class Invocation:
    """One routed invocation, as the Lambda service received it."""

    function_name: str
    qualifier: str | None
    event: dict[str, Any]
    error_type: str | None


class FakeLambdaContext:
    """The attributes of the Python runtime's ``context`` that handlers (and powertools) read."""

    def __init__(self, function_arn: str, function_name: str, timeout_seconds: int) -> None:
        self.aws_request_id = str(uuid.uuid4())
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.invoked_function_arn = function_arn
        self.memory_limit_in_mb = 1024
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "2026/01/01/[$LATEST]0123456789abcdef"
        self._deadline = time.monotonic() + timeout_seconds

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


@contextlib.contextmanager
def route_lambda_invocations(routes: Mapping[str, LambdaCallable]) -> Iterator[list[Invocation]]:
    """Run moto Lambda invocations of the functions named in ``routes`` (function names, unqualified) in-process.

    Yields the list of routed invocations, appended to as they happen (from moto's execution threads)."""
    original = LambdaSimpleBackend.invoke
    invocations: list[Invocation] = []
    lock = threading.Lock()

    def invoke(
        self: LambdaSimpleBackend,
        function_name: str,
        qualifier: str | None,
        body: Any,
        headers: Any,
        response_headers: Any,
    ) -> str | bytes | None:
        function = self.get_function(function_name, qualifier)  # UnknownFunctionException, like the service
        route = routes.get(function.function_name)
        if route is None:
            return original(self, function_name, qualifier, body, headers, response_headers)
        event = json.loads(body) if body else {}
        invoked_arn = function_name if function_name.startswith("arn:") else function.function_arn
        context = FakeLambdaContext(invoked_arn, function.function_name, int(function.timeout))
        try:
            result = route(event, context)
        except LambdaServiceFault as fault:
            _record(Invocation(function.function_name, qualifier, event, "Lambda.ServiceException"))
            raise _ServiceException(str(fault)) from None
        except LambdaThrottled as throttled:
            _record(Invocation(function.function_name, qualifier, event, "Lambda.TooManyRequestsException"))
            raise _TooManyRequests(str(throttled)) from None
        except Exception as exc:
            _record(Invocation(function.function_name, qualifier, event, type(exc).__name__))
            response_headers["x-amz-function-error"] = "Unhandled"
            error = {
                "errorMessage": str(exc),
                "errorType": type(exc).__name__,
                "requestId": context.aws_request_id,
                "stackTrace": traceback.format_tb(exc.__traceback__),
            }
            return json.dumps(error).encode()
        _record(Invocation(function.function_name, qualifier, event, None))
        return json.dumps(result).encode()

    def _record(invocation: Invocation) -> None:
        with lock:
            invocations.append(invocation)

    LambdaSimpleBackend.invoke = invoke  # type: ignore[method-assign]
    try:
        yield invocations
    finally:
        LambdaSimpleBackend.invoke = original  # type: ignore[method-assign]


# ------------------------------------------------------------------------------------------------ resources


@dataclass(frozen=True)
class ToolCallWorkflow:
    """The tool-call function (with its ``live`` alias) and the state machine, as ``template.yaml`` describes them."""

    state_machine_arn: str
    function_name: str
    function_arn: str
    alias_arn: str
    region: str


def _machine_properties() -> dict[str, Any]:
    resource = load_template()["Resources"][STATE_MACHINE_RESOURCE]
    if resource["Type"] != "AWS::Serverless::StateMachine":
        raise ValueError(f"{STATE_MACHINE_RESOURCE} is a {resource['Type']}")
    properties: dict[str, Any] = resource["Properties"]
    return properties


def state_machine_definition(*, alias_arn: str, partition: str = "aws") -> str:
    """The ASL file the template names, with its ``DefinitionSubstitutions`` applied (every one must be known)."""
    properties = _machine_properties()
    known = {f"{FUNCTION_RESOURCE}.Alias": alias_arn, "AWS::Partition": partition}
    text: str = (REPO_ROOT / properties["DefinitionUri"]).read_text(encoding="utf-8")
    for name, value in properties["DefinitionSubstitutions"].items():
        ref = value.get("Ref") if isinstance(value, dict) else None
        if ref not in known:
            raise ValueError(f"DefinitionSubstitutions.{name} = {value!r}: teach tests/support/stepfunctions.py")
        text = text.replace("${" + name + "}", known[ref])
    if "${" in text:
        raise ValueError("the state machine definition has a placeholder the template does not substitute")
    return text


def _zipped_handler() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.write(REPO_ROOT / "functions" / "tool_calls" / "handler.py", "handler.py")
    return buffer.getvalue()


def create_tool_call_workflow(
    *, stack_name: str = "mcpbridge-test", region: str = "eu-west-1", endpoint_url: str | None = None
) -> ToolCallWorkflow:
    """Create the tool-call function (published, ``live`` alias) and the state machine, named as a stack called
    ``stack_name`` would name them. Route the function with :func:`route_lambda_invocations`."""
    template = load_template()
    function = template["Resources"][FUNCTION_RESOURCE]["Properties"]
    machine = _machine_properties()

    iam = boto3.client("iam", region_name=region, endpoint_url=endpoint_url)

    def role(name: str, service: str) -> str:
        statement = {"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}
        trust = json.dumps({"Version": "2012-10-17", "Statement": [statement]})
        return str(iam.create_role(RoleName=name, AssumeRolePolicyDocument=trust)["Role"]["Arn"])

    function_role = role(f"{stack_name}-tool-calls-fn", "lambda.amazonaws.com")
    machine_role = role(f"{stack_name}-tool-calls-sm", "states.amazonaws.com")

    lambda_client = boto3.client("lambda", region_name=region, endpoint_url=endpoint_url)
    function_name = f"{stack_name}-tool-calls"
    created = lambda_client.create_function(
        FunctionName=function_name,
        Runtime=template["Globals"]["Function"]["Runtime"],
        Role=function_role,
        Handler=function["Handler"],
        Code={"ZipFile": _zipped_handler()},
        Timeout=int(function["Timeout"]),
        Publish=True,
    )
    alias = lambda_client.create_alias(FunctionName=function_name, Name="live", FunctionVersion=created["Version"])

    name = machine["Name"]["Fn::Sub"].replace("${AWS::StackName}", stack_name)
    sfn = boto3.client("stepfunctions", region_name=region, endpoint_url=endpoint_url)
    state_machine = sfn.create_state_machine(
        name=name,
        definition=state_machine_definition(alias_arn=alias["AliasArn"]),
        roleArn=machine_role,
        type=machine["Type"],
    )
    return ToolCallWorkflow(
        state_machine_arn=state_machine["stateMachineArn"],
        function_name=function_name,
        function_arn=created["FunctionArn"],
        alias_arn=alias["AliasArn"],
        region=region,
    )


# ------------------------------------------------------------------------------------------------ executions


def executions() -> Worker:
    """moto's execution threads (every state machine's), as one worker: alive while any of them is, its CPU theirs."""
    from moto.stepfunctions.parser.utils import TMP_THREADS

    seen: dict[int, float] = {}  # thread id -> CPU seconds last read: an ended thread's CPU still counts

    def cpu() -> float:
        for thread in list(TMP_THREADS):
            if thread.native_id is not None:
                used = thread_cpu_seconds(thread.native_id)
                if used is not None:
                    seen[thread.native_id] = max(used, seen.get(thread.native_id, 0.0))
        return sum(seen.values())

    def alive() -> bool:
        return any(thread.is_alive() for thread in list(TMP_THREADS))

    return Worker("the Step Functions executions", alive, cpu, lambda: "")


def wait_until(predicate: Callable[[], _T | None], *, what: str = "the condition") -> _T:
    """Poll ``predicate`` until it returns something other than None/False, for as long as moto's executions work."""
    found: list[_T] = []

    def ready() -> bool:
        value = predicate()
        if value is None or value is False:
            return False
        found[:] = [value]
        return True

    wait_for(ready, executions(), what=what)
    return found[0]


def wait_for_execution(client: Any, execution_arn: str) -> dict[str, Any]:
    """``describe_execution`` once the execution has ended (it runs on a moto thread)."""

    def ended() -> dict[str, Any] | None:
        described: dict[str, Any] = client.describe_execution(executionArn=execution_arn)
        return described if described["status"] in TERMINAL_STATUSES else None

    return wait_until(ended, what=f"the end of {execution_arn.rsplit(':', 1)[-1]}")


def current_state(client: Any, execution_arn: str) -> str | None:
    """The name of the state the execution entered last (from its history)."""
    events = client.get_execution_history(executionArn=execution_arn, maxResults=1000)["events"]
    entered = [e["stateEnteredEventDetails"]["name"] for e in events if "stateEnteredEventDetails" in e]
    return entered[-1] if entered else None


def stop_executions(region: str = "eu-west-1", account_id: str = DEFAULT_ACCOUNT_ID, *, timeout: float = 10.0) -> None:
    """Stop every running execution of moto's (executing) Step Functions backend and wake its waits, then wait for
    the interpreter threads to end. Call it before the mock ends."""
    from moto.stepfunctions.parser.models import stepfunctions_parser_backends
    from moto.stepfunctions.parser.utils import TMP_THREADS

    backend = stepfunctions_parser_backends[account_id][region]
    for state_machine in backend.state_machines:
        for execution in state_machine.executions:
            worker = getattr(execution, "exec_worker", None)
            if execution.status == "RUNNING":
                backend.stop_execution(execution.execution_arn)
            if worker is not None:
                for endpoint in list(worker.env.callback_pool_manager._pool.values()):
                    endpoint.interrupt_all()
    deadline = time.monotonic() + timeout
    for thread in list(TMP_THREADS):
        thread.join(max(0.0, deadline - time.monotonic()))
