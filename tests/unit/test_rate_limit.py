"""The per-endpoint rate limiter on both stores: an exact sliding minute, denied calls uncounted, safe under races."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from mcpbridge.adapters.aws.dynamodb import DynamoStore
from mcpbridge.adapters.local.sqlite import SqliteStore
from mcpbridge.domain.items import Condition, Item, Key, Update
from mcpbridge.errors import ConditionFailed, Unavailable
from mcpbridge.ports import Store
from mcpbridge.server.rate_limit import RateLimiter, window_key
from tests.support.clock import FakeClock
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

    def put(self, item: Item, *, condition: Condition | None = None) -> None:
        self.puts += 1
        raise ConditionFailed(condition.name if condition else "live", None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def update(self, key: Key, update: Update, *, condition: Condition | None = None) -> Item:
        raise AssertionError("the limiter only puts")


def test_endless_contention_is_an_error_never_a_silent_allow(store: Store, clock: FakeClock) -> None:
    losing = _AlwaysLosing(store)
    sleeps: list[float] = []
    limiter = RateLimiter(losing, clock, max_attempts=7, sleep=sleeps.append)
    with pytest.raises(Unavailable) as raised:
        limiter.hit("ep_a", 3)
    assert raised.value.code == "rate_limiter_contention"
    assert losing.puts == 7
    assert len(sleeps) == 6
    assert all(0 <= s <= 0.05 for s in sleeps)
