"""Cached connections to external MCP services: one per (service, principal scope), reused across operations.

Keys: ``PoolKey(service_id, scope)``. ``scope`` is ``"workspace"`` for services every member shares (none / API key
/ bearer auth) and ``"user:<id>"`` for OAuth services, whose connections carry one user's token (see
:func:`mcpbridge.client.registry.scope_for`).

A cached connection is reused only while it was built from the same configuration: each entry remembers the
fingerprint of its :class:`~mcpbridge.client.connection.ConnectionSpec` (URL, transport, headers including the
credential, timeouts). A service changed on another instance, a rotated credential or a refreshed OAuth token
gives a different fingerprint, so the next :meth:`ConnectionPool.session` closes the old connection and opens a
new one. Changes made through this process's registry close the service's connections at once
(:meth:`ConnectionPool.forget_service`, called by the registry's change listener, before the change is written).

Each connection lives in an asyncio task of its own (the holder), so it outlives the request that opened it and is
closed from any task. A connection is retired after ``idle_seconds`` without use, never while an operation holds
it. The pool belongs to the event loop that first used it: under another loop (a test client's per-request loop)
it starts afresh, since tasks of a finished loop can neither run nor be closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from mcpbridge.client.connection import Connection, ConnectionSpec
from mcpbridge.domain.external_services import WORKSPACE_SCOPE
from mcpbridge.errors import UpstreamError
from mcpbridge.outbound.policy import EgressPolicy

log = logging.getLogger("mcpbridge.services")

DEFAULT_IDLE_SECONDS = 300.0
MAX_CONNECTIONS = 256
_CLOSE_TIMEOUT = 10.0


@dataclass(frozen=True)
class PoolKey:
    service_id: str
    scope: str = WORKSPACE_SCOPE


def fingerprint(spec: ConnectionSpec) -> str:
    """A digest of everything that shapes a connection (headers included, so it never leaves the process)."""
    material = json.dumps(
        [spec.url, spec.transport, sorted(spec.headers.items()), spec.timeout, spec.initialize_timeout],
        separators=(",", ":"),
    )
    return hashlib.sha256(material.encode()).hexdigest()


@dataclass
class _Entry:
    key: PoolKey
    fingerprint: str
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    connection: Connection | None = None
    error: BaseException | None = None
    holder: asyncio.Task[None] | None = None
    users: int = 0
    last_used: float = field(default_factory=time.monotonic)
    retired: bool = False


class ConnectionPool:
    """See the module docstring. ``clock`` is monotonic seconds (injectable for idle tests)."""

    def __init__(
        self,
        policy: EgressPolicy,
        *,
        idle_seconds: float = DEFAULT_IDLE_SECONDS,
        max_connections: int = MAX_CONNECTIONS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._policy = policy
        self._idle_seconds = idle_seconds
        self._max_connections = max_connections
        self._clock = clock
        self._entries: dict[PoolKey, _Entry] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()  # guards _entries: forget_* may be called from worker threads
        self.opened = 0
        """How many connections this pool opened (for tests and metrics)."""

    # -- use ------------------------------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def session(
        self, key: PoolKey, spec: ConnectionSpec, *, until: float | None = None
    ) -> AsyncIterator[Connection]:
        """The cached connection for ``key`` built from ``spec`` (opened, or replaced when ``spec`` changed).

        While the block runs the connection is not retired. Connection failures propagate as the connection layer
        raises them (:class:`~mcpbridge.errors.UpstreamError` and subclasses); a failed open is not cached. ``until``
        (on anyio's clock): stop waiting for a connection still opening then, with ``upstream_timeout`` (nothing
        was sent; the opening goes on for the next caller).
        """
        # Claimed before it is ready: a connection retired meanwhile waits for this operation too.
        entry = self._claim(key, spec)
        try:
            await self._ready(entry, spec, until)
            if entry.connection is None:
                with self._lock:
                    if self._entries.get(key) is entry:
                        self._entries.pop(key, None)
                assert entry.error is not None
                raise entry.error
            yield entry.connection
        finally:
            entry.users -= 1
            entry.last_used = self._clock()
            if entry.users == 0:
                entry.idle.set()

    @staticmethod
    async def _ready(entry: _Entry, spec: ConnectionSpec, until: float | None) -> None:
        if until is None:
            await entry.ready.wait()
            return
        left = max(0.0, until - anyio.current_time())
        with anyio.move_on_after(left):
            await entry.ready.wait()
        if not entry.ready.is_set():
            raise UpstreamError(
                f"{spec.host} could not be reached within the {left:.0f} s this request had left; nothing was sent",
                code="upstream_timeout",
                details={"timeout_seconds": round(left, 2)},
            )

    def _claim(self, key: PoolKey, spec: ConnectionSpec) -> _Entry:
        """The entry for ``key`` built from ``spec`` (a new one opening when there is none or it was built from
        another spec), counted as in use."""
        self._adopt_loop()
        wanted = fingerprint(spec)
        self._retire_idle()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and (entry.fingerprint != wanted or entry.retired):
                self._entries.pop(key, None)
                self._retire(entry)
                entry = None
            if entry is None:
                entry = _Entry(key, wanted, last_used=self._clock())
                self._entries[key] = entry
                entry.holder = asyncio.get_running_loop().create_task(self._hold(entry, spec))
                self.opened += 1
            entry.users += 1
            entry.idle.clear()
        return entry

    async def _hold(self, entry: _Entry, spec: ConnectionSpec) -> None:
        try:
            async with Connection(spec, self._policy) as connection:
                entry.connection = connection
                entry.ready.set()
                await entry.stop.wait()
                await entry.idle.wait()  # a retired connection finishes the operations already running on it
        except Exception as exc:
            entry.error = exc
        finally:
            entry.ready.set()
            entry.retired = True

    # -- closing --------------------------------------------------------------------------------------------------

    def forget_service(self, service_id: str) -> int:
        """Close every cached connection of a service (all scopes). Safe from any thread; returns how many."""
        return self._forget(lambda key: key.service_id == service_id)

    def forget(self, key: PoolKey) -> int:
        """Close the cached connection of one (service, scope), e.g. after that user's OAuth token changed."""
        return self._forget(lambda candidate: candidate == key)

    def _forget(self, matches: Callable[[PoolKey], bool]) -> int:
        with self._lock:
            doomed = [entry for key, entry in self._entries.items() if matches(key)]
            for entry in doomed:
                self._entries.pop(entry.key, None)
                self._retire(entry)
        return len(doomed)

    def _retire(self, entry: _Entry) -> None:
        """Ask the holder to close the connection (it finishes once no operation is waiting on it)."""
        entry.retired = True
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            entry.stop.set()
        else:
            loop.call_soon_threadsafe(entry.stop.set)

    def _retire_idle(self) -> None:
        now = self._clock()
        with self._lock:
            idle = [
                entry
                for entry in self._entries.values()
                if entry.users == 0 and entry.ready.is_set() and now - entry.last_used > self._idle_seconds
            ]
            over = len(self._entries) - len(idle) - self._max_connections + 1
            if over > 0:  # too many: the least recently used idle ones go as well
                spare = sorted(
                    (e for e in self._entries.values() if e.users == 0 and e not in idle), key=lambda e: e.last_used
                )
                idle.extend(spare[:over])
            for entry in idle:
                self._entries.pop(entry.key, None)
                self._retire(entry)

    def _adopt_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return
        with self._lock:
            if self._loop is not None and self._entries:
                log.debug("new event loop: %d cached connections dropped", len(self._entries))
            self._entries.clear()
            self._loop = loop

    async def aclose(self) -> None:
        """Close every cached connection and wait for them (bounded)."""
        with self._lock:
            entries = list(self._entries.values())
            self._entries.clear()
        for entry in entries:
            self._retire(entry)
        holders = [e.holder for e in entries if e.holder is not None and not e.holder.done()]
        if holders:
            await asyncio.wait(holders, timeout=_CLOSE_TIMEOUT)

    @property
    def size(self) -> int:
        with self._lock:
            return len(self._entries)

    def cached(self, key: PoolKey) -> Connection | None:
        """The open connection cached under ``key``, if any (for tests and diagnostics)."""
        with self._lock:
            entry = self._entries.get(key)
        return entry.connection if entry is not None and not entry.retired else None


class ConnectionPools:
    """One :class:`ConnectionPool` per event loop (the server's loop, a workflow's loop, a Lambda invocation's),
    with closing requests fanned out to all of them."""

    def __init__(self, policy: EgressPolicy, **options: Any) -> None:
        self._policy = policy
        self._options = options
        self._pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ConnectionPool] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def for_running_loop(self) -> ConnectionPool:
        loop = asyncio.get_running_loop()
        with self._lock:
            pool = self._pools.get(loop)
            if pool is None:
                pool = self._pools[loop] = ConnectionPool(self._policy, **self._options)
            return pool

    def forget_service(self, service_id: str) -> int:
        with self._lock:
            pools = list(self._pools.values())
        return sum(pool.forget_service(service_id) for pool in pools)

    def forget_principal(self, service_id: str, principal_type: str, principal_id: str) -> int:
        """Close one principal's cached connections to a service (their OAuth token changed or went)."""
        return self.forget(PoolKey(service_id, f"{principal_type}:{principal_id}"))

    def forget(self, key: PoolKey) -> int:
        with self._lock:
            pools = list(self._pools.values())
        return sum(pool.forget(key) for pool in pools)

    async def aclose(self) -> None:
        """Close the running loop's pool (the others belong to loops that close their own)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            pool = self._pools.pop(loop, None)
        if pool is not None:
            await pool.aclose()
