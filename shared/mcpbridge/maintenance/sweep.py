"""The periodic sweep (every few minutes: EventBridge Scheduler on AWS): documents and deletions whose jobs never
ended are re-driven (:meth:`~mcpbridge.knowledge.document_recovery.IndexingRecovery.sweep`)."""

from __future__ import annotations

import logging

from mcpbridge.knowledge.document_recovery import IndexingRecovery, SweepReport

log = logging.getLogger("mcpbridge.maintenance")


class Sweep:
    def __init__(self, indexing: IndexingRecovery) -> None:
        self._indexing = indexing

    def run(self) -> SweepReport:
        return self._indexing.sweep()
