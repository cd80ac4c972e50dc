"""The audit trail of external tool calls (agent and gateway), read from the calls' own records.

Every call is recorded by the broker (:mod:`mcpbridge.agent.calls`) and kept for the retention of call records
(``RETENTION_SECONDS``; DynamoDB's TTL on ``expires_at`` deletes it then). An entry says who called (user, API key),
through which endpoint or agent, the service and tool, a digest of the arguments (SHA-256 of their canonical JSON:
never the values), the approval (who decided, what, when, with what reason, whether the arguments were replaced and
the digest of those), the outcome (status, error code) and timings. Workspace admins read every call of the
workspace; other keys their own user's calls. Pages are read newest first by call id (ids are time-ordered), a
bounded number of records at a time (:data:`SCAN_BUDGET`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from mcpbridge.agent.calls import ToolCall, ToolCalls
from mcpbridge.agent.tool_resolution import ENDPOINT_PREFIX
from mcpbridge.domain.identity import Principal
from mcpbridge.errors import InvalidInput


@dataclass(frozen=True)
class CallFilters:
    since: str | None = None
    until: str | None = None
    user_id: str | None = None
    service_id: str | None = None
    tool: str | None = None
    outcome: str | None = None
    endpoint_id: str | None = None
    agent_id: str | None = None
    rule_id: str | None = None
    """Calls decided by this rule of the workspace's rules (whether enforced or only logged)."""

    def describe(self) -> str:
        """The filters as one string, for a cursor that belongs to this listing only."""
        return json.dumps(self.__dict__, sort_keys=True)


def arguments_digest(arguments: Any) -> str:
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def entry_of(call: ToolCall) -> dict[str, Any]:
    """One call as the audit trail shows it (no argument values, no result, no token)."""
    through = call.agent_id or ""
    approval = call.approval
    shown_approval = None
    if approval is not None:
        shown_approval = {
            "decision": approval.get("decision"),
            "by": approval.get("by"),
            "at": approval.get("at"),
            "reason": approval.get("reason"),
            "modified_args": bool(approval.get("modified_args")),
            "modified_arguments_digest": arguments_digest(call.arguments) if approval.get("modified_args") else None,
        }
    original = call.original_arguments if call.original_arguments is not None else call.arguments
    started, finished = parse_timestamp(call.created_at), parse_timestamp(call.finished_at or "")
    return {
        "call_id": call.id,
        "user_id": call.owner_user_id,
        "api_key_id": call.item.get("submitted_by_api_key") or None,
        "endpoint_id": through if through.startswith(ENDPOINT_PREFIX) else None,
        "agent_id": through if through and not through.startswith(ENDPOINT_PREFIX) else None,
        "service_id": call.service_id,
        "service_name": call.service_name,
        "tool": call.tool_name,
        "arguments_digest": arguments_digest(original),
        "approval_required": approval is not None or call.status == "awaiting_approval",
        "approval": shown_approval,
        "approvals": [
            {"decision": a.get("decision"), "by": a.get("by"), "at": a.get("at")}
            for a in call.item.get("approvals") or []
        ],
        "policy": call.item.get("policy"),
        "policy_result": call.item.get("policy_result"),
        "outcome": call.status,
        "error_code": (call.error or {}).get("code"),
        "created_at": call.created_at,
        "finished_at": call.finished_at,
        "duration_ms": None if started is None or finished is None else round((finished - started) * 1000),
    }


SCAN_BUDGET: Final = 2000
"""At most this many call records are read for one page: a page whose filters keep few calls may come back short
(even empty) with a ``next_cursor`` to read on from, so no query reads a whole workspace's history at once."""


@dataclass(frozen=True)
class AuditPage:
    entries: list[dict[str, Any]]
    after: str | None
    """The last call id this page read up to, to read on from; None when no older call is left."""


class CallAudit:
    def __init__(self, calls: ToolCalls) -> None:
        self._calls = calls

    def page(self, principal: Principal, filters: CallFilters, *, limit: int, before: str | None = None) -> AuditPage:
        """Up to ``limit`` entries that ``filters`` keep, newest first, among the calls older than the call id
        ``before`` (from the newest when None), reading at most :data:`SCAN_BUDGET` records."""
        for bound in (filters.since, filters.until):
            if bound is not None and parse_timestamp(bound) is None:
                raise InvalidInput("since and until must be ISO 8601 timestamps", code="invalid_time_range")
        if not principal.is_admin and filters.user_id not in (None, principal.user_id):
            return AuditPage([], None)
        wanted_user = filters.user_id if principal.is_admin else principal.user_id
        entries: list[dict[str, Any]] = []
        for scanned, call in enumerate(self._calls.newest_first(principal.workspace_id, before=before), start=1):
            entry = entry_of(call)
            if _keeps(entry, filters, wanted_user):
                entries.append(entry)
                if len(entries) > limit:  # one more than the page: there is a next page, starting after the page
                    return AuditPage(entries[:limit], entries[limit - 1]["call_id"])
            if scanned >= SCAN_BUDGET:
                return AuditPage(entries, call.id)
        return AuditPage(entries, None)


def _keeps(entry: dict[str, Any], filters: CallFilters, user_id: str | None) -> bool:
    created = parse_timestamp(entry["created_at"]) or 0.0
    since = parse_timestamp(filters.since or "")
    until = parse_timestamp(filters.until or "")
    checks = (
        since is None or created >= since,
        until is None or created < until,
        user_id is None or entry["user_id"] == user_id,
        filters.service_id is None or entry["service_id"] == filters.service_id,
        filters.tool is None or entry["tool"] == filters.tool,
        filters.outcome is None or entry["outcome"] == filters.outcome,
        filters.endpoint_id is None or entry["endpoint_id"] == filters.endpoint_id,
        filters.agent_id is None or entry["agent_id"] == filters.agent_id,
        filters.rule_id is None or (entry["policy"] or {}).get("rule_id") == filters.rule_id,
    )
    return all(checks)


def parse_timestamp(text: str) -> float | None:
    """Seconds since the epoch of an ISO 8601 timestamp (``Z`` or an offset; UTC when it has none), or None."""
    if not text or len(text) > 64:
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return parsed.timestamp()
    except (ValueError, OverflowError):  # not a time, or one past what a timestamp holds
        return None
