"""Where people resolve paused agent calls: tool approvals and in-conversation OAuth."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from mcpbridge.errors import NotFound
from mcpbridge.http.auth import CurrentPrincipal

router = APIRouter(prefix="/api/v1/agent", tags=["resolutions"])


class ApprovalDecision(BaseModel):
    model_config = ConfigDict(extra="forbid")

    decision: Literal["approve", "reject"]
    reason: str | None = Field(default=None, max_length=2000)
    modified_args: dict[str, Any] | None = None


class OAuthResolution(BaseModel):
    model_config = ConfigDict(extra="forbid")

    service_id: str = Field(min_length=1)
    decision: Literal["authorize", "cancel"]


@router.post("/tool-approvals/{pending_id}")
def resolve_approval(pending_id: str, body: ApprovalDecision, principal: CurrentPrincipal) -> dict[str, str]:
    # No call can pause in this version: there is nothing to resolve.
    raise NotFound("no such pending call", code="pending_not_found")


@router.post("/mcp-oauth-resolutions/{pending_id}")
def resolve_oauth(pending_id: str, body: OAuthResolution, principal: CurrentPrincipal) -> dict[str, str]:
    raise NotFound("no such pending call", code="pending_not_found")
