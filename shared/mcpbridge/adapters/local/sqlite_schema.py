"""The embedded store's schema: one table of JSON items with their keys and index keys beside them, created when a
file is first opened, and a file of the earlier layout moved to this one."""

from __future__ import annotations

import logging
import sqlite3
import time

from mcpbridge.adapters.sqlite_wal import RETRY_SECONDS, switch_to_wal

log = logging.getLogger("mcpbridge.store")

# A rowid table with a unique index on the key, not a WITHOUT ROWID table: that one is an index b-tree, whose
# interior pages keep copies of whole rows (bodies too) as dividers that deleting the row does not touch, so
# ``secure_delete`` could not erase them. Here a body lives only in its leaf cell, zeroed when the row goes; a key
# may linger as a divider in an index until :meth:`SqliteStore.reclaim` rewrites the file.
_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS items (
    pk TEXT NOT NULL,
    sk TEXT NOT NULL,
    gsi1pk TEXT,
    gsi1sk TEXT,
    gsi2pk TEXT,
    gsi2sk TEXT,
    expires_at INTEGER,
    body TEXT NOT NULL
)""",
    "CREATE UNIQUE INDEX IF NOT EXISTS items_key ON items (pk, sk)",
    "CREATE INDEX IF NOT EXISTS items_gsi1 ON items (gsi1pk, gsi1sk, pk, sk) WHERE gsi1pk IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS items_gsi2 ON items (gsi2pk, gsi2sk, pk, sk) WHERE gsi2pk IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS items_expiry ON items (expires_at) WHERE expires_at IS NOT NULL",
)
_INDEXES = ("items_gsi1", "items_gsi2", "items_expiry")

COLUMNS = ("pk", "sk", "gsi1pk", "gsi1sk", "gsi2pk", "gsi2sk", "expires_at", "body")


def initialise(conn: sqlite3.Connection) -> None:
    """Switch the file to WAL (waiting out another process opening it at the same moment) and create the schema,
    moving a file of the earlier layout (a WITHOUT ROWID table) to this one."""
    switch_to_wal(conn, timeout=30)
    deadline = time.monotonic() + 30
    while True:
        try:
            _create_schema(conn)
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(RETRY_SECONDS)


def _create_schema(conn: sqlite3.Connection) -> None:
    """One transaction (another process may be opening the file too). The connection has ``secure_delete`` on, so
    the pages of an old table dropped here are zeroed, interior pages with their copies of rows too."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        row = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'items'").fetchone()
        moving = row is not None and "WITHOUT ROWID" in str(row[0]).upper()
        if moving:
            conn.execute("ALTER TABLE items RENAME TO items_without_rowid")
            for index in _INDEXES:
                conn.execute(f"DROP INDEX IF EXISTS {index}")
        for statement in _SCHEMA:
            conn.execute(statement)
        if moving:
            columns = ", ".join(COLUMNS)
            conn.execute(f"INSERT INTO items ({columns}) SELECT {columns} FROM items_without_rowid")  # noqa: S608 - fixed column names
            conn.execute("DROP TABLE items_without_rowid")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    if moving:
        log.warning("the SQLite store moved its rows to the current layout")


def rewrite(conn: sqlite3.Connection) -> None:
    """Rebuild the file from its live rows and empty the WAL: nothing deleted stays readable in either."""
    conn.execute("VACUUM")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
