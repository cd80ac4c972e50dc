"""Running a check that only reads the store from a request's coroutine."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import anyio.to_thread

from mcpbridge.bootstrap import Container

T = TypeVar("T")


async def store_read(container: Container, read: Callable[..., T], *args: Any) -> T:
    """``read(*args)``, which only reads the store: on the event loop when store reads are local (SQLite; a hop to a
    worker thread costs more than the reads: tools/list 0.43x -> 0.75x of a bare SDK server at 8 clients,
    tests/bench/mcp_endpoint.py), else in a worker thread, as blocking I/O must be (DynamoDB)."""
    if container.store.reads_are_local:
        return read(*args)
    return await anyio.to_thread.run_sync(read, *args)
