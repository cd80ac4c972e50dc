"""The registry of external MCP services a workspace connects to (the client side of the hub): create, read, change
and delete them, keep their secrets sealed, and tell the packages that keep rows per service when one goes.

The model is ``domain/external_services``; the item layout ``client/service_items``; what each field may be
``client/service_validation``; the ``mcpServers`` import ``client/mcp_servers_import``.

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

Any change of ``transport``, ``url``, ``headers``, ``auth_config`` or of a credential sets ``catalog_stale``: the
catalog layer refreshes its snapshot and clears the flag with :meth:`ServiceRegistry.clear_catalog_stale`.

Deleting a service deletes its item and name guard, then asks each :class:`ServiceRows` owner (tool policies, catalog
snapshots, OAuth tokens and registered clients) to forget its own rows.
"""

# Over 400 lines: create, read, change and delete of services, with their secrets sealed, in one place.

from __future__ import annotations

import builtins
import dataclasses
import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from mcpbridge.client.mcp_servers_import import ImportResult, import_servers
from mcpbridge.client.service_items import (
    current_value,
    guard_of,
    item_of,
    name_free,
    name_key,
    partition,
    service_key,
    service_of,
    stored,
    unchanged,
)
from mcpbridge.client.service_validation import (
    MAX_URL_CHARS,
    clean_advanced,
    clean_auth,
    clean_bool,
    clean_headers,
    clean_secret,
    clean_text,
    clean_transport,
    clean_usage,
    shown,
)
from mcpbridge.domain.external_services import (
    BUILTIN_PARTITION,
    DEFAULT_TRANSPORT,
    ID_PREFIX,
    SECRET_FIELDS,
    AdvancedConfig,
    AuthConfig,
    ExternalService,
)
from mcpbridge.domain.identity import Principal, timestamp
from mcpbridge.domain.ids import is_id, new_id
from mcpbridge.domain.items import Condition, Item, Key, Patch, Put, Remove, Update
from mcpbridge.domain.names import clean_description, clean_name, fold
from mcpbridge.errors import ConditionFailed, Conflict, Forbidden, InvalidInput, MCPBridgeError, NotFound
from mcpbridge.observability import masked_url
from mcpbridge.optimistic import update_optimistically
from mcpbridge.outbound.policy import EgressPolicy
from mcpbridge.paging import every_item
from mcpbridge.ports import Clock, SecretBox, Store
from mcpbridge.sealing import open_secret_or_none

log = logging.getLogger("mcpbridge.services")

_CONNECTION_FIELDS = frozenset({"transport", "url", "headers", "auth_config"})
_RECONNECT_FIELDS = _CONNECTION_FIELDS | {"enabled", "advanced_config"}


class ServiceRows(Protocol):
    """A package that keeps rows per service (policies, snapshots, tokens...): it forgets them when the service goes.
    Leftovers are harmless (service ids are never reused), so a failure is logged, not raised."""

    def forget_service(self, workspace_id: str, service_id: str) -> None: ...


@dataclass(frozen=True)
class Saved:
    """A created or updated service and the warnings about its request (ignored secret fields)."""

    service: ExternalService
    warnings: tuple[str, ...] = ()


class _Unset:
    """Marks an ``update`` argument that was not given."""


UNSET: Final = _Unset()


class ServiceRegistry:
    """The external MCP services of a workspace (own and builtin): management through REST, and the stored
    configuration and opened secrets the connection layer needs."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        secrets: SecretBox,
        egress: EgressPolicy,
        *,
        dependents: Sequence[ServiceRows] = (),
    ) -> None:
        """``dependents``: the packages that keep rows per service, told when a service is deleted."""
        self._store = store
        self._clock = clock
        self._secrets = secrets
        self._egress = egress
        self._dependents = tuple(dependents)
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
            *every_item(self._store, partition(principal.workspace_id), sk_prefix="SVC#"),
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
            auth=clean_auth(AuthConfig(), auth_config or {}, warnings),
            advanced=clean_advanced(AdvancedConfig(), advanced_config or {}),
            usage_instructions=usage_instructions,
        )
        item = (
            item_of(service) | self._sealed_headers(service, service.headers) | self._sealed_url(service, service.url)
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
            auth=clean_auth(AuthConfig(), auth_config or {}, warnings),
            advanced=clean_advanced(AdvancedConfig(), advanced_config or {}),
            usage_instructions=usage_instructions,
        )
        sealed = self._sealed_headers(service, service.headers) | self._sealed_url(service, service.url)
        self._insert(item_of(service) | sealed, service)
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
        given = {
            "name": name,
            "description": description,
            "enabled": enabled,
            "transport": transport,
            "url": url,
            "headers": headers,
            "usage_instructions": usage_instructions,
        }
        simple = self._cleaned({k: v for k, v in given.items() if not isinstance(v, _Unset)})
        auth_changes = None if isinstance(auth_config, _Unset) else dict(auth_config)
        advanced_changes = None if isinstance(advanced_config, _Unset) else dict(advanced_config)
        checked_metadata: set[str] = set()

        def attempt() -> Saved:
            current = self._own(principal.workspace_id, service_id)
            warnings: builtins.list[str] = []
            changes = dict(simple)
            if auth_changes is not None:
                changes["auth_config"] = self._merged_auth(current, auth_changes, warnings, checked_metadata)
            if advanced_changes is not None:
                changes["advanced_config"] = clean_advanced(current.advanced, advanced_changes)
            effective = {k: v for k, v in changes.items() if current_value(current, k) != v}
            _log_warnings(current.id, warnings)
            if not effective:
                return Saved(current, tuple(warnings))
            item = self._write_changes(current, effective)
            log.info("updated MCP service %s (%s)", current.id, ", ".join(sorted(effective)))
            if _RECONNECT_FIELDS & set(effective):
                self._connection_changed(current.id)
            return Saved(self._service_of(item), tuple(warnings))

        return update_optimistically(attempt, busy=lambda: _busy("the update"))

    def _cleaned(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """The simple fields of an update, each checked as on create (a URL passes the egress guard again)."""
        cleaners: dict[str, Callable[[Any], Any]] = {
            "name": lambda v: clean_name(clean_text(v, "name")),
            "description": lambda v: clean_description(clean_text(v, "description")),
            "enabled": lambda v: clean_bool(v, "enabled"),
            "transport": clean_transport,
            "url": lambda v: self._clean_url(v, "url"),
            "headers": clean_headers,
            "usage_instructions": clean_usage,
        }
        return {field_name: cleaners[field_name](value) for field_name, value in given.items()}

    def _merged_auth(
        self,
        current: ExternalService,
        changes: Mapping[str, Any],
        warnings: builtins.list[str],
        checked_metadata: set[str],
    ) -> AuthConfig:
        """``auth_config`` merged field by field; a newly pinned metadata URL passes the egress guard (once)."""
        auth = clean_auth(current.auth, changes, warnings)
        pinned = auth.auth_server_metadata_url
        if pinned and pinned != current.auth.auth_server_metadata_url and pinned not in checked_metadata:
            self._clean_url(pinned, "auth_config.auth_server_metadata_url")
            checked_metadata.add(pinned)
        return auth

    def _write_changes(self, current: ExternalService, effective: Mapping[str, Any]) -> Item:
        """Write the changed fields on condition that ``current`` is still the stored version (a new name moves its
        guard in the same transaction); ``ConditionFailed`` when another write came first."""
        sets: dict[str, Any] = {k: stored(v) for k, v in effective.items() if k != "headers"}
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
        if "name" not in effective or fold(effective["name"]) == fold(current.name):
            return self._store.update(key, Update(set=sets, remove=removes), condition=unchanged(current.version))
        try:
            self._store.transact(
                [
                    Patch(key, Update(set=sets, remove=removes), unchanged(current.version)),
                    Remove(name_key(current.workspace_id, current.name)),
                    Put(guard_of(current.workspace_id, effective["name"], current.id), name_free()),
                ]
            )
        except ConditionFailed as lost:
            if lost.condition == name_free().name:
                raise _name_taken() from None
            raise
        item = self._store.get(key)
        if item is None:  # deleted right after: the next round answers 404
            raise ConditionFailed(unchanged(current.version).name, None)
        return item

    def set_enabled(self, principal: Principal, service_id: str, enabled: bool) -> ExternalService:
        return self.update(principal, service_id, enabled=enabled).service

    def delete(self, principal: Principal, service_id: str) -> None:
        """Delete the service and its name guard; then the packages that keep rows for it forget them."""
        require_writer(principal)

        def attempt() -> ExternalService:
            current = self._own(principal.workspace_id, service_id)
            self._connection_changed(current.id)
            self._store.transact(
                [
                    Remove(service_key(current.workspace_id, current.id), unchanged(current.version)),
                    Remove(name_key(current.workspace_id, current.name)),
                ]
            )
            return current

        deleted = update_optimistically(attempt, busy=lambda: _busy("the deletion"))
        for dependent in self._dependents:
            try:
                dependent.forget_service(principal.workspace_id, deleted.id)
            except MCPBridgeError as exc:  # leftovers are harmless: ids are never reused
                log.warning("could not forget the rows of deleted MCP service %s: %s", deleted.id, exc.code)
        self._connection_changed(deleted.id)  # a connection opened during the deletion goes too
        log.info("deleted MCP service %s", deleted.id)

    def set_credentials(
        self, principal: Principal, service_id: str, values: Mapping[str, str | None]
    ) -> ExternalService:
        """Pointer semantics per field: absent or None = keep, ``""`` = no-op, a value = replace (sealed)."""
        require_writer(principal)
        unknown = sorted(set(values) - set(SECRET_FIELDS))
        if unknown:
            raise _unknown_field(unknown[0])
        given = {name: clean_secret(name, value) for name, value in values.items() if value is not None and value}

        def attempt() -> ExternalService:
            current = self._own(principal.workspace_id, service_id)
            if not given:
                return current
            context = current.secret_context
            sets: dict[str, Any] = {
                f"secret_{name}": self._secrets.seal(value, context) for name, value in given.items()
            }
            sets |= self._connection_moved(current)
            item = self._store.update(
                service_key(current.workspace_id, current.id), Update(set=sets), condition=unchanged(current.version)
            )
            log.info("changed credentials %s of MCP service %s", ", ".join(sorted(given)), current.id)
            self._connection_changed(current.id)
            return self._service_of(item)

        return update_optimistically(attempt, busy=lambda: _busy("the change"))

    def delete_credential(self, principal: Principal, service_id: str, field_name: str) -> ExternalService:
        """Clear one secret; clearing one that is not set changes nothing (idempotent)."""
        require_writer(principal)
        if field_name not in SECRET_FIELDS:
            raise _unknown_field(field_name)
        attr = f"secret_{field_name}"

        def attempt() -> ExternalService:
            current = self._own(principal.workspace_id, service_id)
            if field_name not in current.sealed:
                return current
            update = Update(set=self._connection_moved(current), remove=[attr])
            item = self._store.update(
                service_key(current.workspace_id, current.id), update, condition=unchanged(current.version)
            )
            log.info("cleared credential %s of MCP service %s", field_name, current.id)
            self._connection_changed(current.id)
            return self._service_of(item)

        return update_optimistically(attempt, busy=lambda: _busy("the change"))

    def _connection_moved(self, current: ExternalService) -> dict[str, Any]:
        """What every change of credentials writes besides them: the catalog is stale, the connection moved on."""
        return {
            "catalog_stale": True,
            "connection_version": current.connection_version + 1,
            "updated_at": timestamp(self._clock.now()),
            "version": current.version + 1,
        }

    def clear_catalog_stale(self, service: ExternalService) -> bool:
        """For the catalog layer, after a complete refresh of ``service`` as read: False when the service changed
        since (the flag stays set). The version does not move: nothing configured changed."""
        try:
            self._store.update(
                service_key(service.workspace_id, service.id),
                Update(set={"catalog_stale": False}),
                condition=unchanged(service.version),
            )
        except ConditionFailed:
            return False
        return True

    def import_servers(self, principal: Principal, document: Mapping[str, Any]) -> ImportResult:
        """Create one service per entry of a standard ``mcpServers`` document (``client/mcp_servers_import``)."""
        require_writer(principal)
        return import_servers(self, principal, document)

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
        checked_transport = clean_transport(transport)
        cleaned_name = clean_name(clean_text(name, "name"))
        cleaned_description = clean_description(clean_text(description, "description"))
        cleaned_headers = clean_headers(headers or {})
        usage = clean_usage(usage_instructions)
        cleaned_url = self._clean_url(url, "url")
        if auth.auth_server_metadata_url:
            self._clean_url(auth.auth_server_metadata_url, "auth_config.auth_server_metadata_url")
        now = timestamp(self._clock.now())
        return ExternalService(
            id=new_id(ID_PREFIX),
            workspace_id=workspace_id,
            name=cleaned_name,
            description=cleaned_description,
            enabled=clean_bool(enabled, "enabled"),
            transport=checked_transport,
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
                    Put(guard_of(service.workspace_id, service.name, service.id), name_free()),
                ]
            )
        except ConditionFailed as lost:
            if lost.condition == name_free().name:
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
        service = service_of(item, {})
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
                condition=unchanged(service.version),
            )
        except ConditionFailed:
            return  # changed meanwhile: the writer sealed them, or the next read will
        log.info("sealed the URL and custom headers of MCP service %s at rest", service.id)


# ---------------------------------------------------------------------------------------------------- access


def require_reader(principal: Principal) -> None:
    if not principal.scope.allows("manage_services"):
        raise Forbidden("this API key lacks the manage_services capability", code="capability_missing")


def require_writer(principal: Principal) -> None:
    if not principal.is_admin:
        raise Forbidden("this needs an admin API key", code="admin_required")
    require_reader(principal)


def _matches(service: ExternalService, keywords: builtins.list[str]) -> bool:
    fields = (fold(service.name), fold(service.usage_instructions), fold(service.description))
    return all(any(keyword in text for text in fields) for keyword in keywords)


def _log_warnings(service_id: str, warnings: Iterable[str]) -> None:
    for warning in warnings:  # field names only: a warning never carries a value
        log.warning("MCP service %s: %s", service_id, warning)


# ---------------------------------------------------------------------------------------------------- errors


def _busy(what: str) -> Conflict:
    return Conflict(f"the service kept changing during {what}; retry", code="service_busy")


def _not_found() -> NotFound:
    return NotFound("MCP service not found", code="service_not_found")


def _name_taken() -> Conflict:
    return Conflict("a service with this name already exists in the workspace", code="service_name_taken")


def _unknown_field(name: str) -> InvalidInput:
    return InvalidInput(
        f"unknown credential field {shown(name)}",
        code="unknown_credential_field",
        details={"allowed": list(SECRET_FIELDS)},
    )
