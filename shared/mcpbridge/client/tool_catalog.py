"""Persistent tool catalogs of external MCP services: one snapshot per (workspace, service, principal scope).

A refresh connects, pulls every page of tools (full definitions, JSON Schemas included), the resources when the
server declares them, its identity, protocol version and instructions, and saves the result only when all of it
arrived within the limits (100 pages, 2000 tools, 256 KiB per tool definition; over a limit the pull is rejected
whole). A failed refresh keeps the last complete snapshot and records the error beside it.

Storage (a snapshot can hold 2000 tools of up to 256 KiB each, far beyond a DynamoDB item's 400 KB):

    blob   catalogs/<ws>/<service>/<scope>/<snapshot_id>.json   the snapshot itself (JSON), never rewritten
    item   WS#<ws> / SVCCAT#<service>#<scope>                    the head: which blob is current, its facts, and
                                                                 the last refresh error

The head moves to a new blob with a conditional write on the snapshot it replaced, so two refreshes racing leave
one complete snapshot (the loser's blob is deleted) and a reader never sees a half-written one. Old blobs are
deleted after the head has moved.

Each tool carries ``definition_hash`` (SHA-256 of its canonical JSON definition). A tool whose hash differs from
the previous snapshot is flagged ``changed`` (defence against silent tool changes); when its policy requires
approval, the policy row records the new hash (:meth:`ToolPolicies.note_definition_change`), so an approval given
for the earlier definition does not carry over. The admin-written ``usage_instructions`` of the service are a
separate field that no refresh touches; the server's own instructions are kept as ``instructions`` here.

The snapshot is stale when the service's connection settings or credentials changed after it was taken (it
records the service's ``connection_version``, which moves with those changes only; the service's own
``catalog_stale`` flag is cleared by the next complete refresh).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
from anyio import to_thread

from mcpbridge.client.policies import ToolPolicies
from mcpbridge.client.registry import ServiceRegistry, require_reader, require_writer
from mcpbridge.client.snapshots import Snapshots, head_key
from mcpbridge.domain.external_services import ExternalService, scope_for
from mcpbridge.domain.identity import Principal, timestamp
from mcpbridge.domain.ids import new_id
from mcpbridge.domain.items import AttrAbsent, Compare, Condition, Key, Update
from mcpbridge.errors import ConditionFailed, InvalidInput, MCPBridgeError, OAuthRequired, UpstreamError
from mcpbridge.observability import NoTelemetry
from mcpbridge.outbound.policy import EgressPolicy
from mcpbridge.ports import Blobs, Clock, Store, Telemetry

if TYPE_CHECKING:  # the MCP client is imported on use: reading a catalog (admin API) should not pay for it
    from mcp.types import Resource, Tool

    from mcpbridge.client.connection import ConnectionSpec
    from mcpbridge.client.quarantine import ToolQuarantine

log = logging.getLogger("mcpbridge.services")

MAX_DEFINITION_BYTES = 256 * 1024
SNAPSHOT_FORMAT = 1
MAX_ERROR_MESSAGE_CHARS = 500

SpecFor = Callable[[ExternalService, Principal], Awaitable["ConnectionSpec"]]
"""How the catalog gets a connection spec for a service as seen by a principal (credentials opened, OAuth token)."""


def definition_hash(definition: dict[str, Any]) -> str:
    canonical = json.dumps(definition, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class RefreshError:
    code: str
    message: str
    at: str


@dataclass(frozen=True)
class CatalogView:
    """What ``GET /{id}/metadata`` shows: the current complete snapshot (or None), whether it is stale, and the
    last refresh error (None when the last refresh succeeded)."""

    service: ExternalService
    scope: str
    snapshot: dict[str, Any] | None
    stale: bool
    last_error: RefreshError | None
    last_attempt_at: str | None


class ToolCatalog:
    def __init__(
        self,
        store: Store,
        blobs: Callable[[], Blobs],
        clock: Clock,
        registry: ServiceRegistry,
        policies: ToolPolicies,
        egress: EgressPolicy,
        spec_for: SpecFor,
        telemetry: Telemetry | None = None,
        request_budget: float | None = None,
        snapshots: Snapshots | None = None,
        quarantine: ToolQuarantine | None = None,
    ) -> None:
        """``telemetry``: a span around each pull, and the failed ones counted (``CatalogRefreshFailures``);
        ``request_budget``: the seconds a pull may take in all (a synchronous request's), None for the services'
        own timeouts alone; ``snapshots``: the container's reader of stored snapshots (which keeps their bytes)."""
        self._telemetry = telemetry or NoTelemetry()
        self._budget = request_budget
        self._store = store
        self._blobs = blobs  # asked for on first use: reading policies or resolving a tool needs no blob store
        self._clock = clock
        self._registry = registry
        self._policies = policies
        self._egress = egress
        self._spec_for = spec_for
        self._snapshots = snapshots or Snapshots(store, blobs)
        self._quarantine = quarantine

    # ------------------------------------------------------------------------------------------ reading

    def view(self, principal: Principal, service_id: str) -> CatalogView:
        """The stored catalog of a service for this principal (blocking: store and blob reads)."""
        require_reader(principal)
        service = self._registry.get(principal, service_id)
        return self._view(principal, service)

    def view_of(self, principal: Principal, service: ExternalService) -> CatalogView:
        """:meth:`view` of a service the caller has just read, as ``principal`` may (one read fewer). Its snapshot is
        shared with every other caller (:meth:`Snapshots.load_shared`): read only."""
        require_reader(principal)
        return self._view(principal, service, shared=True)

    def _view(self, principal: Principal, service: ExternalService, *, shared: bool = False) -> CatalogView:
        scope = scope_for(service, principal)
        head = self._store.get(head_key(principal.workspace_id, service.id, scope))
        snapshot = self._snapshots.load_shared(head) if shared else self._load(head)
        error = (head or {}).get("last_error")
        stale = snapshot is None or int(snapshot.get("connection_version", 0)) < service.connection_version
        return CatalogView(
            service=service,
            scope=scope,
            snapshot=snapshot,
            stale=stale,
            last_error=RefreshError(error["code"], error["message"], error["at"]) if error else None,
            last_attempt_at=(head or {}).get("last_attempt_at"),
        )

    def _load(self, head: dict[str, Any] | None) -> dict[str, Any] | None:
        return self._snapshots.load(head)

    async def current(self, principal: Principal, service_id: str) -> CatalogView:
        """The stored snapshot, or a first refresh when there is none yet (readers may trigger the first pull)."""
        view = await to_thread.run_sync(self.view, principal, service_id)
        if view.snapshot is not None:
            return view
        return await self._refresh(principal, view.service)

    # ------------------------------------------------------------------------------------------ refreshing

    async def refresh(self, principal: Principal, service_id: str) -> CatalogView:
        """Pull the catalog now: admins, or for an OAuth service its user (their own catalog). Raises the upstream
        or policy error after recording it."""

        def load() -> ExternalService:
            require_reader(principal)
            service = self._registry.get(principal, service_id)
            if service.auth.auth_type != "oauth":  # an OAuth user refreshes their own catalog; otherwise admins
                require_writer(principal)
            return service

        service = await to_thread.run_sync(load)
        return await self._refresh(principal, service)

    async def refresh_for(self, principal: Principal, service: ExternalService) -> CatalogView:
        """Pull the catalog of ``service`` as ``principal`` sees it, without the REST permission check (for a
        call that needs the user's first catalog of an OAuth service)."""
        return await self._refresh(principal, service)

    async def _refresh(self, principal: Principal, service: ExternalService) -> CatalogView:
        scope = scope_for(service, principal)
        key = head_key(principal.workspace_id, service.id, scope)
        started = timestamp(self._clock.now())
        try:
            spec = await self._spec_for(service, principal)
            with self._telemetry.span("upstream.refresh_catalog", service_id=service.id):
                pulled = await self._pull(spec)
        except (UpstreamError, InvalidInput, OAuthRequired) as failure:
            self._telemetry.count("CatalogRefreshFailures")
            await to_thread.run_sync(self._record_failure, key, service, scope, failure, started)
            raise
        return await to_thread.run_sync(self._save, principal, service, scope, pulled, started)

    async def _pull(self, spec: ConnectionSpec) -> dict[str, Any]:
        from mcpbridge.client.connection import Connection

        until = None if self._budget is None else anyio.current_time() + self._budget
        async with Connection(spec, self._egress, until=until) as connection:
            tools = await connection.list_tools()
            resources: list[Resource] = []
            if connection.capabilities.resources is not None:
                resources = await connection.list_resources()
            info = connection.server_info
            facts = {
                "protocol_version": connection.protocol_version,
                "server": None
                if info is None
                else {"name": info.name, "version": info.version, "title": getattr(info, "title", None)},
                "instructions": connection.instructions,
                "capabilities": connection.capabilities.model_dump(mode="json", by_alias=True, exclude_none=True),
            }
        return {
            **facts,
            "tools": [_definition(tool, spec.host) for tool in tools],
            "resources": [_resource(resource) for resource in resources],
        }

    def _save(
        self, principal: Principal, service: ExternalService, scope: str, pulled: dict[str, Any], started: str
    ) -> CatalogView:
        workspace_id = principal.workspace_id
        key = head_key(workspace_id, service.id, scope)
        head = self._store.get(key)
        previous = self._load(head)
        tools, changed, added, removed = _compared(previous, pulled["tools"])
        snapshot_id = new_id("cat")
        now = timestamp(self._clock.now())
        snapshot = {
            "format": SNAPSHOT_FORMAT,
            "snapshot_id": snapshot_id,
            "service_id": service.id,
            "service_version": service.version,
            "connection_version": service.connection_version,
            "scope": scope,
            "synced_at": now,
            "protocol_version": pulled["protocol_version"],
            "server": pulled["server"],
            "instructions": pulled["instructions"],
            "capabilities": pulled["capabilities"],
            "tools": tools,
            "resources": pulled["resources"],
            "changes": {"added": added, "changed": changed, "removed": removed, "first": previous is None},
        }
        blob_key = f"catalogs/{workspace_id}/{service.id}/{scope}/{snapshot_id}.json"
        self._blobs().put(blob_key, json.dumps(snapshot, ensure_ascii=False).encode(), content_type="application/json")
        previous_id = (head or {}).get("snapshot_id")
        unchanged_head = Condition(
            "catalog_head_unchanged",
            AttrAbsent("snapshot_id") if previous_id is None else Compare("snapshot_id", "=", previous_id),
        )
        sets = {
            "service_id": service.id,
            "scope": scope,
            "snapshot_id": snapshot_id,
            "snapshot_key": blob_key,
            "synced_at": now,
            "service_version": service.version,
            "tool_count": len(tools),
            "resource_count": len(pulled["resources"]),
            "last_attempt_at": started,
        }
        clears = ["last_error"] if head is not None and "last_error" in head else []
        self._keep_baseline(workspace_id, service.id, (previous or {"tools": tools})["tools"])
        try:
            self._store.update(key, Update(set=sets, remove=clears), condition=unchanged_head)
        except ConditionFailed:
            # Another refresh saved first: its complete snapshot stands, ours is dropped.
            self._snapshots.delete(blob_key)
            log.info("catalog refresh of MCP service %s lost a race; keeping the other snapshot", service.id)
            return self._view(principal, service)
        if head is not None and head.get("snapshot_key"):
            self._snapshots.delete(head["snapshot_key"])
        self._registry.clear_catalog_stale(service)
        self._note_changes(workspace_id, service.id, tools)
        counts = (len(tools), len(changed), len(added), len(removed))
        log.info(
            "catalog of MCP service %s refreshed: %d tools (%d changed, %d added, %d removed)", service.id, *counts
        )
        return self._view(principal, self._registry.find(workspace_id, service.id))

    def _keep_baseline(self, workspace_id: str, service_id: str, tools: list[dict[str, Any]]) -> None:
        """The tools as they were before this refresh (or as first listed) stay the approved ones: see
        :mod:`mcpbridge.client.quarantine`. Done before the head moves, so no reader ever pins a changed tool."""
        if self._quarantine is not None:
            self._quarantine.set_baseline(workspace_id, service_id, tools)

    def _note_changes(self, workspace_id: str, service_id: str, tools: list[dict[str, Any]]) -> None:
        for tool in tools:
            if not tool["changed"]:
                continue
            try:
                self._policies.note_definition_change(workspace_id, service_id, tool["name"], tool["definition_hash"])
            except MCPBridgeError as exc:  # the snapshot stands; the broker re-checks the hash on every call
                log.warning("could not mark the changed tool of MCP service %s: %s", service_id, exc.code)

    def _record_failure(
        self, key: Key, service: ExternalService, scope: str, failure: MCPBridgeError, started: str
    ) -> None:
        error = {
            "code": failure.code,
            "message": failure.message[:MAX_ERROR_MESSAGE_CHARS],
            "at": timestamp(self._clock.now()),
        }
        try:
            self._store.update(
                key,
                Update(set={"service_id": service.id, "scope": scope, "last_error": error, "last_attempt_at": started}),
            )
        except MCPBridgeError as exc:
            log.warning("could not record the failed catalog refresh of MCP service %s: %s", service.id, exc.code)
        log.info("catalog refresh of MCP service %s failed: %s", service.id, failure.code)


def _compared(
    previous: dict[str, Any] | None, definitions: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[str], list[str], list[str]]:
    """The pulled tools with their hashes and ``changed`` flags, and the names changed, added and removed since the
    previous snapshot (nothing counts as added in a first one)."""
    before = {t["name"]: t["definition_hash"] for t in (previous or {}).get("tools", [])}
    tools: list[dict[str, Any]] = []
    changed: list[str] = []
    added: list[str] = []
    for definition in definitions:
        digest = definition_hash(definition)
        name = definition["name"]
        old = before.get(name)
        flagged = old is not None and old != digest
        if flagged:
            changed.append(name)
        elif old is None and previous is not None:
            added.append(name)
        tools.append({"definition": definition, "name": name, "definition_hash": digest, "changed": flagged})
    removed = sorted(set(before) - {t["name"] for t in tools})
    return tools, changed, added, removed


def _definition(tool: Tool, host: str) -> dict[str, Any]:
    definition: dict[str, Any] = tool.model_dump(mode="json", by_alias=True, exclude_none=True)
    size = len(json.dumps(definition, separators=(",", ":"), ensure_ascii=False).encode())
    if size > MAX_DEFINITION_BYTES:
        raise UpstreamError(
            f"{host} lists a tool whose definition is larger than {MAX_DEFINITION_BYTES // 1024} KiB; "
            "the catalog was not saved",
            code="upstream_limit_exceeded",
            details={"tool": tool.name[:128], "bytes": size, "limit": MAX_DEFINITION_BYTES},
        )
    return definition


def _resource(resource: Resource) -> dict[str, Any]:
    dumped: dict[str, Any] = resource.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped
