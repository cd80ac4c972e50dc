"""The embedded workflow: agent tool calls that pause run their steps in a thread of this process.

Each execution loops over the steps (``prepare`` -> wait -> ``prepare`` ... -> ``invoke`` -> ``finish``), exactly
as the Step Functions state machine does. A pause is a token ``local:<call>:<nonce>`` registered in memory and
parked on the call's record by ``await_resolution``; :meth:`LocalWorkflow.send_success` wakes the thread. The record
is read again at least every second: a call resolved by another process on the same data (``mcpbridge calls
approve`` while ``mcpbridge serve`` runs it) goes on within that second; the wait ends at the call's deadline (checked
against the injected clock), which runs ``timeout``.

Nothing lives only in memory: every pause and decision is on the record, so after a restart
:meth:`LocalWorkflow.recover` starts an execution again for every unfinished call; it parks a new token and
waits for the rest of the time (a call that was ``running`` when the process died is reported uncertain, never run
again).
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mcpbridge.errors import Conflict, MCPBridgeError, NotFound
from mcpbridge.ports import CallStart, Clock

if TYPE_CHECKING:
    from mcpbridge.agent.calls import ToolCalls
    from mcpbridge.agent.steps import ToolCallSteps

log = logging.getLogger("mcpbridge.agent")

TOKEN_PREFIX = "local:"  # noqa: S105 - a prefix, not a secret
_SLICE_SECONDS = 1.0
_MAX_STEPS = 50
_WAITING = frozenset({"awaiting_approval", "awaiting_oauth"})


@dataclass
class _Waiter:
    call_id: str
    woken: threading.Event = field(default_factory=threading.Event)


class LocalWorkflow:
    def __init__(self, steps: Callable[[], ToolCallSteps], calls: Callable[[], ToolCalls], clock: Clock) -> None:
        self._steps = steps
        self._calls = calls
        self._clock = clock
        self._waiters: dict[str, _Waiter] = {}
        self._running: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()

    # -- the Workflow port --------------------------------------------------------------------------------------

    def start(self, call: CallStart) -> str:
        with self._lock:
            thread = self._running.get(call.call_id)
            if thread is not None and thread.is_alive():
                return f"local:{call.call_id}"
            thread = threading.Thread(
                target=self._execute, args=(call.call_id, call.workspace_id), name=f"call-{call.call_id}", daemon=True
            )
            self._running[call.call_id] = thread
        thread.start()
        return f"local:{call.call_id}"

    def send_success(self, task_token: str, output: Mapping[str, Any]) -> None:
        self._wake(task_token)

    def send_failure(self, task_token: str, error: str, cause: str) -> None:
        self._wake(task_token)

    def _wake(self, task_token: str) -> None:
        with self._lock:
            waiter = self._waiters.pop(task_token, None)
        if waiter is None:
            # Not a pause of this process (an agent's callback token, or one parked before a restart and already
            # replaced by recovery): there is nothing waiting on it here.
            raise Conflict("nothing is waiting on this token (already resolved or expired)", code="already_resolved")
        waiter.woken.set()

    # -- executions ---------------------------------------------------------------------------------------------

    def recover(self) -> int:
        """Start an execution for every unfinished call (after a restart). Returns how many."""
        started = 0
        for call in self._calls().unfinished():
            self.start(CallStart(call.id, call.workspace_id, call.approval_timeout_seconds, call.oauth_timeout_seconds))
            started += 1
        if started:
            log.info("resumed %d unfinished tool calls", started)
        return started

    def _execute(self, call_id: str, workspace_id: str) -> None:
        steps = self._steps()
        try:
            following = steps.prepare(call_id, workspace_id)["next"]
            for _ in range(_MAX_STEPS):
                if self._stopping.is_set():
                    return
                if following in ("approval", "oauth"):
                    following = self._pause(steps, call_id, workspace_id, following)
                elif following == "invoke":
                    following = steps.invoke(call_id, workspace_id)["next"]
                else:
                    steps.finish(call_id, workspace_id)
                    return
            log.error("tool call %s did not settle after %d steps", call_id, _MAX_STEPS)
        except MCPBridgeError as exc:
            log.error("tool call %s: workflow step failed: %s", call_id, exc.code)
            self._end(steps, call_id, workspace_id)
        except Exception:
            log.exception("tool call %s: workflow step failed", call_id)
            self._end(steps, call_id, workspace_id)
        finally:
            with self._lock:
                if self._running.get(call_id) is threading.current_thread():
                    del self._running[call_id]

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

    def _pause(self, steps: ToolCallSteps, call_id: str, workspace_id: str, kind: Any) -> str:
        token = f"{TOKEN_PREFIX}{call_id}:{secrets.token_urlsafe(16)}"
        waiter = _Waiter(call_id)
        with self._lock:
            self._waiters[token] = waiter
        try:
            steps.await_resolution(call_id, workspace_id, kind, token)
            while not waiter.woken.is_set():
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
                if self._stopping.is_set():
                    return "stop"
                waiter.woken.wait(_SLICE_SECONDS if remaining is None else min(_SLICE_SECONDS, remaining))
        finally:
            with self._lock:
                self._waiters.pop(token, None)
        return str(steps.prepare(call_id, workspace_id)["next"])

    def close(self, timeout: float = 5.0) -> None:
        """Stop waiting (the records keep every pause; :meth:`recover` picks them up at the next start)."""
        self._stopping.set()
        with self._lock:
            threads = list(self._running.values())
        for thread in threads:
            thread.join(timeout=timeout)

    def wait_idle(self, call_id: str, timeout: float) -> bool:
        """For tests and the CLI: wait until the call's execution thread has ended."""
        with self._lock:
            thread = self._running.get(call_id)
        if thread is None:
            return True
        thread.join(timeout)
        return not thread.is_alive()
