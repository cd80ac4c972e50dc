"""The purge of a deleted workspace, a background job (``purge_workspace``): it runs once the workspace is marked
``deleting`` (which refused every key and endpoint token of it at once), is safe to run twice, and resumes where it
stopped when run again (``mcpbridge serve`` resubmits unfinished purges at start; on AWS the indexer retries).

What goes, in order:

1. calls waiting for a person: cancelled (``workspace_deleted``), their workflows woken to end them;
2. OAuth authorizations in progress: attempts and their states (keyed by a digest of the state, outside the
   workspace's partition), so no callback can complete one;
3. each knowledge base: its item, then its documents with their blobs (``documents/<ws>/...``), wiki pages and index
   file (``Documents.purge_knowledge_base``), then anything else under ``KB#<kb>`` (the index pointer and lease on
   AWS); documents that listing did not reach (a lagging index, a knowledge base deleted before them) with their
   blobs;
4. catalog snapshots of every service and user (the blobs under ``catalogs/<ws>/``, then their heads);
5. each endpoint's rate-limit log (``RATE#<endpoint>``);
6. every other item of the workspace's partition (keys, users, services, policies, OAuth tokens and registrations,
   agents, tool references, calls, sessions, name guards, counters), and last the workspace's own item;
7. the store reclaims what the deletes left where it keeps its data (the embedded store rewrites its file, in which
   a deleted key may linger in an index page).

Items whose TTL has passed are invisible to every read, this one too; the store's TTL (DynamoDB) or
``purge_expired`` (SQLite) removes them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from mcpbridge.agent.calls import ToolCalls
from mcpbridge.agent.steps import ToolCallSteps
from mcpbridge.agent.tool_search import index_id as tool_index_id
from mcpbridge.client.snapshots import Snapshots
from mcpbridge.domain.items import Condition, Key
from mcpbridge.identity.records import workspace_key
from mcpbridge.identity.workspaces import PURGE_JOB, Workspaces
from mcpbridge.knowledge.bases import kb_key
from mcpbridge.knowledge.documents import Documents, blob_key
from mcpbridge.knowledge.share_records import forget_workspace_shares
from mcpbridge.oauth.attempts import forget_attempts
from mcpbridge.paging import delete_every_item, every_item
from mcpbridge.ports import Blobs, Jobs, Store
from mcpbridge.publishing.rate_limit import window_key
from mcpbridge.tenancy.paused_calls import cancel_waiting

log = logging.getLogger("mcpbridge.tenancy")


class WorkspacePurge:
    def __init__(
        self,
        store: Store,
        workspaces: Workspaces,
        documents: Callable[[], Documents],
        blobs: Callable[[], Blobs],
        snapshots: Snapshots,
        calls: ToolCalls,
        steps: Callable[[], ToolCallSteps],
        jobs: Jobs,
    ) -> None:
        """``documents``, ``blobs`` and ``steps`` are asked for only when there is something for them."""
        self._store = store
        self._workspaces = workspaces
        self._documents = documents
        self._blobs = blobs
        self._snapshots = snapshots
        self._calls = calls
        self._steps = steps
        self._jobs = jobs

    def run(self, workspace_id: str) -> None:
        """Purge a workspace marked ``deleting``; nothing for one that is not (or is gone already)."""
        item = self._store.get(workspace_key(workspace_id))
        if item is None or item.get("status") != "deleting":
            return
        partition = f"WS#{workspace_id}"
        waiting = self._calls.pending_in(workspace_id)
        if waiting:
            cancel_waiting(
                self._calls, self._steps(), waiting, code="workspace_deleted", why="the workspace was deleted"
            )
        forget_attempts(self._store, workspace_id)
        forget_workspace_shares(self._store, workspace_id)  # the other side of each lives in another workspace
        self._purge_knowledge(workspace_id)
        self._snapshots.forget_scope(workspace_id)
        for endpoint in list(every_item(self._store, partition, sk_prefix="MCPEP#")):
            delete_every_item(self._store, window_key(str(endpoint["id"])).pk, sk_prefix="")
        for rest in list(every_item(self._store, partition)):
            if rest["sk"] != "WS":
                self._store.delete(Key(rest["pk"], rest["sk"]))
        self._store.delete(
            workspace_key(workspace_id), condition=Condition.equals("still_deleting", "status", "deleting")
        )
        self._store.reclaim()
        log.warning("workspace %s is deleted", workspace_id)

    def _purge_knowledge(self, workspace_id: str) -> None:
        partition = f"WS#{workspace_id}"
        bases = [str(kb["id"]) for kb in every_item(self._store, partition, sk_prefix="KB#")]
        for kb_id in bases:
            self._store.delete(kb_key(workspace_id, kb_id))
            self._purge_base(workspace_id, kb_id)
        # Documents that listing did not reach: of a knowledge base deleted before them (whose own purge job has
        # not run yet) or missed by a lagging index. Their knowledge bases are purged too, then their blobs (every
        # version's source and text) go here.
        leftovers = list(every_item(self._store, partition, sk_prefix="DOC#"))
        for kb_id in sorted({str(document["knowledge_base_id"]) for document in leftovers} - set(bases)):
            self._purge_base(workspace_id, kb_id)
        self._purge_base(workspace_id, tool_index_id(workspace_id))  # the tool search index lives beside them
        for document in leftovers:
            for version in range(1, int(document.get("version") or 1) + 1):
                for part in ("source", "text"):
                    self._blobs().delete(blob_key(workspace_id, str(document["id"]), version, part))
            self._store.delete(Key(document["pk"], document["sk"]))

    def _purge_base(self, workspace_id: str, kb_id: str) -> None:
        """A knowledge base's documents, wiki pages and index file, then anything else under ``KB#<kb>``."""
        self._documents().purge_knowledge_base(workspace_id, kb_id)
        delete_every_item(self._store, f"KB#{kb_id}", sk_prefix="")

    def _any(self, partition: str, prefix: str) -> bool:
        return bool(self._store.query(partition, sk_prefix=prefix, limit=1).items)

    def resume(self) -> int:
        """Submit the purge of every workspace still ``deleting`` (after a restart); how many."""
        unfinished = self._workspaces.deleting()
        for workspace_id in unfinished:
            self._jobs.submit(PURGE_JOB, {"workspace_id": workspace_id})
        return len(unfinished)
