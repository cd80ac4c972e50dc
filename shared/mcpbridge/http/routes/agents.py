"""``/api/v1/agents``: agent profiles, which external MCP services an agent may use and how long its paused calls
wait (read: viewer; write: admin; API keys need ``manage_services``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from pydantic import BaseModel, ConfigDict, Field, model_validator

from mcpbridge.agent.profiles import AgentProfile
from mcpbridge.http.auth import CurrentPrincipal
from mcpbridge.http.deps import ProfilesDep
from mcpbridge.http.openapi import problems

router = APIRouter(prefix="/api/v1/agents", tags=["agents"])


class AgentIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

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

    model_config = ConfigDict(extra="forbid", strict=True)

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
    created_at: str | None
    updated_at: str | None
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
    total: int


@router.post("", status_code=201, responses=problems(409))
def create_agent(body: AgentIn, principal: CurrentPrincipal, profiles: ProfilesDep) -> AgentOut:
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


@router.get("")
def list_agents(principal: CurrentPrincipal, agent_profiles: ProfilesDep) -> AgentList:
    profiles = agent_profiles.list(principal)
    return AgentList(items=[AgentOut.of(p) for p in profiles], total=len(profiles))


@router.get("/{agent_id}")
def get_agent(agent_id: str, principal: CurrentPrincipal, profiles: ProfilesDep) -> AgentOut:
    return AgentOut.of(profiles.get(principal, agent_id))


@router.put("/{agent_id}", responses=problems(409))
def update_agent(agent_id: str, body: AgentPatch, principal: CurrentPrincipal, profiles: ProfilesDep) -> AgentOut:
    profile = profiles.update(principal, agent_id, expected_version=body.expected_version, **body.changes())
    return AgentOut.of(profile)


@router.delete("/{agent_id}", status_code=204)
def delete_agent(agent_id: str, principal: CurrentPrincipal, profiles: ProfilesDep) -> Response:
    profiles.delete(principal, agent_id)
    return Response(status_code=204)
