"""The periodic sweep (every five minutes: EventBridge Scheduler on AWS): documents and deletions whose jobs never
ended are re-driven (:meth:`~mcpbridge.knowledge.document_recovery.IndexingRecovery.sweep`), and the numbers an
operator watches between jobs are measured: ``IndexingBacklog`` (documents waiting to be indexed) and
``PendingApprovals`` (tool calls waiting for a person's approval), every workspace."""

from __future__ import annotations

import logging

from mcpbridge.agent.calls import ToolCalls
from mcpbridge.knowledge.document_recovery import IndexingRecovery, SweepReport
from mcpbridge.ports import Telemetry

log = logging.getLogger("mcpbridge.maintenance")


class Sweep:
    def __init__(self, indexing: IndexingRecovery, calls: ToolCalls, telemetry: Telemetry) -> None:
        self._indexing = indexing
        self._calls = calls
        self._telemetry = telemetry

    def run(self) -> SweepReport:
        report = self._indexing.sweep()
        self._telemetry.count("IndexingBacklog", report.backlog)
        self._telemetry.count("PendingApprovals", self._calls.count_waiting("awaiting_approval"))
        return report
