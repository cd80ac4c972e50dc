"""Documents whose jobs never end, and how many documents wait.

* A job that failed for good (Lambda's failure record on AWS, the thread pool giving up locally) moves its document
  to ``failed`` with the reason, if that version is still waiting (``pending`` or ``processing``): never left
  ``pending``.
* The sweep re-drives what waited longer than the deadline, whatever lost it (a submission that failed after the
  document was stored, a failure record that could not be delivered, a crash): a document's indexing job is
  submitted again (``redrives`` counts them; after :data:`REDRIVES_MAX` the document fails, saying why), and so is
  the deletion job of a deletion marker. Every move is conditional on what the sweep read, so two sweeps, or a
  sweep racing the job, do no harm.
* The backlog is how many documents wait to be indexed, every shard summed (capped: counting reads every entry).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from mcpbridge.domain.identity import timestamp
from mcpbridge.domain.items import AllOf, AnyOf, AttrAbsent, Clause, Compare, Condition, Item, ItemExists, Key, Update
from mcpbridge.domain.shards import list_partitions
from mcpbridge.errors import ConditionFailed
from mcpbridge.knowledge.document_records import doc_key
from mcpbridge.knowledge.documents import DELETING, PENDING, Documents
from mcpbridge.paging import every_item
from mcpbridge.ports import Clock, Store

log = logging.getLogger("mcpbridge.knowledge")

REDRIVES_MAX: Final = 2
"""Re-drives of one document version before the sweep gives up on it."""
BACKLOG_CAP: Final = 10_000
"""The backlog is counted up to this (each count reads the entries)."""
SWEEP_BATCH: Final = 500
"""Documents and deletions one sweep re-drives at most; the next sweep takes the rest."""
WAITING: Final = ("pending", "processing")


@dataclass(frozen=True)
class SweepReport:
    backlog: int
    """Documents waiting to be indexed (at most :data:`BACKLOG_CAP`)."""
    redriven: int
    failed: int
    deletions_redriven: int


class IndexingRecovery:
    def __init__(self, store: Store, clock: Clock, documents: Documents, *, deadline_seconds: float) -> None:
        """``deadline_seconds``: how long a job may take, from its submission, before the sweep re-drives it (longer
        than Lambda may keep and retry an asynchronous invocation)."""
        self._store = store
        self._clock = clock
        self._documents = documents
        self._deadline = deadline_seconds

    def fail_indexing(self, workspace_id: str, document_id: str, version: int, reason: str) -> bool:
        """Move that version of the document, if it still waits, to ``failed`` with ``reason``; False when it
        does not (indexed, changed, deleted). Safe to run twice."""
        still_waiting = AllOf((ItemExists(), Compare("version", "=", version), _waiting()))
        changes = {"parse_status": "failed", "parse_error": reason[:500], "updated_at": timestamp(self._clock.now())}
        try:
            self._store.update(
                doc_key(workspace_id, document_id),
                Update(set=changes, remove=["gsi2pk", "gsi2sk", "queued_at"]),
                condition=Condition("document_still_waiting", still_waiting),
            )
        except ConditionFailed:
            return False
        log.info("document %s v%d failed for good: %s", document_id, version, reason[:200])
        return True

    def backlog(self) -> int:
        """How many documents wait to be indexed (their index entries, every shard; at most the cap)."""
        return sum(1 for _ in _capped(self._entries(PENDING), BACKLOG_CAP))

    def sweep(self) -> SweepReport:
        """Re-drive (or, after too many re-drives, fail) documents waiting past the deadline, and re-drive
        deletions not done by then; at most :data:`SWEEP_BATCH` of them."""
        cutoff = self._clock.now() - self._deadline
        backlog = redriven = failed = 0
        for entry in _capped(self._entries(PENDING), BACKLOG_CAP):
            backlog += 1
            if redriven + failed >= SWEEP_BATCH:
                continue
            item = self._store.get(Key(entry["pk"], entry["sk"]))  # the index may lag: the item decides
            if item is None or "gsi2pk" not in item or item.get("parse_status") not in WAITING:
                continue
            if _queued_at(item) > cutoff:
                continue
            if int(item.get("redrives", 0)) >= REDRIVES_MAX:
                reason = (
                    f"indexing did not finish: its job was submitted {REDRIVES_MAX + 1} times and never ended; "
                    "update the document to index it again"
                )
                failed += self.fail_indexing(item["workspace_id"], item["id"], int(item["version"]), reason)
            elif self._requeue(item):
                self._documents.submit_indexing(item["workspace_id"], item["id"], int(item["version"]))
                redriven += 1
        deletions = 0
        for entry in self._entries(DELETING):
            if deletions >= SWEEP_BATCH:
                break
            marker = self._store.get(Key(entry["pk"], entry["sk"]))
            if marker is not None and _queued_at(marker) <= cutoff and self._requeue(marker):
                self._documents.submit_deletion(marker)
                deletions += 1
        report = SweepReport(backlog, redriven, failed, deletions)
        if redriven or failed or deletions:
            log.warning("sweep: %s", report)
        return report

    def _requeue(self, item: Item) -> bool:
        """Stamp a new ``queued_at`` (and count the re-drive) if nobody else did since ``item`` was read."""
        unchanged: Clause = (
            AttrAbsent("queued_at") if "queued_at" not in item else Compare("queued_at", "=", item["queued_at"])
        )
        clauses: list[Clause] = [ItemExists(), unchanged]
        changes: dict[str, object] = {"queued_at": self._clock.now()}
        if "parse_status" in item:  # a document: still that version, still waiting
            clauses += [Compare("version", "=", item["version"]), _waiting()]
            changes["parse_status"] = "pending"
        with contextlib.suppress(ConditionFailed):
            self._store.update(
                Key(item["pk"], item["sk"]),
                Update(set=changes, add={"redrives": 1}),
                condition=Condition("job_not_requeued", AllOf(tuple(clauses))),
            )
            return True
        return False

    def _entries(self, prefix: str) -> Iterator[Item]:
        for partition in list_partitions(prefix):
            yield from every_item(self._store, partition, index="gsi2", page_size=500)


def _waiting() -> AnyOf:
    return AnyOf(tuple(Compare("parse_status", "=", status) for status in WAITING))


def _queued_at(item: Item) -> float:
    """When the item's current job was submitted; items written before ``queued_at`` existed: their last change."""
    if item.get("queued_at") is not None:
        return float(item["queued_at"])
    changed = item.get("updated_at") or item.get("created_at")
    return datetime.fromisoformat(str(changed).replace("Z", "+00:00")).timestamp() if changed else 0.0


def _capped(entries: Iterator[Item], cap: int) -> Iterator[Item]:
    for count, entry in enumerate(entries):
        if count >= cap:
            return
        yield entry
