"""``/api/v1/agents``: agent profiles, which external MCP services an agent may use and how long its paused calls
wait (read: viewer; write: admin; API keys need ``manage_services``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from pydantic import BaseModel, ConfigDict, Field, model_validator

from mcpbridge.agent.profiles import AgentProfile
from mcpbridge.http.auth import CurrentPrincipal
from mcpbridge.http.deps import ProfilesDep
from mcpbridge.http.fields import AgentId
from mcpbridge.http.openapi import problems
from mcpbridge.http.paging import cursor_query, limit_query, next_cursor_field, page_of
from mcpbridge.http.views import Timestamp

router = APIRouter(prefix="/api/v1/agents", tags=["agents"])


class AgentIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [
                {
                    "name": "Support assistant",
                    "description": "Answers customers",
                    "mcp_selection_mode": "selected",
                    "mcp_services": ["svc_01jd8x2k7m0000000000000000"],
                    "approval_timeout_seconds": 600,
                    "oauth_wait_timeout_seconds": 600,
                }
            ]
        },
    )

    name: str = Field(description="1 to 255 bytes once trimmed.")
    description: str = ""
    mcp_selection_mode: str = Field(default="all", description="all (default), selected or none.")
    mcp_services: list[str] = Field(
        default_factory=list,
        description="Service ids (the workspace's or builtin) used when the mode is selected; at most 100.",
    )
    approval_timeout_seconds: int = Field(default=600, description="30 to 86400 (default 600).")
    oauth_wait_timeout_seconds: int = Field(default=600, description="30 to 86400 (default 600).")


class AgentPatch(BaseModel):
    """Only the fields sent change; none may be null. ``expected_version``: refuse with 409 unless the profile is
    still at that version."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={"examples": [{"approval_timeout_seconds": 1800, "expected_version": 3}]},
    )

    name: str | None = None
    description: str | None = None
    mcp_selection_mode: str | None = None
    mcp_services: list[str] | None = None
    approval_timeout_seconds: int | None = None
    oauth_wait_timeout_seconds: int | None = None
    expected_version: int | None = None

    @model_validator(mode="after")
    def _no_nulls(self) -> AgentPatch:
        nulls = sorted(f for f in self.model_fields_set if f != "expected_version" and getattr(self, f) is None)
        if nulls:
            raise ValueError(f"{', '.join(nulls)} cannot be null")
        return self

    def changes(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.model_fields_set if name != "expected_version"}


class AgentOut(BaseModel):
    id: str
    name: str
    description: str
    mcp_selection_mode: str
    mcp_services: list[str]
    approval_timeout_seconds: int
    oauth_wait_timeout_seconds: int
    created_at: Timestamp | None
    updated_at: Timestamp | None
    version: int

    @classmethod
    def of(cls, profile: AgentProfile) -> AgentOut:
        assert profile.id is not None  # the default profile is never listed
        return cls(
            id=profile.id,
            name=profile.name,
            description=profile.description,
            mcp_selection_mode=profile.mcp_selection_mode,
            mcp_services=list(profile.mcp_services),
            approval_timeout_seconds=profile.approval_timeout_seconds,
            oauth_wait_timeout_seconds=profile.oauth_wait_timeout_seconds,
            created_at=profile.created_at,
            updated_at=profile.updated_at,
            version=profile.version,
        )


class AgentList(BaseModel):
    items: list[AgentOut]
    next_cursor: str | None = next_cursor_field()


@router.post(
    "", operation_id="createAgent", summary="Create an agent profile", status_code=201, responses=problems(409)
)
def create_agent(body: AgentIn, principal: CurrentPrincipal, profiles: ProfilesDep) -> AgentOut:
    """Which external services an agent may use (all, selected or none) and how long its paused calls wait for an
    approval or an authorization."""
    profile = profiles.create(
        principal,
        name=body.name,
        description=body.description,
        mcp_selection_mode=body.mcp_selection_mode,
        mcp_services=body.mcp_services,
        approval_timeout_seconds=body.approval_timeout_seconds,
        oauth_wait_timeout_seconds=body.oauth_wait_timeout_seconds,
    )
    return AgentOut.of(profile)


@router.get("", operation_id="listAgents", summary="List agent profiles")
def list_agents(
    principal: CurrentPrincipal,
    agent_profiles: ProfilesDep,
    limit: int = limit_query(),
    cursor: str | None = cursor_query(),
) -> AgentList:
    """The workspace's agent profiles, oldest first."""
    profiles, next_cursor = page_of(
        agent_profiles.list(principal), key=lambda p: (p.id or "",), limit=limit, cursor=cursor, listing="agents"
    )
    return AgentList(items=[AgentOut.of(p) for p in profiles], next_cursor=next_cursor)


@router.get("/{agent_id}", operation_id="getAgent", summary="Get an agent profile")
def get_agent(agent_id: AgentId, principal: CurrentPrincipal, profiles: ProfilesDep) -> AgentOut:
    """One agent profile, by id."""
    return AgentOut.of(profiles.get(principal, agent_id))


@router.put("/{agent_id}", operation_id="updateAgent", summary="Update an agent profile", responses=problems(409))
def update_agent(agent_id: AgentId, body: AgentPatch, principal: CurrentPrincipal, profiles: ProfilesDep) -> AgentOut:
    """Changes the fields sent; with `expected_version`, only if the profile is still at that version (409
    otherwise)."""
    profile = profiles.update(principal, agent_id, expected_version=body.expected_version, **body.changes())
    return AgentOut.of(profile)


@router.delete("/{agent_id}", operation_id="deleteAgent", summary="Delete an agent profile", status_code=204)
def delete_agent(agent_id: AgentId, principal: CurrentPrincipal, profiles: ProfilesDep) -> Response:
    """Deletes the profile; its calls keep their record."""
    profiles.delete(principal, agent_id)
    return Response(status_code=204)
