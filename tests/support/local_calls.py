"""Waiting for a tool call that the in-process workflow runs: for as long as the call's thread is alive and working.

The embedded workflow runs each call that pauses on a thread of this process named ``call-<id>``
(``mcpbridge.adapters.local.workflow``). A wait here follows that thread (tests.support.readiness): it goes on while
the thread is alive and using CPU, however busy the machine is, and fails at once when the thread has ended without
the awaited state, or once it has made no progress for a long time (a pause nothing resolves).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from tests.support.readiness import Worker, wait_until

_T = TypeVar("_T")


def execution(call_id: str) -> Worker:
    """The thread running ``call_id`` (one that has already ended counts as exited)."""
    name = f"the execution of call {call_id}"
    thread = next((t for t in threading.enumerate() if t.name == f"call-{call_id}"), None)
    if thread is None:
        return Worker(name, lambda: False, lambda: 0.0, lambda: "")
    return Worker.thread(name, thread)


def wait_for_call(call_id: str, look: Callable[[], _T | None], *, what: str) -> _T:
    """Poll ``look`` until it returns something other than None/False, while the call's execution works."""
    found: list[_T] = []

    def ready() -> bool:
        value = look()
        if value is None or value is False:
            return False
        found[:] = [value]
        return True

    wait_until(ready, execution(call_id), what=what)
    return found[0]


def wait_idle(call_id: str) -> None:
    """Until the call's execution thread has ended (its last step announced)."""
    worker = execution(call_id)
    wait_until(lambda: not worker.alive(), worker, what="ending")
