"""The registry of external MCP services a workspace connects to (the client side of the hub).

Items (single table):

    WS#<ws> / SVC#<id>              a service of a workspace
    WS#<ws> / SVCNAME#<folded>      the name guard: one service per case-insensitive name and workspace
    BUILTIN / SVC#<id>              a builtin service, visible to every workspace, immutable through the API
    BUILTIN / SVCNAME#<folded>      the builtins' name guard

Secrets (``api_key``, ``token``, ``client_secret``) are never part of a create or update: they are written only by
:meth:`ServiceRegistry.set_credentials` and :meth:`ServiceRegistry.delete_credential`, sealed by the ``SecretBox``
under ``SecretContext(ws, "mcp_service", id)`` and stored on the service item as ``enc:v1:...`` strings
(attributes ``secret_<field>``). Secret fields sent inside ``auth_config`` are ignored with a deprecation warning that
names the field, never the value. Outside the connection layer (:meth:`ServiceRegistry.connection_secrets`) nothing
opens them; :meth:`ServiceRegistry.credentials_status` only says whether each one is configured (a value that cannot
be opened counts as not configured).

Custom header values are credentials too (an ``Authorization`` or ``X-API-Key`` header imported from an
``mcpServers`` file is common): they are sealed together, as one JSON object, under
``SecretContext(ws, "mcp_service_headers", id)`` in ``secret_headers``; only their names are stored in clear
(``header_names``) and shown. The registry opens them when it reads a service, for the connection layer; a value that
cannot be opened leaves the service without custom headers (logged by kind and id). Items written before headers were
sealed keep a plaintext ``headers`` map until the registry reads them, when it seals them in place. A URL whose
query or fragment would be masked in a response (``?api_key=***``) is kept the same way: the masked form in ``url``,
the whole URL sealed in ``secret_url`` under ``SecretContext(ws, "mcp_service_url", id)``.

Every URL (``url``, ``auth_config.auth_server_metadata_url``) passes the egress guard (``EgressPolicy.check_url`` and
``resolve``) when it is saved; the connection layer checks again when it connects. ``stdio`` is refused everywhere.

Bounds of ``advanced_config``: ``timeout`` 1 to 300 seconds (default 30), ``retry_count`` 0 to 10 (default 3),
``retry_delay`` 0 to 60 seconds (default 1).

Any change of ``transport``, ``url``, ``headers``, ``auth_config`` or of a credential sets ``catalog_stale``: the
catalog layer refreshes its snapshot and clears the flag with :meth:`ServiceRegistry.clear_catalog_stale`.
"""

from __future__ import annotations

import builtins
import dataclasses
import json
import logging
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from mcpbridge.domain.identity import Principal, timestamp
from mcpbridge.domain.ids import is_id, new_id
from mcpbridge.domain.items import Condition, Item, Key, Patch, Put, Remove, Update
from mcpbridge.domain.names import clean_description, clean_name, fold
from mcpbridge.domain.secrets import SecretContext
from mcpbridge.errors import ConditionFailed, Conflict, Forbidden, InvalidInput, MCPBridgeError, NotFound
from mcpbridge.observability import masked_url
from mcpbridge.outbound.policy import EgressPolicy
from mcpbridge.paging import every_item
from mcpbridge.ports import Clock, SecretBox, Store
from mcpbridge.sealing import open_secret_or_none

log = logging.getLogger("mcpbridge.services")

ID_PREFIX = "svc"
BUILTIN_PARTITION = "BUILTIN"
SECRET_KIND = "mcp_service"  # noqa: S105 - a SecretContext kind, not a secret
HEADERS_KIND = "mcp_service_headers"
URL_KIND = "mcp_service_url"

Transport = Literal["sse", "http-streamable"]
AuthType = Literal["none", "api_key", "bearer", "oauth"]
SecretField = Literal["api_key", "token", "client_secret"]

TRANSPORTS: Final[tuple[Transport, ...]] = ("sse", "http-streamable")
AUTH_TYPES: Final[tuple[AuthType, ...]] = ("none", "api_key", "bearer", "oauth")
SECRET_FIELDS: Final[tuple[SecretField, ...]] = ("api_key", "token", "client_secret")
STDIO_REFUSED = "stdio transport is disabled for security reasons"
DEFAULT_TRANSPORT: Final[Transport] = "http-streamable"
DEFAULT_API_KEY_HEADER = "X-API-Key"

DEFAULT_TIMEOUT_SECONDS = 30.0
MAX_TIMEOUT_SECONDS = 300.0
DEFAULT_RETRY_COUNT = 3
MAX_RETRY_COUNT = 10
DEFAULT_RETRY_DELAY_SECONDS = 1.0
MAX_RETRY_DELAY_SECONDS = 60.0

MAX_URL_CHARS = 2048
MAX_HEADERS = 50
MAX_HEADER_VALUE_CHARS = 8192
MAX_SCOPES = 50
MAX_SCOPE_CHARS = 200
MAX_CLIENT_ID_CHARS = 512
MAX_USAGE_INSTRUCTIONS_CHARS = 10_000
MAX_SECRET_CHARS = 16_384
MAX_IMPORT_ENTRIES = 100
_WRITE_ATTEMPTS = 5

_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}")
_HEADER_VALUE_BAD = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
# Headers the HTTP client or the MCP transport owns: a service may not set them.
_RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "transfer-encoding",
        "connection",
        "upgrade",
        "te",
        "trailer",
        "keep-alive",
        "proxy-connection",
        "mcp-session-id",
        "mcp-protocol-version",
        "last-event-id",
    }
)
_CONNECTION_FIELDS = frozenset({"transport", "url", "headers", "auth_config"})
_RECONNECT_FIELDS = _CONNECTION_FIELDS | {"enabled", "advanced_config"}
_AUTH_KEYS = frozenset({"auth_type", "api_key_header", "client_id", "scopes", "auth_server_metadata_url"})
_ADVANCED_KEYS = frozenset({"timeout", "retry_count", "retry_delay"})
_IMPORT_TRANSPORTS: dict[str, Transport] = {
    "sse": "sse",
    "http": "http-streamable",
    "http-streamable": "http-streamable",
    "streamable-http": "http-streamable",
    "streamable_http": "http-streamable",
    "streamablehttp": "http-streamable",
}


@dataclass(frozen=True)
class AuthConfig:
    """The non-secret part of a service's authentication. The strategies are exclusive."""

    auth_type: AuthType = "none"
    api_key_header: str = DEFAULT_API_KEY_HEADER
    client_id: str = ""
    scopes: tuple[str, ...] = ()
    auth_server_metadata_url: str = ""
    """Optional pin of the OAuth authorization server's metadata; empty: discovery (RFC 9728 / RFC 8414)."""


@dataclass(frozen=True)
class AdvancedConfig:
    timeout: float = DEFAULT_TIMEOUT_SECONDS
    retry_count: int = DEFAULT_RETRY_COUNT
    retry_delay: float = DEFAULT_RETRY_DELAY_SECONDS


@dataclass(frozen=True)
class ExternalService:
    """A service as stored. ``sealed`` holds the sealed (``enc:v1:``) secrets only, never a plaintext."""

    id: str
    workspace_id: str | None
    """None for a builtin service."""
    name: str
    description: str
    enabled: bool
    transport: Transport
    url: str
    headers: Mapping[str, str]
    """``custom_headers``: sent after the auth header, and able to override it."""
    auth: AuthConfig
    advanced: AdvancedConfig
    usage_instructions: str
    catalog_stale: bool
    created_at: str
    updated_at: str
    version: int
    connection_version: int = 1
    """Moves with every change of the connection settings or credentials only (catalog snapshots record it)."""
    sealed: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def is_builtin(self) -> bool:
        return self.workspace_id is None

    @property
    def secret_context(self) -> SecretContext:
        return SecretContext(self.workspace_id or BUILTIN_PARTITION, SECRET_KIND, self.id)

    @property
    def headers_context(self) -> SecretContext:
        return SecretContext(self.workspace_id or BUILTIN_PARTITION, HEADERS_KIND, self.id)

    @property
    def url_context(self) -> SecretContext:
        return SecretContext(self.workspace_id or BUILTIN_PARTITION, URL_KIND, self.id)


@dataclass(frozen=True)
class Saved:
    """A created or updated service and the warnings about its request (ignored secret fields)."""

    service: ExternalService
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class ImportRefusal:
    name: str
    code: str
    reason: str


@dataclass(frozen=True)
class ImportResult:
    created: builtins.list[ExternalService]
    refused: builtins.list[ImportRefusal]
    warnings: builtins.list[str]


class _Unset:
    """Marks an ``update`` argument that was not given."""


UNSET: Final = _Unset()


WORKSPACE_SCOPE = "workspace"


def scope_for(service: ExternalService, principal: Principal) -> str:
    """Whose view of a service a connection or catalog is: per user for OAuth services (each user's token),
    the workspace's otherwise."""
    return f"user:{principal.user_id}" if service.auth.auth_type == "oauth" else WORKSPACE_SCOPE


def service_key(workspace_id: str | None, service_id: str) -> Key:
    return Key(_partition(workspace_id), f"SVC#{service_id}")


def name_key(workspace_id: str | None, name: str) -> Key:
    return Key(_partition(workspace_id), f"SVCNAME#{fold(name)}")


def _partition(workspace_id: str | None) -> str:
    return BUILTIN_PARTITION if workspace_id is None else f"WS#{workspace_id}"


class ServiceRegistry:
    """The external MCP services of a workspace (own and builtin): management through REST, and the stored
    configuration and opened secrets the connection layer needs."""

    def __init__(self, store: Store, clock: Clock, secrets: SecretBox, egress: EgressPolicy) -> None:
        self._store = store
        self._clock = clock
        self._secrets = secrets
        self._egress = egress
        self._listeners: builtins.list[Callable[[str], object]] = []

    def on_connection_change(self, listener: Callable[[str], object]) -> None:
        """Call ``listener(service_id)`` when a service's connection settings or credentials change, or it is
        deleted (before the deletion too), so cached connections are closed. Other instances notice the change
        through the connection's fingerprint instead."""
        self._listeners.append(listener)

    def _connection_changed(self, service_id: str) -> None:
        for listener in self._listeners:
            try:
                listener(service_id)
            except Exception:  # a listener failing must not fail the change already made
                log.exception("closing the cached connections of MCP service %s failed", service_id)

    # ------------------------------------------------------------------------------------------ reading

    def list(self, principal: Principal, *, search: str | None = None) -> builtins.list[ExternalService]:
        """The workspace's services then the builtin ones, oldest first. ``search``: every space-separated keyword
        (case-insensitive) appears in the name, the usage instructions or the description."""
        require_reader(principal)
        items = [
            *every_item(self._store, _partition(principal.workspace_id), sk_prefix="SVC#"),
            *every_item(self._store, BUILTIN_PARTITION, sk_prefix="SVC#"),
        ]
        services = [self._service_of(item) for item in items]
        keywords = fold(search or "").split()
        if not keywords:
            return services
        return [s for s in services if _matches(s, keywords)]

    def get(self, principal: Principal, service_id: str) -> ExternalService:
        """A service of the principal's workspace or a builtin one (404 ``service_not_found`` otherwise)."""
        require_reader(principal)
        return self.find(principal.workspace_id, service_id)

    def find(self, workspace_id: str, service_id: str) -> ExternalService:
        """As ``get`` without a principal (for the connection and catalog layers)."""
        if not is_id(service_id, ID_PREFIX):
            raise _not_found()
        item = self._store.get(service_key(workspace_id, service_id)) or self._store.get(service_key(None, service_id))
        if item is None:
            raise _not_found()
        return self._service_of(item)

    def credentials_status(self, service: ExternalService) -> dict[str, dict[str, bool]]:
        """``{"api_key": {"configured": bool}, ...}``; a value that cannot be opened counts as not configured."""
        context = service.secret_context
        return {
            name: {"configured": open_secret_or_none(self._secrets, service.sealed.get(name), context) is not None}
            for name in SECRET_FIELDS
        }

    def connection_secrets(self, service: ExternalService) -> dict[str, str]:
        """The opened secrets, for the connection layer only (never for a response or a log)."""
        context = service.secret_context
        opened: dict[str, str] = {}
        for name in SECRET_FIELDS:
            value = open_secret_or_none(self._secrets, service.sealed.get(name), context)
            if value is not None:
                opened[name] = value
        return opened

    # ------------------------------------------------------------------------------------------ writing

    def create(
        self,
        principal: Principal,
        *,
        name: str,
        url: str,
        description: str = "",
        enabled: bool = True,
        transport: str = DEFAULT_TRANSPORT,
        headers: Mapping[str, str] | None = None,
        auth_config: Mapping[str, Any] | None = None,
        advanced_config: Mapping[str, Any] | None = None,
        usage_instructions: str = "",
    ) -> Saved:
        require_writer(principal)
        warnings: builtins.list[str] = []
        service = self._new_service(
            principal.workspace_id,
            name=name,
            url=url,
            description=description,
            enabled=enabled,
            transport=transport,
            headers=headers,
            auth=_clean_auth(AuthConfig(), auth_config or {}, warnings),
            advanced=_clean_advanced(AdvancedConfig(), advanced_config or {}),
            usage_instructions=usage_instructions,
        )
        item = (
            _item_of(service) | self._sealed_headers(service, service.headers) | self._sealed_url(service, service.url)
        )
        item["created_by"] = principal.user_id
        item["created_by_api_key"] = principal.api_key_id
        self._insert(item, service)
        _log_warnings(service.id, warnings)
        log.info("registered MCP service %s in workspace %s", service.id, principal.workspace_id)
        return Saved(service, tuple(warnings))

    def register_builtin(
        self,
        *,
        name: str,
        url: str,
        description: str = "",
        enabled: bool = True,
        transport: str = DEFAULT_TRANSPORT,
        headers: Mapping[str, str] | None = None,
        auth_config: Mapping[str, Any] | None = None,
        advanced_config: Mapping[str, Any] | None = None,
        usage_instructions: str = "",
    ) -> ExternalService:
        """A builtin service, visible to every workspace (for operators and tests; no REST route writes these)."""
        warnings: builtins.list[str] = []
        service = self._new_service(
            None,
            name=name,
            url=url,
            description=description,
            enabled=enabled,
            transport=transport,
            headers=headers,
            auth=_clean_auth(AuthConfig(), auth_config or {}, warnings),
            advanced=_clean_advanced(AdvancedConfig(), advanced_config or {}),
            usage_instructions=usage_instructions,
        )
        sealed = self._sealed_headers(service, service.headers) | self._sealed_url(service, service.url)
        self._insert(_item_of(service) | sealed, service)
        _log_warnings(service.id, warnings)
        log.info("registered builtin MCP service %s", service.id)
        return service

    def update(
        self,
        principal: Principal,
        service_id: str,
        *,
        name: str | _Unset = UNSET,
        description: str | _Unset = UNSET,
        enabled: bool | _Unset = UNSET,
        transport: str | _Unset = UNSET,
        url: str | _Unset = UNSET,
        headers: Mapping[str, str] | _Unset = UNSET,
        auth_config: Mapping[str, Any] | _Unset = UNSET,
        advanced_config: Mapping[str, Any] | _Unset = UNSET,
        usage_instructions: str | _Unset = UNSET,
    ) -> Saved:
        """Change the given fields (validated as on create; a new URL passes the egress guard again).
        ``auth_config`` and ``advanced_config`` are merged field by field; ``headers`` is replaced whole.
        Secrets are never changed here: secret fields inside ``auth_config`` are ignored with a warning."""
        require_writer(principal)
        warnings: builtins.list[str] = []
        simple: dict[str, Any] = {}
        if not isinstance(name, _Unset):
            simple["name"] = clean_name(_text(name, "name"))
        if not isinstance(description, _Unset):
            simple["description"] = clean_description(_text(description, "description"))
        if not isinstance(enabled, _Unset):
            simple["enabled"] = _bool(enabled, "enabled")
        if not isinstance(transport, _Unset):
            simple["transport"] = _clean_transport(transport)
        if not isinstance(url, _Unset):
            simple["url"] = self._clean_url(url, "url")
        if not isinstance(headers, _Unset):
            simple["headers"] = _clean_headers(headers)
        if not isinstance(usage_instructions, _Unset):
            simple["usage_instructions"] = _clean_usage(usage_instructions)
        auth_changes = None if isinstance(auth_config, _Unset) else dict(auth_config)
        advanced_changes = None if isinstance(advanced_config, _Unset) else dict(advanced_config)
        metadata_checked: str | None = None
        for _ in range(_WRITE_ATTEMPTS):
            current = self._own(principal.workspace_id, service_id)
            changes = dict(simple)
            if auth_changes is not None:
                attempt_warnings: builtins.list[str] = []
                auth = _clean_auth(current.auth, auth_changes, attempt_warnings)
                warnings = attempt_warnings
                if auth.auth_server_metadata_url and auth.auth_server_metadata_url not in (
                    current.auth.auth_server_metadata_url,
                    metadata_checked,
                ):
                    self._clean_url(auth.auth_server_metadata_url, "auth_config.auth_server_metadata_url")
                    metadata_checked = auth.auth_server_metadata_url
                changes["auth_config"] = auth
            if advanced_changes is not None:
                changes["advanced_config"] = _clean_advanced(current.advanced, advanced_changes)
            effective = {k: v for k, v in changes.items() if _current_value(current, k) != v}
            if not effective:
                _log_warnings(current.id, warnings)
                return Saved(current, tuple(warnings))
            sets: dict[str, Any] = {k: _stored(v) for k, v in effective.items() if k != "headers"}
            removes: builtins.list[str] = []
            if "headers" in effective:
                sets |= self._sealed_headers(current, effective["headers"])
                removes = ["headers"] + ([] if effective["headers"] else ["secret_headers"])
            if "url" in effective:
                sets |= self._sealed_url(current, effective["url"])
                removes += [] if "secret_url" in sets else ["secret_url"]
            if "name" in effective:
                sets["name_folded"] = fold(effective["name"])
            if _CONNECTION_FIELDS & set(effective):
                sets["catalog_stale"] = True
                sets["connection_version"] = current.connection_version + 1
            sets |= {"updated_at": timestamp(self._clock.now()), "version": current.version + 1}
            key = service_key(current.workspace_id, current.id)
            try:
                if "name" in effective and fold(effective["name"]) != fold(current.name):
                    self._store.transact(
                        [
                            Patch(key, Update(set=sets, remove=removes), _unchanged(current.version)),
                            Remove(name_key(current.workspace_id, current.name)),
                            Put(_guard_of(current.workspace_id, effective["name"], current.id), _name_free()),
                        ]
                    )
                    item = self._store.get(key)
                    if item is None:
                        continue
                else:
                    item = self._store.update(
                        key, Update(set=sets, remove=removes), condition=_unchanged(current.version)
                    )
            except ConditionFailed as lost:
                if lost.condition == _name_free().name:
                    raise _name_taken() from None
                continue  # changed or deleted under us: re-read (a deleted service is then a 404)
            _log_warnings(current.id, warnings)
            log.info("updated MCP service %s (%s)", current.id, ", ".join(sorted(effective)))
            if _RECONNECT_FIELDS & set(effective):
                self._connection_changed(current.id)
            return Saved(self._service_of(item), tuple(warnings))
        raise Conflict("the service kept changing during the update; retry", code="service_busy")

    def set_enabled(self, principal: Principal, service_id: str, enabled: bool) -> ExternalService:
        return self.update(principal, service_id, enabled=enabled).service

    def delete(self, principal: Principal, service_id: str) -> None:
        """Delete the service, its name guard, its tool policies and its OAuth tokens and clients."""
        require_writer(principal)
        for _ in range(_WRITE_ATTEMPTS):
            current = self._own(principal.workspace_id, service_id)
            self._connection_changed(current.id)
            try:
                self._store.transact(
                    [
                        Remove(service_key(current.workspace_id, current.id), _unchanged(current.version)),
                        Remove(name_key(current.workspace_id, current.name)),
                    ]
                )
            except ConditionFailed:
                continue
            self._drop_dependents(principal.workspace_id, current.id)
            self._connection_changed(current.id)  # a connection opened during the deletion goes too
            log.info("deleted MCP service %s", current.id)
            return
        raise Conflict("the service kept changing during the deletion; retry", code="service_busy")

    def set_credentials(
        self, principal: Principal, service_id: str, values: Mapping[str, str | None]
    ) -> ExternalService:
        """Pointer semantics per field: absent or None = keep, ``""`` = no-op, a value = replace (sealed)."""
        require_writer(principal)
        unknown = sorted(set(values) - set(SECRET_FIELDS))
        if unknown:
            raise _unknown_field(unknown[0])
        given = {name: _clean_secret(name, value) for name, value in values.items() if value is not None and value}
        for _ in range(_WRITE_ATTEMPTS):
            current = self._own(principal.workspace_id, service_id)
            if not given:
                return current
            context = current.secret_context
            sets: dict[str, Any] = {
                f"secret_{name}": self._secrets.seal(value, context) for name, value in given.items()
            }
            sets |= {
                "catalog_stale": True,
                "connection_version": current.connection_version + 1,
                "updated_at": timestamp(self._clock.now()),
                "version": current.version + 1,
            }
            try:
                item = self._store.update(
                    service_key(current.workspace_id, current.id),
                    Update(set=sets),
                    condition=_unchanged(current.version),
                )
            except ConditionFailed:
                continue
            log.info("changed credentials %s of MCP service %s", ", ".join(sorted(given)), current.id)
            self._connection_changed(current.id)
            return self._service_of(item)
        raise Conflict("the service kept changing; retry", code="service_busy")

    def delete_credential(self, principal: Principal, service_id: str, field_name: str) -> ExternalService:
        """Clear one secret; clearing one that is not set changes nothing (idempotent)."""
        require_writer(principal)
        if field_name not in SECRET_FIELDS:
            raise _unknown_field(field_name)
        attr = f"secret_{field_name}"
        for _ in range(_WRITE_ATTEMPTS):
            current = self._own(principal.workspace_id, service_id)
            if field_name not in current.sealed:
                return current
            update = Update(
                set={
                    "catalog_stale": True,
                    "connection_version": current.connection_version + 1,
                    "updated_at": timestamp(self._clock.now()),
                    "version": current.version + 1,
                },
                remove=[attr],
            )
            try:
                item = self._store.update(
                    service_key(current.workspace_id, current.id), update, condition=_unchanged(current.version)
                )
            except ConditionFailed:
                continue
            log.info("cleared credential %s of MCP service %s", field_name, current.id)
            self._connection_changed(current.id)
            return self._service_of(item)
        raise Conflict("the service kept changing; retry", code="service_busy")

    def clear_catalog_stale(self, service: ExternalService) -> bool:
        """For the catalog layer, after a complete refresh of ``service`` as read: False when the service changed
        since (the flag stays set). The version does not move: nothing configured changed."""
        try:
            self._store.update(
                service_key(service.workspace_id, service.id),
                Update(set={"catalog_stale": False}),
                condition=_unchanged(service.version),
            )
        except ConditionFailed:
            return False
        return True

    def import_servers(self, principal: Principal, document: Mapping[str, Any]) -> ImportResult:
        """Create one service per entry of a standard ``{"mcpServers": {name: {url, type|transport, headers}}}``.
        Entries that cannot be created (stdio, a refused URL, a taken name, bad fields) are listed with the reason
        and create nothing."""
        require_writer(principal)
        servers = document.get("mcpServers")
        if not isinstance(servers, Mapping):
            raise InvalidInput("the document has no mcpServers object", code="invalid_import")
        if len(servers) > MAX_IMPORT_ENTRIES:
            raise InvalidInput(f"an import holds at most {MAX_IMPORT_ENTRIES} servers", code="too_many_servers")
        created: builtins.list[ExternalService] = []
        refused: builtins.list[ImportRefusal] = []
        warnings: builtins.list[str] = []
        for raw_name, entry in servers.items():
            shown = _shown(str(raw_name))
            try:
                arguments = _import_arguments(entry)
                saved = self.create(principal, name=str(raw_name), **arguments)
            except (InvalidInput, Conflict) as refusal:
                refused.append(ImportRefusal(shown, refusal.code, refusal.message))
                continue
            created.append(saved.service)
            warnings.extend(f"{shown}: {w}" for w in saved.warnings)
        return ImportResult(created, refused, warnings)

    # ------------------------------------------------------------------------------------------ helpers

    def _new_service(
        self,
        workspace_id: str | None,
        *,
        name: str,
        url: str,
        description: str,
        enabled: bool,
        transport: str,
        headers: Mapping[str, str] | None,
        auth: AuthConfig,
        advanced: AdvancedConfig,
        usage_instructions: str,
    ) -> ExternalService:
        clean_transport = _clean_transport(transport)
        cleaned_name = clean_name(_text(name, "name"))
        cleaned_description = clean_description(_text(description, "description"))
        cleaned_headers = _clean_headers(headers or {})
        usage = _clean_usage(usage_instructions)
        cleaned_url = self._clean_url(url, "url")
        if auth.auth_server_metadata_url:
            self._clean_url(auth.auth_server_metadata_url, "auth_config.auth_server_metadata_url")
        now = timestamp(self._clock.now())
        return ExternalService(
            id=new_id(ID_PREFIX),
            workspace_id=workspace_id,
            name=cleaned_name,
            description=cleaned_description,
            enabled=_bool(enabled, "enabled"),
            transport=clean_transport,
            url=cleaned_url,
            headers=cleaned_headers,
            auth=auth,
            advanced=advanced,
            usage_instructions=usage,
            catalog_stale=True,
            created_at=now,
            updated_at=now,
            version=1,
        )

    def _insert(self, item: Item, service: ExternalService) -> None:
        try:
            self._store.transact(
                [
                    Put(item, Condition.absent("service_new")),
                    Put(_guard_of(service.workspace_id, service.name, service.id), _name_free()),
                ]
            )
        except ConditionFailed as lost:
            if lost.condition == _name_free().name:
                raise _name_taken() from None
            raise

    def _clean_url(self, url: Any, field_name: str) -> str:
        if not isinstance(url, str) or not url.strip():
            raise InvalidInput(f"{field_name} is required", code="url_invalid")
        text: str = url.strip()
        if len(text) > MAX_URL_CHARS:
            raise InvalidInput(f"{field_name} is longer than {MAX_URL_CHARS} characters", code="url_invalid")
        target = self._egress.check_url(text)
        self._egress.resolve(target)
        return text

    def _own(self, workspace_id: str, service_id: str) -> ExternalService:
        """A service the workspace may change: its own (404 otherwise), never a builtin one (403)."""
        if not is_id(service_id, ID_PREFIX):
            raise _not_found()
        item = self._store.get(service_key(workspace_id, service_id))
        if item is not None:
            return self._service_of(item)
        if self._store.get(service_key(None, service_id)) is not None:
            raise Forbidden("builtin services cannot be changed", code="builtin_immutable")
        raise _not_found()

    def _sealed_headers(self, service: ExternalService, headers: Mapping[str, str]) -> Item:
        """The item attributes of a service's custom headers: their names in clear, their values sealed."""
        if not headers:
            return {"header_names": []}
        sealed = self._secrets.seal(json.dumps(dict(headers), sort_keys=True), service.headers_context)
        return {"header_names": sorted(headers), "secret_headers": sealed}

    def _sealed_url(self, service: ExternalService, url: str) -> Item:
        """The item attributes of a service's URL: as shown (query values masked) in clear, and when that hides
        anything, the whole URL sealed (a key put in a query is a secret like any other)."""
        shown = masked_url(url)
        if shown == url:
            return {"url": url}
        return {"url": shown, "secret_url": self._secrets.seal(url, service.url_context)}

    def _service_of(self, item: Item) -> ExternalService:
        """A stored service with its URL and custom headers opened (sealed first if the item predates sealing)."""
        service = _service_of(item, {})
        legacy_headers = item.get("headers") if not item.get("secret_headers") else None
        headers: dict[str, str] = {str(k): str(v) for k, v in (legacy_headers or {}).items()}
        if not legacy_headers:
            opened = open_secret_or_none(self._secrets, item.get("secret_headers"), service.headers_context)
            headers = {} if opened is None else {str(k): str(v) for k, v in json.loads(opened).items()}
        url = service.url
        if item.get("secret_url"):
            url = open_secret_or_none(self._secrets, item["secret_url"], service.url_context) or url
        service = dataclasses.replace(service, headers=headers, url=url)
        legacy_url = not item.get("secret_url") and masked_url(service.url) != service.url
        if legacy_headers or legacy_url:
            self._seal_legacy(service, item)
        return service

    def _seal_legacy(self, service: ExternalService, item: Item) -> None:
        # Nothing configured changes (same values, same version): only how they are kept at rest.
        sealed = self._sealed_headers(service, service.headers) | self._sealed_url(service, service.url)
        try:
            self._store.update(
                Key(item["pk"], item["sk"]),
                Update(set=sealed, remove=["headers"]),
                condition=_unchanged(service.version),
            )
        except ConditionFailed:
            return  # changed meanwhile: the writer sealed them, or the next read will
        log.info("sealed the URL and custom headers of MCP service %s at rest", service.id)

    def _drop_dependents(self, workspace_id: str, service_id: str) -> None:
        """The service's tool policies, users' OAuth tokens and its registered OAuth clients go with it (tokens are
        not revoked upstream: the server is being forgotten)."""
        for prefix in (f"SVCTOOL#{service_id}#", f"OAUTHTOKEN#{service_id}#", f"OAUTHCLIENT#{service_id}#"):
            try:
                for item in builtins.list(every_item(self._store, _partition(workspace_id), sk_prefix=prefix)):
                    self._store.delete(Key(item["pk"], item["sk"]))
            except MCPBridgeError as exc:  # leftovers are harmless: ids are never reused
                log.warning("could not delete %s items of MCP service %s: %s", prefix[:-1], service_id, exc.code)


# ---------------------------------------------------------------------------------------------------- access


def require_reader(principal: Principal) -> None:
    if not principal.scope.allows("manage_services"):
        raise Forbidden("this API key lacks the manage_services capability", code="capability_missing")


def require_writer(principal: Principal) -> None:
    if not principal.is_admin:
        raise Forbidden("this needs an admin API key", code="admin_required")
    require_reader(principal)


# ---------------------------------------------------------------------------------------------------- validation


def _text(value: Any, field_name: str) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"{field_name} must be a string", code=f"invalid_{field_name}")
    return value


def _bool(value: Any, field_name: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidInput(f"{field_name} must be true or false", code=f"invalid_{field_name}")
    return value


def _clean_transport(transport: Any) -> Transport:
    value = transport.strip().lower() if isinstance(transport, str) else transport
    if value == "stdio":
        raise InvalidInput(STDIO_REFUSED, code="stdio_disabled")
    for known in TRANSPORTS:
        if value == known:
            return known
    raise InvalidInput(
        "transport must be sse or http-streamable", code="invalid_transport", details={"allowed": list(TRANSPORTS)}
    )


def _clean_usage(text: Any) -> str:
    value = _text(text, "usage_instructions").strip()
    if len(value) > MAX_USAGE_INSTRUCTIONS_CHARS:
        raise InvalidInput(
            f"usage_instructions is longer than {MAX_USAGE_INSTRUCTIONS_CHARS} characters",
            code="invalid_usage_instructions",
        )
    return value


def _clean_header_name(name: Any, field_name: str) -> str:
    if not isinstance(name, str) or not _HEADER_NAME.fullmatch(name):
        raise InvalidInput(f"{field_name} holds an invalid header name", code="invalid_headers")
    return name


def _clean_headers(headers: Any) -> dict[str, str]:
    if not isinstance(headers, Mapping):
        raise InvalidInput("headers must be an object of strings", code="invalid_headers")
    if len(headers) > MAX_HEADERS:
        raise InvalidInput(f"at most {MAX_HEADERS} headers", code="invalid_headers")
    cleaned: dict[str, str] = {}
    seen: set[str] = set()
    for name, value in headers.items():
        header = _clean_header_name(name, "headers")
        lowered = header.lower()
        if lowered in _RESERVED_HEADERS:
            raise InvalidInput(f"the header {header} cannot be set", code="invalid_headers")
        if lowered in seen:
            raise InvalidInput(f"the header {header} appears twice", code="invalid_headers")
        seen.add(lowered)
        # The value is never quoted back: it may be a credential.
        if not isinstance(value, str) or len(value) > MAX_HEADER_VALUE_CHARS or _HEADER_VALUE_BAD.search(value):
            raise InvalidInput(
                f"the value of header {header} must be a string of at most {MAX_HEADER_VALUE_CHARS} characters "
                "without line breaks or control characters",
                code="invalid_headers",
            )
        cleaned[header] = value
    return cleaned


def _clean_auth(current: AuthConfig, changes: Mapping[str, Any], warnings: builtins.list[str]) -> AuthConfig:
    """``current`` with ``changes`` applied; secret fields are dropped with a warning."""
    values: dict[str, Any] = {
        "auth_type": current.auth_type,
        "api_key_header": current.api_key_header,
        "client_id": current.client_id,
        "scopes": current.scopes,
        "auth_server_metadata_url": current.auth_server_metadata_url,
    }
    for key, value in changes.items():
        if key in SECRET_FIELDS:
            if value is not None:
                warnings.append(f"auth_config.{key} is deprecated here and was ignored; set it with PUT /credentials")
            continue
        if key not in _AUTH_KEYS:
            raise InvalidInput(f"auth_config has no field {_shown(str(key))}", code="invalid_auth_config")
        if value is None:
            continue
        values[key] = value
    auth_type = values["auth_type"]
    if auth_type == "":
        auth_type = "none"
    if auth_type not in AUTH_TYPES:
        raise InvalidInput(
            "auth_config.auth_type must be none, api_key, bearer or oauth",
            code="invalid_auth_config",
            details={"allowed": list(AUTH_TYPES)},
        )
    header = values["api_key_header"]
    if header == "":
        header = DEFAULT_API_KEY_HEADER
    header = _clean_header_name(header, "auth_config.api_key_header")
    if header.lower() in _RESERVED_HEADERS:
        raise InvalidInput(f"the header {header} cannot be set", code="invalid_auth_config")
    client_id = values["client_id"]
    if not isinstance(client_id, str) or len(client_id.strip()) > MAX_CLIENT_ID_CHARS:
        raise InvalidInput(
            f"auth_config.client_id must be a string of at most {MAX_CLIENT_ID_CHARS} characters",
            code="invalid_auth_config",
        )
    scopes = values["scopes"]
    if isinstance(scopes, str) or not isinstance(scopes, Iterable):
        raise InvalidInput("auth_config.scopes must be a list of strings", code="invalid_auth_config")
    cleaned_scopes = tuple(dict.fromkeys(_clean_scope(s) for s in scopes))
    if len(cleaned_scopes) > MAX_SCOPES:
        raise InvalidInput(f"auth_config.scopes holds at most {MAX_SCOPES} scopes", code="invalid_auth_config")
    metadata_url = values["auth_server_metadata_url"]
    if not isinstance(metadata_url, str):
        raise InvalidInput("auth_config.auth_server_metadata_url must be a string", code="invalid_auth_config")
    return AuthConfig(
        auth_type=auth_type,
        api_key_header=header,
        client_id=client_id.strip(),
        scopes=cleaned_scopes,
        auth_server_metadata_url=metadata_url.strip(),
    )


def _clean_scope(scope: Any) -> str:
    if (
        not isinstance(scope, str)
        or not scope.strip()
        or len(scope.strip()) > MAX_SCOPE_CHARS
        or any(c.isspace() for c in scope.strip())
    ):
        raise InvalidInput(
            f"each scope is a non-empty string without spaces, at most {MAX_SCOPE_CHARS} characters",
            code="invalid_auth_config",
        )
    return scope.strip()


def _clean_advanced(current: AdvancedConfig, changes: Mapping[str, Any]) -> AdvancedConfig:
    unknown = sorted(set(changes) - _ADVANCED_KEYS)
    if unknown:
        raise InvalidInput(f"advanced_config has no field {_shown(str(unknown[0]))}", code="invalid_advanced_config")
    timeout = _number(changes.get("timeout"), current.timeout, "timeout", 1.0, MAX_TIMEOUT_SECONDS)
    delay = _number(changes.get("retry_delay"), current.retry_delay, "retry_delay", 0.0, MAX_RETRY_DELAY_SECONDS)
    count = changes.get("retry_count")
    if count is None:
        count = current.retry_count
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_RETRY_COUNT:
        raise InvalidInput(
            f"advanced_config.retry_count must be an integer from 0 to {MAX_RETRY_COUNT}",
            code="invalid_advanced_config",
        )
    return AdvancedConfig(timeout=timeout, retry_count=count, retry_delay=delay)


def _number(value: Any, default: float, name: str, low: float, high: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidInput(f"advanced_config.{name} must be a number", code="invalid_advanced_config")
    if not low <= value <= high:
        raise InvalidInput(
            f"advanced_config.{name} must be from {low:g} to {high:g} seconds",
            code="invalid_advanced_config",
            details={"min": low, "max": high},
        )
    return float(value)


def _clean_secret(name: str, value: Any) -> str:
    # The value is never quoted back, whatever is wrong with it.
    if not isinstance(value, str) or len(value) > MAX_SECRET_CHARS or _HEADER_VALUE_BAD.search(value):
        raise InvalidInput(
            f"{name} must be a string of at most {MAX_SECRET_CHARS} characters without line breaks or control "
            "characters",
            code="invalid_credential",
        )
    return value


def _import_arguments(entry: Any) -> dict[str, Any]:
    """``create`` arguments for one ``mcpServers`` entry (InvalidInput when it cannot be one)."""
    if not isinstance(entry, Mapping):
        raise InvalidInput("the entry is not an object", code="invalid_import_entry")
    kind = entry.get("type", entry.get("transport"))
    if "command" in entry or (isinstance(kind, str) and kind.strip().lower() == "stdio"):
        raise InvalidInput(STDIO_REFUSED, code="stdio_disabled")
    url = entry.get("url", entry.get("serverUrl"))
    if not isinstance(url, str) or not url.strip():
        raise InvalidInput("the entry has no url", code="url_invalid")
    if kind is None:
        transport: str = "sse" if url.rstrip("/").lower().endswith("/sse") else DEFAULT_TRANSPORT
    elif isinstance(kind, str):
        transport = _IMPORT_TRANSPORTS.get(kind.strip().lower(), kind)
    else:
        raise InvalidInput("type must be a string", code="invalid_transport")
    arguments: dict[str, Any] = {"url": url, "transport": transport, "headers": entry.get("headers") or {}}
    if "description" in entry:
        arguments["description"] = entry["description"]
    if "disabled" in entry:
        arguments["enabled"] = not _bool(entry["disabled"], "disabled")
    return arguments


def _matches(service: ExternalService, keywords: builtins.list[str]) -> bool:
    fields = (fold(service.name), fold(service.usage_instructions), fold(service.description))
    return all(any(keyword in text for text in fields) for keyword in keywords)


def _shown(value: str) -> str:
    return value if len(value) <= 64 else value[:64] + "…"


def _log_warnings(service_id: str, warnings: Iterable[str]) -> None:
    for warning in warnings:  # field names only: a warning never carries a value
        log.warning("MCP service %s: %s", service_id, warning)


# ---------------------------------------------------------------------------------------------------- errors


def _not_found() -> NotFound:
    return NotFound("MCP service not found", code="service_not_found")


def _name_taken() -> Conflict:
    return Conflict("a service with this name already exists in the workspace", code="service_name_taken")


def _unknown_field(name: str) -> InvalidInput:
    return InvalidInput(
        f"unknown credential field {_shown(name)}",
        code="unknown_credential_field",
        details={"allowed": list(SECRET_FIELDS)},
    )


# ---------------------------------------------------------------------------------------------------- items


def _unchanged(version: int) -> Condition:
    return Condition.equals("service_unchanged", "version", version)


def _name_free() -> Condition:
    return Condition.absent("service_name_free")


def _guard_of(workspace_id: str | None, name: str, service_id: str) -> Item:
    return {**name_key(workspace_id, name).as_dict(), "service_id": service_id, "name": name}


def _current_value(service: ExternalService, change: str) -> Any:
    if change == "auth_config":
        return service.auth
    if change == "advanced_config":
        return service.advanced
    if change == "headers":
        return dict(service.headers)
    return getattr(service, change)


def _stored(value: Any) -> Any:
    if isinstance(value, AuthConfig):
        return _auth_item(value)
    if isinstance(value, AdvancedConfig):
        return _advanced_item(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value


def _auth_item(auth: AuthConfig) -> dict[str, Any]:
    return {
        "auth_type": auth.auth_type,
        "api_key_header": auth.api_key_header,
        "client_id": auth.client_id,
        "scopes": list(auth.scopes),
        "auth_server_metadata_url": auth.auth_server_metadata_url,
    }


def _advanced_item(advanced: AdvancedConfig) -> dict[str, Any]:
    return {"timeout": advanced.timeout, "retry_count": advanced.retry_count, "retry_delay": advanced.retry_delay}


def _item_of(service: ExternalService) -> Item:
    return {
        **service_key(service.workspace_id, service.id).as_dict(),
        "id": service.id,
        "workspace_id": service.workspace_id,
        "builtin": service.is_builtin,
        "name": service.name,
        "name_folded": fold(service.name),
        "description": service.description,
        "enabled": service.enabled,
        "transport": service.transport,
        "url": service.url,
        "auth_config": _auth_item(service.auth),
        "advanced_config": _advanced_item(service.advanced),
        "usage_instructions": service.usage_instructions,
        "catalog_stale": service.catalog_stale,
        "created_at": service.created_at,
        "updated_at": service.updated_at,
        "version": service.version,
        "connection_version": service.connection_version,
    }


def _service_of(item: Item, headers: Mapping[str, str]) -> ExternalService:
    auth = item.get("auth_config") or {}
    advanced = item.get("advanced_config") or {}
    transport = item.get("transport")
    auth_type: AuthType = "none"
    for known in AUTH_TYPES:
        if known == auth.get("auth_type"):
            auth_type = known
    return ExternalService(
        id=item["id"],
        workspace_id=None if item.get("builtin") else item["workspace_id"],
        name=item["name"],
        description=item.get("description", ""),
        enabled=bool(item.get("enabled", True)),
        transport="sse" if transport == "sse" else "http-streamable",
        url=item.get("url", ""),
        headers=dict(headers),
        auth=AuthConfig(
            auth_type=auth_type,
            api_key_header=auth.get("api_key_header") or DEFAULT_API_KEY_HEADER,
            client_id=auth.get("client_id", ""),
            scopes=tuple(auth.get("scopes") or ()),
            auth_server_metadata_url=auth.get("auth_server_metadata_url", ""),
        ),
        advanced=AdvancedConfig(
            timeout=float(advanced.get("timeout", DEFAULT_TIMEOUT_SECONDS)),
            retry_count=int(advanced.get("retry_count", DEFAULT_RETRY_COUNT)),
            retry_delay=float(advanced.get("retry_delay", DEFAULT_RETRY_DELAY_SECONDS)),
        ),
        usage_instructions=item.get("usage_instructions", ""),
        catalog_stale=bool(item.get("catalog_stale", True)),
        created_at=item["created_at"],
        updated_at=item["updated_at"],
        version=int(item.get("version", 1)),
        connection_version=int(item.get("connection_version", 1)),
        sealed={name: str(item[f"secret_{name}"]) for name in SECRET_FIELDS if item.get(f"secret_{name}")},
    )
