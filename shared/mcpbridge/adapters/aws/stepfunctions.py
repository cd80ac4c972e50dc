"""The Workflow port on AWS Step Functions: every agent tool call that may pause is one execution of the Standard
state machine in ``infra/tool_call_state_machine.asl.json`` (``MCPBRIDGE_STATE_MACHINE_ARN``).

The execution is named after the call, so starting a call twice never runs it twice: Step Functions answers a
second ``StartExecution`` with the same name either with the running execution (same input) or with
``ExecutionAlreadyExists`` (other input, or the execution has ended), and both mean "already started".

Task tokens are credentials: they go to AWS and nowhere else (no log line, no error message, no details).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from botocore.exceptions import BotoCoreError, ClientError

from mcpbridge.errors import Conflict, InvalidInput, Unavailable
from mcpbridge.ports import CallStart

if TYPE_CHECKING:
    from mypy_boto3_stepfunctions import SFNClient

log = logging.getLogger("mcpbridge.workflow")

# Execution names: 1-80 characters, and Step Functions refuses whitespace, wildcards, brackets, most punctuation and
# control characters. Call ids are ours (letters, digits, '-' and '_'), so anything else is a bug worth a clear error.
_EXECUTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,80}")
MAX_TIMEOUT_SECONDS: Final = 99_999_999
"""The largest TimeoutSeconds a Task state accepts (about three years)."""
MAX_OUTPUT_BYTES: Final = 256 * 1024
"""SendTaskSuccess output, like every state's data, is capped at 256 KiB."""
MAX_ERROR_CHARS: Final = 256
MAX_CAUSE_CHARS: Final = 32_768

# Answers to SendTaskSuccess/SendTaskFailure meaning "nobody waits for this token any more": the task already got
# its answer or timed out (TaskTimedOut), or the execution has ended (TaskDoesNotExist, InvalidToken).
_NOT_WAITING: Final = frozenset({"TaskTimedOut", "TaskDoesNotExist", "InvalidToken"})
# The state machine is missing or this function may not use it (AccessDenied, AccessDeniedException): not transient.
_MISCONFIGURED: Final = frozenset({"StateMachineDoesNotExist", "StateMachineDeleting", "InvalidArn"})


class StepFunctionsWorkflow:
    """``ports.Workflow`` on Step Functions. Construction does no I/O (SnapStart-safe)."""

    def __init__(self, client: SFNClient, state_machine_arn: str) -> None:
        self._client = client
        self._state_machine_arn = state_machine_arn

    # -- start ----------------------------------------------------------------------------------------------------

    def start(self, call: CallStart) -> str:
        """Start the call's execution (named ``call.call_id``); returns the execution ARN, the existing one when
        the call was started before."""
        machine = self._machine()
        if not _EXECUTION_NAME.fullmatch(call.call_id):
            raise InvalidInput("a tool call id must be 1-80 letters, digits, '-' or '_'", code="invalid_call_id")
        for name, seconds in (
            ("approval_timeout_seconds", call.approval_timeout_seconds),
            ("oauth_timeout_seconds", call.oauth_timeout_seconds),
        ):
            if isinstance(seconds, bool) or not isinstance(seconds, int) or not 1 <= seconds <= MAX_TIMEOUT_SECONDS:
                raise InvalidInput(
                    f"{name} must be a whole number of seconds between 1 and {MAX_TIMEOUT_SECONDS}",
                    code="invalid_timeout",
                    details={"field": name},
                )
        execution_input = {
            "call_id": call.call_id,
            "workspace_id": call.workspace_id,
            "approval_timeout_seconds": call.approval_timeout_seconds,
            "oauth_timeout_seconds": call.oauth_timeout_seconds,
        }
        try:
            started = self._client.start_execution(
                stateMachineArn=machine, name=call.call_id, input=json.dumps(execution_input)
            )
        except ClientError as exc:
            code = _error_code(exc)
            if code == "ExecutionAlreadyExists":
                log.info("tool call %s: its execution was already started", call.call_id)
                return self.execution_arn(call.call_id)
            raise _unavailable("start the tool call's workflow", code) from exc
        except BotoCoreError as exc:
            raise _unavailable("start the tool call's workflow", type(exc).__name__) from exc
        arn: str = started["executionArn"]
        return arn

    def execution_arn(self, call_id: str) -> str:
        """The ARN of the call's execution (``...:execution:<state machine name>:<call id>``), started or not."""
        parts = self._machine().split(":")
        return ":".join([*parts[:5], "execution", parts[6], call_id])

    # -- resolutions ----------------------------------------------------------------------------------------------

    def send_success(self, task_token: str, output: Mapping[str, Any]) -> None:
        """Resume the paused step with ``output``. :class:`Conflict` when nothing waits for the token any more."""
        body = json.dumps(dict(output), separators=(",", ":"), default=str)
        if len(body.encode()) > MAX_OUTPUT_BYTES:
            raise InvalidInput("the resolution output exceeds 256 KiB", code="workflow_output_too_large")
        self._send("SendTaskSuccess", lambda: self._client.send_task_success(taskToken=task_token, output=body))

    def send_failure(self, task_token: str, error: str, cause: str) -> None:
        """Fail the paused step with ``error`` (cut to 256 characters) and ``cause`` (cut to 32 768)."""
        error, cause = error[:MAX_ERROR_CHARS], cause[:MAX_CAUSE_CHARS]
        self._send(
            "SendTaskFailure",
            lambda: self._client.send_task_failure(taskToken=task_token, error=error, cause=cause),
        )

    def _send(self, operation: str, call: Callable[[], object]) -> None:
        try:
            call()
        except ClientError as exc:
            code = _error_code(exc)
            if code in _NOT_WAITING:
                raise Conflict(
                    "the paused tool call was already resolved or has expired",
                    code="pause_not_waiting",
                    details={"reason": code},
                ) from None  # the botocore error text may quote the token
            if code == "InvalidOutput":
                raise InvalidInput("the resolution output is not valid JSON", code="workflow_invalid_output") from None
            log.warning("%s failed (%s)", operation, code)
            raise _unavailable("resume the paused tool call", code) from None
        except BotoCoreError as exc:
            log.warning("%s failed (%s)", operation, type(exc).__name__)
            raise _unavailable("resume the paused tool call", type(exc).__name__) from None

    def _machine(self) -> str:
        arn = self._state_machine_arn
        parts = arn.split(":")
        if len(parts) < 7 or parts[0] != "arn" or parts[2] != "states" or parts[5] != "stateMachine":
            raise Unavailable(
                "MCPBRIDGE_STATE_MACHINE_ARN is not set to a Step Functions state machine ARN",
                code="workflow_unconfigured",
            )
        return arn


def _error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", "Unknown"))


def _unavailable(what: str, code: str) -> Unavailable:
    if code in _MISCONFIGURED or code.startswith("AccessDenied"):
        return Unavailable(f"cannot {what}: the state machine is missing or not allowed", code="workflow_unconfigured")
    return Unavailable(f"cannot {what} now; retry", code="workflow_unavailable", details={"reason": code})
