"""What the SQLite store leaves in its files: a deleted or overwritten value is gone from the bytes on disk."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from mcpbridge.adapters.local.sqlite import SqliteStore
from mcpbridge.domain.items import Key
from tests.support.clock import FakeClock

GONE = "value-that-must-not-stay-7c1e9f3a2b4d"


def file_bytes(path: Path) -> bytes:
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return b"".join(p.read_bytes() for p in path.parent.iterdir() if p.name.startswith(path.name))


def test_deleted_and_overwritten_values_are_not_left_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    store = SqliteStore(path, FakeClock())
    try:
        # Big enough to fill pages of their own, so a deletion frees whole pages rather than rewriting one.
        for i in range(20):
            store.put({"pk": "WS#w", "sk": f"ROW#{i}", "secret": f"{GONE}-{i}-" + "x" * 4000})
        store.put({"pk": "WS#w", "sk": "KEEP", "value": "kept"})
        assert GONE.encode() in file_bytes(path)
        for i in range(10):
            store.delete(Key("WS#w", f"ROW#{i}"))
        for i in range(10, 20):
            store.put({"pk": "WS#w", "sk": f"ROW#{i}", "secret": "replaced"})
        assert GONE.encode() not in file_bytes(path)
        assert store.get(Key("WS#w", "KEEP")) == {"pk": "WS#w", "sk": "KEEP", "value": "kept"}
        # Some SQLite builds zero freed content by default and others do not: the store asks for it explicitly.
        assert store._connection().execute("PRAGMA secure_delete").fetchone() == (1,)
    finally:
        store.close()
