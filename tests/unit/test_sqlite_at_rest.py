"""What the SQLite store leaves in its files: a deleted or overwritten value is gone from the bytes on disk."""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path

import pytest

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


def _fill(store: SqliteStore, seed: int) -> list[str]:
    """Partitions of small rows of varied sizes, the shape of a store's own items; the names of its partitions."""
    rnd = random.Random(seed)
    partitions = [f"ws_{seed}_{rnd.getrandbits(64):016x}" for _ in range(12)]
    for partition in partitions:
        for i in range(rnd.randint(5, 50)):
            indexed = {"gsi1pk": f"WS#{partition}", "gsi1sk": f"T#{rnd.random()}"} if i % 2 else {}
            body = f"body of {partition} " + "x" * rnd.randint(50, 800)
            store.put({"pk": f"WS#{partition}", "sk": f"ITEM#{rnd.getrandbits(64):016x}", "body": body, **indexed})
    return partitions


def _drop(store: SqliteStore, partition: str) -> None:
    for item in store.query(f"WS#{partition}", limit=100).items:
        store.delete(Key(item["pk"], item["sk"]))


def test_a_deleted_rows_body_never_stays_in_an_index_page(tmp_path: Path) -> None:
    # In a WITHOUT ROWID table (the earlier layout) interior pages keep whole rows as dividers: about one partition
    # in five deleted this way left its body readable in the file.
    left = []
    for seed in range(6):
        path = tmp_path / f"store{seed}.db"
        store = SqliteStore(path, FakeClock())
        try:
            partitions = _fill(store, seed)
            for partition in partitions[::3]:
                _drop(store, partition)
            data = file_bytes(path)
            left += [p for p in partitions[::3] if f"body of {p}".encode() in data]
            assert all(f"body of {p}".encode() in data for p in partitions[1::3])
        finally:
            store.close()
    assert left == []


def test_reclaim_leaves_not_even_the_keys_of_deleted_rows(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    store = SqliteStore(path, FakeClock())
    try:
        partitions = _fill(store, 1)
        kept = store.query(f"WS#{partitions[1]}", limit=100).items
        for partition in partitions[::3]:
            _drop(store, partition)
        store.reclaim()
        data = file_bytes(path)
        assert [p for p in partitions[::3] if p.encode() in data] == []
        assert store.query(f"WS#{partitions[1]}", limit=100).items == kept
        assert store.query(f"WS#{partitions[1]}", index="gsi1", limit=100).items
    finally:
        store.close()


def _earlier_layout_file(path: Path) -> bytes:
    """A file of the WITHOUT ROWID layout: 300 kept rows in ``WS#w``, then partitions of varied rows of which every
    third is deleted, until the body of a deleted one is left in an interior page; that body."""
    for seed in range(20):
        path.unlink(missing_ok=True)
        rnd = random.Random(seed)
        with sqlite3.connect(path) as db:
            db.executescript(EARLIER_LAYOUT)
            for i in range(300):
                body = json.dumps({"pk": "WS#w", "sk": f"ITEM#{i:03d}", "gsi1pk": "G#w", "gsi1sk": f"{i:03d}", "n": i})
                row = (f"ITEM#{i:03d}", f"{i:03d}", body)
                db.execute("INSERT INTO items VALUES ('WS#w', ?, 'G#w', ?, NULL, NULL, NULL, ?)", row)
            for p in range(12):
                for _ in range(rnd.randint(5, 50)):
                    body = json.dumps({"value": f"{GONE}-{p}-" + "x" * rnd.randint(50, 800)})
                    row = (f"WS#p{p}", f"ITEM#{rnd.getrandbits(64):016x}", body)
                    db.execute("INSERT INTO items VALUES (?, ?, NULL, NULL, NULL, NULL, NULL, ?)", row)
        with sqlite3.connect(path) as db:
            db.execute("PRAGMA secure_delete=ON")
            for p in range(0, 12, 3):
                db.execute("DELETE FROM items WHERE pk = ?", (f"WS#p{p}",))
        data = file_bytes(path)
        left = [f"{GONE}-{p}-".encode() for p in range(0, 12, 3) if f"{GONE}-{p}-".encode() in data]
        if left:
            return left[0]
    raise AssertionError("no seed left a deleted body in the earlier layout")


def test_a_file_of_the_earlier_layout_keeps_every_row_and_loses_its_remnants(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "store.db"
    remnant = _earlier_layout_file(path)
    store = SqliteStore(path, FakeClock())
    try:
        assert [i["n"] for i in store.query("WS#w", limit=1000).items] == list(range(300))
        assert [i["n"] for i in store.query("G#w", index="gsi1", limit=1000, descending=True).items][:2] == [299, 298]
        assert len(store.query("WS#p1", limit=100).items) > 0
        store.put({"pk": "WS#w", "sk": "ITEM#000", "n": -1})
        assert store.get(Key("WS#w", "ITEM#000")) == {"pk": "WS#w", "sk": "ITEM#000", "n": -1}
        sql = store._connection().execute("SELECT sql FROM sqlite_master WHERE name = 'items'").fetchone()[0]
        assert "WITHOUT ROWID" not in sql.upper()
        assert remnant not in file_bytes(path)
    finally:
        store.close()
    assert "moved its rows to the current layout" in caplog.text
    caplog.clear()
    reopened = SqliteStore(path, FakeClock())
    try:
        assert len(reopened.query("WS#w", limit=1000).items) == 300
        assert "moved its rows" not in caplog.text  # the move happens once
    finally:
        reopened.close()


EARLIER_LAYOUT = """
CREATE TABLE items (
    pk TEXT NOT NULL, sk TEXT NOT NULL, gsi1pk TEXT, gsi1sk TEXT, gsi2pk TEXT, gsi2sk TEXT, expires_at INTEGER,
    body TEXT NOT NULL, PRIMARY KEY (pk, sk)
) WITHOUT ROWID;
CREATE INDEX items_gsi1 ON items (gsi1pk, gsi1sk, pk, sk) WHERE gsi1pk IS NOT NULL;
CREATE INDEX items_gsi2 ON items (gsi2pk, gsi2sk, pk, sk) WHERE gsi2pk IS NOT NULL;
CREATE INDEX items_expiry ON items (expires_at) WHERE expires_at IS NOT NULL;
"""
