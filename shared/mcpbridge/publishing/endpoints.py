"""Published MCP endpoints: their records, management (create, update, rotate, delete) and token authentication.

Items (single table):

    WS#<ws> / MCPEP#<id>     an endpoint; gsi1 = MCPTOKEN#<sha256> / MCPEP (the token's lookup),
                             gsi2 = MCPEPID#<id> / MCPEP (find an endpoint from the id in a URL path)

A token is ``mcp_`` + 43 base64url characters; only its SHA-256 is stored. Authentication reads through gsi1, then
(where the index may lag the table, on DynamoDB) reads the base item consistently, and compares the stored hash, so
a rotation, a disable or a delete cuts a client off on its very next request. Nothing is cached.

An endpoint accepts its static token, OAuth access tokens of mcpbridge's authorization server
(:mod:`mcpbridge.authserver`), or both (``auth_mode``; both by default); its rate limit counts per endpoint or,
for OAuth callers, per user (``rate_limit_scope``).

An endpoint may also publish tools of the workspace's external MCP services (``services``: each a service id and
the names of its tools, or ``["*"]`` for every enabled tool); :mod:`mcpbridge.agent.gateway` lists and calls them
through the agent broker. Publishing them needs ``call_tools`` on the key, as calling them would.

A scoped API key never mints an endpoint with more authority than itself: the endpoint's knowledge bases must lie
within the key's, and the capabilities its tools need (``catalog.capabilities_for``) within the key's capabilities.
"""

# Over 400 lines: endpoint records, tokens, scope rules and validation of one resource.

from __future__ import annotations

import builtins
import enum
import hmac
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, get_args

from mcpbridge.domain import credentials
from mcpbridge.domain.identity import Principal, Scope, timestamp
from mcpbridge.domain.ids import is_id, new_id
from mcpbridge.domain.items import AttrAbsent, Compare, Condition, Item, ItemExists, Key, Update, all_of, any_of
from mcpbridge.domain.knowledge import KnowledgeAccess
from mcpbridge.domain.names import clean_description, clean_name
from mcpbridge.errors import (
    ConditionFailed,
    Conflict,
    Forbidden,
    InvalidInput,
    MCPBridgeError,
    NotFound,
    Unauthenticated,
)
from mcpbridge.identity.accounts import workspace_key
from mcpbridge.knowledge.bases import KnowledgeBases
from mcpbridge.optimistic import refusing_when, update_optimistically
from mcpbridge.paging import every_item
from mcpbridge.ports import Clock, Store
from mcpbridge.publishing.offered_tools import (
    BY_NAME,
    CATALOG,
    DEFAULT_TOOLS,
    GROUP_TITLES,
    GROUPS,
    CatalogTool,
    ToolGroup,
    capabilities_for,
    normalise_tools,
)

log = logging.getLogger("mcpbridge.endpoints")

ID_PREFIX = "ep"
DEFAULT_RATE_LIMIT_PER_MINUTE = 60
MAX_RATE_LIMIT_PER_MINUTE = 6000
MAX_KNOWLEDGE_BASES = 100
MAX_SERVICES = 50
MAX_SERVICE_TOOLS = 200
ALL_TOOLS = "*"
SERVICES_CAPABILITY = "call_tools"
LAST_USED_EVERY_SECONDS = 60
_WRITE_ATTEMPTS = 5

AuthMode = Literal["both", "oauth", "static"]
"""Which credentials the endpoint accepts: its static ``mcp_`` token, OAuth access tokens, or both."""
AUTH_MODES: tuple[AuthMode, ...] = get_args(AuthMode)
RateLimitScope = Literal["endpoint", "user"]
"""What the rate limit counts: every call to the endpoint, or each OAuth user's calls apart (static-token calls then
share one count)."""
RATE_LIMIT_SCOPES: tuple[RateLimitScope, ...] = get_args(RateLimitScope)
ExternalToolMode = Literal["list", "search"]
"""How an endpoint offers its external tools: each one listed, or ``search_tools`` and ``call_tool`` in their place
(:mod:`mcpbridge.agent.gateway`)."""
EXTERNAL_TOOL_MODES: tuple[ExternalToolMode, ...] = get_args(ExternalToolMode)


class Unset(enum.Enum):
    """Marks an ``update`` argument that was not given (``None`` is a value: it clears ``default_agent_id``)."""

    UNSET = "unset"


UNSET: Final = Unset.UNSET


def endpoint_key(workspace_id: str, endpoint_id: str) -> Key:
    return Key(f"WS#{workspace_id}", f"MCPEP#{endpoint_id}")


@dataclass(frozen=True)
class PublishedService:
    """An external service an endpoint publishes: ``tools`` names its tools, or is ``("*",)`` for every enabled one."""

    service_id: str
    tools: tuple[str, ...]

    def publishes(self, tool_name: str) -> bool:
        return self.tools == (ALL_TOOLS,) or tool_name in self.tools

    def as_dict(self) -> dict[str, Any]:
        return {"service_id": self.service_id, "tools": list(self.tools)}


@dataclass(frozen=True)
class Endpoint:
    """An endpoint as stored, minus its token hash. The plaintext token exists only in create/rotate responses."""

    id: str
    workspace_id: str
    name: str
    description: str
    enabled: bool
    knowledge_base_ids: list[str]
    """Empty: every knowledge base of the workspace."""
    tools: list[str]
    """The whitelist, in catalog order."""
    default_agent_id: str | None
    rate_limit_per_minute: int
    token_hint: str
    last_used_at: str | None
    created_at: str
    updated_at: str
    version: int
    auth_mode: AuthMode = "both"
    rate_limit_scope: RateLimitScope = "endpoint"
    services: tuple[PublishedService, ...] = ()
    """External services whose tools the endpoint publishes beside its knowledge tools."""
    external_tool_mode: ExternalToolMode = "list"

    @property
    def accepts_oauth(self) -> bool:
        return self.auth_mode != "static"

    @property
    def accepts_static_token(self) -> bool:
        return self.auth_mode != "oauth"

    @property
    def restricts_knowledge_bases(self) -> bool:
        return bool(self.knowledge_base_ids)

    def allows_knowledge_base(self, kb_id: str) -> bool:
        return not self.knowledge_base_ids or kb_id in self.knowledge_base_ids

    def has_tool(self, name: str) -> bool:
        return name.strip() in self.tools

    @property
    def scope(self) -> Scope:
        """The authority the endpoint grants: its tools' capabilities and its knowledge bases (None: all)."""
        return Scope(
            capabilities=frozenset(capabilities_for(self.tools)),
            knowledge_base_ids=frozenset(self.knowledge_base_ids) if self.knowledge_base_ids else None,
        )

    def knowledge_access(self) -> KnowledgeAccess:
        """What the endpoint's tools may reach: its workspace, limited to its knowledge bases when it lists some."""
        return KnowledgeAccess(self.workspace_id, self.scope.knowledge_base_ids)


@dataclass(frozen=True)
class CatalogGroup:
    name: ToolGroup
    title: str
    tools: tuple[CatalogTool, ...]


class EndpointService:
    """Management of a workspace's MCP endpoints (REST) and authentication of their tokens (MCP transport)."""

    def __init__(
        self, store: Store, clock: Clock, bases: KnowledgeBases, service_exists: Callable[[str, str], bool]
    ) -> None:
        """``service_exists(workspace_id, service_id)``: whether the workspace has that external service."""
        self._store = store
        self._clock = clock
        self._bases = bases
        self._service_exists = service_exists

    def _require_services(self, principal: Principal, services: builtins.list[PublishedService]) -> None:
        """Each published service exists in the workspace (404 naming it), and the key may call external tools."""
        if services and not principal.scope.allows(SERVICES_CAPABILITY):
            raise Forbidden(
                f"publishing external services needs the {SERVICES_CAPABILITY} capability on this API key",
                code="scope_exceeded",
                details={"missing_capabilities": [SERVICES_CAPABILITY]},
            )
        for published in services:
            if not self._service_exists(principal.workspace_id, published.service_id):
                raise NotFound(
                    f"services: no MCP service {_shown(published.service_id)} in this workspace",
                    code="service_not_found",
                    details={"field": "services", "service_id": _shown(published.service_id)},
                )

    def _clean_agent(self, workspace_id: str, agent_id: str | None) -> str | None:
        """None or blank: no default agent; otherwise an agent profile of the workspace (404 if there is none)."""
        if agent_id is None or not agent_id.strip():
            return None
        from mcpbridge.agent.profiles import agent_key  # on use: the MCP endpoint's cold start never needs it

        cleaned = agent_id.strip()
        if len(cleaned) > 64 or self._store.get(agent_key(workspace_id, cleaned)) is None:
            raise NotFound("agent not found", code="agent_not_found")
        return cleaned

    # ------------------------------------------------------------------------------------------ reading

    def catalog(self, principal: Principal) -> builtins.list[CatalogGroup]:
        """The tools an endpoint can offer, by group in display order."""
        _require_reader(principal)
        return [CatalogGroup(g, GROUP_TITLES[g], tuple(t for t in CATALOG if t.group == g)) for g in GROUPS]

    def list(self, principal: Principal) -> builtins.list[Endpoint]:
        """The endpoints of the principal's workspace within its authority, oldest first (a scoped key does not
        see the configuration of endpoints that publish more than it may reach)."""
        _require_reader(principal)
        items = every_item(self._store, f"WS#{principal.workspace_id}", sk_prefix="MCPEP#")
        endpoints = [_endpoint_of(item) for item in items]
        return [e for e in endpoints if _covers(principal, e.knowledge_base_ids, e.tools)]

    def get(self, principal: Principal, endpoint_id: str) -> Endpoint:
        _require_reader(principal)
        endpoint = _endpoint_of(self._item(principal.workspace_id, endpoint_id))
        _require_covers(principal, endpoint.knowledge_base_ids, endpoint.tools)
        return endpoint

    def find(self, endpoint_id: str) -> Endpoint | None:
        """The endpoint with this id in any workspace (through gsi2, then a consistent read), or None."""
        if not is_id(endpoint_id, ID_PREFIX):
            return None
        page = self._store.query(f"MCPEPID#{endpoint_id}", index="gsi2", limit=1)
        if not page.items:
            return None
        item = self._store.get(endpoint_key(page.items[0]["workspace_id"], endpoint_id))
        return None if item is None else _endpoint_of(item)

    # ------------------------------------------------------------------------------------------ writing

    def create(
        self,
        principal: Principal,
        *,
        name: str,
        description: str = "",
        enabled: bool = True,
        knowledge_base_ids: Iterable[str] = (),
        tools: Iterable[str] | None = None,
        default_agent_id: str | None = None,
        rate_limit_per_minute: int = 0,
        auth_mode: str = "both",
        rate_limit_scope: str = "endpoint",
        services: Iterable[Any] = (),
        external_tool_mode: str = "list",
    ) -> tuple[Endpoint, str]:
        """A new endpoint and its token's plaintext (shown once). ``tools=None``: the default tools the key may
        publish; ``rate_limit_per_minute=0``: the default (60)."""
        _require_writer(principal)
        name = clean_name(name)
        description = clean_description(description)
        chosen_tools = _clean_tools(_default_tools(principal) if tools is None else tools)
        rate = _clean_rate(rate_limit_per_minute)
        mode, rate_scope = _clean_auth_mode(auth_mode), _clean_rate_scope(rate_limit_scope)
        agent = self._clean_agent(principal.workspace_id, default_agent_id)
        kb_ids = _clean_kb_ids(knowledge_base_ids)
        published = _clean_services(services)
        tool_mode = _clean_external_tool_mode(external_tool_mode)
        _require_covers(principal, kb_ids, chosen_tools)
        self._require_bases(principal, kb_ids)
        self._require_services(principal, published)
        now = timestamp(self._clock.now())
        issued = credentials.issue(credentials.ENDPOINT_TOKEN_PREFIX)
        endpoint = Endpoint(
            id=new_id(ID_PREFIX),
            workspace_id=principal.workspace_id,
            name=name,
            description=description,
            enabled=bool(enabled),
            knowledge_base_ids=kb_ids,
            tools=chosen_tools,
            default_agent_id=agent,
            rate_limit_per_minute=rate,
            token_hint=issued.hint,
            last_used_at=None,
            created_at=now,
            updated_at=now,
            version=1,
            auth_mode=mode,
            rate_limit_scope=rate_scope,
            services=tuple(published),
            external_tool_mode=tool_mode,
        )
        item = _item_of(endpoint, issued.sha256)
        item["created_by"] = principal.user_id
        item["created_by_api_key"] = principal.api_key_id
        self._store.put(item, condition=Condition.absent("endpoint_new"))
        log.info("created MCP endpoint %s in workspace %s", endpoint.id, endpoint.workspace_id)
        return endpoint, issued.plaintext

    def update(
        self,
        principal: Principal,
        endpoint_id: str,
        *,
        name: str | Unset = UNSET,
        description: str | Unset = UNSET,
        enabled: bool | Unset = UNSET,
        knowledge_base_ids: Iterable[str] | Unset = UNSET,
        tools: Iterable[str] | Unset = UNSET,
        default_agent_id: str | Unset | None = UNSET,
        rate_limit_per_minute: int | Unset = UNSET,
        auth_mode: str | Unset = UNSET,
        rate_limit_scope: str | Unset = UNSET,
        services: Iterable[Any] | Unset = UNSET,
        external_tool_mode: str | Unset = UNSET,
        expected_version: int | None = None,
    ) -> Endpoint:
        """Change the given fields (validated as on create). The result must stay within the key's authority.

        ``expected_version``: refuse (409) unless the endpoint is still at that version; without it, a concurrent
        change is merged by re-reading and re-applying these fields."""
        _require_writer(principal)
        given: dict[str, Any] = {"name": name, "description": description, "enabled": enabled, "tools": tools}
        given |= {"rate_limit_per_minute": rate_limit_per_minute, "knowledge_base_ids": knowledge_base_ids}
        given |= {"auth_mode": auth_mode, "rate_limit_scope": rate_limit_scope, "services": services}
        given |= {"external_tool_mode": external_tool_mode}
        changes: dict[str, Any] = {f: _CLEANERS[f](v) for f, v in given.items() if not isinstance(v, Unset)}
        if not isinstance(default_agent_id, Unset):
            changes["default_agent_id"] = self._clean_agent(principal.workspace_id, default_agent_id)
        if "services" in changes:
            self._require_services(principal, changes["services"])
            changes["services"] = tuple(changes["services"])
        bases_checked = False

        def attempt() -> Endpoint:
            nonlocal bases_checked
            current = _endpoint_of(self._item(principal.workspace_id, endpoint_id))
            if expected_version is not None and current.version != expected_version:
                raise _version_conflict()
            _require_covers(
                principal,
                changes.get("knowledge_base_ids", current.knowledge_base_ids),
                changes.get("tools", current.tools),
            )
            if "knowledge_base_ids" in changes and not bases_checked:
                self._require_bases(principal, changes["knowledge_base_ids"])
                bases_checked = True
            effective = {field: value for field, value in changes.items() if getattr(current, field) != value}
            if not effective:
                return current
            effective |= {"updated_at": timestamp(self._clock.now()), "version": current.version + 1}
            if "services" in effective:
                effective["services"] = [published.as_dict() for published in effective["services"]]
            # Changed under us: merged onto the newer version in the next round, unless the caller pinned one.
            with refusing_when(gone=_not_found, pinned=_version_conflict if expected_version is not None else None):
                item = self._store.update(
                    endpoint_key(current.workspace_id, current.id),
                    Update(set=effective),
                    condition=_unchanged(current.version),
                )
            log.info("updated MCP endpoint %s (%s)", current.id, ", ".join(sorted(changes)))
            return _endpoint_of(item)

        return update_optimistically(attempt, busy=lambda: _busy("the update"))

    def rotate_token(self, principal: Principal, endpoint_id: str) -> tuple[Endpoint, str]:
        """A new token (plaintext shown once); the old one stops working on its next request."""
        _require_writer(principal)

        def attempt() -> tuple[Endpoint, str]:
            current = _endpoint_of(self._item(principal.workspace_id, endpoint_id))
            _require_covers(principal, current.knowledge_base_ids, current.tools)
            issued = credentials.issue(credentials.ENDPOINT_TOKEN_PREFIX)
            changes = {
                "sha256": issued.sha256,
                "gsi1pk": _token_partition(issued.sha256),
                "token_hint": issued.hint,
                "updated_at": timestamp(self._clock.now()),
                "version": current.version + 1,
            }
            with refusing_when(gone=_not_found):
                item = self._store.update(
                    endpoint_key(current.workspace_id, current.id),
                    Update(set=changes),
                    condition=_unchanged(current.version),
                )
            log.info("rotated the token of MCP endpoint %s", current.id)
            return _endpoint_of(item), issued.plaintext

        return update_optimistically(attempt, busy=lambda: _busy("the rotation"))

    def delete(self, principal: Principal, endpoint_id: str) -> None:
        """Delete now: the endpoint's token fails on its next request. The endpoint must lie within the key's
        authority, as for any other change, at the version that is deleted."""
        _require_writer(principal)

        def attempt() -> None:
            current = _endpoint_of(self._item(principal.workspace_id, endpoint_id))
            _require_covers(principal, current.knowledge_base_ids, current.tools)
            with refusing_when(gone=_not_found):  # changed under us: the next round judges the newer version
                self._store.delete(
                    endpoint_key(current.workspace_id, current.id), condition=_unchanged(current.version)
                )

        update_optimistically(attempt, busy=lambda: _busy("the deletion"))
        log.info("deleted MCP endpoint %s", endpoint_id)

    # ------------------------------------------------------------------------------------------ MCP transport

    def authenticate(self, endpoint_id: str, token: str) -> Endpoint:
        """The endpoint a bearer token opens, checked against the store on every call (no cache).

        Raises ``Unauthenticated(code="invalid_token")`` for a malformed, unknown, rotated or deleted token, or a
        token of another endpoint; ``Forbidden`` with ``endpoint_disabled`` or ``workspace_inactive``.
        """
        if not endpoint_id or not token or not credentials.well_formed(token, credentials.ENDPOINT_TOKEN_PREFIX):
            raise _invalid_token()
        sha = credentials.digest(token)
        page = self._store.query(_token_partition(sha), index="gsi1", limit=2)
        if not page.items:
            raise _invalid_token()
        item: Item | None = page.items[0]
        if not self._store.indexes_are_consistent:
            # The index may lag a rotation or a delete: the base item, read consistently, has the last word.
            item = self._store.get(endpoint_key(page.items[0]["workspace_id"], page.items[0]["id"]))
        if item is None:
            raise _invalid_token()
        same_hash = credentials.same_digest(str(item["sha256"]), sha)
        same_endpoint = hmac.compare_digest(str(item["id"]).encode(), endpoint_id.encode())
        if not (same_hash and same_endpoint):
            raise _invalid_token()
        endpoint = _endpoint_of(item)
        if not endpoint.accepts_static_token:
            raise Unauthenticated(
                "this endpoint accepts OAuth access tokens only: sign in with an OAuth client",
                code="static_token_not_accepted",
            )
        self.require_open(endpoint)
        return endpoint

    def require_open(self, endpoint: Endpoint) -> None:
        """Raise ``Forbidden`` unless the endpoint is enabled and its workspace active (read now, never cached)."""
        if not endpoint.enabled:
            raise Forbidden("this MCP endpoint is disabled", code="endpoint_disabled")
        workspace = self._store.get(workspace_key(endpoint.workspace_id))
        if workspace is None or workspace.get("status") != "active":
            raise Forbidden("the workspace is not active", code="workspace_inactive")

    def touch(self, endpoint: Endpoint) -> None:
        """Record use: ``last_used_at`` is written at most once a minute per endpoint; failures are swallowed."""
        now = self._clock.now()
        cutoff = timestamp(now - LAST_USED_EVERY_SECONDS)
        if (endpoint.last_used_at or "") >= cutoff:
            return
        stale = all_of(ItemExists(), any_of(AttrAbsent("last_used_at"), Compare("last_used_at", "<", cutoff)))
        try:
            self._store.update(
                endpoint_key(endpoint.workspace_id, endpoint.id),
                Update(set={"last_used_at": timestamp(now)}),
                condition=Condition("last_used_stale", stale),
                durable=False,  # a use time is not worth a disk sync: a power cut may forget the last one
            )
        except ConditionFailed:
            pass  # another request recorded it this minute, or the endpoint is gone: nothing to do
        except MCPBridgeError as exc:
            log.warning("could not record the use of MCP endpoint %s: %s", endpoint.id, exc.code)

    # ------------------------------------------------------------------------------------------ helpers

    def _item(self, workspace_id: str, endpoint_id: str) -> Item:
        item = self._store.get(endpoint_key(workspace_id, endpoint_id)) if is_id(endpoint_id, ID_PREFIX) else None
        if item is None:
            raise _not_found()
        return item

    def _require_bases(self, principal: Principal, kb_ids: builtins.list[str]) -> None:
        """Each knowledge base exists in the workspace and is visible to the key."""
        access = KnowledgeAccess(principal.workspace_id, principal.scope.knowledge_base_ids)
        for kb_id in kb_ids:
            if is_id(kb_id, "kb"):
                try:
                    self._bases.get(access, kb_id)
                    continue
                except NotFound:
                    pass
            raise NotFound(f"knowledge base not found: {_shown(kb_id)}", code="kb_not_found")


# ---------------------------------------------------------------------------------------------------- access


def _require_channels(principal: Principal) -> None:
    if not principal.scope.allows("manage_channels"):
        raise Forbidden("this API key lacks the manage_channels capability", code="capability_missing")


def _require_reader(principal: Principal) -> None:
    _require_channels(principal)


def _require_writer(principal: Principal) -> None:
    if not principal.is_admin:
        raise Forbidden("this needs an admin API key", code="admin_required")
    _require_channels(principal)


def _covers(principal: Principal, kb_ids: list[str], tools: list[str]) -> bool:
    try:
        _require_covers(principal, kb_ids, tools)
    except Forbidden:
        return False
    return True


def _require_covers(principal: Principal, kb_ids: list[str], tools: list[str]) -> None:
    """A scoped key may only publish, see or change what it could do itself."""
    scope = principal.scope
    if scope.knowledge_base_ids is not None:
        if not kb_ids:
            raise Forbidden(
                "this API key is limited to some knowledge bases and may only reach endpoints limited to them",
                code="scope_exceeded",
            )
        for kb_id in kb_ids:
            if kb_id not in scope.knowledge_base_ids:
                raise Forbidden(
                    f"knowledge base is outside this API key's scope: {_shown(kb_id)}", code="scope_exceeded"
                )
    missing = sorted(c for c in capabilities_for(tools) if not scope.allows(c))
    if missing:
        raise Forbidden(
            f"this API key lacks the {missing[0]} capability the endpoint's tools need",
            code="scope_exceeded",
            details={"missing_capabilities": missing},
        )


# ---------------------------------------------------------------------------------------------------- validation


def _default_tools(principal: Principal) -> list[str]:
    """The catalog's default tools that this key may publish."""
    return [name for name in DEFAULT_TOOLS if principal.scope.allows(BY_NAME[name].capability)]


def _clean_tools(tools: Iterable[str]) -> list[str]:
    """The catalog's tools named, each once, in catalog order; a name the catalog does not have is refused (400
    naming it), so a typo never publishes less than was meant without a word."""
    named = list(tools)
    unknown = sorted({name.strip() for name in named} - BY_NAME.keys() - {""})
    if unknown:
        shown = ", ".join(_shown(name) for name in unknown[:5])
        raise InvalidInput(
            f"unknown tool {shown}: an endpoint's tools are those of GET /api/v1/mcp-endpoints/tools",
            code="unknown_tool",
            details={"unknown": [_shown(name) for name in unknown[:20]], "known": [t.name for t in CATALOG]},
        )
    chosen = normalise_tools(named)
    if not chosen:
        raise InvalidInput(
            "at least one tool must be enabled", code="no_tools", details={"known": [t.name for t in CATALOG]}
        )
    return chosen


def _clean_rate(rate: int) -> int:
    if isinstance(rate, bool):
        raise InvalidInput("rate_limit_per_minute must be an integer", code="invalid_rate_limit")
    if rate == 0:
        return DEFAULT_RATE_LIMIT_PER_MINUTE
    if not 1 <= rate <= MAX_RATE_LIMIT_PER_MINUTE:
        raise InvalidInput(
            "rate_limit_per_minute is out of range",
            code="invalid_rate_limit",
            details={"min": 1, "max": MAX_RATE_LIMIT_PER_MINUTE, "default": DEFAULT_RATE_LIMIT_PER_MINUTE},
        )
    return rate


def _clean_auth_mode(mode: str) -> AuthMode:
    for known in AUTH_MODES:
        if mode == known:
            return known
    raise InvalidInput(
        "auth_mode must be both, oauth or static", code="invalid_auth_mode", details={"allowed": list(AUTH_MODES)}
    )


def _clean_rate_scope(scope: str) -> RateLimitScope:
    for known in RATE_LIMIT_SCOPES:
        if scope == known:
            return known
    raise InvalidInput(
        "rate_limit_scope must be endpoint or user",
        code="invalid_rate_limit_scope",
        details={"allowed": list(RATE_LIMIT_SCOPES)},
    )


def _clean_external_tool_mode(mode: str) -> ExternalToolMode:
    for known in EXTERNAL_TOOL_MODES:
        if mode == known:
            return known
    raise InvalidInput(
        "external_tool_mode must be list or search",
        code="invalid_external_tool_mode",
        details={"allowed": list(EXTERNAL_TOOL_MODES)},
    )


def _clean_services(services: Iterable[Any]) -> list[PublishedService]:
    """``[{"service_id": ..., "tools": [...] | ["*"]}]``, each service once; a bad shape is refused naming its place."""
    if isinstance(services, (str, bytes, Mapping)):
        raise _bad_services("services must be a list of {service_id, tools} objects")
    cleaned: dict[str, PublishedService] = {}
    for index, entry in enumerate(services):
        where = f"services[{index}]"
        if not isinstance(entry, Mapping) or set(entry) - {"service_id", "tools"}:
            raise _bad_services(f"{where} must be an object with service_id and tools only")
        service_id, tools = entry.get("service_id"), entry.get("tools")
        if not isinstance(service_id, str) or not service_id.strip() or len(service_id) > 128:
            raise _bad_services(f"{where}.service_id must be a service id (a string, svc_...)")
        if not isinstance(tools, list) or not tools or not all(isinstance(t, str) and t.strip() for t in tools):
            raise _bad_services(f'{where}.tools must be a non-empty list of tool names, or ["*"]')
        names = tuple(dict.fromkeys(t.strip() for t in tools))
        if ALL_TOOLS in names and len(names) > 1:
            raise _bad_services(f'{where}.tools: "*" stands alone (every enabled tool)')
        if len(names) > MAX_SERVICE_TOOLS or any(len(n) > 256 for n in names):
            raise _bad_services(f"{where}.tools: at most {MAX_SERVICE_TOOLS} names of at most 256 characters")
        if service_id.strip() in cleaned:
            raise _bad_services(f"{where}.service_id {service_id.strip()} is listed twice")
        cleaned[service_id.strip()] = PublishedService(service_id.strip(), names)
    if len(cleaned) > MAX_SERVICES:
        raise _bad_services(f"an endpoint publishes at most {MAX_SERVICES} services")
    return list(cleaned.values())


def _bad_services(message: str) -> InvalidInput:
    return InvalidInput(message, code="invalid_services", details={"field": "services"})


def _clean_kb_ids(kb_ids: Iterable[str]) -> list[str]:
    cleaned = list(dict.fromkeys(k.strip() for k in kb_ids if k and k.strip()))
    if len(cleaned) > MAX_KNOWLEDGE_BASES:
        raise InvalidInput(
            f"an endpoint lists at most {MAX_KNOWLEDGE_BASES} knowledge bases", code="too_many_knowledge_bases"
        )
    return cleaned


_CLEANERS: dict[str, Any] = {
    "name": clean_name,
    "description": clean_description,
    "enabled": bool,
    "tools": _clean_tools,
    "rate_limit_per_minute": _clean_rate,
    "knowledge_base_ids": _clean_kb_ids,
    "auth_mode": _clean_auth_mode,
    "rate_limit_scope": _clean_rate_scope,
    "services": _clean_services,
    "external_tool_mode": _clean_external_tool_mode,
}
"""How ``update`` cleans each field it is given (as ``create`` does)."""


def _shown(value: str) -> str:
    """A caller-supplied id, cut short enough to quote in a message."""
    return value if len(value) <= 64 else value[:64] + "…"


# ---------------------------------------------------------------------------------------------------- errors


def _busy(what: str) -> Conflict:
    return Conflict(f"the endpoint kept changing during {what}; retry", code="endpoint_busy")


def _not_found() -> NotFound:
    return NotFound("MCP endpoint not found", code="endpoint_not_found")


def _invalid_token() -> Unauthenticated:
    return Unauthenticated("the token is not valid for this endpoint", code="invalid_token")


def _version_conflict() -> Conflict:
    return Conflict("the endpoint was changed by someone else; reload it and retry", code="endpoint_version_conflict")


# ---------------------------------------------------------------------------------------------------- items


def _token_partition(sha256: str) -> str:
    return f"MCPTOKEN#{sha256}"


def _unchanged(version: int) -> Condition:
    return Condition.equals("endpoint_unchanged", "version", version)


def _item_of(endpoint: Endpoint, sha256: str) -> Item:
    return {
        **endpoint_key(endpoint.workspace_id, endpoint.id).as_dict(),
        "gsi1pk": _token_partition(sha256),
        "gsi1sk": "MCPEP",
        "gsi2pk": f"MCPEPID#{endpoint.id}",
        "gsi2sk": "MCPEP",
        "id": endpoint.id,
        "workspace_id": endpoint.workspace_id,
        "name": endpoint.name,
        "description": endpoint.description,
        "enabled": endpoint.enabled,
        "knowledge_base_ids": list(endpoint.knowledge_base_ids),
        "tools": list(endpoint.tools),
        "default_agent_id": endpoint.default_agent_id,
        "rate_limit_per_minute": endpoint.rate_limit_per_minute,
        "sha256": sha256,
        "token_hint": endpoint.token_hint,
        "created_at": endpoint.created_at,
        "updated_at": endpoint.updated_at,
        "version": endpoint.version,
        "auth_mode": endpoint.auth_mode,
        "rate_limit_scope": endpoint.rate_limit_scope,
        "services": [published.as_dict() for published in endpoint.services],
        "external_tool_mode": endpoint.external_tool_mode,
    }


def _endpoint_of(item: Item) -> Endpoint:
    return Endpoint(
        id=item["id"],
        workspace_id=item["workspace_id"],
        name=item["name"],
        description=item.get("description", ""),
        enabled=bool(item.get("enabled", True)),
        knowledge_base_ids=list(item.get("knowledge_base_ids") or []),
        tools=list(item.get("tools") or []),
        default_agent_id=item.get("default_agent_id"),
        rate_limit_per_minute=int(item.get("rate_limit_per_minute", DEFAULT_RATE_LIMIT_PER_MINUTE)),
        token_hint=item["token_hint"],
        last_used_at=item.get("last_used_at"),
        created_at=item["created_at"],
        updated_at=item["updated_at"],
        version=int(item.get("version", 1)),
        auth_mode=_clean_auth_mode(item.get("auth_mode") or "both"),
        rate_limit_scope=_clean_rate_scope(item.get("rate_limit_scope") or "endpoint"),
        services=tuple(
            PublishedService(str(entry["service_id"]), tuple(entry.get("tools") or ()))
            for entry in item.get("services") or ()
        ),
        external_tool_mode=_clean_external_tool_mode(item.get("external_tool_mode") or "list"),
    )
