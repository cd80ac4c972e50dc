"""An event that cancels what waits on it, with no task of its own watching it.

An operation on an upstream session ends early when its session dies, when the server rejects the session, or
when a request is refused. Watching each of those with ``await event.wait()`` costs a task per event per
operation (created, scheduled, cancelled: a tool call paid for four); a :class:`Tripwire` instead cancels the
scopes registered with it when it is set, from the task that sets it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import anyio


class Tripwire:
    """Set once (later sets do nothing). Everything runs on one event loop: ``set`` is called from a task of it."""

    def __init__(self) -> None:
        self._set = False
        self._scopes: list[anyio.CancelScope] = []
        self._event: anyio.Event | None = None

    def set(self) -> None:
        if self._set:
            return
        self._set = True
        for scope in self._scopes:
            scope.cancel()
        if self._event is not None:
            self._event.set()

    def is_set(self) -> bool:
        return self._set

    async def wait(self) -> None:
        if self._set:
            return
        if self._event is None:
            self._event = anyio.Event()
        await self._event.wait()

    @contextlib.contextmanager
    def cancels(self, scope: anyio.CancelScope) -> Iterator[None]:
        """While the block runs, setting this cancels ``scope`` (at once if it is set already)."""
        if self._set:
            scope.cancel()
        self._scopes.append(scope)
        try:
            yield
        finally:
            self._scopes.remove(scope)
