"""Group commit of the SQLite store's WAL: one ``fsync`` of the WAL file makes every commit counted before it durable,
so writers that commit while a sync is under way share the next one; a thread of its own syncs what callers asked
for without waiting (:meth:`WalSync.soon`)."""

from __future__ import annotations

import functools
import logging
import os
import threading
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
        self._wanted = 0  # commits the sync thread is asked to sync (soon)
        self._thread: threading.Thread | None = None
        self._inode: tuple[int, int] | None = None  # the WAL file whose directory entry is synced

    def committed(self) -> int:
        """Count a commit just made (under the write lock); its ticket for :meth:`wait`."""
        with self._changed:
            self._committed += 1
            return self._committed

    def soon(self) -> Callable[[], None]:
        """Have the sync thread sync every commit counted so far, without waiting; the wait for it (which syncs
        itself if the thread has not got there: a failure is raised to the one who waits)."""
        with self._changed:
            ticket = self._committed
            if self._synced >= ticket:
                return nothing_to_sync
            self._wanted = max(self._wanted, ticket)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="sqlite-wal-sync", daemon=True)
                self._thread.start()
            self._changed.notify_all()
        return functools.partial(self.wait, ticket)

    def _run(self) -> None:
        """The sync thread: syncs what :meth:`soon` asked for, in groups."""
        while True:
            with self._changed:
                while self._synced >= self._wanted:
                    self._changed.wait()
                target = self._wanted
            try:
                self.wait(target)
            except OSError as exc:  # the one who waits syncs again and is told
                log.warning("the SQLite store could not sync its journal: %s", exc)
                with self._changed:
                    self._wanted = self._synced  # asked again by the next soon()

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
