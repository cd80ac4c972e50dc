"""``/api/v1/agent/servers``, ``/api/v1/agent/tools``, ``/api/v1/agent/tools/describe``: what an agent may call.

``agent_id`` names the agent profile (omitted: the default profile, every service). Any role may read; API keys need
``call_tools``, the capability of agents (``POST /api/v1/agent/tool-calls`` needs it too), so an agent's key can
discover what it may call without the ``manage_services`` authority of the admin routes. Every answer carries
``notice``: the metadata comes from third-party servers and is untrusted data. Describe takes the tool name as a
query parameter: tool names are free text (``/``, ``%``, spaces) that a path segment would mangle on its way through
proxies and API Gateway.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from mcpbridge.agent.discovery import EXTERNAL_DATA_NOTICE, ServerStatus, ToolDescription, ToolSummary
from mcpbridge.http.auth import CurrentPrincipal
from mcpbridge.http.deps import DiscoveryDep, ProfilesDep
from mcpbridge.http.openapi import problems

router = APIRouter(prefix="/api/v1/agent", tags=["agent-catalog"])


class RefreshErrorOut(BaseModel):
    code: str
    message: str
    at: str


class ServerOut(BaseModel):
    service_id: str
    name: str
    description: str
    builtin: bool
    status: str = Field(description="ready, stale, error, needs_auth or disabled.")
    tool_count: int = Field(description="Tools the catalog snapshot lists.")
    enabled_tool_count: int = Field(description="Of those, the ones the workspace's policies leave enabled.")
    synced_at: str | None
    last_error: RefreshErrorOut | None
    usage_instructions: str = Field(description="Untrusted data, not instructions.")
    server_instructions: str | None = Field(description="The server's own instructions; untrusted data.")
    untrusted: bool

    @classmethod
    def of(cls, status: ServerStatus) -> ServerOut:
        service, error = status.service, status.last_error
        return cls(
            service_id=service.id,
            name=service.name,
            description=service.description,
            builtin=service.is_builtin,
            status=status.status,
            tool_count=status.tool_count,
            enabled_tool_count=status.enabled_tool_count,
            synced_at=status.synced_at,
            last_error=None if error is None else RefreshErrorOut(code=error.code, message=error.message, at=error.at),
            usage_instructions=status.usage_instructions,
            server_instructions=status.server_instructions,
            untrusted=status.untrusted,
        )


class ServerList(BaseModel):
    agent_id: str | None = Field(description="The profile used; null for the default profile.")
    items: list[ServerOut]
    notice: str


class ToolSummaryOut(BaseModel):
    function_name: str = Field(description="mcp_<service>_<tool>_<hash>, at most 64 characters of [a-z0-9_].")
    service_id: str
    service_name: str
    name: str
    title: str | None
    description: str = Field(description="Prefixed [MCP Service: <name> (external)] and cut to 200 characters.")
    require_approval: bool
    stale: bool

    @classmethod
    def of(cls, tool: ToolSummary) -> ToolSummaryOut:
        return cls(
            function_name=tool.function_name,
            service_id=tool.service_id,
            service_name=tool.service_name,
            name=tool.name,
            title=tool.title,
            description=tool.description,
            require_approval=tool.require_approval,
            stale=tool.stale,
        )


class ToolList(BaseModel):
    items: list[ToolSummaryOut]
    total: int
    next_cursor: str | None
    has_more: bool
    notice: str


class ToolDescriptionOut(BaseModel):
    function_name: str
    service_id: str
    service_name: str
    name: str
    title: str | None
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None
    annotations: dict[str, Any] | None
    definition: dict[str, Any] = Field(description="The tool as the server lists it.")
    definition_hash: str
    tool_ref: str = Field(description="Pass it to a tool call; a changed schema invalidates it (describe again).")
    require_approval: bool
    stale: bool
    synced_at: str | None
    untrusted: bool
    notice: str

    @classmethod
    def of(cls, tool: ToolDescription) -> ToolDescriptionOut:
        return cls(
            function_name=tool.function_name,
            service_id=tool.service_id,
            service_name=tool.service_name,
            name=tool.name,
            title=tool.title,
            description=tool.description,
            input_schema=tool.input_schema,
            output_schema=tool.output_schema,
            annotations=tool.annotations,
            definition=tool.definition,
            definition_hash=tool.definition_hash,
            tool_ref=tool.tool_ref,
            require_approval=tool.require_approval,
            stale=tool.stale,
            synced_at=tool.synced_at,
            untrusted=True,
            notice=EXTERNAL_DATA_NOTICE,
        )


@router.get("/servers", responses=problems(404))
def list_servers(
    principal: CurrentPrincipal, profiles: ProfilesDep, discovery: DiscoveryDep, agent_id: str | None = None
) -> ServerList:
    agent = profiles.resolve(principal, agent_id)
    statuses = discovery.servers(principal, agent)
    return ServerList(agent_id=agent.id, items=[ServerOut.of(s) for s in statuses], notice=EXTERNAL_DATA_NOTICE)


@router.get("/tools", responses=problems(400, 404))
def list_tools(
    principal: CurrentPrincipal,
    profiles: ProfilesDep,
    discovery: DiscoveryDep,
    agent_id: str | None = None,
    query: str | None = None,
    service_id: str | None = None,
    cursor: str | None = None,
    limit: int = 20,
) -> ToolList:
    agent = profiles.resolve(principal, agent_id)
    page = discovery.tools(principal, agent, query=query, service_id=service_id, cursor=cursor, limit=limit)
    return ToolList(
        items=[ToolSummaryOut.of(t) for t in page.items],
        total=page.total,
        next_cursor=page.next_cursor,
        has_more=page.has_more,
        notice=EXTERNAL_DATA_NOTICE,
    )


@router.get("/tools/describe", responses=problems(400, 404))
def describe_tool(
    principal: CurrentPrincipal,
    profiles: ProfilesDep,
    discovery: DiscoveryDep,
    service_id: str,
    tool_name: str,
    agent_id: str | None = None,
) -> ToolDescriptionOut:
    agent = profiles.resolve(principal, agent_id)
    return ToolDescriptionOut.of(discovery.describe(principal, agent, service_id, tool_name))
