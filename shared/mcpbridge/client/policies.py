"""Per-tool policies of external MCP services: ``enabled`` and ``require_approval``, set by workspace admins.

Items: ``WS#<ws> / SVCTOOL#<service_id>#<tool_name>``. A policy must name a tool the service's catalog lists (an
approval set on ``Echo`` for the tool ``echo`` would protect nothing): an unknown name is refused with the near
matches, unless the admin asks to pre-register it (``pre_register``) for a tool the catalog does not list yet. Once
stored, a policy is independent of the catalog and survives every refresh. A missing row, or a missing field of a
row, means enabled and no approval. Policies of builtin services are per workspace too.
"""

from __future__ import annotations

import builtins
import difflib
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass

from mcpbridge.client.registry import ServiceRegistry, require_reader, require_writer
from mcpbridge.client.snapshots import Snapshots
from mcpbridge.domain.external_services import ExternalService, scope_for
from mcpbridge.domain.identity import Principal, timestamp
from mcpbridge.domain.items import Condition, Item, Key, Update
from mcpbridge.errors import ConditionFailed, InvalidInput, NotFound
from mcpbridge.paging import delete_every_item, every_item
from mcpbridge.ports import Clock, Store

log = logging.getLogger("mcpbridge.services")

MAX_TOOL_NAME_CHARS = 256
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def policy_key(workspace_id: str, service_id: str, tool_name: str) -> Key:
    return Key(f"WS#{workspace_id}", f"SVCTOOL#{service_id}#{tool_name}")


@dataclass(frozen=True)
class ToolPolicy:
    service_id: str
    tool_name: str
    enabled: bool = True
    require_approval: bool = False
    updated_at: str | None = None
    """None: no row (the defaults)."""
    version: int = 0
    definition_hash: str | None = None
    """For a tool requiring approval whose definition changed: the definition approvals must now be given for."""
    definition_changed_at: str | None = None


class ServicePolicies:
    """The stored policies of one service, by tool; a tool without a row gets the defaults (enabled, no approval)."""

    def __init__(self, service_id: str, policies: Iterable[ToolPolicy]) -> None:
        self._service_id = service_id
        self._by_tool = {p.tool_name: p for p in policies}

    def of(self, tool_name: str) -> ToolPolicy:
        return self._by_tool.get(tool_name) or ToolPolicy(self._service_id, tool_name)

    def disabled(self) -> set[str]:
        return {name for name, policy in self._by_tool.items() if not policy.enabled}


class PolicyRows:
    """The tool policies of a service as rows: forgotten with their service (see ``ServiceRegistry.delete``)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def forget_service(self, workspace_id: str, service_id: str) -> None:
        delete_every_item(self._store, f"WS#{workspace_id}", sk_prefix=f"SVCTOOL#{service_id}#")


class ToolPolicies:
    """Read and change per-tool policies; ``policy_for`` is what the call broker consults."""

    def __init__(self, store: Store, clock: Clock, registry: ServiceRegistry, snapshots: Snapshots) -> None:
        self._store = store
        self._clock = clock
        self._registry = registry
        self._snapshots = snapshots

    def list(self, principal: Principal, service_id: str) -> builtins.list[ToolPolicy]:
        """The policies stored for a service of the workspace (or a builtin one), by tool name."""
        require_reader(principal)
        service = self._registry.get(principal, service_id)
        return self._stored(principal.workspace_id, service.id)

    def of_service(self, principal: Principal, service: ExternalService) -> ServicePolicies:
        """Every tool's policy for a service the caller has just read, as the catalog and the agents show them."""
        require_reader(principal)
        return ServicePolicies(service.id, self._stored(principal.workspace_id, service.id))

    def _stored(self, workspace_id: str, service_id: str) -> builtins.list[ToolPolicy]:
        items = every_item(self._store, f"WS#{workspace_id}", sk_prefix=f"SVCTOOL#{service_id}#")
        return [_policy_of(item) for item in items]

    def set(
        self,
        principal: Principal,
        service_id: str,
        tool_name: str,
        *,
        enabled: bool | None = None,
        require_approval: bool | None = None,
        pre_register: bool = False,
    ) -> ToolPolicy:
        """Change the given fields (at least one; 400 ``nothing_to_update``); the others keep their value.

        The tool must be one the service's catalog lists (404 ``tool_not_found`` with near matches), or an
        existing policy's, unless ``pre_register``: then the name is stored as given."""
        require_writer(principal)
        name = clean_tool_name(tool_name)
        changes: dict[str, bool] = {}
        for field_name, value in (("enabled", enabled), ("require_approval", require_approval)):
            if value is None:
                continue
            if not isinstance(value, bool):
                raise InvalidInput(f"{field_name} must be true or false", code="invalid_policy")
            changes[field_name] = value
        if not changes:
            raise InvalidInput("give enabled and/or require_approval", code="nothing_to_update")
        service = self._registry.get(principal, service_id)
        if not pre_register:
            self._require_listed(principal, service.id, scope_for(service, principal), name)
        update = Update(
            set={
                **changes,
                "service_id": service.id,
                "tool_name": name,
                "workspace_id": principal.workspace_id,
                "updated_at": timestamp(self._clock.now()),
            },
            add={"version": 1},
        )
        item = self._store.update(policy_key(principal.workspace_id, service.id, name), update)
        log.info("set tool policy of %s on MCP service %s (%s)", _shown(name), service.id, ", ".join(sorted(changes)))
        return _policy_of(item)

    def _require_listed(self, principal: Principal, service_id: str, scope: str, name: str) -> None:
        listed = self._snapshots.tool_names(principal.workspace_id, service_id, scope)
        if listed is not None and name in listed:
            return
        if self._store.get(policy_key(principal.workspace_id, service_id, name)) is not None:
            return  # pre-registered earlier: changing it is fine
        if listed is None:
            raise NotFound(
                f"the service has no tool catalog yet, so the tool {_shown(name)} cannot be checked: refresh its "
                'catalog (POST .../metadata/refresh), or send "pre_register": true to store the policy anyway',
                code="tool_not_found",
                details={"near_matches": []},
            )
        near = _near_matches(name, listed)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        raise NotFound(
            f"the service's catalog lists no tool named {_shown(name)}{hint} (tool names are case-sensitive; send "
            '"pre_register": true to store a policy for a tool the catalog does not list yet)',
            code="tool_not_found",
            details={"near_matches": near},
        )

    def note_definition_change(self, workspace_id: str, service_id: str, tool_name: str, digest: str) -> bool:
        """A catalog refresh saw a new definition of a tool. When the tool requires approval, record the new hash
        (approvals given for the earlier definition no longer count); otherwise change nothing. True if recorded."""
        try:
            self._store.update(
                policy_key(workspace_id, service_id, tool_name),
                Update(
                    set={"definition_hash": digest, "definition_changed_at": timestamp(self._clock.now())},
                    add={"version": 1},
                ),
                condition=Condition.equals("approval_required", "require_approval", True),
            )
        except ConditionFailed:
            return False
        log.warning(
            "tool %s of MCP service %s changed its definition; it requires approval again",
            _shown(tool_name),
            service_id,
        )
        return True

    def policy_for(self, workspace_id: str, service_id: str, tool_name: str) -> ToolPolicy:
        """The policy the broker applies. A store failure propagates: callers treat it as approval required."""
        item = self._store.get(policy_key(workspace_id, service_id, tool_name))
        return ToolPolicy(service_id, tool_name) if item is None else _policy_of(item)


def clean_tool_name(tool_name: str) -> str:
    if (
        not isinstance(tool_name, str)
        or not tool_name
        or len(tool_name) > MAX_TOOL_NAME_CHARS
        or _CONTROL.search(tool_name)
    ):
        raise InvalidInput(
            f"a tool name is 1 to {MAX_TOOL_NAME_CHARS} characters without control characters",
            code="invalid_tool_name",
        )
    return tool_name


def _near_matches(name: str, listed: frozenset[str], most: int = 5) -> list[str]:
    """Names that differ only in case first, then the closest spellings."""
    same_case = sorted(t for t in listed if t.casefold() == name.casefold())
    close = difflib.get_close_matches(name, sorted(listed), n=most, cutoff=0.6)
    return list(dict.fromkeys([*same_case, *close]))[:most]


def _shown(value: str) -> str:
    return value if len(value) <= 64 else value[:64] + "…"


def _policy_of(item: Item) -> ToolPolicy:
    return ToolPolicy(
        service_id=item["service_id"],
        tool_name=item["tool_name"],
        enabled=bool(item.get("enabled", True)),
        require_approval=bool(item.get("require_approval", False)),
        updated_at=item.get("updated_at"),
        version=int(item.get("version", 0)),
        definition_hash=item.get("definition_hash"),
        definition_changed_at=item.get("definition_changed_at"),
    )
