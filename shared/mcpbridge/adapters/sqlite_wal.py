"""Switching an SQLite file to write-ahead logging when other connections may be opening it too."""

from __future__ import annotations

import sqlite3
import time

RETRY_SECONDS = 0.05


def switch_to_wal(conn: sqlite3.Connection, timeout: float) -> None:
    """``PRAGMA journal_mode=WAL`` (a persistent setting), waiting out other connections for up to ``timeout``.

    Changing the journal mode needs the file to itself, and SQLite answers "database is locked" at once instead of
    calling the busy handler, so a connection opening the same new file at the same moment is retried here.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(RETRY_SECONDS)
