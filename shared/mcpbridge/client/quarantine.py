"""Quarantine of changed tools: each tool of an external service is pinned (its definition's digest and the
definition itself) once approved for use; a tool whose current definition differs from its pin, or that has no pin,
is *held*: not offered to agents or endpoints and refused when called, until an admin approves it again.

Items (one per tool, one per service)::

    WS#<ws> / TOOLPIN#<service_id>#<tool_name>   digest, definition_json, approved_at, approved_by, how
    WS#<ws> / TOOLQUAR#<service_id>              baseline_at, new_tools ("hold" | "approve"), updated_at

* **Baseline.** The first catalog a service shows in a workspace is its baseline: every tool it lists is pinned as
  listed (``how: "baseline"``), in one pass guarded by the service's ``TOOLQUAR`` item (written once, conditionally).
  A catalog refresh sets the baseline from the snapshot it replaces, before the new one is stored, so a refresh that
  changes a tool never makes the change its own baseline. Services that had a catalog before quarantine existed get
  the same treatment on the first read or refresh: their tools stay usable, pinned as they were.
* **Held.** ``changed``: the pin's digest differs from the tool's current ``definition_hash`` (any field: name,
  title, description, schemas, annotations). ``new``: the tool appeared after the baseline and the service's
  ``new_tools`` is ``hold`` (the default); with ``approve``, such a tool is pinned as it first appears.
* **Approval** takes the digest the admin saw (``definition_hash``): approving a definition that changed again in
  between is refused (409), so nobody approves what they have not seen.

Pins are per workspace and service, not per principal: a user's own catalog (OAuth services) whose tool differs from
the pin holds that tool for them too.
"""

from __future__ import annotations

import builtins
import contextlib
import difflib
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from mcpbridge.client.registry import ServiceRegistry, require_reader, require_writer
from mcpbridge.client.snapshots import Snapshots, head_key
from mcpbridge.domain.external_services import scope_for
from mcpbridge.domain.identity import Principal, timestamp
from mcpbridge.domain.items import AttrAbsent, Condition, ItemAbsent, Key, Update
from mcpbridge.errors import ConditionFailed, Conflict, InvalidInput, NotFound
from mcpbridge.paging import delete_every_item, every_item
from mcpbridge.ports import Clock, Store

log = logging.getLogger("mcpbridge.services")

NewTools = Literal["hold", "approve"]
HoldReason = Literal["new", "changed"]
NEW_TOOLS: Final[tuple[NewTools, ...]] = ("hold", "approve")
DEFAULT_NEW_TOOLS: Final[NewTools] = "hold"
DEFINITION_FIELDS: Final = ("name", "title", "description", "inputSchema", "outputSchema", "annotations")


def pin_key(workspace_id: str, service_id: str, tool_name: str) -> Key:
    return Key(f"WS#{workspace_id}", f"TOOLPIN#{service_id}#{tool_name}")


def settings_key(workspace_id: str, service_id: str) -> Key:
    return Key(f"WS#{workspace_id}", f"TOOLQUAR#{service_id}")


@dataclass(frozen=True)
class Hold:
    """Why a tool is held, and what its pin says (None for a tool never approved)."""

    tool_name: str
    reason: HoldReason
    current_hash: str
    pinned_hash: str | None


@dataclass(frozen=True)
class HeldTool:
    service_id: str
    service_name: str
    tool_name: str
    reason: HoldReason
    current_hash: str
    pinned_hash: str | None
    seen_at: str | None
    """When the catalog that shows the held definition was taken."""


@dataclass(frozen=True)
class Difference:
    """A held tool's pinned definition beside its current one."""

    held: HeldTool
    pinned: dict[str, Any] | None
    current: dict[str, Any]
    changed_fields: list[str]
    diff: str
    """A unified diff of the two definitions as indented, key-sorted JSON."""


@dataclass(frozen=True)
class Pin:
    service_id: str
    tool_name: str
    digest: str
    approved_at: str
    approved_by: str
    how: str


@dataclass(frozen=True)
class QuarantineSettings:
    service_id: str
    new_tools: NewTools
    baseline_at: str | None


class PinRows:
    """The pins and quarantine settings of a service as rows: forgotten with their service."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def forget_service(self, workspace_id: str, service_id: str) -> None:
        delete_every_item(self._store, f"WS#{workspace_id}", sk_prefix=f"TOOLPIN#{service_id}#")
        self._store.delete(settings_key(workspace_id, service_id))


class ToolQuarantine:
    def __init__(self, store: Store, clock: Clock, registry: ServiceRegistry, snapshots: Snapshots) -> None:
        self._store = store
        self._clock = clock
        self._registry = registry
        self._snapshots = snapshots

    # ------------------------------------------------------------------------------------------ the catalog's side

    def holds(
        self, workspace_id: str, service_id: str, tools: Sequence[dict[str, Any]], only: str | None = None
    ) -> dict[str, Hold]:
        """The held tools among ``tools`` (snapshot entries: ``name``, ``definition``, ``definition_hash``), by name;
        with ``only``, of that tool alone (its pin read, not every pin of the service: a call's check). A service
        without a baseline gets one from these tools first (nothing held then)."""
        marker = self._store.get(settings_key(workspace_id, service_id))
        if marker is None or "baseline_at" not in marker:
            if not tools:
                return {}
            marker = self.set_baseline(workspace_id, service_id, tools)
        if only is None:
            pins = self._pins(workspace_id, service_id)
        else:
            tools = [tool for tool in tools if tool["name"] == only]
            pin = self._store.get(pin_key(workspace_id, service_id, only)) if tools else None
            pins = {} if pin is None else {only: pin}
        held: dict[str, Hold] = {}
        to_pin: list[dict[str, Any]] = []
        for tool in tools:
            pin = pins.get(tool["name"])
            if pin is None:
                if marker.get("new_tools", DEFAULT_NEW_TOOLS) == "approve":
                    to_pin.append(tool)
                    continue
                held[tool["name"]] = Hold(tool["name"], "new", tool["definition_hash"], None)
            elif pin["digest"] != tool["definition_hash"]:
                held[tool["name"]] = Hold(tool["name"], "changed", tool["definition_hash"], str(pin["digest"]))
        for tool in to_pin:  # the service lets new tools through: each is pinned as it first appears
            self._pin(workspace_id, service_id, tool, by="service:new_tools=approve", how="new_tools", only_new=True)
        return held

    def set_baseline(self, workspace_id: str, service_id: str, tools: Iterable[dict[str, Any]]) -> dict[str, Any]:
        """Pin ``tools`` as the service's baseline unless it has one (see the module docstring); the settings item."""
        key = settings_key(workspace_id, service_id)
        marker = self._store.get(key)
        if marker is not None and "baseline_at" in marker:
            return marker
        for tool in tools:
            self._pin(workspace_id, service_id, tool, by="baseline", how="baseline", only_new=True)
        now = timestamp(self._clock.now())
        try:
            return self._store.update(
                key,
                Update(set={"baseline_at": now, "service_id": service_id, "workspace_id": workspace_id}),
                condition=Condition("quarantine_baseline_unset", AttrAbsent("baseline_at")),
            )
        except ConditionFailed:
            return self._store.get(key) or {}

    def pinned_how(self, workspace_id: str, service_id: str, tool_name: str) -> str | None:
        """How the tool's pin was made (``baseline``, ``new_tools``, ``approved``), or None without one."""
        item = self._store.get(pin_key(workspace_id, service_id, tool_name))
        return None if item is None else str(item.get("how"))

    # ------------------------------------------------------------------------------------------ the admins' side

    def settings(self, principal: Principal, service_id: str) -> QuarantineSettings:
        require_reader(principal)
        service = self._registry.get(principal, service_id)
        item = self._store.get(settings_key(principal.workspace_id, service.id)) or {}
        return QuarantineSettings(service.id, item.get("new_tools", DEFAULT_NEW_TOOLS), item.get("baseline_at"))

    def set_new_tools(self, principal: Principal, service_id: str, new_tools: object) -> QuarantineSettings:
        """Whether tools appearing after the baseline start held (``hold``) or are pinned as they appear."""
        require_writer(principal)
        if new_tools not in NEW_TOOLS:
            raise InvalidInput('new_tools must be "hold" or "approve"', code="invalid_new_tools")
        service = self._registry.get(principal, service_id)
        self._store.update(
            settings_key(principal.workspace_id, service.id),
            Update(
                set={
                    "new_tools": new_tools,
                    "service_id": service.id,
                    "workspace_id": principal.workspace_id,
                    "updated_at": timestamp(self._clock.now()),
                }
            ),
        )
        log.info("new tools of MCP service %s: %s", service.id, new_tools)
        return self.settings(principal, service.id)

    def held(self, principal: Principal, service_id: str | None = None) -> builtins.list[HeldTool]:
        """The held tools of one service, or of every service of the workspace, as the admin's catalog shows them."""
        require_reader(principal)
        services = (
            [self._registry.get(principal, service_id)] if service_id is not None else self._registry.list(principal)
        )
        found: builtins.list[HeldTool] = []
        for service in services:
            snapshot = self._snapshot(principal, service.id, scope_for(service, principal))
            if snapshot is None:
                continue
            tools = _unique(snapshot)
            for hold in self.holds(principal.workspace_id, service.id, tools).values():
                found.append(
                    HeldTool(
                        service.id,
                        service.name,
                        hold.tool_name,
                        hold.reason,
                        hold.current_hash,
                        hold.pinned_hash,
                        snapshot.get("synced_at"),
                    )
                )
        return found

    def difference(self, principal: Principal, service_id: str, tool_name: str) -> Difference:
        """A held tool's pinned and current definitions and their difference (404 ``tool_not_held`` otherwise)."""
        require_reader(principal)
        held, current = self._held_tool(principal, service_id, tool_name)
        pin = self._store.get(pin_key(principal.workspace_id, held.service_id, tool_name))
        pinned = json.loads(pin["definition_json"]) if pin is not None else None
        fields = [f for f in DEFINITION_FIELDS if (pinned or {}).get(f) != current.get(f)]
        extra = sorted(set(current) | set(pinned or {}))
        fields += [f for f in extra if f not in DEFINITION_FIELDS and (pinned or {}).get(f) != current.get(f)]
        diff = "".join(
            difflib.unified_diff(
                _lines(pinned) if pinned is not None else [],
                _lines(current),
                fromfile="approved" if pinned is not None else "(never approved)",
                tofile="current",
            )
        )
        return Difference(held, pinned, current, fields, diff)

    def approve(self, principal: Principal, service_id: str, tool_name: str, definition_hash: object) -> Pin:
        """Pin the tool's current definition, if it is the one the admin saw (``definition_hash``; 409
        ``definition_changed`` otherwise, 404 ``tool_not_held`` for a tool that is not held)."""
        require_writer(principal)
        if not isinstance(definition_hash, str) or len(definition_hash) != 64:
            raise InvalidInput(
                "definition_hash is required: the current_hash of the difference you reviewed",
                code="invalid_definition_hash",
            )
        held, current = self._held_tool(principal, service_id, tool_name)
        if held.current_hash != definition_hash:
            raise Conflict(
                "the tool's definition changed again since that difference: review the new one",
                code="definition_changed",
                details={
                    "service_id": held.service_id,
                    "tool_name": _shown(tool_name),
                    "current_hash": held.current_hash,
                },
            )
        tool = {"name": tool_name, "definition": current, "definition_hash": held.current_hash}
        pin = self._pin(principal.workspace_id, held.service_id, tool, by=principal.user_id, how="approved")
        log.info("tool %s of MCP service %s approved again", _shown(tool_name), held.service_id)
        return pin

    # ------------------------------------------------------------------------------------------ helpers

    def _held_tool(self, principal: Principal, service_id: str, tool_name: str) -> tuple[HeldTool, dict[str, Any]]:
        if not isinstance(tool_name, str) or not tool_name or len(tool_name) > 256:
            raise InvalidInput("a tool name is 1 to 256 characters", code="invalid_tool_name")
        service = self._registry.get(principal, service_id)
        snapshot = self._snapshot(principal, service.id, scope_for(service, principal))
        tools = _unique(snapshot)
        hold = self.holds(principal.workspace_id, service.id, tools).get(tool_name)
        if hold is None or snapshot is None:
            raise NotFound(
                f"the tool {_shown(tool_name)} of {service.name} is not held",
                code="tool_not_held",
                details={"service_id": service.id, "tool_name": _shown(tool_name)},
            )
        current = next(t["definition"] for t in tools if t["name"] == tool_name)
        held = HeldTool(
            service.id,
            service.name,
            tool_name,
            hold.reason,
            hold.current_hash,
            hold.pinned_hash,
            snapshot.get("synced_at"),
        )
        return held, current

    def _snapshot(self, principal: Principal, service_id: str, scope: str) -> dict[str, Any] | None:
        return self._snapshots.load(self._store.get(head_key(principal.workspace_id, service_id, scope)))

    def _pins(self, workspace_id: str, service_id: str) -> dict[str, dict[str, Any]]:
        items = every_item(self._store, f"WS#{workspace_id}", sk_prefix=f"TOOLPIN#{service_id}#")
        return {str(item["tool_name"]): item for item in items}

    def _pin(
        self, workspace_id: str, service_id: str, tool: dict[str, Any], *, by: str, how: str, only_new: bool = False
    ) -> Pin:
        now = timestamp(self._clock.now())
        item = {
            **pin_key(workspace_id, service_id, tool["name"]).as_dict(),
            "service_id": service_id,
            "tool_name": tool["name"],
            "digest": tool["definition_hash"],
            "definition_json": json.dumps(tool["definition"], sort_keys=True, ensure_ascii=False),
            "approved_at": now,
            "approved_by": by,
            "how": how,
        }
        with contextlib.suppress(ConditionFailed):  # pinned meanwhile (another request's baseline): that pin stands
            self._store.put(item, condition=Condition("tool_not_pinned", ItemAbsent()) if only_new else None)
        return Pin(service_id, tool["name"], tool["definition_hash"], now, by, how)


def _unique(snapshot: dict[str, Any] | None) -> list[dict[str, Any]]:
    seen: set[str] = set()
    tools = []
    for tool in (snapshot or {}).get("tools", []):
        if tool["name"] not in seen:
            seen.add(tool["name"])
            tools.append(tool)
    return tools


def _lines(definition: dict[str, Any]) -> list[str]:
    return [line + "\n" for line in json.dumps(definition, sort_keys=True, indent=2, ensure_ascii=False).splitlines()]


def _shown(value: str) -> str:
    return value if len(value) <= 64 else value[:64] + "…"
