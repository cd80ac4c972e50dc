"""The tool-call steps as one Lambda function: the tasks of the state machine in
``infra/tool_call_state_machine.asl.json`` invoke it with an event naming the step.

Events (every field a string)::

    {"step": "prepare",  "call_id", "workspace_id"}                          -> {"next": NEXT}
    {"step": "await",    "call_id", "workspace_id", "kind", "task_token"}    -> {"status": "waiting"}
    {"step": "timeout",  "call_id", "workspace_id", "kind"}                  -> {"next": NEXT}
    {"step": "invoke",   "call_id", "workspace_id"}                          -> {"next": ...}
    {"step": "finish",   "call_id", "workspace_id"}                          -> the outcome, without "result"
    {"step": "fail",     "call_id", "workspace_id", "error"}                 -> the outcome, without "result"

``NEXT`` is ``approval``, ``oauth``, ``invoke`` or ``finish`` (the state machine's ``Route`` branches on it) and
``kind`` is ``approval`` or ``oauth``. The ``await`` task is a ``.waitForTaskToken`` task: what it returns is
ignored, the execution waits until someone sends success or failure with ``task_token``. ``fail`` runs when
``finish`` failed after its retries (the state machine's ``RecordFailure``); ``error`` is the name of what it raised.

A malformed event raises :class:`~mcpbridge.errors.InvalidInput`; a step's own error propagates, so Lambda reports
it with the exception's class name as ``errorType``, which is the error name the state machine's ``Catch`` sees.
The task token is a credential: it is handed to the steps and never logged.

The outcome ``finish`` returns becomes the execution's output, which Step Functions keeps in the execution's
history and caps at 256 KiB: the tool's ``result`` is therefore left out (it stays on the call's record, and the
steps hand it to the agent's own callback token themselves).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, get_args

from mcpbridge.agent.calls import Next, PendingKind
from mcpbridge.errors import InvalidInput, MCPBridgeError

if TYPE_CHECKING:
    from mcpbridge.observability import LambdaLogging
    from mcpbridge.ports import Telemetry

log = logging.getLogger("mcpbridge.agent.lambda_steps")

StepName = Literal["prepare", "await", "timeout", "invoke", "finish", "fail"]

STEPS: Final[tuple[str, ...]] = get_args(StepName)
KINDS: Final[tuple[str, ...]] = get_args(PendingKind)
NEXT_STEPS: Final[tuple[str, ...]] = get_args(Next)
FINISH_OMITS: Final[tuple[str, ...]] = ("result",)
"""Keys of the outcome that stay out of the execution's output (see the module's docstring)."""

LambdaHandler = Callable[[dict[str, Any], Any], dict[str, Any]]


class Steps(Protocol):
    """What the function dispatches to (``mcpbridge.agent.steps.ToolCallSteps`` in production)."""

    def prepare(self, call_id: str, workspace_id: str) -> Mapping[str, Any]: ...

    def await_resolution(self, call_id: str, workspace_id: str, kind: PendingKind, task_token: str) -> None: ...

    def timeout(self, call_id: str, workspace_id: str, kind: PendingKind) -> Mapping[str, Any]: ...

    def invoke(self, call_id: str, workspace_id: str) -> Mapping[str, Any]: ...

    def finish(self, call_id: str, workspace_id: str) -> Mapping[str, Any]: ...

    def fail(self, call_id: str, workspace_id: str, error: str) -> Mapping[str, Any]: ...


def run_step(steps: Steps, event: Mapping[str, Any]) -> dict[str, Any]:
    """Validate ``event`` and run the step it names; returns the JSON object the task receives as ``Payload``."""
    if not isinstance(event, Mapping):
        raise InvalidInput("a tool-call step event must be a JSON object", code="invalid_step_event")
    step = _field(event, "step")
    if step not in STEPS:
        raise InvalidInput(
            f"unknown tool-call step {step[:40]!r}", code="invalid_step_event", details={"steps": list(STEPS)}
        )
    call_id = _field(event, "call_id")
    workspace_id = _field(event, "workspace_id")
    log.debug("tool call %s: step %s", call_id, step)
    if step == "prepare":
        return _routed(step, steps.prepare(call_id, workspace_id))
    if step == "await":
        steps.await_resolution(call_id, workspace_id, _kind(event), _field(event, "task_token"))
        return {"status": "waiting"}
    if step == "timeout":
        return _routed(step, steps.timeout(call_id, workspace_id, _kind(event)))
    if step == "invoke":
        return _object(step, steps.invoke(call_id, workspace_id))
    if step == "fail":
        outcome = _object(step, steps.fail(call_id, workspace_id, _field(event, "error")))
    else:
        outcome = _object(step, steps.finish(call_id, workspace_id))
    return {key: value for key, value in outcome.items() if key not in FINISH_OMITS}


def make_steps_handler(
    steps_factory: Callable[[], Steps],
    *,
    lambda_logging: LambdaLogging | None = None,
    telemetry: Telemetry | None = None,
) -> LambdaHandler:
    """The Lambda handler of the tool-call function.

    ``steps_factory`` is called once, at the first invocation (so building this handler imports and builds
    nothing); ``lambda_logging``, when given, tags every log line with the invocation's request id; ``telemetry``,
    when it can ``flush``, writes the invocation's metrics as it ends.
    """
    flush = getattr(telemetry, "flush", None)
    resolved: list[Steps] = []

    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        if lambda_logging is not None:
            lambda_logging.bind(context)
        if not resolved:
            resolved.append(steps_factory())
        try:
            return run_step(resolved[0], event)
        except Exception as exc:
            # Ids and the error's class only: never the event (it may hold the task token) or arbitrary messages.
            step = event.get("step") if isinstance(event, Mapping) else None
            call_id = event.get("call_id") if isinstance(event, Mapping) else None
            code = exc.code if isinstance(exc, MCPBridgeError) else type(exc).__name__
            log.warning("tool call %.80s: step %.20s failed (%s)", call_id, step, code)
            raise
        finally:
            if flush is not None:
                flush()

    return handler


def _field(event: Mapping[str, Any], name: str) -> str:
    value = event.get(name)
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"the step event needs a non-empty string {name!r}", code="invalid_step_event")
    return value


def _kind(event: Mapping[str, Any]) -> PendingKind:
    kind = _field(event, "kind")
    if kind == "approval":
        return "approval"
    if kind == "oauth":
        return "oauth"
    raise InvalidInput(f"unknown pause kind {kind[:40]!r}", code="invalid_step_event", details={"kinds": list(KINDS)})


def _object(step: str, result: Any) -> dict[str, Any]:
    if not isinstance(result, Mapping):
        raise MCPBridgeError(f"the {step} step returned no JSON object", code="invalid_step_result")
    return dict(result)


def _routed(step: str, result: Any) -> dict[str, Any]:
    routed = _object(step, result)
    if routed.get("next") not in NEXT_STEPS:
        raise MCPBridgeError(
            f"the {step} step returned no valid 'next'", code="invalid_step_result", details={"next": list(NEXT_STEPS)}
        )
    return routed
