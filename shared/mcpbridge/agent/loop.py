"""The loop that runs a paused agent tool call's steps in this process (the embedded workflow).

It follows the steps (``prepare`` -> wait -> ``prepare`` ... -> ``invoke`` -> ``finish``) exactly as the Step
Functions state machine does. A pause parks a token (``Parking``, the embedded workflow's) on the call's record with
``await_resolution`` and waits for it to be woken; the record is read again at least every second, so a call resolved
by another process on the same data (``mcpbridge calls approve`` while ``mcpbridge serve`` runs it) goes on within
that second; the wait ends at the call's deadline (checked against the injected clock), which runs ``timeout``.

Nothing lives only in memory: every pause and decision is on the record, so after a restart :meth:`StepLoop.
unfinished` names every call an execution must start again for; it parks a new token and waits for the rest of the
time (a call that was ``running`` when the process died is reported uncertain, never run again).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from mcpbridge.agent.calls import PendingKind
from mcpbridge.errors import MCPBridgeError, NotFound
from mcpbridge.ports import CallStart, Clock

if TYPE_CHECKING:
    from mcpbridge.agent.calls import ToolCalls
    from mcpbridge.agent.steps import ToolCallSteps

log = logging.getLogger("mcpbridge.agent")

SLICE_SECONDS = 1.0
MAX_STEPS = 50
_WAITING = frozenset({"awaiting_approval", "awaiting_oauth"})


class Parking(Protocol):
    """Where a paused execution waits (the embedded workflow): a token its resolution wakes."""

    def park(self, call_id: str) -> tuple[str, threading.Event]:
        """A fresh token for ``call_id`` and the event that ``send_success``/``send_failure`` on it sets."""
        ...

    def unpark(self, token: str) -> None: ...

    def stopping(self) -> bool:
        """Whether the process is shutting down (the execution stops; its record keeps the pause)."""
        ...


class StepLoop:
    def __init__(self, steps: Callable[[], ToolCallSteps], calls: Callable[[], ToolCalls], clock: Clock) -> None:
        self._steps = steps
        self._calls = calls
        self._clock = clock

    def unfinished(self) -> list[CallStart]:
        """The executions to start again after a restart: one per unfinished call."""
        return [
            CallStart(call.id, call.workspace_id, call.approval_timeout_seconds, call.oauth_timeout_seconds)
            for call in self._calls().unfinished()
        ]

    def run(self, call_id: str, workspace_id: str, parking: Parking) -> None:
        """One execution, to its end (a failed step closes the call as the state machine's Catch does)."""
        steps = self._steps()
        try:
            following = steps.prepare(call_id, workspace_id)["next"]
            for _ in range(MAX_STEPS):
                if parking.stopping():
                    return
                if following in ("approval", "oauth"):
                    following = self._pause(steps, call_id, workspace_id, following, parking)  # type: ignore[arg-type]
                elif following == "invoke":
                    following = steps.invoke(call_id, workspace_id)["next"]
                else:
                    steps.finish(call_id, workspace_id)
                    return
            log.error("tool call %s did not settle after %d steps", call_id, MAX_STEPS)
        except MCPBridgeError as exc:
            log.error("tool call %s: workflow step failed: %s", call_id, exc.code)
            self._end(steps, call_id, workspace_id)
        except Exception:
            log.exception("tool call %s: workflow step failed", call_id)
            self._end(steps, call_id, workspace_id)

    def _end(self, steps: ToolCallSteps, call_id: str, workspace_id: str) -> None:
        """After a failed step (``finish`` too): close the call (failed, or uncertain if it may have run), as the
        state machine's Catch does; if ``finish`` fails again, record that with ``fail``, as ``RecordFailure`` does."""
        try:
            steps.finish(call_id, workspace_id)
            return
        except Exception as exc:
            error = type(exc).__name__
            log.warning("tool call %s: finish failed (%s)", call_id, error)
        try:
            steps.fail(call_id, workspace_id, error)
        except Exception:
            log.exception("tool call %s: could not be closed", call_id)

    def _pause(self, steps: ToolCallSteps, call_id: str, workspace_id: str, kind: PendingKind, parking: Parking) -> str:
        token, woken = parking.park(call_id)
        try:
            steps.await_resolution(call_id, workspace_id, kind, token)
            while not woken.is_set():
                try:
                    call = self._calls().find(workspace_id, call_id)
                except NotFound:  # its workspace or user was deleted: the call just ends
                    return "finish"
                if call.status not in _WAITING:
                    break  # resolved by another process on the same data (the CLI, another server): go on
                deadline = call.deadline_at
                remaining = None if deadline is None else deadline - self._clock.now()
                if remaining is not None and remaining <= 0:
                    return str(steps.timeout(call_id, workspace_id, kind)["next"])
                if parking.stopping():
                    return "stop"
                woken.wait(SLICE_SECONDS if remaining is None else min(SLICE_SECONDS, remaining))
        finally:
            parking.unpark(token)
        return str(steps.prepare(call_id, workspace_id)["next"])
