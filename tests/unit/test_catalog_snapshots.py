"""Stored catalog snapshots are read once from the blob store and kept (their blobs are never rewritten); each load
is a snapshot of its own; deleting or forgetting snapshots drops what was kept."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mcpbridge.adapters.local.files import FileBlobs
from mcpbridge.adapters.local.sqlite import SqliteStore
from mcpbridge.client import snapshots as snapshots_module
from mcpbridge.client.snapshots import Snapshots, head_key
from tests.support.clock import FakeClock


class CountingBlobs(FileBlobs):
    """The local blob store, counting its reads."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.reads = 0

    def get(self, key: str) -> bytes | None:
        self.reads += 1
        return super().get(key)


def _snapshot(store: SqliteStore, blobs: FileBlobs, service_id: str, tools: list[str]) -> dict[str, Any]:
    key = f"catalogs/ws_1/{service_id}/workspace/cat_{service_id}.json"
    blobs.put(key, json.dumps({"tools": [{"name": name} for name in tools]}).encode())
    head = {
        **head_key("ws_1", service_id, "workspace").as_dict(),
        "snapshot_id": f"cat_{service_id}",
        "snapshot_key": key,
    }
    store.put(head)
    return head


def test_a_snapshot_is_read_from_the_blob_store_once(tmp_path: Path) -> None:
    store, blobs = SqliteStore(tmp_path / "s.sqlite3", FakeClock()), CountingBlobs(tmp_path / "blobs")
    head = _snapshot(store, blobs, "svc_1", ["echo", "add"])
    snapshots = Snapshots(store, lambda: blobs)
    first = snapshots.load(head)
    assert first == {"tools": [{"name": "echo"}, {"name": "add"}]}
    assert first is not None
    first["tools"].clear()  # a caller's changes stay its own
    assert snapshots.load(head) == {"tools": [{"name": "echo"}, {"name": "add"}]}
    assert blobs.reads == 1
    assert snapshots.tool_names("ws_1", "svc_1", "workspace") == frozenset({"echo", "add"})
    assert blobs.reads == 1


def test_deleted_and_forgotten_snapshots_are_not_kept(tmp_path: Path) -> None:
    store, blobs = SqliteStore(tmp_path / "s.sqlite3", FakeClock()), CountingBlobs(tmp_path / "blobs")
    snapshots = Snapshots(store, lambda: blobs)
    one, two = _snapshot(store, blobs, "svc_1", ["echo"]), _snapshot(store, blobs, "svc_2", ["add"])
    snapshots.load(one), snapshots.load(two)
    snapshots.delete(one["snapshot_key"])
    assert snapshots.load(one) is None, "the blob is gone and nothing was kept of it"
    snapshots.forget_service("ws_1", "svc_2")
    assert snapshots.load(two) is None
    assert blobs.reads == 4


def test_what_is_kept_stays_within_its_bound(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(snapshots_module, "CACHE_BYTES", 400)
    store, blobs = SqliteStore(tmp_path / "s.sqlite3", FakeClock()), CountingBlobs(tmp_path / "blobs")
    snapshots = Snapshots(store, lambda: blobs)
    heads = [_snapshot(store, blobs, f"svc_{i}", ["t" * 20, "u" * 20]) for i in range(10)]
    for head in heads:
        snapshots.load(head)
    assert blobs.reads == 10
    snapshots.load(heads[-1])  # the most recent stays
    assert blobs.reads == 10
    snapshots.load(heads[0])  # the oldest went
    assert blobs.reads == 11
