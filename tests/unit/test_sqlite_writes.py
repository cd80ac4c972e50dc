"""How the SQLite store commits: a durable write returns once the WAL holding it is synced (one sync shared by the
writers committing meanwhile), the others do not wait; the threads of one process queued on a lock of their own
rather than in SQLite's sleeping busy handler."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcpbridge.adapters.local.sqlite import SqliteStore
from mcpbridge.domain.items import Condition, Key, Update
from mcpbridge.errors import Unavailable
from tests.support.clock import FakeClock
from tests.support.threads import run_together

K = Key("WS#w", "ROW")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    opened = SqliteStore(tmp_path / "store.sqlite3", FakeClock())
    yield opened
    opened.close()


class _Syncs:
    """``os.fsync`` recording which file each call synced (and optionally taking its time, like a slow disk)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, seconds: float = 0.0) -> None:
        self.paths: list[str] = []
        self._real = os.fsync
        self._seconds = seconds
        self._lock = threading.Lock()
        monkeypatch.setattr(os, "fsync", self)

    def __call__(self, fd: int) -> None:
        with self._lock:
            self.paths.append(os.readlink(f"/proc/self/fd/{fd}"))
        time.sleep(self._seconds)
        self._real(fd)

    def of_wal(self) -> int:
        return sum(path.endswith("-wal") for path in self.paths)


def test_a_durable_write_returns_after_its_wal_is_synced_and_the_others_do_not_wait(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    syncs = _Syncs(monkeypatch)
    store.put({**K.as_dict(), "value": "first"})  # creates the file and its WAL
    # The WAL, then (a new file) its directory, so that its name survives a power cut too.
    wal, directory = os.path.realpath(f"{store._path}-wal"), os.path.realpath(store._path.parent)
    assert syncs.paths == [wal, directory]
    conn = store._connection()
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert conn.execute("PRAGMA synchronous").fetchone() == (1,)  # NORMAL: SQLite itself does not sync commits
    for value, durable, expected in [("a", True, 2), ("b", False, 2), ("c", False, 2), ("d", True, 3)]:
        store.put({**K.as_dict(), "value": value}, durable=durable)
        assert syncs.of_wal() == expected, value
    store.update(K, Update(set={"value": "e"}), durable=False)
    assert syncs.of_wal() == 3
    store.update(K, Update(set={"value": "f"}))
    assert syncs.of_wal() == 4
    store.delete(K)
    assert syncs.of_wal() == 5
    assert syncs.paths.count(directory) == 1  # the same WAL file: its directory once
    assert store.get(K) is None


def test_durable_writers_committing_together_share_their_syncs(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk taking 20 ms per sync: 8 threads x 15 durable writes need far fewer syncs than writes, and every
    write is there (with a sync per commit under the write lock, as synchronous=FULL does, there would be 120)."""
    store.put({**K.as_dict(), "n": 0})
    syncs = _Syncs(monkeypatch, seconds=0.02)
    workers, writes = 8, 15

    def write(worker: int) -> None:
        for n in range(writes):
            store.put({"pk": "WS#w", "sk": f"ROW#{worker}#{n}", "n": n}, condition=Condition.absent("new"))

    run_together(workers, write)
    assert len(store.query("WS#w", sk_prefix="ROW#", limit=1000).items) == workers * writes
    assert 0 < syncs.of_wal() <= workers * writes // 2, syncs.of_wal()


def test_threads_of_one_process_never_wait_in_the_busy_handler(store: SqliteStore) -> None:
    """With SQLite's busy timeout at zero, a writer finding another one inside a transaction fails at once
    ("database is locked"). Sixteen threads writing together all succeed: they queue on the store's own lock."""
    workers, writes = 16, 40

    def write(worker: int) -> None:
        store._connection().execute("PRAGMA busy_timeout=0")
        for n in range(writes):
            key = Key("WS#w", f"ROW#{worker}#{n}")
            store.put({**key.as_dict(), "n": n}, condition=Condition.absent("new"), durable=n % 2 == 0)
            store.update(K, Update(add={"count": 1}), durable=False)

    run_together(workers, write)
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


def test_writes_at_once_never_wait_and_write_nothing_when_they_would(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.put({**K.as_dict(), "value": "first"})
    syncs = _Syncs(monkeypatch)
    other = Key("WS#w", "OTHER")
    with store.writes_at_once():
        store.put({**other.as_dict(), "value": "at once"}, durable=False)
        store.update(other, Update(set={"n": 1}), durable=False)
        with pytest.raises(Unavailable, match="disk sync"):  # a durable write would wait for the sync
            store.put({**K.as_dict(), "value": "durable"})
    assert store.get(other) == {**other.as_dict(), "value": "at once", "n": 1}
    assert store.get(K) == {**K.as_dict(), "value": "first"}
    assert syncs.of_wal() == 0

    # Another process holds SQLite's write lock: refused at once, nothing written; outside the block, writes wait.
    blocker = sqlite3.connect(store._path, isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with store.writes_at_once(), pytest.raises(Unavailable, match="busy"):
            store.put({**K.as_dict(), "value": "blocked"}, durable=False)
        threading.Timer(0.2, blocker.execute, ["COMMIT"]).start()
        store.put({**K.as_dict(), "value": "waited"}, durable=False)
    finally:
        blocker.close()
    assert store.get(K) == {**K.as_dict(), "value": "waited"}
    conn = store._connection()
    assert conn.execute("PRAGMA busy_timeout").fetchone() == (30000,)
    assert conn.execute("PRAGMA wal_autocheckpoint").fetchone() == (0,)  # checkpoints are the other threads'

    # Another thread of this process is writing: refused at once as well.
    store._writer.acquire()
    try:
        with store.writes_at_once(), pytest.raises(Unavailable, match="busy"):
            store.put({**K.as_dict(), "value": "queued"}, durable=False)
    finally:
        store._writer.release()
    assert store.get(K) == {**K.as_dict(), "value": "waited"}


def test_sync_soon_syncs_what_was_written_while_the_caller_goes_on(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writes made without a sync are synced by the store's sync thread once asked; the wait returns when they are on
    disk, at once when nothing is left to sync."""
    store.put({**K.as_dict(), "value": "first"})  # the file, its WAL and their first sync
    syncs = _Syncs(monkeypatch, seconds=0.05)
    store.put({**K.as_dict(), "value": "a"}, durable=False)
    store.update(K, Update(set={"value": "b"}), durable=False)
    assert syncs.of_wal() == 0
    started = threading.Event()
    real_sync = syncs.__call__

    def noted(fd: int) -> None:
        started.set()
        real_sync(fd)

    monkeypatch.setattr(os, "fsync", noted)
    wait = store.sync_soon()  # returns before the sync
    started.wait()  # the sync thread syncs the WAL without anyone waiting (a hang is pytest-timeout's)
    wait()
    assert syncs.of_wal() == 1  # both writes, one sync
    store.sync_soon()()  # nothing new: no sync
    assert syncs.of_wal() == 1
    assert store.get(K) == {**K.as_dict(), "value": "b"}


def test_a_sync_asked_within_a_delay_shares_an_earlier_one_or_comes_on_its_own(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``within``: the sync thread lets a sync wait that long for another to cover it; none comes: it syncs alone."""
    store.put({**K.as_dict(), "value": "first"})
    syncs = _Syncs(monkeypatch)
    store.put({**K.as_dict(), "value": "a"}, durable=False)
    later = store.sync_soon(within=60)  # an hour would do: the next sync covers it
    store.put({**K.as_dict(), "value": "b"}, durable=False)
    store.sync_soon()()  # asked at once: one sync, covering both writes
    later()  # returns at once: covered
    assert syncs.of_wal() == 1
    store.put({**K.as_dict(), "value": "c"}, durable=False)
    alone = store.sync_soon(within=0.05)
    while syncs.of_wal() < 2:  # no one else syncs: the thread does, on its own (a hang is pytest-timeout's)
        time.sleep(0.01)
    alone()
    assert syncs.of_wal() == 2


def test_a_failed_background_sync_is_raised_to_the_one_who_waits_and_tried_again(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.put({**K.as_dict(), "value": "first"})
    real, broken, attempts = os.fsync, threading.Event(), []

    def failing(fd: int) -> None:
        attempts.append(broken.is_set())
        if broken.is_set():
            raise OSError(5, "Input/output error")
        real(fd)

    monkeypatch.setattr(os, "fsync", failing)
    broken.set()
    store.put({**K.as_dict(), "value": "a"}, durable=False)
    with pytest.raises(Unavailable) as failed:
        store.sync_soon()()  # whichever of the sync thread and the waiter synced, the waiter is told
    assert failed.value.code == "store_unavailable"
    broken.clear()
    store.sync_soon()()  # the disk answers again: synced
    assert attempts[-1] is False
