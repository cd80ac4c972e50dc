"""Optimistic updates: read, change, write on condition that nothing changed in between, and on a lost race start
again from a fresh read, a bounded number of times.

The loop lives here once; each caller gives one ``attempt`` (its read, its change and its conditional write, raising
:class:`~mcpbridge.errors.ConditionFailed` when the write loses) and says what to answer when it keeps losing. An
attempt that can tell a lost race from a real refusal (the item is gone, a name is taken, the caller pinned a
version) raises that refusal itself: only ``ConditionFailed`` starts another round.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from mcpbridge.errors import ConditionFailed, Conflict, MCPBridgeError

T = TypeVar("T")

ATTEMPTS = 5


def update_optimistically(attempt: Callable[[], T], *, busy: Callable[[], Conflict], attempts: int = ATTEMPTS) -> T:
    """``attempt()`` until it returns, retrying each lost race (``ConditionFailed``); ``busy()`` after the last."""
    for _ in range(attempts):
        try:
            return attempt()
        except ConditionFailed:
            continue
    raise busy()


@contextmanager
def refusing_when(
    *, gone: Callable[[], MCPBridgeError], pinned: Callable[[], MCPBridgeError] | None = None
) -> Iterator[None]:
    """Around the conditional write of an attempt: a write that lost because the item is gone raises ``gone()``; one
    that lost while the caller pinned a version (``pinned`` given) raises ``pinned()``; any other lost race propagates,
    so :func:`update_optimistically` starts another round."""
    try:
        yield
    except ConditionFailed as lost:
        if lost.current is None:
            raise gone() from None
        if pinned is not None:
            raise pinned() from None
        raise
