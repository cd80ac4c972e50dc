"""``/api/v1/agent/tool-calls`` and ``/api/v1/agent/pending``: agents call external tools by ``tool_ref``.

A call that needs nothing from a person runs at once (200 with its outcome). One that needs an approval or the
user's OAuth authorization answers 202 with the pending record; the agent polls ``GET /tool-calls/{id}`` or, on
AWS, passes ``callback_task_token`` to be resumed by Step Functions when the call ends.
"""

from __future__ import annotations

from typing import Annotated, Any

from anyio import to_thread
from fastapi import APIRouter, Header, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from mcpbridge.agent.calls import ToolCall
from mcpbridge.agent.profiles import require_agent, require_agent_or_approver
from mcpbridge.http.auth import CurrentPrincipal
from mcpbridge.http.deps import BrokerDep
from mcpbridge.http.fields import CallId
from mcpbridge.http.openapi import problems
from mcpbridge.http.paging import cursor_query, limit_query, next_cursor_field, page_of
from mcpbridge.http.routes.resolutions import CallOut, call_out

router = APIRouter(prefix="/api/v1/agent", tags=["agent"])


class ActingPrincipal(BaseModel):
    model_config = ConfigDict(
        extra="forbid", strict=True, json_schema_extra={"examples": [{"user_id": "usr_01jd8x2k7m0000000000000000"}]}
    )

    user_id: str = Field(min_length=1, max_length=128)


class ToolCallIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [
                {
                    "tool_ref": "tr_...",
                    "arguments": {"query": "refresh tokens"},
                    "agent_id": "agt_01jd8x2k7m0000000000000000",
                    "interactive": True,
                }
            ]
        },
    )

    tool_ref: str = Field(min_length=1, max_length=128, description="From the agent catalog's describe.")
    arguments: dict[str, Any] = Field(default_factory=dict, description="Validated against the tool's schema.")
    agent_id: str | None = Field(default=None, max_length=64)
    principal: ActingPrincipal | None = Field(default=None, description="Act for this user (needs act_as).")
    session_id: str | None = Field(default=None, max_length=256)
    interactive: bool = Field(default=True, description="False: never pause for OAuth (a notice instead).")
    callback_task_token: str | None = Field(
        default=None, max_length=2048, description="AWS only: resumed with SendTaskSuccess/Failure at the end."
    )


class SubmittedOut(CallOut):
    notice: str | None = None


class PendingList(BaseModel):
    items: list[CallOut]
    next_cursor: str | None = next_cursor_field()


@router.post(
    "/tool-calls",
    operation_id="submitToolCall",
    summary="Call a tool",
    responses={**problems(404, 409, 502), 202: {"description": "The call waits for an approval or an authorization."}},
)
async def submit_tool_call(
    body: ToolCallIn,
    principal: CurrentPrincipal,
    broker: BrokerDep,
    request: Request,
    response: Response,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            max_length=255,
            description="Retrying with the same key and body returns the first call (the tool never runs twice); "
            "the same key with another body is 409. Keys expire with their call.",
        ),
    ] = None,
) -> SubmittedOut:
    """Calls an external tool by `tool_ref`, its arguments checked against the tool's schema and policy. 200 with the
    outcome when it ran at once; 202 with the pending call when it waits for a person's approval or the user's OAuth
    authorization (poll `GET /api/v1/agent/tool-calls/{call_id}`)."""
    require_agent(principal)
    submitted = await broker.submit(
        principal,
        tool_ref=body.tool_ref,
        arguments=body.arguments,
        agent_id=body.agent_id,
        acting_user_id=body.principal.user_id if body.principal else None,
        session_id=body.session_id,
        interactive=body.interactive,
        callback_task_token=body.callback_task_token,
        base_url=str(request.base_url).rstrip("/"),
        idempotency_key=idempotency_key,
    )
    if submitted.paused:
        response.status_code = 202
    call = submitted.call
    if call.status == "awaiting_oauth":  # its authorization URL is read from the store
        shown = (await to_thread.run_sync(call_out, call, principal, broker)).model_dump()
    else:
        shown = call_out(call, principal, broker).model_dump()
    if submitted.agent_result is not None:  # ran at once: the agent gets the images; storage has them redacted
        shown["result"] = submitted.agent_result
    return SubmittedOut(**shown, notice=submitted.notice)


@router.get("/tool-calls/{call_id}", operation_id="getToolCall", summary="Get a tool call")
def get_tool_call(call_id: CallId, principal: CurrentPrincipal, broker: BrokerDep) -> CallOut:
    """A call's status, and its result or error once it ended."""
    require_agent_or_approver(principal)
    return call_out(broker.get(principal, call_id), principal, broker)


@router.get("/pending", operation_id="listPendingCalls", summary="List pending calls")
def list_pending(
    principal: CurrentPrincipal,
    broker: BrokerDep,
    limit: int = limit_query(),
    cursor: str | None = cursor_query(),
) -> PendingList:
    """The calls waiting for a person: the caller's own; for an admin key with `approve_calls`, every one of the
    workspace. Oldest first."""
    require_agent_or_approver(principal)
    calls: list[ToolCall] = broker.pending(principal)
    shown, next_cursor = page_of(
        calls, key=lambda c: (c.created_at, c.id), limit=limit, cursor=cursor, listing="agent/pending"
    )
    return PendingList(items=[call_out(call, principal, broker) for call in shown], next_cursor=next_cursor)
