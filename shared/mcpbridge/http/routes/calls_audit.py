"""``GET /api/v1/calls``: the audit trail of external tool calls, agent and gateway alike
(:mod:`mcpbridge.agent.audit`), newest first, filtered and paged by the REST convention."""

from __future__ import annotations

from typing import Annotated, Any

from anyio import to_thread
from fastapi import APIRouter, Query
from pydantic import BaseModel

from mcpbridge.agent.audit import CallAudit, CallFilters
from mcpbridge.agent.profiles import require_agent_or_approver
from mcpbridge.http.auth import CurrentPrincipal
from mcpbridge.http.deps import BrokerDep
from mcpbridge.http.paging import cursor_query, limit_query, next_cursor_field, page_of

router = APIRouter(prefix="/api/v1/calls", tags=["calls"])


class AuditEntries(BaseModel):
    items: list[dict[str, Any]]
    next_cursor: str | None = next_cursor_field()


Filter = Annotated[str | None, Query(max_length=256)]


@router.get("", operation_id="listCalls", summary="Audit the external tool calls")
async def list_calls(
    principal: CurrentPrincipal,
    broker: BrokerDep,
    since: Filter = None,
    until: Filter = None,
    user_id: Filter = None,
    service_id: Filter = None,
    tool: Filter = None,
    outcome: Filter = None,
    endpoint_id: Filter = None,
    agent_id: Filter = None,
    limit: int = limit_query(),
    cursor: str | None = cursor_query(),
) -> AuditEntries:
    """Every external tool call kept (agents' and published endpoints'), newest first: who called, through which
    endpoint or agent, the tool, a digest of the arguments (never their values), the approval, the outcome and its
    timings. `since` (inclusive) and `until` (exclusive) are ISO 8601 times. Admin keys see the workspace's calls,
    other keys their own."""
    if not principal.is_admin:
        require_agent_or_approver(principal)
    filters = CallFilters(since, until, user_id, service_id, tool, outcome, endpoint_id, agent_id)
    audit = CallAudit(broker.records)
    entries = await to_thread.run_sync(audit.query, principal, filters)
    page, next_cursor = page_of(
        entries,
        key=lambda e: (e["created_at"], e["call_id"]),
        limit=limit,
        cursor=cursor,
        listing=f"calls:{filters.describe()}",
        descending=True,
    )
    return AuditEntries(items=page, next_cursor=next_cursor)
