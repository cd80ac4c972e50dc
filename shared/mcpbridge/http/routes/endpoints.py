"""``/api/v1/mcp-endpoints``: publish knowledge bases as MCP endpoints (read: viewer; write: admin; API keys need
``manage_channels``). The token is in the create and rotate responses only, with ready-to-paste client configs."""

from __future__ import annotations

import re
import unicodedata
from typing import Any, Literal
from urllib.parse import urlsplit

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field, model_validator

from mcpbridge.http.auth import CurrentPrincipal
from mcpbridge.http.deps import EndpointsDep, SettingsDep, UsageWriterDep
from mcpbridge.http.fields import EndpointId
from mcpbridge.http.openapi import problems
from mcpbridge.http.paging import cursor_query, limit_query, next_cursor_field, page_of
from mcpbridge.http.views import Timestamp
from mcpbridge.publishing.endpoints import CatalogGroup, Endpoint

router = APIRouter(prefix="/api/v1/mcp-endpoints", tags=["mcp-endpoints"])

TOKEN_ENV_VAR = "MCPBRIDGE_TOKEN"  # noqa: S105 - the name of an environment variable, not a secret
_LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1"})


class PublishedServiceIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    service_id: str = Field(min_length=1, max_length=128, description="An MCP service of the workspace.")
    tools: list[str] = Field(
        min_length=1, max_length=200, description='Its tools to publish, by name, or `["*"]` for every enabled tool.'
    )


class PublishedServiceOut(BaseModel):
    service_id: str
    tools: list[str]


class EndpointIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [
                {
                    "name": "Claude",
                    "knowledge_base_ids": ["kb_01jd8x2k7m0000000000000000"],
                    "tools": ["search_knowledge", "read_document"],
                    "rate_limit_per_minute": 120,
                }
            ]
        },
    )

    name: str = Field(description="1 to 255 bytes once trimmed.")
    description: str = ""
    enabled: bool = True
    knowledge_base_ids: list[str] = Field(default_factory=list, description="Empty: every knowledge base.")
    tools: list[str] | None = Field(
        default=None, description="Tool whitelist (an unknown name is refused). Omit for the default tools."
    )
    default_agent_id: str | None = None
    rate_limit_per_minute: int = Field(default=60, description="Calls per minute, 1 to 6000; 0 means 60.")
    auth_mode: Literal["both", "oauth", "static"] = Field(
        default="both",
        description="The credentials accepted: the static token, OAuth access tokens of mcpbridge's authorization "
        "server (clients that add a server by URL and sign in), or both.",
    )
    rate_limit_scope: Literal["endpoint", "user"] = Field(
        default="endpoint",
        description="What the rate limit counts: all calls to the endpoint, or each OAuth user's calls apart.",
    )
    services: list[PublishedServiceIn] = Field(
        default_factory=list,
        description="External MCP services whose tools the endpoint publishes beside its knowledge tools (calls go "
        "through the same policies, approvals and records as agent calls).",
    )
    external_tool_mode: Literal["list", "search"] = Field(
        default="list",
        description="How the external tools are offered: each listed (list), or search_tools and call_tool in "
        "their place (search: a client with hundreds of tools behind it sees two).",
    )


class EndpointPatch(BaseModel):
    """Only the fields sent change. ``default_agent_id: null`` clears it; no other field may be null."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"examples": [{"enabled": False}]})

    name: str | None = None
    description: str | None = None
    enabled: bool | None = None
    knowledge_base_ids: list[str] | None = None
    tools: list[str] | None = None
    default_agent_id: str | None = None
    rate_limit_per_minute: int | None = None
    auth_mode: Literal["both", "oauth", "static"] | None = None
    rate_limit_scope: Literal["endpoint", "user"] | None = None
    services: list[PublishedServiceIn] | None = None
    external_tool_mode: Literal["list", "search"] | None = None

    @model_validator(mode="after")
    def _only_agent_is_nullable(self) -> EndpointPatch:
        nulls = sorted(f for f in self.model_fields_set if f != "default_agent_id" and getattr(self, f) is None)
        if nulls:
            raise ValueError(f"{', '.join(nulls)} cannot be null")
        return self

    def changes(self) -> dict[str, Any]:
        changes = {field: getattr(self, field) for field in self.model_fields_set}
        if self.services is not None:
            changes["services"] = [published.model_dump() for published in self.services]
        return changes


class EndpointOut(BaseModel):
    """An endpoint as listed. It has no field for the token or its hash."""

    id: str
    name: str
    description: str
    enabled: bool
    knowledge_base_ids: list[str]
    tools: list[str]
    default_agent_id: str | None
    rate_limit_per_minute: int
    token_hint: str
    last_used_at: Timestamp | None
    created_at: Timestamp
    updated_at: Timestamp
    version: int
    auth_mode: Literal["both", "oauth", "static"]
    rate_limit_scope: Literal["endpoint", "user"]
    services: list[PublishedServiceOut]
    external_tool_mode: Literal["list", "search"]

    @classmethod
    def of(cls, endpoint: Endpoint) -> EndpointOut:
        return cls(
            id=endpoint.id,
            name=endpoint.name,
            description=endpoint.description,
            enabled=endpoint.enabled,
            knowledge_base_ids=list(endpoint.knowledge_base_ids),
            tools=list(endpoint.tools),
            default_agent_id=endpoint.default_agent_id,
            rate_limit_per_minute=endpoint.rate_limit_per_minute,
            token_hint=endpoint.token_hint,
            last_used_at=endpoint.last_used_at,
            created_at=endpoint.created_at,
            updated_at=endpoint.updated_at,
            version=endpoint.version,
            auth_mode=endpoint.auth_mode,
            rate_limit_scope=endpoint.rate_limit_scope,
            services=[PublishedServiceOut(**published.as_dict()) for published in endpoint.services],
            external_tool_mode=endpoint.external_tool_mode,
        )


MCP_REMOTE = "mcp-remote@0.15.1"
"""The stdio bridge the fallback config runs, pinned: ``npx`` would otherwise fetch whatever is newest."""


class ClientConfigs(BaseModel):
    cursor: dict[str, Any] = Field(description="Cursor `~/.cursor/mcp.json` (`mcpServers`).")
    vscode: dict[str, Any] = Field(description="VS Code `.vscode/mcp.json` (`servers`, `type: http`).")
    claude_code: str = Field(description="A `claude mcp add --transport http ...` command.")
    mcp_remote: dict[str, Any] = Field(
        description=f"stdio fallback through `mcp-remote` (pinned: `{MCP_REMOTE}`; Claude Desktop and others); the "
        "token is in `env` only."
    )
    opencode: dict[str, Any] = Field(
        description="OpenCode `opencode.json` (`mcp.servers`, `type: remote`, its own OAuth off: the token is sent)."
    )


class IssuedEndpoint(EndpointOut):
    """An endpoint with its token, as created or rotated. The token is shown only in this response: store it now."""

    token: str
    url: str
    client_configs: ClientConfigs


class EndpointList(BaseModel):
    items: list[EndpointOut]
    next_cursor: str | None = next_cursor_field()


class CatalogToolOut(BaseModel):
    name: str
    title: str
    group: str
    default: bool


class CatalogGroupOut(BaseModel):
    name: str
    title: str
    tools: list[CatalogToolOut]

    @classmethod
    def of(cls, group: CatalogGroup) -> CatalogGroupOut:
        return cls(
            name=group.name,
            title=group.title,
            tools=[CatalogToolOut(name=t.name, title=t.title, group=t.group, default=t.default) for t in group.tools],
        )


class CatalogOut(BaseModel):
    groups: list[CatalogGroupOut]


# ---------------------------------------------------------------------------------------------------- routes


@router.get("", operation_id="listEndpoints", summary="List MCP endpoints")
def list_endpoints(
    principal: CurrentPrincipal,
    endpoint_service: EndpointsDep,
    limit: int = limit_query(),
    cursor: str | None = cursor_query(),
) -> EndpointList:
    """The workspace's published MCP endpoints the key may see (a scoped key sees only those within its scope),
    oldest first. Tokens are shown by their hint only."""
    endpoints, next_cursor = page_of(
        endpoint_service.list(principal), key=lambda e: (e.id,), limit=limit, cursor=cursor, listing="mcp-endpoints"
    )
    return EndpointList(items=[EndpointOut.of(e) for e in endpoints], next_cursor=next_cursor)


@router.get("/tools", operation_id="getEndpointToolCatalog", summary="Endpoint tool catalog")
def tool_catalog(principal: CurrentPrincipal, endpoints: EndpointsDep) -> CatalogOut:
    """The tools an endpoint can offer, in groups (read, ask, wiki, write), with the ones on by default."""
    return CatalogOut(groups=[CatalogGroupOut.of(g) for g in endpoints.catalog(principal)])


@router.post(
    "", operation_id="createEndpoint", summary="Create an MCP endpoint", status_code=201, responses=problems(404)
)
def create_endpoint(
    body: EndpointIn,
    principal: CurrentPrincipal,
    endpoints: EndpointsDep,
    settings: SettingsDep,
    request: Request,
    response: Response,
) -> IssuedEndpoint:
    """Publishes knowledge bases as an MCP endpoint at `/mcp/{endpoint_id}`. The response carries the endpoint's
    token (shown only here, `Cache-Control: no-store`) and ready-to-paste configs for Cursor, VS Code, Claude Code
    and mcp-remote."""
    endpoint, token = endpoints.create(
        principal,
        name=body.name,
        description=body.description,
        enabled=body.enabled,
        knowledge_base_ids=body.knowledge_base_ids,
        tools=body.tools,
        default_agent_id=body.default_agent_id,
        rate_limit_per_minute=body.rate_limit_per_minute,
        auth_mode=body.auth_mode,
        rate_limit_scope=body.rate_limit_scope,
        services=[published.model_dump() for published in body.services],
        external_tool_mode=body.external_tool_mode,
    )
    return _issued(endpoint, token, settings.public_base_url, request, response)


@router.get("/{endpoint_id}", operation_id="getEndpoint", summary="Get an MCP endpoint")
def get_endpoint(endpoint_id: EndpointId, principal: CurrentPrincipal, endpoints: EndpointsDep) -> EndpointOut:
    """One endpoint, by id (no token)."""
    return EndpointOut.of(endpoints.get(principal, endpoint_id))


class UsageInstructionsOut(BaseModel):
    instructions: str = Field(description="Plain text to give an assistant or a client before it uses the endpoint.")
    source: Literal["template", "model"] = Field(description="Written by the template or by the language model.")
    notices: list[str]


@router.post(
    "/{endpoint_id}/usage-instructions",
    operation_id="writeEndpointUsageInstructions",
    summary="Write usage instructions for an MCP endpoint",
    responses=problems(404),
)
def usage_instructions(
    endpoint_id: EndpointId,
    principal: CurrentPrincipal,
    writer: UsageWriterDep,
    template: bool = Query(default=False, description="The template only, even where a language model is configured."),
) -> UsageInstructionsOut:
    """Instructions written from what the endpoint offers (its enabled tools, knowledge bases and published services):
    by the configured language model, or by a template where there is none (or it fails, or `template=true`). Nothing
    is stored."""
    written = writer.write(principal, endpoint_id, use_model=not template)
    return UsageInstructionsOut(instructions=written.text, source=written.source, notices=written.notices)


@router.put("/{endpoint_id}", operation_id="updateEndpoint", summary="Update an MCP endpoint", responses=problems(409))
def update_endpoint(
    endpoint_id: EndpointId, body: EndpointPatch, principal: CurrentPrincipal, endpoints: EndpointsDep
) -> EndpointOut:
    """Changes the fields sent; a disabled endpoint refuses its next request."""
    return EndpointOut.of(endpoints.update(principal, endpoint_id, **body.changes()))


@router.delete(
    "/{endpoint_id}",
    operation_id="deleteEndpoint",
    summary="Delete an MCP endpoint",
    status_code=204,
    responses=problems(409),
)
def delete_endpoint(endpoint_id: EndpointId, principal: CurrentPrincipal, endpoints: EndpointsDep) -> Response:
    """The endpoint and its token go at once: its next request is refused."""
    endpoints.delete(principal, endpoint_id)
    return Response(status_code=204)


@router.post(
    "/{endpoint_id}/rotate-token",
    operation_id="rotateEndpointToken",
    summary="Rotate an endpoint's token",
    responses=problems(409),
)
def rotate_token(
    endpoint_id: EndpointId,
    principal: CurrentPrincipal,
    endpoints: EndpointsDep,
    settings: SettingsDep,
    request: Request,
    response: Response,
) -> IssuedEndpoint:
    """A new token for the endpoint (shown only in this response, with new client configs); the old one is refused
    from the next request."""
    endpoint, token = endpoints.rotate_token(principal, endpoint_id)
    return _issued(endpoint, token, settings.public_base_url, request, response)


# ---------------------------------------------------------------------------------------------------- configs


def _issued(
    endpoint: Endpoint, token: str, public_base_url: str, request: Request, response: Response
) -> IssuedEndpoint:
    response.headers["Cache-Control"] = "no-store"
    base = (public_base_url or str(request.base_url)).rstrip("/")
    url = f"{base}/mcp/{endpoint.id}"
    return IssuedEndpoint(
        **EndpointOut.of(endpoint).model_dump(),
        token=token,
        url=url,
        client_configs=client_configs(slug(endpoint.name), url, token),
    )


def slug(name: str) -> str:
    """A server name clients accept (letters, digits, hyphens), from the endpoint's name."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    cleaned = re.sub(r"[^a-z0-9]+", "-", ascii_name.lower()).strip("-")[:64].rstrip("-")
    return cleaned or "mcpbridge"


def client_configs(server: str, url: str, token: str) -> ClientConfigs:
    headers = {"Authorization": f"Bearer {token}"}
    # mcp-remote's documented form: no space after the colon (some clients mangle spaces in args), the value read
    # from an environment variable it expands itself, so the token never appears in the process arguments.
    remote_args = ["-y", MCP_REMOTE, url, "--header", f"Authorization:${{{TOKEN_ENV_VAR}}}"]
    if _needs_allow_http(url):
        remote_args.append("--allow-http")  # mcp-remote refuses plain http except on localhost without it
    return ClientConfigs(
        cursor={"mcpServers": {server: {"url": url, "headers": headers}}},
        vscode={"servers": {server: {"type": "http", "url": url, "headers": headers}}},
        claude_code=f'claude mcp add --transport http {server} {url} --header "Authorization: Bearer {token}"',
        mcp_remote={
            "mcpServers": {
                server: {"command": "npx", "args": remote_args, "env": {TOKEN_ENV_VAR: f"Bearer {token}"}},
            }
        },
        opencode={
            "$schema": "https://opencode.ai/config.json",
            "mcp": {"servers": {server: {"type": "remote", "url": url, "oauth": False, "headers": headers}}},
        },
    )


def _needs_allow_http(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme.lower() == "http" and (parts.hostname or "") not in _LOOPBACK_HOSTS
