"""The per-endpoint rate limiter on both stores: an exact sliding minute, denied calls uncounted, safe under races."""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from moto import mock_aws

from mcpbridge.adapters.aws.dynamodb import DynamoStore
from mcpbridge.adapters.local.sqlite import SqliteStore
from mcpbridge.domain.items import Condition, Item, Key, Update
from mcpbridge.errors import ConditionFailed, Unavailable
from mcpbridge.ports import Store
from mcpbridge.publishing.rate_limit import RateLimiter, window_key
from tests.support.clock import FakeClock
from tests.support.dynamo_size import item_size
from tests.support.moto_atomic import atomic_dynamodb


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=["local", "aws"])
def store(request: pytest.FixtureRequest, clock: FakeClock, tmp_path: Path) -> Iterator[Store]:
    if request.param == "local":
        sqlite = SqliteStore(tmp_path / "store.sqlite3", clock)
        yield sqlite
        sqlite.close()
        return
    request.getfixturevalue("aws_credentials")
    from tests.support.aws import table_create_kwargs

    with mock_aws(), atomic_dynamodb():
        client = boto3.client("dynamodb", region_name="eu-west-1")
        client.create_table(**table_create_kwargs("ratelimit"))
        yield DynamoStore(client, "ratelimit", clock)


@pytest.fixture
def limiter(store: Store, clock: FakeClock) -> RateLimiter:
    return RateLimiter(store, clock)


def allowed(limiter: RateLimiter, endpoint_id: str, limit: int, times: int) -> list[bool]:
    return [limiter.hit(endpoint_id, limit).allowed for _ in range(times)]


def test_the_budget_is_spent_then_calls_are_denied_with_a_retry_hint(limiter: RateLimiter, clock: FakeClock) -> None:
    assert allowed(limiter, "ep_a", 3, 3) == [True, True, True]
    clock.advance(20)
    denied = limiter.hit("ep_a", 3)
    assert not denied.allowed
    assert denied.retry_after_seconds == 40, "the oldest call leaves the window 60 s after it was made"
    clock.advance(39.5)
    assert limiter.hit("ep_a", 3).retry_after_seconds == 1, "never less than one second"


def test_the_window_slides(limiter: RateLimiter, clock: FakeClock) -> None:
    assert limiter.hit("ep_a", 3).allowed
    clock.advance(30)
    assert allowed(limiter, "ep_a", 3, 2) == [True, True]
    assert not limiter.hit("ep_a", 3).allowed
    clock.advance(31)  # the first call is now 61 s old: one slot is free, the two later calls still count
    assert allowed(limiter, "ep_a", 3, 2) == [True, False]
    clock.advance(61)
    assert allowed(limiter, "ep_a", 3, 4) == [True, True, True, False]


def test_denied_calls_are_not_counted(limiter: RateLimiter, clock: FakeClock, store: Store) -> None:
    assert allowed(limiter, "ep_a", 3, 3) == [True] * 3
    for _ in range(50):
        clock.advance(1)
        assert not limiter.hit("ep_a", 3).allowed
    window = store.get(window_key("ep_a"))
    assert window is not None
    assert len(window["hits"]) == 3
    clock.advance(11)  # 61 s after the allowed calls, although denied calls kept coming until 11 s ago
    assert allowed(limiter, "ep_a", 3, 4) == [True, True, True, False]


def test_endpoints_have_independent_budgets(limiter: RateLimiter) -> None:
    assert allowed(limiter, "ep_a", 2, 3) == [True, True, False]
    assert allowed(limiter, "ep_b", 2, 3) == [True, True, False]
    assert allowed(limiter, "ep_c", 5, 1) == [True]


def test_no_limit_means_no_limit_and_no_write(limiter: RateLimiter, store: Store) -> None:
    for limit in (0, -1):
        assert all(allowed(limiter, "ep_a", limit, 100))
    assert store.get(window_key("ep_a")) is None


def test_a_lowered_limit_waits_for_enough_calls_to_leave(limiter: RateLimiter, clock: FakeClock) -> None:
    for _ in range(5):
        assert limiter.hit("ep_a", 10).allowed
        clock.advance(10)
    # Calls at 0, 10, 20, 30, 40 s; now 50 s. With the limit cut to 2, a call fits when only one is left in the
    # window: once the call made at 30 s leaves it, at 90 s.
    denied = limiter.hit("ep_a", 2)
    assert not denied.allowed
    assert denied.retry_after_seconds == 40
    clock.advance(40)
    assert limiter.hit("ep_a", 2).allowed


def test_an_idle_window_expires(limiter: RateLimiter, clock: FakeClock, store: Store) -> None:
    assert limiter.hit("ep_a", 1).allowed
    window = store.get(window_key("ep_a"))
    assert window is not None
    assert window["expires_at"] == int(clock.now()) + 120
    clock.advance(121)
    assert store.get(window_key("ep_a")) is None
    assert limiter.hit("ep_a", 1).allowed, "a new window starts over an expired one"
    fresh = store.get(window_key("ep_a"))
    assert fresh is not None
    assert fresh["version"] == 1
    assert len(fresh["hits"]) == 1


def test_racing_calls_are_counted_exactly(store: Store, clock: FakeClock) -> None:
    limiter = RateLimiter(store, clock)
    start = threading.Barrier(20)
    results: list[bool] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def call() -> None:
        try:
            start.wait()
            decision = limiter.hit("ep_race", 5)
            with lock:
                results.append(decision.allowed)
        except BaseException as exc:  # collected and re-raised by the test
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(results) == 20
    assert results.count(True) == 5
    window = store.get(window_key("ep_race"))
    assert window is not None
    assert len(window["hits"]) == 5


class _AlwaysLosing:
    """A store whose conditional writes always lose, as if other instances kept winning the race."""

    def __init__(self, inner: Store) -> None:
        self._inner = inner
        self.puts = 0

    def get(self, key: Key) -> Item | None:
        return self._inner.get(key)

    def put(self, item: Item, *, condition: Condition | None = None, durable: bool = True) -> None:
        self.puts += 1
        raise ConditionFailed(condition.name if condition else "live", None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def update(self, key: Key, update: Update, *, condition: Condition | None = None, durable: bool = True) -> Item:
        raise AssertionError("the limiter only puts")


def test_endless_contention_is_an_error_never_a_silent_allow(store: Store, clock: FakeClock) -> None:
    """Lost races are decided again at once (the failed write returned the winner's head); only a run of losses
    backs off, with sleeps bounded by 50 ms; then the call fails rather than being allowed uncounted."""
    losing = _AlwaysLosing(store)
    sleeps: list[float] = []
    limiter = RateLimiter(losing, clock, max_attempts=7, sleep=sleeps.append)
    with pytest.raises(Unavailable) as raised:
        limiter.hit("ep_a", 3)
    assert raised.value.code == "rate_limiter_contention"
    assert losing.puts == 7
    assert len(sleeps) == 3, "the first four attempts do not sleep"
    assert all(0 <= s <= 0.05 for s in sleeps)


# ------------------------------------------------------------------------------------------------ exactness and cost


@pytest.fixture(params=["local", "aws"])
def instances(request: pytest.FixtureRequest, clock: FakeClock, tmp_path: Path) -> Iterator[list[Store]]:
    """Three handles on one database, as three instances (or processes) of the hub would hold them."""
    if request.param == "local":
        handles = [SqliteStore(tmp_path / "store.sqlite3", clock) for _ in range(3)]
        yield list(handles)
        for handle in handles:
            handle.close()
        return
    request.getfixturevalue("aws_credentials")
    from tests.support.aws import table_create_kwargs

    with mock_aws(), atomic_dynamodb():
        boto3.client("dynamodb", region_name="eu-west-1").create_table(**table_create_kwargs("ratelimit"))
        yield [DynamoStore(boto3.client("dynamodb", region_name="eu-west-1"), "ratelimit", clock) for _ in range(3)]


class SlidingWindowModel:
    """The rule, brute force: a call is allowed when fewer than ``limit`` allowed calls are under 60 s older."""

    def __init__(self) -> None:
        self.allowed: list[int] = []

    def hit(self, now_ms: int, limit: int) -> tuple[bool, int]:
        window = [ms for ms in self.allowed if now_ms - ms < 60_000]
        if len(window) >= limit:
            return False, max(1, math.ceil((window[len(window) - limit] + 60_000 - now_ms) / 1000))
        self.allowed.append(now_ms)
        return True, 0


_endpoints = itertools.count()
steps = st.one_of(
    st.just(0),
    st.integers(1, 999),
    st.integers(1_000, 30_000),
    st.sampled_from([59_999, 60_000, 60_001, 119_000, 121_000, 300_000]),
)


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    calls=st.lists(st.tuples(st.integers(0, 2), steps, st.integers(1, 9)), min_size=1, max_size=40),
    recent=st.integers(1, 4),
)
def test_decisions_match_a_brute_force_sliding_window(
    instances: list[Store], clock: FakeClock, calls: list[tuple[int, int, int]], recent: int
) -> None:
    """Any call times, any (changing) limits, three instances: the same decisions and retry hints as the model.
    A head holding at most ``recent`` times makes the log spill into chunks after a few calls."""
    endpoint_id = f"ep_model_{next(_endpoints)}"
    limiters = [RateLimiter(store, clock, recent=recent) for store in instances]
    model = SlidingWindowModel()
    for instance, step_ms, limit in calls:
        clock.advance(step_ms / 1000)
        expected = model.hit(math.floor(clock.now() * 1000), limit)
        decision = limiters[instance].hit(endpoint_id, limit)
        assert (decision.allowed, decision.retry_after_seconds) == expected
        head = instances[instance].get(window_key(endpoint_id))
        assert head is not None
        assert len(head["hits"]) <= recent


@pytest.mark.parametrize("recent", [1, None])
def test_the_window_edge_is_exact_to_the_millisecond(store: Store, clock: FakeClock, recent: int | None) -> None:
    """A call 59 999 ms old still counts, one 60 000 ms old no longer does, whether its time is read from the head
    or from a chunk (``recent=1``)."""
    limiter = RateLimiter(store, clock) if recent is None else RateLimiter(store, clock, recent=recent)
    assert limiter.hit("ep_edge", 2).allowed
    clock.advance(59.9995)  # mid-millisecond, so that no rounding moves the edge: 59 999 ms later
    assert limiter.hit("ep_edge", 2).allowed, "one call in the window, room for another"
    denied = limiter.hit("ep_edge", 2)
    assert (denied.allowed, denied.retry_after_seconds) == (False, 1), "the first call is 59 999 ms old: it counts"
    clock.advance(0.001)
    assert limiter.hit("ep_edge", 2).allowed, "the first call is 60 000 ms old: out of the window"
    assert not limiter.hit("ep_edge", 2).allowed


def test_a_long_steady_stream_at_a_large_limit_matches_the_model(store: Store, clock: FakeClock) -> None:
    """Default head size, a limit well above it: denials and retry hints come from chunks."""
    limiter = RateLimiter(store, clock)
    model = SlidingWindowModel()
    for i in range(200):
        # Bursts of 40 calls 100 ms apart, every 20 s: the window fills, then denies until the first burst leaves.
        clock.advance(0.1 if i % 40 else 20)
        expected = model.hit(math.floor(clock.now() * 1000), 100)
        decision = limiter.hit("ep_steady", 100)
        assert (decision.allowed, decision.retry_after_seconds) == expected, i
    assert 100 < len(model.allowed) < 200, "the stream was denied at times, and allowed again"


@pytest.mark.parametrize("recent", [None, 4])
def test_two_hundred_racing_calls_over_three_instances_are_counted_exactly(
    instances: list[Store], clock: FakeClock, recent: int | None
) -> None:
    """200 calls at once through three store handles (with ``recent=4``, the log spilling into chunks as it goes):
    exactly the budget is allowed, and every allowed call is in the log once."""
    limiters = [
        RateLimiter(store, clock) if recent is None else RateLimiter(store, clock, recent=recent) for store in instances
    ]
    for _ in range(10):  # an earlier minute's calls, for the racers to look up in chunks
        assert limiters[0].hit("ep_crowd", 10).allowed
    clock.advance(60)
    start = threading.Barrier(200)
    results: list[bool] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def call(limiter: RateLimiter) -> None:
        try:
            start.wait()
            decision = limiter.hit("ep_crowd", 10)
            with lock:
                results.append(decision.allowed)
        except BaseException as exc:  # collected and re-raised by the test
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(limiters[i % 3],)) for i in range(200)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(results) == 200
    assert results.count(True) == 10
    head = instances[1].get(window_key("ep_crowd"))
    assert head is not None
    assert head["version"] == 20, "10 earlier calls and 10 now, each numbered once"
    assert not limiters[2].hit("ep_crowd", 10).allowed


class _Behind:
    """A clock that runs ``seconds`` behind another: an instance whose clock drifted."""

    def __init__(self, clock: FakeClock, seconds: float) -> None:
        self._clock = clock
        self._seconds = seconds

    def now(self) -> float:
        return self._clock.now() - self._seconds


def test_an_instance_whose_clock_runs_behind_cannot_log_a_call_in_the_past(
    instances: list[Store], clock: FakeClock
) -> None:
    ahead = RateLimiter(instances[0], clock)
    behind = RateLimiter(instances[1], _Behind(clock, 10))
    assert ahead.hit("ep_skew", 2).allowed
    assert behind.hit("ep_skew", 2).allowed, "its clock says 10 s earlier; the log records it at the latest time"
    clock.advance(55)
    # Both calls were made 55 s ago. Had the second been logged 10 s in the past, it would look 65 s old here.
    assert not ahead.hit("ep_skew", 1).allowed
    clock.advance(5)
    assert ahead.hit("ep_skew", 1).allowed


class _PausingStore:
    """The store, with the first head write held up while ``pause`` runs: an instance frozen mid-call."""

    def __init__(self, inner: Store, pause: Callable[[], None]) -> None:
        self._inner = inner
        self._pause: Callable[[], None] | None = pause

    def put(self, item: Item, *, condition: Condition | None = None, durable: bool = True) -> None:
        if self._pause is not None and item["sk"] == "LOG":
            pause, self._pause = self._pause, None
            pause()
        self._inner.put(item, condition=condition, durable=durable)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_a_call_frozen_across_the_expiry_of_the_log_cannot_overwrite_its_next_life(
    instances: list[Store], clock: FakeClock
) -> None:
    """The log expires while a call sits between reading and writing it; a new life reaches the same version. The
    late write must lose (the head carries its epoch), or the new life's calls would vanish from the count."""
    other = RateLimiter(instances[1], clock)
    assert [other.hit("ep_frozen", 3).allowed for _ in range(2)] == [True, True]

    def meanwhile() -> None:
        clock.advance(200)  # the log expires; two calls start its next life
        assert [other.hit("ep_frozen", 3).allowed for _ in range(2)] == [True, True]

    frozen = RateLimiter(_PausingStore(instances[0], meanwhile), clock)
    assert frozen.hit("ep_frozen", 3).allowed, "decided again on waking, against the new life: two calls of three"
    assert not other.hit("ep_frozen", 3).allowed, "three calls in this minute"
    head = instances[2].get(window_key("ep_frozen"))
    assert head is not None
    assert head["version"] == 3


class CountingStore:
    """The store, with every call counted and the size of every item written measured (as DynamoDB bills it)."""

    def __init__(self, inner: Store) -> None:
        self._inner = inner
        self.reads = 0
        self.written: list[int] = []
        self.durable: list[bool] = []

    def get(self, key: Key) -> Item | None:
        self.reads += 1
        return self._inner.get(key)

    def put(self, item: Item, *, condition: Condition | None = None, durable: bool = True) -> None:
        self.written.append(item_size(item))
        self.durable.append(durable)
        self._inner.put(item, condition=condition, durable=durable)

    def update(self, key: Key, update: Update, *, condition: Condition | None = None, durable: bool = True) -> Item:
        item = self._inner.update(key, update, condition=condition, durable=durable)
        self.written.append(item_size(item))
        return item

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.mark.parametrize("limit", [60, 200, 6000])
def test_the_cost_of_a_call_does_not_grow_with_the_limit(store: Store, clock: FakeClock, limit: int) -> None:
    """With the window as full as the limit lets it be (up to 300 calls), an allowed call reads no head (the one it
    wrote last is known) and at limits over 64 a chunk of earlier times, once for many calls, and writes the head
    (a chunk too, once every 64 calls), each item under 1 KB and none synced to disk one by one; a denied call
    reads the head (it is decided on the log as it is) and writes nothing."""
    counting = CountingStore(store)
    limiter = RateLimiter(counting, clock)
    # At 60 a minute, calls just over a second apart keep the window full and every call allowed.
    spacing = 60 / limit + 0.0001 if limit <= 1000 else 0.005
    for _ in range(min(limit, 300)):
        clock.advance(spacing)
        assert limiter.hit("ep_cost", limit).allowed
    counting.reads, counting.written = 0, []
    measured = 128
    for _ in range(measured):
        clock.advance(spacing)
        assert limiter.hit("ep_cost", limit).allowed
    assert max(counting.written) < 1024, "no item grows with the number of calls in the window: one write unit"
    assert len(counting.written) <= measured + 2, "one head write a call, one chunk write every 64 calls"
    assert counting.reads <= 8, "no head read: only a chunk, once for the many calls that look it up"
    assert not any(counting.durable), "the log is worth no disk sync per call"
    counting.reads, counting.written = 0, []
    assert not limiter.hit("ep_cost", 10).allowed
    assert counting.written == []
    assert 1 <= counting.reads <= 2
