"""The embedded workflow: each execution of a paused agent tool call runs in a thread of this process.

What an execution does is the agent's step loop (:class:`mcpbridge.agent.loop.StepLoop`, handed in as ``run``); this
adapter gives it a thread and a place to wait. A pause is a token ``local:<call>:<nonce>`` registered in memory
(``park``); :meth:`LocalWorkflow.send_success` wakes the thread waiting on it. Every pause and decision is on the
call's record, so after a restart :meth:`LocalWorkflow.recover` starts an execution again for every call
``unfinished`` names.
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Callable, Mapping
from typing import Any

from mcpbridge.errors import Conflict
from mcpbridge.ports import CallStart

log = logging.getLogger("mcpbridge.agent")

TOKEN_PREFIX = "local:"  # noqa: S105 - a prefix, not a secret


class LocalWorkflow:
    def __init__(
        self,
        run: Callable[[str, str, LocalWorkflow], None],
        unfinished: Callable[[], list[CallStart]],
    ) -> None:
        """``run(call_id, workspace_id, parking)`` is one execution to its end; ``unfinished()`` the executions to
        start again after a restart."""
        self._run = run
        self._unfinished = unfinished
        self._waiters: dict[str, threading.Event] = {}
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
            woken = self._waiters.pop(task_token, None)
        if woken is None:
            # Not a pause of this process (an agent's callback token, or one parked before a restart and already
            # replaced by recovery): there is nothing waiting on it here.
            raise Conflict("nothing is waiting on this token (already resolved or expired)", code="already_resolved")
        woken.set()

    # -- parking (what a paused execution waits on) ----------------------------------------------------------------

    def park(self, call_id: str) -> tuple[str, threading.Event]:
        token = f"{TOKEN_PREFIX}{call_id}:{secrets.token_urlsafe(16)}"
        woken = threading.Event()
        with self._lock:
            self._waiters[token] = woken
        return token, woken

    def unpark(self, token: str) -> None:
        with self._lock:
            self._waiters.pop(token, None)

    def stopping(self) -> bool:
        return self._stopping.is_set()

    # -- executions ---------------------------------------------------------------------------------------------

    def recover(self) -> int:
        """Start an execution for every unfinished call (after a restart). Returns how many."""
        started = 0
        for call in self._unfinished():
            self.start(call)
            started += 1
        if started:
            log.info("resumed %d unfinished tool calls", started)
        return started

    def _execute(self, call_id: str, workspace_id: str) -> None:
        try:
            self._run(call_id, workspace_id, self)
        finally:
            with self._lock:
                if self._running.get(call_id) is threading.current_thread():
                    del self._running[call_id]

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
