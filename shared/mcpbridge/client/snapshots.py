"""Reading stored catalog snapshots: the head item of a (workspace, service, scope) and the blob it points at.

Shared by the catalog (which writes snapshots) and the tool policies (which check that a policy names a tool some
snapshot lists), so neither depends on the other; one instance per container. A snapshot's blob is never rewritten
(a new catalog is a new blob), so the bytes read once are kept in memory, the most recently used first, up to
:data:`CACHE_BYTES`: every agent call resolves its tool against the catalogs, and each read was a file read, or an
S3 GET on AWS. The head is read every time, so a new snapshot is seen at once; forgetting snapshots drops their
bytes too. :meth:`Snapshots.load` parses the bytes anew, so its caller may change what it gets;
:meth:`Snapshots.load_shared` keeps the parsed snapshot beside its bytes and hands every caller the same one, read
only (resolving a tool parsed its service's whole catalog on every call).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import pydantic_core

from mcpbridge.domain.items import Key
from mcpbridge.paging import every_item
from mcpbridge.ports import Blobs, Store

log = logging.getLogger("mcpbridge.services")

CACHE_BYTES = 16 * 1024 * 1024


def head_key(workspace_id: str, service_id: str, scope: str) -> Key:
    return Key(f"WS#{workspace_id}", f"SVCCAT#{service_id}#{scope}")


class Snapshots:
    def __init__(self, store: Store, blobs: Callable[[], Blobs]) -> None:
        """``blobs`` is asked for on first use: a function that never reads a snapshot needs no blob store."""
        self._store = store
        self._blobs = blobs
        self._kept: OrderedDict[str, bytes] = OrderedDict()
        self._parsed: dict[str, dict[str, Any]] = {}  # of keys in _kept: dropped with their bytes
        self._kept_bytes = 0
        self._lock = threading.Lock()

    def load(self, head: dict[str, Any] | None) -> dict[str, Any] | None:
        """The snapshot a head points at, or None (no head, no snapshot yet, or a blob that is gone)."""
        if not head or not head.get("snapshot_key"):
            return None
        data = self._read(head["snapshot_key"])
        if data is None:  # the head points at a blob that is gone: treat as no snapshot, never as an error page
            log.warning("catalog snapshot %s is missing", head.get("snapshot_id"))
            return None
        snapshot: dict[str, Any] = pydantic_core.from_json(data)
        return snapshot

    def load_shared(self, head: dict[str, Any] | None) -> dict[str, Any] | None:
        """:meth:`load`, parsed once per blob kept here and shared by every caller: never change what it returns."""
        if not head or not head.get("snapshot_key"):
            return None
        key = head["snapshot_key"]
        with self._lock:
            parsed = self._parsed.get(key)
        if parsed is not None:
            return parsed
        snapshot = self.load(head)
        if snapshot is not None:
            with self._lock:
                if key in self._kept:  # a blob too large to keep is parsed on every load
                    self._parsed[key] = snapshot
        return snapshot

    def _read(self, key: str) -> bytes | None:
        with self._lock:
            data = self._kept.get(key)
            if data is not None:
                self._kept.move_to_end(key)
                return data
        data = self._blobs().get(key)
        if data is None or len(data) > CACHE_BYTES // 4:
            return data
        with self._lock:
            if key not in self._kept:
                self._kept[key] = data
                self._kept_bytes += len(data)
            while self._kept_bytes > CACHE_BYTES:
                forgotten, dropped = self._kept.popitem(last=False)
                self._parsed.pop(forgotten, None)
                self._kept_bytes -= len(dropped)
        return data

    def delete(self, key: str) -> None:
        """Delete a snapshot's blob (and its bytes kept here)."""
        self._blobs().delete(key)
        with self._lock:
            data = self._kept.pop(key, None)
            self._parsed.pop(key, None)
            if data is not None:
                self._kept_bytes -= len(data)

    def tool_names(self, workspace_id: str, service_id: str, scope: str) -> frozenset[str] | None:
        """The tools the service lists in the workspace: the snapshot of ``scope`` when there is one, else any
        other scope's (each user's own, for OAuth services). None when no snapshot was ever taken."""
        snapshot = self.load(self._store.get(head_key(workspace_id, service_id, scope)))
        if snapshot is None:
            for head in every_item(self._store, f"WS#{workspace_id}", sk_prefix=f"SVCCAT#{service_id}#"):
                snapshot = self.load(head)
                if snapshot is not None:
                    break
        if snapshot is None:
            return None
        return frozenset(str(tool["name"]) for tool in snapshot.get("tools", []))

    def forget_service(self, workspace_id: str, service_id: str) -> None:
        """Delete every snapshot of a service in a workspace, blobs then heads (after the service is deleted)."""
        self._forget(workspace_id, f"SVCCAT#{service_id}#", lambda head: True)

    def forget_scope(self, workspace_id: str, scope: str | None = None) -> None:
        """Delete the snapshots of every service in a workspace taken for ``scope`` (a user's, ``user:<id>``), or
        all of them when ``scope`` is None (the workspace is being deleted)."""
        self._forget(workspace_id, "SVCCAT#", lambda head: scope is None or head.get("scope") == scope)

    def _forget(self, workspace_id: str, prefix: str, chosen: Callable[[dict[str, Any]], bool]) -> None:
        for head in list(every_item(self._store, f"WS#{workspace_id}", sk_prefix=prefix)):
            if not chosen(head):
                continue
            if head.get("snapshot_key"):
                self.delete(head["snapshot_key"])
            self._store.delete(Key(head["pk"], head["sk"]))
