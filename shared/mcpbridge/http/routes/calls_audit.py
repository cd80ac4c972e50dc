"""``GET /api/v1/calls``: the audit trail of external tool calls, agent and gateway alike
(:mod:`mcpbridge.agent.audit`), newest first, filtered and paged by the REST convention. A page reads a bounded
number of records: when the filters keep few calls it may hold fewer than ``limit`` entries and still have a
``next_cursor``."""

from __future__ import annotations

from typing import Any

from anyio import to_thread
from fastapi import APIRouter, Query
from pydantic import BaseModel

from mcpbridge.agent.audit import CallAudit, CallFilters
from mcpbridge.agent.profiles import require_agent_or_approver
from mcpbridge.http.auth import CurrentPrincipal
from mcpbridge.http.deps import BrokerDep
from mcpbridge.http.paging import cursor_position, cursor_query, limit_query, next_cursor_field, position_cursor

router = APIRouter(prefix="/api/v1/calls", tags=["calls"])


class AuditEntries(BaseModel):
    items: list[dict[str, Any]]
    next_cursor: str | None = next_cursor_field()


def _filter(description: str) -> Any:
    return Query(default=None, max_length=256, description=description)


@router.get("", operation_id="listCalls", summary="Audit the external tool calls")
async def list_calls(
    principal: CurrentPrincipal,
    broker: BrokerDep,
    since: str | None = _filter("Calls made at or after this ISO 8601 time."),
    until: str | None = _filter("Calls made before this ISO 8601 time."),
    user_id: str | None = _filter("Calls of this user (admin keys only; others see their own)."),
    service_id: str | None = _filter("Calls of this MCP service."),
    tool: str | None = _filter("Calls of this tool (its name at the service)."),
    outcome: str | None = _filter("Calls in this status: completed, failed, rejected, cancelled, uncertain..."),
    endpoint_id: str | None = _filter("Calls made through this published endpoint."),
    agent_id: str | None = _filter("Calls made under this agent profile."),
    rule_id: str | None = _filter("Calls decided by this rule of the workspace's rules (enforced or log-only)."),
    limit: int = limit_query(),
    cursor: str | None = cursor_query(),
) -> AuditEntries:
    """Every external tool call kept (agents' and published endpoints'), newest first: who called, through which
    endpoint or agent, the tool, a digest of the arguments (never their values), the approval, the outcome and its
    timings, and the decision of the workspace's rules (`policy`: rule and version). `since` (inclusive) and `until`
    (exclusive) are ISO 8601 times. Admin keys see the workspace's calls, other keys their own. Each page reads a
    bounded number of records: with narrow filters a page may hold fewer than `limit` entries (even none) and still
    carry a `next_cursor`; the listing ends when `next_cursor` is null."""
    if not principal.is_admin:
        require_agent_or_approver(principal)
    filters = CallFilters(since, until, user_id, service_id, tool, outcome, endpoint_id, agent_id, rule_id)
    listing = f"calls:{filters.describe()}"
    before = cursor_position(cursor, listing)[0] if cursor else None
    audit = CallAudit(broker.records)
    page = await to_thread.run_sync(lambda: audit.page(principal, filters, limit=limit, before=before))
    next_cursor = position_cursor((page.after,), listing) if page.after else None
    return AuditEntries(items=page.entries, next_cursor=next_cursor)
