"""Per-endpoint rate limit: an exact sliding one-minute window, shared by every instance and process, at a cost
per call that does not grow with the limit.

The guarantee, in the limiter's timeline (the millisecond time it records for each call it allows): no 60 s window
holds more than ``limit`` allowed calls, and a call is allowed whenever fewer than ``limit`` allowed calls are less
than 60 s older than it. Denied calls are not recorded. That is the sliding-window log, exactly; the cheaper
schemes are not exact: fixed-window or per-second counters either let some 60 s span hold more than ``limit``
calls or refuse calls it has room for, and GCRA with a burst of ``limit`` lets a ``limit + 1``-th call in less
than a minute after the burst.

The log of an endpoint numbers the calls it allows, 1, 2, 3, ..., each with its time. It lives in a *head* item
and in *chunk* items (RECENT = 64):

    RATE#<endpoint_id> / LOG                 epoch, version = n (the number of the latest call),
                                             hits = the times of the latest calls (at most RECENT), expires_at
    RATE#<endpoint_id> / LOG#<epoch>#<c>     hits = the times of calls c*RECENT+1 .. (c+1)*RECENT, expires_at

A call reads the head (``n`` calls logged), takes as its time ``t`` the later of its clock and the latest time in
the log, and looks up the time of call ``n + 1 - limit``: in the head when ``limit <= RECENT`` (the default limit,
60, never reads anything else), otherwise in one chunk. The call is allowed when that call is 60 s older than
``t`` or more, or does not exist; it then writes the head back with ``version = n + 1`` and ``t`` appended, on
condition that the head is still at ``epoch``/``n`` (or still absent). A lost race is decided again against the
winner's head, which the failed write returns; a denied call writes nothing.

Why it is exact across instances. Every allowed call is a conditional write of the one head moving it from
``n`` to ``n + 1``, so calls are numbered once each, in the order they were allowed, whichever instance made
them, and their times never decrease along the numbers. Call ``j`` was allowed only once call ``j - limit`` was
at least 60 s older than it; so a 60 s window holding call ``j``, the latest in it, cannot hold call
``j - limit``, nor any earlier one: at most ``limit`` calls. Conversely a call is refused only when call
``n + 1 - limit`` and the ``limit - 1`` after it are all in its window. For the lookup to see the right times:

- the head keeps the times of the latest RECENT calls, minus those a window older than the latest call (no later
  call can have them in its window: "among the latest RECENT but not in the head" means old);
- the call that moves the head past a multiple of RECENT first writes the head's times as their chunk (``put``
  where absent; racers holding the same head write the same times). A chunk is thus written before the head can
  forget its times, and never changes after, so the last few read are cached in memory;
- items expire 120 s after their latest time: an expired chunk only held times older than a window, and an
  expired head means every call it logged is. A new head starts a new epoch, so nothing from an earlier life of
  the log (a late write from it included: the condition names the epoch) mixes with this one.

An allowed call reads the head (and, above RECENT, a chunk, cached for the next calls) and writes the head (and,
every RECENT calls, a chunk): items under 1 KB whatever the limit (1 to 6000), one DynamoDB write unit per call
where the single-item log of every time in the window took up to 53. The head this process last wrote is kept in
memory and used instead of the read: if another instance moved the head meanwhile, the conditional write fails and
returns the current head, so a stale copy costs one lost write, never a wrong count; a denial is only ever decided
on a head just read (its retry hint is then exact). Calls of one process for one endpoint take turns (a lock per
endpoint), so they never race each other; a race lost to another process is decided again at once, with the
winner's head, and only after a few such losses in a row do retries back off. The log's writes are not synced to
disk one by one on the embedded store (``durable=False``): a power cut may forget the last calls counted, and as
many more calls than the limit could then pass in the minute after it. Clocks of instances are assumed to agree
(to well under the 60 s window); one running behind records its calls at the latest time already in the log
rather than in the past. A call's time is read before its write, so an instance frozen in between is counted at
the time it read. ``retry_after_seconds`` on a denial is the wait until call ``n + 1 - limit`` leaves the window,
rounded up to whole seconds, at least 1: the earliest a retry can succeed.
"""

from __future__ import annotations

import contextlib
import math
import random
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mcpbridge.domain.items import Compare, Condition, Item, ItemExists, Key, all_of
from mcpbridge.errors import ConditionFailed, Unavailable
from mcpbridge.observability import NoTelemetry
from mcpbridge.ports import Clock, Store, Telemetry

WINDOW_MS = 60_000
EXPIRE_AFTER_SECONDS = 120
RECENT = 64
"""Calls whose times the head keeps; a chunk holds as many. At 64 times the head stays under 1 KB."""
MAX_ATTEMPTS = 30
_CACHED_CHUNKS = 32
_CACHED_HEADS = 4096
_STRIPES = 64
_IMMEDIATE_ATTEMPTS = 4
"""Lost races retried at once (with the winner's head, which the failed write returned) before any backoff."""
_BACKOFF_BASE_SECONDS = 0.002
_BACKOFF_CAP_SECONDS = 0.05


@dataclass(frozen=True)
class RateDecision:
    allowed: bool
    retry_after_seconds: int
    """0 when allowed; otherwise the whole seconds until enough counted calls leave the window (at least 1)."""


def window_key(endpoint_id: str) -> Key:
    """The head of the endpoint's log."""
    return Key(f"RATE#{endpoint_id}", "LOG")


def chunk_key(endpoint_id: str, epoch: str, chunk: int) -> Key:
    return Key(f"RATE#{endpoint_id}", f"LOG#{epoch}#{chunk:010d}")


@dataclass(frozen=True)
class _Head:
    epoch: str
    version: int
    hits: Sequence[int]
    """Times of calls ``version - len(hits) + 1 .. version``, oldest first."""

    @classmethod
    def of(cls, item: Item | None) -> _Head | None:
        if item is None:
            return None
        return cls(str(item["epoch"]), int(item["version"]), [int(ms) for ms in item["hits"]])


class RateLimiter:
    """``hit`` counts one call against an endpoint's per-minute budget, exactly, across instances."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        *,
        max_attempts: int = MAX_ATTEMPTS,
        sleep: Callable[[float], None] = time.sleep,
        recent: int = RECENT,
        telemetry: Telemetry | None = None,
    ) -> None:
        """``telemetry`` counts the calls refused (``RateLimitedCalls``)."""
        if recent < 1:
            raise ValueError("recent must be at least 1")
        self._store = store
        self._clock = clock
        self._max_attempts = max_attempts
        self._sleep = sleep
        self._recent = recent
        self._telemetry = telemetry or NoTelemetry()
        self._chunks: OrderedDict[Key, tuple[int, ...]] = OrderedDict()
        self._heads: OrderedDict[Key, Item] = OrderedDict()
        self._lock = threading.Lock()
        self._stripes = tuple(threading.Lock() for _ in range(_STRIPES))

    def hit(self, endpoint_id: str, limit: int) -> RateDecision:
        """Allow and count the call if fewer than ``limit`` calls were allowed in the last minute (``limit <= 0``:
        no limit). Raises ``errors.Unavailable`` if the log cannot be updated; it never allows silently."""
        if limit <= 0:
            return RateDecision(allowed=True, retry_after_seconds=0)
        key = window_key(endpoint_id)
        # Calls of this process for one endpoint take turns: they never race each other, only other processes.
        with self._stripes[hash(key) % len(self._stripes)]:
            return self._hit(endpoint_id, key, limit)

    def _hit(self, endpoint_id: str, key: Key, limit: int) -> RateDecision:
        current = self._known_head(key)
        fresh = current is None
        if fresh:
            current = self._store.get(key)
        for attempt in range(self._max_attempts):
            if attempt >= _IMMEDIATE_ATTEMPTS:
                # Still losing to other instances: spread out (jittered exponential backoff) instead of colliding.
                self._sleep(random.uniform(0, min(_BACKOFF_CAP_SECONDS, _BACKOFF_BASE_SECONDS * 2**attempt)))
            head = _Head.of(current)
            now_ms = math.floor(self._clock.now() * 1000)
            at = max(now_ms, head.hits[-1]) if head is not None and head.hits else now_ms
            if head is not None:
                oldest = self._time_of(endpoint_id, head, head.version + 1 - limit)
                if oldest is not None and at - oldest < WINDOW_MS:
                    if not fresh:  # a denial is decided on the log as it is now, so its retry hint is exact
                        current, fresh = self._store.get(key), True
                        continue
                    self._remember(key, current)
                    self._telemetry.count("RateLimitedCalls")
                    wait_ms = oldest + WINDOW_MS - at
                    return RateDecision(allowed=False, retry_after_seconds=max(1, math.ceil(wait_ms / 1000)))
                if head.version % self._recent == 0:
                    self._write_chunk(endpoint_id, head)
            written = self._next(key, head, at)
            try:
                # Not worth a disk sync per call: a power cut may forget the last calls, never count one twice.
                self._store.put(written, condition=_unchanged(head), durable=False)
            except ConditionFailed as lost:
                current, fresh = lost.current, True  # the winner's head: decide again against it, at once
                continue
            self._remember(key, written)
            return RateDecision(allowed=True, retry_after_seconds=0)
        self._forget(key)
        raise Unavailable("the rate limiter is too contended right now; retry shortly", code="rate_limiter_contention")

    def _known_head(self, key: Key) -> Item | None:
        """The head this process last wrote or read (other instances may have moved it since: the conditional
        write then fails and returns the current one, so a stale head costs one lost write, never a wrong count)."""
        with self._lock:
            head = self._heads.get(key)
            if head is not None:
                self._heads.move_to_end(key)
            return head

    def _remember(self, key: Key, head: Item | None) -> None:
        with self._lock:
            if head is None:
                self._heads.pop(key, None)
                return
            self._heads[key] = head
            self._heads.move_to_end(key)
            while len(self._heads) > _CACHED_HEADS:
                self._heads.popitem(last=False)

    def _forget(self, key: Key) -> None:
        self._remember(key, None)

    def _time_of(self, endpoint_id: str, head: _Head, number: int) -> int | None:
        """The time of call ``number`` of the log, or None when it is before the log or known to be older than a
        window (dropped from the head for age, or in a chunk that expired)."""
        if number < 1:
            return None
        first_in_head = head.version - len(head.hits) + 1
        if number >= first_in_head:
            return head.hits[number - first_in_head]
        if number > head.version - self._recent:
            return None  # among the latest calls but no longer in the head: dropped for age
        chunk, index = divmod(number - 1, self._recent)
        hits = self._chunk(chunk_key(endpoint_id, head.epoch, chunk))
        if hits is None:
            return None
        first_in_chunk = self._recent - len(hits)
        return hits[index - first_in_chunk] if index >= first_in_chunk else None

    def _chunk(self, key: Key) -> tuple[int, ...] | None:
        """A chunk's times. A written chunk never changes (nor does the one head state it was made from), so the
        last few read are kept: consecutive calls look up the same chunk RECENT times in a row."""
        with self._lock:
            if key in self._chunks:
                self._chunks.move_to_end(key)
                return self._chunks[key]
        item = self._store.get(key)
        if item is None:
            return None
        hits = tuple(int(ms) for ms in item["hits"])
        with self._lock:
            self._chunks[key] = hits
            while len(self._chunks) > _CACHED_CHUNKS:
                self._chunks.popitem(last=False)
        return hits

    def _write_chunk(self, endpoint_id: str, head: _Head) -> None:
        """Keep the head's times before the head forgets them: its calls are exactly one chunk."""
        if head.version == 0 or not head.hits:
            return
        item: Item = {
            **chunk_key(endpoint_id, head.epoch, head.version // self._recent - 1).as_dict(),
            "hits": list(head.hits),
            "expires_at": head.hits[-1] // 1000 + EXPIRE_AFTER_SECONDS,
        }
        # Written already, by a racer holding the same head: the same times.
        with contextlib.suppress(ConditionFailed):
            self._store.put(item, condition=Condition.absent("rate_chunk_new"), durable=False)

    def _next(self, key: Key, head: _Head | None, at: int) -> Item:
        """The head with the call at ``at`` appended, times a window older than it dropped."""
        kept = [ms for ms in head.hits if at - ms < WINDOW_MS] if head is not None else []
        kept = kept[max(0, len(kept) - self._recent + 1) :]
        return {
            **key.as_dict(),
            "epoch": head.epoch if head is not None else secrets.token_hex(6),
            "version": head.version + 1 if head is not None else 1,
            "hits": [*kept, at],
            "expires_at": at // 1000 + EXPIRE_AFTER_SECONDS,
        }


def _unchanged(head: _Head | None) -> Condition:
    if head is None:
        return Condition.absent("rate_log_new")
    return Condition(
        "rate_log_unchanged",
        all_of(ItemExists(), Compare("epoch", "=", head.epoch), Compare("version", "=", head.version)),
    )
