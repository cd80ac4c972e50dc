"""Reading stored catalog snapshots: the head item of a (workspace, service, scope) and the blob it points at.

Shared by the catalog (which writes snapshots) and the tool policies (which check that a policy names a tool some
snapshot lists), so neither depends on the other.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from mcpbridge.domain.items import Key
from mcpbridge.paging import every_item
from mcpbridge.ports import Blobs, Store

log = logging.getLogger("mcpbridge.services")


def head_key(workspace_id: str, service_id: str, scope: str) -> Key:
    return Key(f"WS#{workspace_id}", f"SVCCAT#{service_id}#{scope}")


class Snapshots:
    def __init__(self, store: Store, blobs: Callable[[], Blobs]) -> None:
        """``blobs`` is asked for on first use: a function that never reads a snapshot needs no blob store."""
        self._store = store
        self._blobs = blobs

    def load(self, head: dict[str, Any] | None) -> dict[str, Any] | None:
        """The snapshot a head points at, or None (no head, no snapshot yet, or a blob that is gone)."""
        if not head or not head.get("snapshot_key"):
            return None
        data = self._blobs().get(head["snapshot_key"])
        if data is None:  # the head points at a blob that is gone: treat as no snapshot, never as an error page
            log.warning("catalog snapshot %s is missing", head.get("snapshot_id"))
            return None
        snapshot: dict[str, Any] = json.loads(data)
        return snapshot

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
                self._blobs().delete(head["snapshot_key"])
            self._store.delete(Key(head["pk"], head["sk"]))
