"""``/api/v1/agent/resources``, ``/api/v1/agent/prompts``, ``/api/v1/agent/catalog/refresh``: what an agent reads
from its external services besides tools (:mod:`mcpbridge.agent.external_reads`).

The same callers as the tool catalog (:mod:`.agent_catalog`): any role, API keys with ``call_tools``; ``agent_id``
names the agent profile whose services these are. Every answer carries ``notice``: what comes back is third-party,
untrusted data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, cast

from anyio import to_thread
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from mcpbridge.agent.discovery import (
    DEFAULT_PAGE_SIZE,
    EXTERNAL_DATA_NOTICE,
    MAX_PAGE_SIZE,
    description_prefix,
)
from mcpbridge.agent.external_reads import MAX_URI_CHARS
from mcpbridge.errors import RateLimited
from mcpbridge.http.auth import CurrentPrincipal, service_of
from mcpbridge.http.deps import ProfilesDep
from mcpbridge.http.openapi import problems
from mcpbridge.http.paging import cursor_query, limit_query, next_cursor_field, page_of
from mcpbridge.http.problems import problem
from mcpbridge.http.routes.agent_catalog import AGENT_ID

if TYPE_CHECKING:
    from mcpbridge.agent.external_reads import ExternalReads

router = APIRouter(prefix="/api/v1/agent", tags=["agent-catalog"])


async def _reads(request: Request) -> ExternalReads:
    return cast("ExternalReads", await service_of(request, "external_reads"))


ReadsDep = Annotated["ExternalReads", Depends(_reads)]
SERVICE_ID = Query(max_length=64, description="The service to read from (from the servers list).")


class ResourceOut(BaseModel):
    service_id: str
    uri: str
    name: str
    title: str | None
    description: str | None = Field(description="Prefixed [MCP Service: <name> (external)]; untrusted data.")
    mime_type: str | None
    size: int | None


class ResourceList(BaseModel):
    items: list[ResourceOut]
    next_cursor: str | None = next_cursor_field()
    notice: str


class ResourceContentsOut(BaseModel):
    service_id: str
    uri: str
    contents: list[dict[str, Any]] = Field(description="uri, mimeType, and text or blob (base64), as sent.")
    size_bytes: int = Field(description="Text in UTF-8 bytes plus blobs in base64 characters.")
    max_bytes: int = Field(description="The cap on a read's contents; a larger one is refused (resource_too_large).")
    untrusted: bool = True
    notice: str


class PromptArgumentOut(BaseModel):
    name: str
    description: str | None
    required: bool


class PromptOut(BaseModel):
    service_id: str
    name: str
    title: str | None
    description: str | None = Field(description="Prefixed [MCP Service: <name> (external)]; untrusted data.")
    arguments: list[PromptArgumentOut]


class PromptList(BaseModel):
    items: list[PromptOut]
    next_cursor: str | None = next_cursor_field()
    notice: str


class PromptGetIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"service_id": "svc_01j9z8x7w6v5t4s3r2q1p0n9m8", "name": "args-prompt", "arguments": {"city": "Lyon"}}
            ]
        },
    )

    service_id: str = Field(max_length=64)
    name: str = Field(description="The prompt's name, as listed.")
    arguments: dict[str, Any] = Field(default_factory=dict, description="Argument name -> string value.")
    agent_id: str | None = Field(default=None, max_length=64)


class PromptMessagesOut(BaseModel):
    service_id: str
    name: str
    description: str | None
    messages: list[dict[str, Any]] = Field(description="role and content, as sent; untrusted data.")
    untrusted: bool = True
    notice: str


class RefreshIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"service_id": "svc_01j9z8x7w6v5t4s3r2q1p0n9m8"}, {}]}
    )

    service_id: str | None = Field(default=None, max_length=64, description="Only this service; omit for all.")
    agent_id: str | None = Field(default=None, max_length=64)


class RefreshOutcomeOut(BaseModel):
    service_id: str
    name: str
    outcome: str = Field(description="refreshed, failed or timed_out.")
    tool_count: int | None
    error: dict[str, str] | None


class RefreshOut(BaseModel):
    items: list[RefreshOutcomeOut]
    limit_per_minute: int


def _prefixed(service_name: str, text: str | None) -> str | None:
    return None if text is None else description_prefix(service_name) + text


@router.get(
    "/resources",
    operation_id="listAgentResources",
    summary="List a service's resources",
    responses=problems(400, 403, 404, 502),
)
async def list_resources(
    principal: CurrentPrincipal,
    profiles: ProfilesDep,
    reads: ReadsDep,
    service_id: str = SERVICE_ID,
    agent_id: str | None = AGENT_ID,
    limit: int = limit_query(DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE),
    cursor: str | None = cursor_query(),
) -> ResourceList:
    """The resources the service lists now to the caller (its own OAuth token for a per-user service)."""
    agent = await to_thread.run_sync(profiles.resolve, principal, agent_id)
    service, listed = await reads.resources(principal, agent, service_id)
    page, next_cursor = page_of(
        listed,
        key=lambda r: (str(r.uri),),
        limit=limit,
        cursor=cursor,
        listing=f"agent/resources?service_id={service_id}&agent_id={agent.id or ''}",
    )
    items = [
        ResourceOut(
            service_id=service.id,
            uri=str(r.uri),
            name=r.name,
            title=r.title,
            description=_prefixed(service.name, r.description),
            mime_type=r.mime_type,
            size=r.size,
        )
        for r in page
    ]
    return ResourceList(items=items, next_cursor=next_cursor, notice=EXTERNAL_DATA_NOTICE)


@router.get(
    "/resources/read",
    operation_id="readAgentResource",
    summary="Read a resource",
    responses=problems(400, 403, 404, 502),
)
async def read_resource(
    principal: CurrentPrincipal,
    profiles: ProfilesDep,
    reads: ReadsDep,
    service_id: str = SERVICE_ID,
    uri: str = Query(max_length=MAX_URI_CHARS, description="The resource's URI, as listed."),
    agent_id: str | None = AGENT_ID,
) -> ResourceContentsOut:
    """One resource's contents (text or base64 blob), at most 4 MiB in all: a larger one is 502
    `resource_too_large` naming the cap."""
    agent = await to_thread.run_sync(profiles.resolve, principal, agent_id)
    read = await reads.read(principal, agent, service_id, uri)
    return ResourceContentsOut(
        service_id=read.service.id,
        uri=read.uri,
        contents=read.contents,
        size_bytes=read.size_bytes,
        max_bytes=reads.max_content_bytes,
        notice=EXTERNAL_DATA_NOTICE,
    )


@router.get(
    "/prompts",
    operation_id="listAgentPrompts",
    summary="List a service's prompts",
    responses=problems(400, 403, 404, 502),
)
async def list_prompts(
    principal: CurrentPrincipal,
    profiles: ProfilesDep,
    reads: ReadsDep,
    service_id: str = SERVICE_ID,
    agent_id: str | None = AGENT_ID,
    limit: int = limit_query(DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE),
    cursor: str | None = cursor_query(),
) -> PromptList:
    """The prompts the service lists now to the caller, with their arguments (required or not)."""
    agent = await to_thread.run_sync(profiles.resolve, principal, agent_id)
    service, listed = await reads.prompts(principal, agent, service_id)
    page, next_cursor = page_of(
        listed,
        key=lambda p: (p.name,),
        limit=limit,
        cursor=cursor,
        listing=f"agent/prompts?service_id={service_id}&agent_id={agent.id or ''}",
    )
    items = [
        PromptOut(
            service_id=service.id,
            name=p.name,
            title=p.title,
            description=_prefixed(service.name, p.description),
            arguments=[
                PromptArgumentOut(name=a.name, description=a.description, required=bool(a.required))
                for a in p.arguments or []
            ],
        )
        for p in page
    ]
    return PromptList(items=items, next_cursor=next_cursor, notice=EXTERNAL_DATA_NOTICE)


@router.post(
    "/prompts/get",
    operation_id="getAgentPrompt",
    summary="Get a prompt's messages",
    responses=problems(400, 403, 404, 502),
)
async def get_prompt(
    principal: CurrentPrincipal, profiles: ProfilesDep, reads: ReadsDep, body: PromptGetIn
) -> PromptMessagesOut:
    """The prompt's messages for the arguments; they are checked against the server's listing first (missing or
    unknown argument: 400, nothing asked of the server)."""
    agent = await to_thread.run_sync(profiles.resolve, principal, body.agent_id)
    got = await reads.prompt(principal, agent, body.service_id, body.name, body.arguments)
    return PromptMessagesOut(
        service_id=got.service.id,
        name=got.name,
        description=_prefixed(got.service.name, got.description),
        messages=got.messages,
        notice=EXTERNAL_DATA_NOTICE,
    )


@router.post(
    "/catalog/refresh",
    operation_id="refreshAgentCatalog",
    summary="Re-pull the agent's catalog",
    response_model=RefreshOut,
    responses=problems(400, 403, 404, 429),
)
async def refresh_catalog(
    principal: CurrentPrincipal, profiles: ProfilesDep, reads: ReadsDep, body: RefreshIn | None = None
) -> RefreshOut | JSONResponse:
    """Pulls the catalog of the agent's enabled services (or one) again for the caller: the caller's own snapshot of
    a per-user OAuth service. Rate limited per caller: 429 with `Retry-After` past the limit."""
    asked = body or RefreshIn()
    agent = await to_thread.run_sync(profiles.resolve, principal, asked.agent_id)
    try:
        outcomes = await reads.refresh(principal, agent, asked.service_id)
    except RateLimited as limited:
        wait = str(limited.details.get("retry_after_seconds", 60))
        return problem(429, limited.code, limited.message, headers={"Retry-After": wait}, details=limited.details)
    items = [
        RefreshOutcomeOut(
            service_id=o.service.id,
            name=o.service.name,
            outcome=o.outcome,
            tool_count=o.tool_count,
            error=None if o.error_code is None else {"code": o.error_code, "message": o.error_message or ""},
        )
        for o in outcomes
    ]
    return RefreshOut(items=items, limit_per_minute=reads.refreshes_per_minute)
