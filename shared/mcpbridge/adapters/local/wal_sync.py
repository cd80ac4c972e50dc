"""Group commit of the SQLite store's WAL: one ``fsync`` of the WAL file makes every commit counted before it durable,
so writers that commit while a sync is under way share the next one; a thread of its own syncs what callers asked
for without waiting (:meth:`WalSync.soon`), at once or, when they can let it, within a delay in which the sync
another write asks for covers theirs too (under load, no sync of its own)."""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("mcpbridge.store")


def nothing_to_sync() -> None:
    """The wait for a sync when nothing is left to sync."""
    return None


class WalSync:
    """Group commit: :meth:`wait` returns once every commit counted before it is on disk, one ``fsync`` of the WAL
    file serving every commit made before that sync started (see the module docstring).

    Syncing the WAL by path is what ``synchronous=FULL`` does through SQLite's own handle: ``fsync`` flushes the
    file's data whichever descriptor names it. The WAL file lasts as long as a connection is open; a new one (after
    every connection closed, which checkpoints the WAL into the database and syncs it) also gets its directory
    synced once, so its name survives a power cut as well."""

    def __init__(self, wal: Path) -> None:
        self._wal = wal
        self._changed = threading.Condition()
        self._committed = 0  # commits counted so far
        self._synced = 0  # commits known to be on disk
        self._syncing = False
        self._wanted = 0  # commits the sync thread is asked to sync now
        self._later = 0  # commits it is asked to sync within a delay (_later_by, on the monotonic clock)
        self._later_by: float | None = None
        self._idle = False  # the sync thread waits with nothing asked of it
        self._thread: threading.Thread | None = None
        self._inode: tuple[int, int] | None = None  # the WAL file whose directory entry is synced

    def committed(self) -> int:
        """Count a commit just made (under the write lock); its ticket for :meth:`wait`."""
        with self._changed:
            self._committed += 1
            return self._committed

    def soon(self, within: float = 0.0) -> Callable[[], None]:
        """Have the sync thread sync every commit counted so far, without waiting: at once, or within ``within``
        seconds (a sync asked for meanwhile covers these commits too). The wait for it (which syncs itself if the
        thread has not got there: a failure is raised to the one who waits)."""
        with self._changed:
            ticket = self._committed
            if self._synced >= ticket:
                return nothing_to_sync
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="sqlite-wal-sync", daemon=True)
                self._thread.start()
            if within <= 0:
                self._wanted = max(self._wanted, ticket)
                self._changed.notify_all()
            else:
                by = time.monotonic() + within
                self._later = max(self._later, ticket)
                self._later_by = by if self._later_by is None else min(self._later_by, by)
                if self._idle:
                    self._changed.notify_all()
        return functools.partial(self.wait, ticket)

    def _run(self) -> None:
        """The sync thread: syncs what :meth:`soon` asked for, in groups."""
        while True:
            with self._changed:
                self._await_work()
                target = self._wanted
            try:
                self.wait(target)
            except OSError as exc:  # the one who waits syncs again and is told
                log.warning("the SQLite store could not sync its journal: %s", exc)
                with self._changed:
                    self._wanted = self._synced  # asked again by the next soon()

    def _await_work(self) -> None:
        """Until a sync is wanted now, or a later one is due (holding the condition)."""
        while self._synced >= self._wanted:
            if self._later <= self._synced:  # nothing asked, or covered already by another sync
                self._later_by = None
                self._idle = True
                try:
                    self._changed.wait()
                finally:
                    self._idle = False
                continue
            left = (self._later_by or 0.0) - time.monotonic()
            if left <= 0:
                self._wanted, self._later_by = max(self._wanted, self._later), None
                return
            self._changed.wait(left)

    def wait(self, ticket: int) -> None:
        with self._changed:
            while self._synced < ticket:
                if self._syncing:
                    self._changed.wait()
                    continue
                self._syncing, target = True, self._committed
                try:
                    self._changed.release()
                    try:
                        self._sync()
                    finally:
                        self._changed.acquire()
                    self._synced = max(self._synced, target)
                finally:  # synced or failed: the next waiter checks, or syncs itself
                    self._syncing = False
                    self._changed.notify_all()

    def _sync(self) -> None:
        try:
            fd = os.open(self._wal, os.O_RDONLY)
        except FileNotFoundError:
            return  # no WAL: its last checkpoint put every commit in the database file and synced it
        try:
            os.fsync(fd)
            stat = os.fstat(fd)
        finally:
            os.close(fd)
        if self._inode != (stat.st_dev, stat.st_ino):
            directory = os.open(self._wal.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
            self._inode = (stat.st_dev, stat.st_ino)
