"""``/api/v1/mcp-services``: the external MCP services a workspace connects to (read: viewer; write: admin; API
keys need ``manage_services``).

No response model has a field able to hold a secret: credentials are reported as ``{"configured": bool}`` and custom
headers by name only (their values may be credentials). Builtin services show neither URL, headers nor auth.
Secrets are written only through ``PUT /{id}/credentials``; secret fields sent in ``auth_config`` are ignored with a
warning in ``warnings``.
"""

# Over 400 lines: the DTOs and routes of the five sub-resources of /mcp-services (REST paths of the spec).

from __future__ import annotations

from typing import Any

from anyio import to_thread
from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, ConfigDict, Field, model_validator

from mcpbridge.client.mcp_servers_import import ImportRefusal
from mcpbridge.client.policies import ToolPolicy
from mcpbridge.client.registry import Saved, ServiceRegistry, require_writer
from mcpbridge.client.tool_catalog import CatalogView
from mcpbridge.domain.external_services import ExternalService
from mcpbridge.http.auth import CurrentPrincipal
from mcpbridge.http.deps import CatalogDep, EgressDep, OAuthDep, PoliciesDep, RegistryDep
from mcpbridge.http.fields import CredentialField, ServiceId, ToolName
from mcpbridge.http.openapi import problems
from mcpbridge.http.paging import cursor_query, limit_query, next_cursor_field, page_of
from mcpbridge.http.views import Timestamp
from mcpbridge.observability import masked_url

router = APIRouter(prefix="/api/v1/mcp-services", tags=["mcp-services"])


# ---------------------------------------------------------------------------------------------------- wiring


# ---------------------------------------------------------------------------------------------------- models


class AuthConfigIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid", strict=True, json_schema_extra={"examples": [{"auth_type": "oauth", "scopes": ["read"]}]}
    )

    auth_type: str | None = Field(default=None, description="none (default), api_key, bearer or oauth.")
    api_key_header: str | None = Field(default=None, description="For api_key; default X-API-Key.")
    client_id: str | None = Field(default=None, description="OAuth pre-registered client; empty string clears it.")
    scopes: list[str] | None = None
    auth_server_metadata_url: str | None = Field(default=None, description="OAuth metadata pin (SSRF-checked).")
    api_key: str | None = Field(default=None, description="Deprecated and ignored: use PUT /{id}/credentials.")
    token: str | None = Field(default=None, description="Deprecated and ignored: use PUT /{id}/credentials.")
    client_secret: str | None = Field(default=None, description="Ignored: use PUT /{id}/credentials.")

    def given(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.model_fields_set}


class AdvancedConfigIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={"examples": [{"timeout": 30, "retry_count": 3, "retry_delay": 1}]},
    )

    timeout: float | None = Field(default=None, description="Seconds, 1 to 300 (default 30).")
    retry_count: int | None = Field(default=None, description="0 to 10 (default 3).")
    retry_delay: float | None = Field(default=None, description="Seconds, 0 to 60 (default 1).")

    def given(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.model_fields_set if getattr(self, name) is not None}


class ServiceIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [
                {
                    "name": "Docs Hub",
                    "url": "https://mcp.example.com/mcp",
                    "transport": "http-streamable",
                    "auth_config": {"auth_type": "bearer"},
                    "usage_instructions": "Search before reading.",
                }
            ]
        },
    )

    name: str = Field(description="1 to 255 bytes once trimmed; unique in the workspace, case-insensitively.")
    description: str = ""
    enabled: bool = True
    transport: str = Field(default="http-streamable", description="sse or http-streamable (stdio is refused).")
    url: str = Field(description="Checked against the SSRF guard when saved.")
    headers: dict[str, str] = Field(default_factory=dict, description="Custom headers, sent after the auth header.")
    auth_config: AuthConfigIn | None = None
    advanced_config: AdvancedConfigIn | None = None
    usage_instructions: str = ""


class ServicePatch(BaseModel):
    """Only the fields sent change; none may be null. ``auth_config`` and ``advanced_config`` merge field by field;
    ``headers`` replaces the whole set."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"examples": [{"enabled": False}]})

    name: str | None = None
    description: str | None = None
    enabled: bool | None = None
    transport: str | None = None
    url: str | None = None
    headers: dict[str, str] | None = None
    auth_config: AuthConfigIn | None = None
    advanced_config: AdvancedConfigIn | None = None
    usage_instructions: str | None = None

    @model_validator(mode="after")
    def _no_nulls(self) -> ServicePatch:
        nulls = sorted(f for f in self.model_fields_set if getattr(self, f) is None)
        if nulls:
            raise ValueError(f"{', '.join(nulls)} cannot be null")
        return self

    def changes(self) -> dict[str, Any]:
        changes: dict[str, Any] = {}
        for name in self.model_fields_set:
            value = getattr(self, name)
            changes[name] = value.given() if isinstance(value, AuthConfigIn | AdvancedConfigIn) else value
        return changes


class AuthConfigOut(BaseModel):
    """The non-secret part of the auth configuration."""

    auth_type: str
    api_key_header: str
    client_id: str
    scopes: list[str]
    auth_server_metadata_url: str


class AdvancedConfigOut(BaseModel):
    timeout: float
    retry_count: int
    retry_delay: float


class CredentialStatus(BaseModel):
    configured: bool


class ServiceOut(BaseModel):
    """A service. It has no field for a secret; builtin services show no URL, headers or auth. URLs are shown with
    their query values masked (``?api_key=***``): a secret put in a query by mistake is not returned."""

    id: str
    name: str
    description: str
    enabled: bool
    builtin: bool
    transport: str
    url: str | None
    header_names: list[str] = Field(description="Custom header names; values are never returned.")
    auth_config: AuthConfigOut | None
    advanced_config: AdvancedConfigOut
    usage_instructions: str
    catalog_stale: bool
    credentials: dict[str, CredentialStatus]
    created_at: Timestamp
    updated_at: Timestamp
    version: int

    @classmethod
    def of(cls, service: ExternalService, registry: ServiceRegistry) -> ServiceOut:
        builtin = service.is_builtin
        auth = service.auth
        return cls(
            id=service.id,
            name=service.name,
            description=service.description,
            enabled=service.enabled,
            builtin=builtin,
            transport=service.transport,
            url=None if builtin else masked_url(service.url),
            header_names=[] if builtin else sorted(service.headers),
            auth_config=None
            if builtin
            else AuthConfigOut(
                auth_type=auth.auth_type,
                api_key_header=auth.api_key_header,
                client_id=auth.client_id,
                scopes=list(auth.scopes),
                auth_server_metadata_url=masked_url(auth.auth_server_metadata_url),
            ),
            advanced_config=AdvancedConfigOut(
                timeout=service.advanced.timeout,
                retry_count=service.advanced.retry_count,
                retry_delay=service.advanced.retry_delay,
            ),
            usage_instructions=service.usage_instructions,
            catalog_stale=service.catalog_stale,
            credentials={}
            if builtin
            else {
                name: CredentialStatus(configured=status["configured"])
                for name, status in registry.credentials_status(service).items()
            },
            created_at=service.created_at,
            updated_at=service.updated_at,
            version=service.version,
        )


class SavedServiceOut(ServiceOut):
    warnings: list[str] = Field(description="About the request, e.g. secret fields ignored in auth_config.")

    @classmethod
    def saved(cls, saved: Saved, registry: ServiceRegistry) -> SavedServiceOut:
        return cls(**ServiceOut.of(saved.service, registry).model_dump(), warnings=list(saved.warnings))


class ServiceList(BaseModel):
    items: list[ServiceOut]
    next_cursor: str | None = next_cursor_field()


class ImportIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [{"mcpServers": {"docs": {"url": "https://mcp.example.com/mcp", "type": "http"}}}]
        },
    )

    mcpServers: dict[str, Any] = Field(
        description="Standard mcpServers object: {name: {url, type|transport, headers}}; stdio entries are refused."
    )


class RefusalOut(BaseModel):
    name: str
    code: str
    reason: str

    @classmethod
    def of(cls, refusal: ImportRefusal) -> RefusalOut:
        return cls(name=refusal.name, code=refusal.code, reason=refusal.reason)


class ImportOut(BaseModel):
    created: list[ServiceOut]
    refused: list[RefusalOut]
    warnings: list[str]


class CredentialsIn(BaseModel):
    """Pointer semantics: absent or null = keep, ``""`` = no change (clear with DELETE), a value = replace."""

    model_config = ConfigDict(
        extra="forbid", strict=True, json_schema_extra={"examples": [{"token": "the bearer token"}]}
    )

    api_key: str | None = None
    token: str | None = None
    client_secret: str | None = None


class ToolPolicyIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid", strict=True, json_schema_extra={"examples": [{"enabled": True, "require_approval": True}]}
    )

    enabled: bool | None = None
    require_approval: bool | None = None
    pre_register: bool = Field(
        default=False,
        description="Store the policy even though the service's catalog does not list this tool (yet). Without "
        "it, a name the catalog does not list is refused with 404 tool_not_found and the near matches.",
    )


class ToolPolicyOut(BaseModel):
    tool_name: str
    enabled: bool
    require_approval: bool
    updated_at: Timestamp | None
    definition_changed_at: Timestamp | None = Field(
        description="Set when a refresh saw this approval-requiring tool change: approvals count for the new "
        "definition only."
    )

    @classmethod
    def of(cls, policy: ToolPolicy) -> ToolPolicyOut:
        return cls(
            tool_name=policy.tool_name,
            enabled=policy.enabled,
            require_approval=policy.require_approval,
            updated_at=policy.updated_at,
            definition_changed_at=policy.definition_changed_at,
        )


class ToolPolicyList(BaseModel):
    items: list[ToolPolicyOut] = Field(description="Stored overrides; a tool not listed is enabled, no approval.")
    next_cursor: str | None = next_cursor_field()


# ---------------------------------------------------------------------------------------------------- routes


@router.get("", operation_id="listServices", summary="List external MCP services")
def list_services(
    principal: CurrentPrincipal,
    registry: RegistryDep,
    search: str | None = Query(
        default=None,
        max_length=500,
        description="Only the services whose name, usage instructions or description contain every "
        "space-separated keyword (case-insensitive).",
    ),
    limit: int = limit_query(),
    cursor: str | None = cursor_query(),
) -> ServiceList:
    """The workspace's external MCP services, then the builtin ones, oldest first, optionally filtered by keywords.
    No secret in any field."""
    services, next_cursor = page_of(
        registry.list(principal, search=search),
        key=lambda s: ("1" if s.is_builtin else "0", s.id),  # the workspace's own services first, then builtin ones
        limit=limit,
        cursor=cursor,
        listing=f"mcp-services?search={search or ''}",
    )
    return ServiceList(items=[ServiceOut.of(s, registry) for s in services], next_cursor=next_cursor)


@router.post(
    "",
    operation_id="createService",
    summary="Register an external MCP service",
    status_code=201,
    responses=problems(409),
)
def create_service(body: ServiceIn, principal: CurrentPrincipal, registry: RegistryDep) -> SavedServiceOut:
    """A Streamable HTTP or SSE server by URL (checked against the SSRF guard), with its auth settings. Secrets go
    through `PUT /api/v1/mcp-services/{service_id}/credentials`; secret fields sent here are ignored with a warning."""
    saved = registry.create(
        principal,
        name=body.name,
        url=body.url,
        description=body.description,
        enabled=body.enabled,
        transport=body.transport,
        headers=body.headers,
        auth_config=body.auth_config.given() if body.auth_config else None,
        advanced_config=body.advanced_config.given() if body.advanced_config else None,
        usage_instructions=body.usage_instructions,
    )
    return SavedServiceOut.saved(saved, registry)


@router.post("/import", operation_id="importServices", summary="Import services from mcpServers JSON")
def import_services(body: ImportIn, principal: CurrentPrincipal, registry: RegistryDep) -> ImportOut:
    """Registers every entry of a standard `mcpServers` object; stdio entries and URLs the SSRF guard refuses are
    listed in `refused` with the reason."""
    result = registry.import_servers(principal, {"mcpServers": body.mcpServers})
    return ImportOut(
        created=[ServiceOut.of(s, registry) for s in result.created],
        refused=[RefusalOut.of(r) for r in result.refused],
        warnings=result.warnings,
    )


@router.get("/{service_id}", operation_id="getService", summary="Get an external MCP service")
def get_service(service_id: ServiceId, principal: CurrentPrincipal, registry: RegistryDep) -> ServiceOut:
    """One service (the workspace's or a builtin one), without secrets: credentials show only whether they are
    configured."""
    return ServiceOut.of(registry.get(principal, service_id), registry)


@router.put(
    "/{service_id}", operation_id="updateService", summary="Update an external MCP service", responses=problems(409)
)
def update_service(
    service_id: ServiceId, body: ServicePatch, principal: CurrentPrincipal, registry: RegistryDep
) -> SavedServiceOut:
    """Changes the fields sent; `auth_config` and `advanced_config` merge field by field, `headers` replaces the
    whole set. A URL sent back masked (`?key=***`) keeps the stored one."""
    changes = body.changes()
    if "url" in changes or "auth_config" in changes:
        _keep_masked_urls(changes, registry.get(principal, service_id))
    return SavedServiceOut.saved(registry.update(principal, service_id, **changes), registry)


def _keep_masked_urls(changes: dict[str, Any], current: ExternalService) -> None:
    """A URL sent back exactly as this API showed it (query values ``***``, a form's round trip) keeps the stored
    one: saving the mask would replace the real query."""
    if "url" in changes and changes["url"] == masked_url(current.url) != current.url:
        del changes["url"]
    auth = changes.get("auth_config") or {}
    pinned = current.auth.auth_server_metadata_url
    if auth.get("auth_server_metadata_url") == masked_url(pinned) != pinned:
        del auth["auth_server_metadata_url"]


@router.delete(
    "/{service_id}",
    operation_id="deleteService",
    summary="Delete an external MCP service",
    status_code=204,
    responses=problems(409),
)
def delete_service(service_id: ServiceId, principal: CurrentPrincipal, registry: RegistryDep) -> Response:
    """Deletes the service; its credentials, catalog snapshots, policies and OAuth tokens go with it."""
    registry.delete(principal, service_id)
    return Response(status_code=204)


@router.put(
    "/{service_id}/credentials",
    operation_id="setServiceCredentials",
    summary="Set a service's credentials",
    responses=problems(409),
)
def set_credentials(
    service_id: ServiceId, body: CredentialsIn, principal: CurrentPrincipal, registry: RegistryDep
) -> ServiceOut:
    """Writes secrets (API key, bearer token, OAuth client secret), sealed at rest. Absent or null keeps a value;
    clear one with DELETE."""
    values = {name: getattr(body, name) for name in body.model_fields_set}
    return ServiceOut.of(registry.set_credentials(principal, service_id, values), registry)


@router.delete(
    "/{service_id}/credentials/{field}",
    operation_id="deleteServiceCredential",
    summary="Clear a service credential",
    status_code=204,
    responses=problems(400, 409),
)
def delete_credential(
    service_id: ServiceId, field: CredentialField, principal: CurrentPrincipal, registry: RegistryDep
) -> Response:
    """Clears one secret (`api_key`, `token` or `client_secret`)."""
    registry.delete_credential(principal, service_id, field)
    return Response(status_code=204)


@router.get("/{service_id}/tool-approvals", operation_id="listToolPolicies", summary="List tool policies")
def list_tool_policies(
    service_id: ServiceId,
    principal: CurrentPrincipal,
    tool_policies: PoliciesDep,
    limit: int = limit_query(),
    cursor: str | None = cursor_query(),
) -> ToolPolicyList:
    """The policies stored for the service's tools, by tool name. A tool not listed is enabled and needs no approval."""
    policies, next_cursor = page_of(
        tool_policies.list(principal, service_id),
        key=lambda p: (p.tool_name,),
        limit=limit,
        cursor=cursor,
        listing=f"mcp-services/{service_id}/tool-approvals",
    )
    return ToolPolicyList(items=[ToolPolicyOut.of(p) for p in policies], next_cursor=next_cursor)


@router.put(
    "/{service_id}/tool-approvals/{tool_name}",
    operation_id="setToolPolicy",
    summary="Set a tool's policy",
    responses=problems(400),
)
def set_tool_policy(
    service_id: ServiceId, tool_name: ToolName, body: ToolPolicyIn, principal: CurrentPrincipal, policies: PoliciesDep
) -> ToolPolicyOut:
    """Enables or disables a tool and says whether calls to it need a person's approval. A name the catalog does not
    list is refused (404 with near matches) unless `pre_register` is true."""
    policy = policies.set(
        principal,
        service_id,
        tool_name,
        enabled=body.enabled,
        require_approval=body.require_approval,
        pre_register=body.pre_register,
    )
    return ToolPolicyOut.of(policy)


# ---------------------------------------------------------------------------------------------------- test


class TestedTool(BaseModel):
    name: str
    description: str | None
    input_schema: dict[str, Any]


class TestedResource(BaseModel):
    uri: str
    name: str
    mime_type: str | None


class ConnectionTestOut(BaseModel):
    """What connecting to the service showed. ``success`` is false only when the connection, the handshake or
    the tool listing failed, or when the server declared resources it then could not list."""

    success: bool
    message: str
    error_code: str | None
    oauth_required: bool
    protocol_version: str | None
    server_name: str | None
    server_version: str | None
    tools: list[TestedTool]
    resources: list[TestedResource]
    warnings: list[str]


@router.post("/{service_id}/test", operation_id="testService", summary="Test a connection")
async def test_service(
    service_id: ServiceId, principal: CurrentPrincipal, registry: RegistryDep, egress: EgressDep, oauth: OAuthDep
) -> ConnectionTestOut:
    # The MCP client is imported on use: the admin API's cold start should not pay for it.
    """Connects to the service now (behind the SSRF guard, with its auth) and reports its identity, tools and
    resources, and whether it wants OAuth."""
    from mcpbridge.client.service_probe import probe_service, verdict

    def find() -> ExternalService:
        require_writer(principal)
        return registry.get(principal, service_id)

    # Store calls are blocking: off the event loop. The test itself is async network I/O, within the route's budget.
    service = await to_thread.run_sync(find)
    result = await probe_service(service, principal, registry=registry, policy=egress, tokens=lambda: oauth)
    concluded = verdict(service, result)
    return ConnectionTestOut(
        success=concluded.success,
        message=concluded.message,
        error_code=concluded.error_code,
        oauth_required=result.oauth_required,
        protocol_version=result.protocol_version,
        server_name=result.server_info.name if result.server_info else None,
        server_version=result.server_info.version if result.server_info else None,
        tools=[
            TestedTool(name=t.name, description=t.description, input_schema=dict(t.input_schema)) for t in result.tools
        ],
        resources=[TestedResource(uri=str(r.uri), name=r.name, mime_type=r.mime_type) for r in result.resources],
        warnings=list(concluded.warnings),
    )


# ---------------------------------------------------------------------------------------------------- catalog


class ServerIdentity(BaseModel):
    name: str
    version: str | None
    title: str | None


class CatalogTool(BaseModel):
    name: str
    definition: dict[str, Any] = Field(description="The tool as the server lists it: inputSchema in full, etc.")
    definition_hash: str = Field(description="SHA-256 of the canonical JSON definition.")
    changed: bool = Field(description="The definition differs from the previous snapshot's.")


class CatalogChanges(BaseModel):
    first: bool
    added: list[str]
    changed: list[str]
    removed: list[str]


class CatalogSnapshot(BaseModel):
    snapshot_id: str
    synced_at: Timestamp
    service_version: int
    protocol_version: str | None
    server: ServerIdentity | None
    instructions: str | None = Field(description="The server's own instructions (usage_instructions stay separate).")
    capabilities: dict[str, Any]
    tools: list[CatalogTool]
    resources: list[dict[str, Any]]
    changes: CatalogChanges


class RefreshErrorOut(BaseModel):
    code: str
    message: str
    at: Timestamp


class CatalogOut(BaseModel):
    """``data`` is the last complete snapshot (null before the first successful refresh)."""

    data: CatalogSnapshot | None
    stale: bool = Field(description="The service's connection settings or credentials changed since the snapshot.")
    last_error: RefreshErrorOut | None = Field(description="Why the last refresh failed; null when it succeeded.")
    last_attempt_at: Timestamp | None

    @classmethod
    def of(cls, view: CatalogView) -> CatalogOut:
        error = view.last_error
        return cls(
            data=None if view.snapshot is None else CatalogSnapshot.model_validate(view.snapshot),
            stale=view.stale,
            last_error=None if error is None else RefreshErrorOut(code=error.code, message=error.message, at=error.at),
            last_attempt_at=view.last_attempt_at,
        )


class ServiceTool(BaseModel):
    name: str
    title: str | None
    description: str | None
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None
    annotations: dict[str, Any] | None
    definition_hash: str
    changed: bool
    enabled: bool = Field(description="The workspace's policy (a tool with no policy row is enabled).")
    require_approval: bool


class ServiceToolList(BaseModel):
    items: list[ServiceTool]
    next_cursor: str | None = next_cursor_field()
    synced_at: Timestamp | None = Field(description="When the catalog these tools come from was taken.")
    stale: bool = Field(description="The service's settings or credentials changed since.")


class ServiceResourceList(BaseModel):
    items: list[dict[str, Any]] = Field(description="The resources as the server lists them (uri, name, ...).")
    next_cursor: str | None = next_cursor_field()
    synced_at: Timestamp | None = Field(description="When the catalog these resources come from was taken.")
    stale: bool = Field(description="The service's settings or credentials changed since.")


@router.get("/{service_id}/metadata", operation_id="getServiceMetadata", summary="Get a service's catalog")
def get_metadata(service_id: ServiceId, principal: CurrentPrincipal, catalog: CatalogDep) -> CatalogOut:
    """The last complete catalog snapshot (tools with their full schemas, resources, server identity and
    instructions), whether it is stale, and the last refresh error."""
    return CatalogOut.of(catalog.view(principal, service_id))


@router.post(
    "/{service_id}/metadata/refresh",
    operation_id="refreshServiceMetadata",
    summary="Refresh a service's catalog",
    responses=problems(502),
)
async def refresh_metadata(service_id: ServiceId, principal: CurrentPrincipal, catalog: CatalogDep) -> CatalogOut:
    """Pulls every page of tools and resources now and saves them only when complete."""
    return CatalogOut.of(await catalog.refresh(principal, service_id))


@router.get(
    "/{service_id}/tools", operation_id="listServiceTools", summary="List a service's tools", responses=problems(502)
)
async def list_service_tools(
    service_id: ServiceId,
    principal: CurrentPrincipal,
    catalog: CatalogDep,
    tool_policies: PoliciesDep,
    limit: int = limit_query(),
    cursor: str | None = cursor_query(),
) -> ServiceToolList:
    """The catalog's tools, in the server's order, with the workspace's policies; the first call pulls the catalog
    when there is none."""
    view = await catalog.current(principal, service_id)
    policies = await to_thread.run_sync(tool_policies.of_service, principal, view.service)
    snapshot = view.snapshot or {}
    # In the server's own order, within one catalog snapshot: a cursor of an older one is refused.
    tools, next_cursor = page_of(
        enumerate(snapshot.get("tools", [])),
        key=lambda entry: (f"{entry[0]:06d}",),
        limit=limit,
        cursor=cursor,
        listing=f"mcp-services/{service_id}/tools@{snapshot.get('synced_at')}",
    )
    items = []
    for _, tool in tools:
        definition = tool["definition"]
        policy = policies.of(tool["name"])
        items.append(
            ServiceTool(
                name=tool["name"],
                title=definition.get("title"),
                description=definition.get("description"),
                input_schema=definition.get("inputSchema") or {},
                output_schema=definition.get("outputSchema"),
                annotations=definition.get("annotations"),
                definition_hash=tool["definition_hash"],
                changed=tool["changed"],
                enabled=policy.enabled,
                require_approval=policy.require_approval,
            )
        )
    return ServiceToolList(items=items, next_cursor=next_cursor, synced_at=snapshot.get("synced_at"), stale=view.stale)


@router.get(
    "/{service_id}/resources",
    operation_id="listServiceResources",
    summary="List a service's resources",
    responses=problems(502),
)
async def list_service_resources(
    service_id: ServiceId,
    principal: CurrentPrincipal,
    catalog: CatalogDep,
    limit: int = limit_query(),
    cursor: str | None = cursor_query(),
) -> ServiceResourceList:
    """The catalog's resources, in the server's order."""
    view = await catalog.current(principal, service_id)
    snapshot = view.snapshot or {}
    resources, next_cursor = page_of(
        enumerate(snapshot.get("resources", [])),
        key=lambda entry: (f"{entry[0]:06d}",),
        limit=limit,
        cursor=cursor,
        listing=f"mcp-services/{service_id}/resources@{snapshot.get('synced_at')}",
    )
    return ServiceResourceList(
        items=[r for _, r in resources], next_cursor=next_cursor, synced_at=snapshot.get("synced_at"), stale=view.stale
    )
