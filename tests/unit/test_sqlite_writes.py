"""How the SQLite store commits: durable writes synced at their commit, the others not; the threads of one process
queued on a lock of its own rather than in SQLite's sleeping busy handler."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcpbridge.adapters.local.sqlite import SqliteStore
from mcpbridge.domain.items import Condition, Key, Update
from tests.support.clock import FakeClock

K = Key("WS#w", "ROW")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    opened = SqliteStore(tmp_path / "store.sqlite3", FakeClock())
    yield opened
    opened.close()


def _synchronous_at_commits(store: SqliteStore, write: list[tuple[str, bool]]) -> list[int]:
    """The connection's ``synchronous`` level (2 FULL, 1 NORMAL) at each commit of the writes made."""
    conn = store._connection()
    levels: list[int] = []
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    try:
        for value, durable in write:
            store.put({**K.as_dict(), "value": value}, durable=durable)
            conn.set_trace_callback(None)
            levels.append(conn.execute("PRAGMA synchronous").fetchone()[0])
            conn.set_trace_callback(statements.append)
    finally:
        conn.set_trace_callback(None)
    assert statements.count("COMMIT") == len(write)
    return levels


def test_a_durable_write_is_synced_at_its_commit_and_the_others_are_not(store: SqliteStore) -> None:
    levels = _synchronous_at_commits(store, [("a", True), ("b", False), ("c", False), ("d", True), ("e", True)])
    assert levels == [2, 1, 1, 2, 2]
    store.update(K, Update(set={"value": "f"}), durable=False)
    assert store._connection().execute("PRAGMA synchronous").fetchone() == (1,)
    store.update(K, Update(set={"value": "g"}))
    assert store._connection().execute("PRAGMA synchronous").fetchone() == (2,)
    assert store.get(K) == {**K.as_dict(), "value": "g"}


def test_threads_of_one_process_never_wait_in_the_busy_handler(store: SqliteStore) -> None:
    """With SQLite's busy timeout at zero, a writer finding another one inside a transaction fails at once
    ("database is locked"). Sixteen threads writing together all succeed: they queue on the store's own lock."""
    workers, writes = 16, 40
    ready = threading.Barrier(workers)
    errors: list[BaseException] = []

    def write(worker: int) -> None:
        try:
            store._connection().execute("PRAGMA busy_timeout=0")
            ready.wait()
            for n in range(writes):
                key = Key("WS#w", f"ROW#{worker}#{n}")
                store.put({**key.as_dict(), "n": n}, condition=Condition.absent("new"), durable=n % 2 == 0)
                store.update(K, Update(add={"count": 1}), durable=False)
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors[:3]
    assert store.get(K) == {**K.as_dict(), "count": workers * writes}


def test_another_process_holding_the_write_lock_is_waited_for(tmp_path: Path) -> None:
    """Writers of other processes (another connection here) are still waited for by SQLite's busy timeout."""
    path = tmp_path / "store.sqlite3"
    store = SqliteStore(path, FakeClock())
    try:
        store.put({**K.as_dict(), "n": 0})
        other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")
        release = threading.Timer(0.3, lambda: other.execute("COMMIT"))
        release.start()
        store.put({**K.as_dict(), "n": 1})
        release.join()
        other.close()
        assert store.get(K) == {**K.as_dict(), "n": 1}
    finally:
        store.close()
