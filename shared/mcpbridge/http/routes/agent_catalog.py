"""``/api/v1/agent/servers``, ``/api/v1/agent/tools``, ``/api/v1/agent/tools/describe``: what an agent may call.

``agent_id`` names the agent profile (omitted: the default profile, every service). Any role may read; API keys need
``call_tools``, the capability of agents (``POST /api/v1/agent/tool-calls`` needs it too), so an agent's key can
discover what it may call without the ``manage_services`` authority of the admin routes. Every answer carries
``notice``: the metadata comes from third-party servers and is untrusted data. Describe takes the tool name as a
query parameter: tool names are free text (``/``, ``%``, spaces) that a path segment would mangle on its way through
proxies and API Gateway.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from mcpbridge.agent.discovery import (
    DEFAULT_PAGE_SIZE,
    EXTERNAL_DATA_NOTICE,
    MAX_PAGE_SIZE,
    ServerStatus,
    ToolDescription,
    ToolSummary,
)
from mcpbridge.http.auth import CurrentPrincipal
from mcpbridge.http.deps import DiscoveryDep, ProfilesDep
from mcpbridge.http.openapi import problems
from mcpbridge.http.paging import cursor_query, limit_query, next_cursor_field, page_of
from mcpbridge.http.views import Timestamp

if TYPE_CHECKING:
    pass

router = APIRouter(prefix="/api/v1/agent", tags=["agent-catalog"])

AGENT_ID = Query(
    default=None,
    max_length=64,
    description="The agent profile whose view this is; omit for the default profile (every service).",
)


class RefreshErrorOut(BaseModel):
    code: str
    message: str
    at: Timestamp


class ServerOut(BaseModel):
    service_id: str
    name: str
    description: str
    builtin: bool
    status: str = Field(description="ready, stale, error, needs_auth or disabled.")
    tool_count: int = Field(description="Tools the catalog snapshot lists.")
    enabled_tool_count: int = Field(description="Of those, the ones the workspace's policies leave enabled.")
    synced_at: Timestamp | None
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
    items: list[ServerOut]
    next_cursor: str | None = next_cursor_field()
    agent_id: str | None = Field(description="The profile used; null for the default profile.")
    notice: str = Field(description="The metadata comes from third-party servers: untrusted data.")


class ToolSummaryOut(BaseModel):
    function_name: str = Field(description="mcp_<service>_<tool>_<hash>, at most 64 characters of [a-z0-9_].")
    service_id: str
    service_name: str
    name: str
    title: str | None
    description: str = Field(description="Prefixed [MCP Service: <name> (external)] and cut to 200 characters.")
    require_approval: bool
    stale: bool
    oauth_connection: Literal["connected", "reauth_required", "not_connected"] | None = Field(
        default=None,
        description="Searches (query) only, for a tool of an OAuth service: whether the caller holds a working token "
        "(connected), one to authorize again (reauth_required) or none (not_connected); null for other services.",
    )

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
            oauth_connection=tool.oauth_connection,
        )


class ToolList(BaseModel):
    items: list[ToolSummaryOut]
    next_cursor: str | None = next_cursor_field()
    notices: list[str] = Field(
        default_factory=list, description="What a search could not do as asked (hybrid without an embedder)."
    )
    notice: str = Field(description="The metadata comes from third-party servers: untrusted data.")


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
    synced_at: Timestamp | None
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


@router.get("/servers", operation_id="listAgentServers", summary="List an agent's servers", responses=problems(404))
def list_servers(
    principal: CurrentPrincipal,
    profiles: ProfilesDep,
    discovery: DiscoveryDep,
    agent_id: str | None = AGENT_ID,
    limit: int = limit_query(),
    cursor: str | None = cursor_query(),
) -> ServerList:
    """Each service the agent's profile selects, with its status, tool counts and (untrusted) instructions."""
    agent = profiles.resolve(principal, agent_id)
    statuses, next_cursor = page_of(
        discovery.servers(principal, agent),
        key=lambda s: ("1" if s.service.is_builtin else "0", s.service.id),
        limit=limit,
        cursor=cursor,
        listing=f"agent/servers?agent_id={agent.id or ''}",
    )
    return ServerList(
        items=[ServerOut.of(s) for s in statuses],
        next_cursor=next_cursor,
        agent_id=agent.id,
        notice=EXTERNAL_DATA_NOTICE,
    )


@router.get("/tools", operation_id="listAgentTools", summary="List an agent's tools", responses=problems(400, 404))
def list_tools(
    principal: CurrentPrincipal,
    profiles: ProfilesDep,
    discovery: DiscoveryDep,
    agent_id: str | None = AGENT_ID,
    query: str | None = Query(
        default=None,
        description="What the agent wants to do, in any language: the tools are ranked on the tool index (names, "
        "titles, descriptions, parameters, services), best first, at most 100.",
    ),
    mode: Literal["hybrid", "semantic", "keyword"] = Query(
        default="hybrid",
        description="How a query ranks: keyword (BM25), semantic (embeddings) or both fused; hybrid runs keyword "
        "only when no embedder is configured.",
    ),
    service_id: str | None = Query(default=None, description="Only the tools of this service."),
    limit: int = limit_query(DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE),
    cursor: str | None = cursor_query(),
) -> ToolList:
    """The enabled tools of the agent's enabled services, optionally of one service, ranked for a query.
    Descriptions are cut to 200 characters: describe a tool for its schema and `tool_ref`."""
    agent = profiles.resolve(principal, agent_id)
    page = discovery.tools(principal, agent, query=query, service_id=service_id, cursor=cursor, limit=limit, mode=mode)
    return ToolList(
        items=[ToolSummaryOut.of(t) for t in page.items],
        next_cursor=page.next_cursor,
        notices=page.notices,
        notice=EXTERNAL_DATA_NOTICE,
    )


@router.get(
    "/tools/describe", operation_id="describeAgentTool", summary="Describe a tool", responses=problems(400, 404)
)
def describe_tool(
    principal: CurrentPrincipal,
    profiles: ProfilesDep,
    discovery: DiscoveryDep,
    service_id: str = Query(description="The service the tool belongs to (from the tools list)."),
    tool_name: str = Query(description="The tool's name as the service lists it (free text: `/`, `%`, spaces)."),
    agent_id: str | None = AGENT_ID,
) -> ToolDescriptionOut:
    """A tool's full definition and the `tool_ref` to call it with. The tool name is a query parameter: names are
    free text that a path segment would mangle."""
    agent = profiles.resolve(principal, agent_id)
    return ToolDescriptionOut.of(discovery.describe(principal, agent, service_id, tool_name))
