"""The periodic sweep (every five minutes: EventBridge Scheduler on AWS): documents and deletions whose jobs never
ended are re-driven (:meth:`~mcpbridge.knowledge.document_recovery.IndexingRecovery.sweep`), and the numbers an
operator watches between jobs are measured: ``IndexingBacklog`` (documents waiting to be indexed) and
``PendingApprovals`` (tool calls waiting for a person's approval), every workspace. Webhook deliveries whose job was
lost are queued again."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from mcpbridge.agent.calls import ToolCalls
from mcpbridge.errors import MCPBridgeError
from mcpbridge.knowledge.document_recovery import IndexingRecovery, SweepReport
from mcpbridge.ports import Telemetry

if TYPE_CHECKING:
    from mcpbridge.agent.webhooks import Webhooks

log = logging.getLogger("mcpbridge.maintenance")


class Sweep:
    def __init__(
        self,
        indexing: IndexingRecovery,
        calls: ToolCalls,
        telemetry: Telemetry,
        webhooks: Callable[[], Webhooks] | None = None,
    ) -> None:
        """``webhooks``: whose deliveries left pending are queued again (asked for on use)."""
        self._indexing = indexing
        self._calls = calls
        self._telemetry = telemetry
        self._webhooks = webhooks

    def run(self) -> SweepReport:
        if self._webhooks is not None:
            try:
                self._webhooks().redrive()
            except MCPBridgeError as exc:  # the rest of the sweep goes on
                log.warning("could not queue pending webhook deliveries again: %s", exc.code)
        report = self._indexing.sweep()
        self._telemetry.count("IndexingBacklog", report.backlog)
        self._telemetry.count("PendingApprovals", self._calls.count_waiting("awaiting_approval"))
        return report
