"""Per-endpoint rate limit: an exact sliding one-minute window, shared by every instance and process.

The serverless form of WeKnora's Redis sliding-window log. One item per endpoint holds the millisecond timestamps
of the calls allowed in the last minute:

    RATE#<endpoint_id> / WINDOW     hits = [ms, ...], version = n, expires_at = now + 120 s

A call reads the window, drops timestamps older than a minute and, if fewer than ``limit`` remain, appends its own
and writes the item back on condition that nobody else wrote it in between (``version`` unchanged, or the item still
absent). A lost race is retried from a fresh read. A denied call writes nothing, so it does not count against the
budget. Idle windows expire through the store's TTL.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from mcpbridge.domain.items import Condition, Item, Key
from mcpbridge.errors import ConditionFailed, Unavailable
from mcpbridge.ports import Clock, Store

WINDOW_MS = 60_000
EXPIRE_AFTER_SECONDS = 120
MAX_ATTEMPTS = 30
_BACKOFF_BASE_SECONDS = 0.002
_BACKOFF_CAP_SECONDS = 0.05


@dataclass(frozen=True)
class RateDecision:
    allowed: bool
    retry_after_seconds: int
    """0 when allowed; otherwise the whole seconds until the oldest counted call leaves the window (at least 1)."""


def window_key(endpoint_id: str) -> Key:
    return Key(f"RATE#{endpoint_id}", "WINDOW")


class RateLimiter:
    """``hit`` counts one call against an endpoint's per-minute budget, exactly, across instances."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        *,
        max_attempts: int = MAX_ATTEMPTS,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._store = store
        self._clock = clock
        self._max_attempts = max_attempts
        self._sleep = sleep

    def hit(self, endpoint_id: str, limit: int) -> RateDecision:
        """Allow and count the call if fewer than ``limit`` calls were allowed in the last minute (``limit <= 0``:
        no limit). Raises ``errors.Unavailable`` if the window cannot be updated; it never allows silently."""
        if limit <= 0:
            return RateDecision(allowed=True, retry_after_seconds=0)
        key = window_key(endpoint_id)
        for attempt in range(self._max_attempts):
            if attempt:
                # Jittered exponential backoff: racers spread out instead of colliding again.
                self._sleep(random.uniform(0, min(_BACKOFF_CAP_SECONDS, _BACKOFF_BASE_SECONDS * 2**attempt)))
            now = self._clock.now()
            now_ms = math.floor(now * 1000)
            current = self._store.get(key)
            hits = _recent(current, now_ms)
            if len(hits) >= limit:
                # The call fits once all but limit - 1 of the counted calls have left the window (with the limit
                # lowered, more than ``limit`` calls may still be in it).
                wait_ms = hits[len(hits) - limit] + WINDOW_MS - now_ms
                return RateDecision(allowed=False, retry_after_seconds=max(1, math.ceil(wait_ms / 1000)))
            item: Item = {
                **key.as_dict(),
                "hits": [*hits, now_ms],
                "version": (int(current["version"]) + 1) if current is not None else 1,
                "expires_at": math.floor(now) + EXPIRE_AFTER_SECONDS,
            }
            condition = (
                Condition.absent("rate_window_new")
                if current is None
                else Condition.equals("rate_window_unchanged", "version", current["version"])
            )
            try:
                self._store.put(item, condition=condition)
            except ConditionFailed:
                continue  # another call wrote the window first: read it again
            return RateDecision(allowed=True, retry_after_seconds=0)
        raise Unavailable("the rate limiter is too contended right now; retry shortly", code="rate_limiter_contention")


def _recent(item: Item | None, now_ms: int) -> list[int]:
    """The item's timestamps still inside the window, oldest first."""
    if item is None:
        return []
    return sorted(int(ms) for ms in item.get("hits", []) if now_ms - int(ms) < WINDOW_MS)
