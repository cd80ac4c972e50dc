"""Where people resolve paused agent calls: tool approvals and in-conversation OAuth.

Only the user a call belongs to, in its workspace, may resolve it (another user: 403 ``user_mismatch``; another
workspace: 404, the call is not visible there). The first resolution wins; a second answers 409
``already_resolved``. ``modified_args`` must be a JSON object (``null`` is refused) and is validated against the
tool's schema again; the call keeps its original arguments beside them (``original_arguments``). Resolving an
OAuth pause with ``authorize`` before the user holds a usable token answers 409.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from mcpbridge.agent.calls import ToolCall
from mcpbridge.agent.profiles import require_agent_or_approver
from mcpbridge.domain.identity import Principal, timestamp
from mcpbridge.http.auth import CurrentPrincipal
from mcpbridge.http.deps import BrokerDep
from mcpbridge.http.fields import PendingId
from mcpbridge.http.openapi import problems
from mcpbridge.http.views import Timestamp

if TYPE_CHECKING:
    from mcpbridge.agent.broker import ToolCallBroker

router = APIRouter(prefix="/api/v1/agent", tags=["resolutions"])


class ApprovalOut(BaseModel):
    """Who resolved a call's approval, how and when."""

    decision: Literal["approve", "reject"]
    by: str = Field(description="The user who decided.")
    by_api_key: str = Field(description="The API key it used.")
    at: Timestamp
    reason: str | None = Field(default=None, description="The reason given, if any.")
    modified_args: bool = Field(default=False, description="The approver replaced the arguments.")
    answered_input: bool = Field(default=False, description="The decision answered the service's own question.")


class InputRequestOut(BaseModel):
    """What the service itself asked during the call (a form-mode elicitation), to be answered with `content`."""

    message: str = Field(description="The service's question, as it put it (untrusted text).")
    requested_schema: dict[str, Any] = Field(description="The JSON Schema the answer must match.")


class CallErrorOut(BaseModel):
    code: str = Field(description="Stable, machine-readable (e.g. rejected, approval_timeout, tool_disabled).")
    message: str


class CallOut(BaseModel):
    """A tool call as its owner sees it. No token; the authorization URL only for its owner while it waits."""

    pending_id: str = Field(description="The call's id (also the pending id while it waits).")
    user_id: str = Field(description="The user the call acts for (its owner).")
    status: str
    kind: str | None = Field(description="approval or oauth while the call waits, else null.")
    service_id: str
    service_name: str
    tool: str
    function_name: str
    tool_ref: str
    arguments: dict[str, Any] = Field(description="The arguments the call runs with (the approved ones, if replaced).")
    original_arguments: dict[str, Any] | None = Field(
        description="The arguments the call was made with, when its approver replaced them (approval.modified_args); "
        "null otherwise."
    )
    session_id: str | None
    expires_at: Timestamp | None = Field(
        description="While the call waits: when the wait ends (the approval or OAuth timeout of its agent profile) and "
        "the call is rejected or cancelled; null once it no longer waits."
    )
    authorization_url: str | None
    input_request: InputRequestOut | None = Field(
        default=None,
        description="While the call waits on its service's own question: the question; approve with `content`.",
    )
    approval: ApprovalOut | None
    approvals: list[ApprovalOut] = Field(
        default_factory=list,
        description="For a call an ask rule routed to named approvers: each approver's decision so far.",
    )
    approvers: list[str] | None = Field(
        default=None, description="Who may decide a call an ask rule routed (the caller never among them)."
    )
    approvals_required: int | None = Field(default=None, description="How many of them must approve.")
    policy: dict[str, Any] | None = Field(
        default=None,
        description="The workspace rules' decision: rule_id (null: the default), rule_set_version, outcome, "
        "enforced (false: log-only), redacted_by, detected (kinds, never values).",
    )
    policy_result: dict[str, Any] | None = Field(
        default=None, description="What the rules on results did: denied_by, redacted_by, detected (kinds)."
    )
    result: dict[str, Any] | None = Field(description="The upstream result, marked untrusted, images redacted.")
    error: CallErrorOut | None
    outcome_uncertain: bool = Field(description="The request may have run and its answer was lost: not replayed.")
    upstream_runs: int | None = Field(
        default=None,
        description="For a call whose service asked a question: how many times the tool ran (once up to each "
        "question it asked, once more with the answers); null for other calls, which run once.",
    )
    created_at: Timestamp
    finished_at: Timestamp | None


def call_out(call: ToolCall, principal: Principal, broker: ToolCallBroker) -> CallOut:
    waiting = call.status in ("awaiting_approval", "awaiting_oauth")
    routing = call.item.get("approval_routing")
    return CallOut(
        pending_id=call.id,
        user_id=call.owner_user_id,
        status=call.status,
        kind=call.pending_kind if waiting else None,
        service_id=call.service_id,
        service_name=call.service_name,
        tool=call.tool_name,
        function_name=call.function_name,
        tool_ref=call.tool_ref,
        arguments=call.arguments,
        original_arguments=call.original_arguments,
        session_id=call.session_id,
        expires_at=timestamp(call.deadline_at) if waiting and call.deadline_at is not None else None,
        authorization_url=broker.authorization_url(call, principal),
        input_request=None if call.input_request is None else InputRequestOut.model_validate(call.input_request),
        approval=None if call.approval is None else ApprovalOut.model_validate(call.approval),
        approvals=[ApprovalOut.model_validate(a) for a in call.item.get("approvals") or []],
        approvers=routing.get("users") if routing else None,
        approvals_required=routing.get("required") if routing else None,
        policy=call.item.get("policy"),
        policy_result=call.item.get("policy_result"),
        result=call.result,
        error=None if call.error is None else CallErrorOut.model_validate(call.error),
        outcome_uncertain=call.status == "uncertain",
        upstream_runs=call.item.get("upstream_runs"),
        created_at=call.created_at,
        finished_at=call.finished_at,
    )


class ApprovalDecision(BaseModel):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"decision": "approve", "reason": "checked with the customer"}]}
    )

    decision: Literal["approve", "reject"]
    reason: str | None = Field(default=None, max_length=2000)
    modified_args: Any = Field(default=None, description="A JSON object replacing the arguments; null is refused.")
    content: Any = Field(
        default=None,
        description="For a call waiting on its service's own question (`input_request`): the answer, a JSON object "
        "matching the question's schema. The call runs again with it.",
    )


class OAuthResolution(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"service_id": "svc_01jd8x2k7m0000000000000000", "decision": "authorize"}]},
    )

    service_id: str = Field(min_length=1, max_length=64)
    decision: Literal["authorize", "cancel"] = "authorize"


class OAuthCancel(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{}]})

    service_id: str | None = Field(default=None, max_length=64)


@router.post(
    "/tool-approvals/{pending_id}",
    operation_id="resolveToolApproval",
    summary="Approve or reject a call",
    responses=problems(409),
)
def resolve_approval(
    pending_id: PendingId, body: ApprovalDecision, principal: CurrentPrincipal, broker: BrokerDep
) -> CallOut:
    """Resolves a call waiting for approval, as its user or a workspace admin with `approve_calls`. `modified_args`
    replaces the arguments (checked against the tool's schema again); a call waiting on its service's own question
    (`input_request`) is approved with `content`, the answer (checked against the question's schema), and runs
    again. The first resolution wins; a second gets 409
    `already_resolved`."""
    require_agent_or_approver(principal)
    call = broker.resolve_approval(
        principal,
        pending_id,
        decision=body.decision,
        reason=body.reason,
        modified_args=body.modified_args,
        modified_given="modified_args" in body.model_fields_set,
        content=body.content,
        content_given="content" in body.model_fields_set,
    )
    return call_out(call, principal, broker)


@router.post(
    "/mcp-oauth-resolutions/{pending_id}",
    operation_id="resolveOAuthPause",
    summary="Resume a call after authorization",
    responses=problems(409),
)
def resolve_oauth(
    pending_id: PendingId, body: OAuthResolution, principal: CurrentPrincipal, broker: BrokerDep
) -> CallOut:
    """Resumes a call waiting for the user's OAuth authorization once the user holds a usable token (409 before), or
    cancels it."""
    require_agent_or_approver(principal)
    call = broker.resolve_oauth(principal, pending_id, service_id=body.service_id, decision=body.decision)
    return call_out(call, principal, broker)


@router.post(
    "/mcp-oauth-resolutions/{pending_id}/cancel",
    operation_id="cancelOAuthPause",
    summary="Cancel a call waiting for authorization",
    responses=problems(409),
)
def cancel_oauth(pending_id: PendingId, principal: CurrentPrincipal, broker: BrokerDep) -> CallOut:
    """Cancels a call waiting for the user's OAuth authorization."""
    require_agent_or_approver(principal)
    current = broker.get(principal, pending_id)
    call = broker.resolve_oauth(principal, pending_id, service_id=current.service_id, decision="cancel")
    return call_out(call, principal, broker)
