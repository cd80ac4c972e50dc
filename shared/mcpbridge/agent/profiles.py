"""Agent profiles: which external MCP services an agent may use, and how long its calls may wait for a person.

Items (single table):

    WS#<ws> / AGENT#<id>     a profile of the workspace

Fields: ``name``, ``description``, ``mcp_selection_mode`` (``all``: every service of the workspace and every builtin
one; ``selected``: the ids in ``mcp_services``; ``none``: no external tool), ``mcp_services`` (ids of services of
the workspace or builtin ones, checked when written; kept in every mode so switching back restores the list),
``approval_timeout_seconds`` and ``oauth_wait_timeout_seconds`` (30 to 86 400, default 600: WeKnora's 10 minutes).

An agent that names no profile gets :func:`default_profile`'s rules (all services, default timeouts); that profile is
never stored. Managing profiles (list, get, create, update, delete) needs a reader, for writes an admin, of external
services (API keys need ``manage_services``: a profile decides which external services an agent reaches, the same
authority as registering them). :meth:`AgentProfiles.resolve`, what an agent's own requests go through, needs
``call_tools`` instead (:func:`require_agent`). Every write is conditional on the version read;
``expected_version`` turns a concurrent change into a 409 instead of a merge.
A selected service deleted later simply stops being offered (the catalog skips ids that no longer resolve).
"""

from __future__ import annotations

import builtins
import enum
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final, Literal

from mcpbridge.client.registry import ServiceRegistry, require_reader, require_writer
from mcpbridge.domain.identity import AGENT_CAPABILITY, Principal, is_approver, timestamp
from mcpbridge.domain.ids import is_id, new_id
from mcpbridge.domain.items import Condition, Item, Key, Update
from mcpbridge.domain.names import clean_description, clean_name
from mcpbridge.errors import ConditionFailed, Conflict, Forbidden, InvalidInput, NotFound
from mcpbridge.optimistic import refusing_when, update_optimistically
from mcpbridge.paging import every_item
from mcpbridge.ports import Clock, Store

log = logging.getLogger("mcpbridge.agents")

ID_PREFIX = "agt"
SelectionMode = Literal["all", "selected", "none"]
SELECTION_MODES: Final[tuple[SelectionMode, ...]] = ("all", "selected", "none")
DEFAULT_TIMEOUT_SECONDS: Final = 600
MIN_TIMEOUT_SECONDS: Final = 30
MAX_TIMEOUT_SECONDS: Final = 86_400
MAX_SELECTED_SERVICES: Final = 100
_WRITE_ATTEMPTS = 5


class Unset(enum.Enum):
    """Marks an ``update`` argument that was not given."""

    UNSET = "unset"


UNSET: Final = Unset.UNSET


def require_agent(principal: Principal) -> None:
    """What an agent's requests need (discover and call external tools): ``call_tools`` (unrestricted keys have it),
    any role."""
    if not principal.scope.allows(AGENT_CAPABILITY):
        raise Forbidden(f"this API key lacks the {AGENT_CAPABILITY} capability", code="capability_missing")


def require_agent_or_approver(principal: Principal) -> None:
    """What reading and resolving paused calls needs: ``call_tools`` (one's own calls), or an admin key with
    ``approve_calls`` (every call of the workspace)."""
    if principal.scope.allows(AGENT_CAPABILITY) or is_approver(principal):
        return
    raise Forbidden(
        f"this API key lacks the {AGENT_CAPABILITY} (or, with an admin key, approve_calls) capability",
        code="capability_missing",
    )


def agent_key(workspace_id: str, agent_id: str) -> Key:
    return Key(f"WS#{workspace_id}", f"AGENT#{agent_id}")


@dataclass(frozen=True)
class AgentProfile:
    id: str | None
    """None for the default profile (not stored)."""
    workspace_id: str
    name: str
    description: str = ""
    mcp_selection_mode: SelectionMode = "all"
    mcp_services: tuple[str, ...] = ()
    approval_timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS
    oauth_wait_timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS
    created_at: str | None = None
    updated_at: str | None = None
    version: int = 0

    @property
    def is_default(self) -> bool:
        return self.id is None

    def selects(self, service_id: str) -> bool:
        """Whether the agent may use this service (its existence and state are checked elsewhere)."""
        if self.mcp_selection_mode == "all":
            return True
        if self.mcp_selection_mode == "selected":
            return service_id in self.mcp_services
        return False


DEFAULT_PROFILE_NAME: Final = "default"


def default_profile(workspace_id: str) -> AgentProfile:
    """The rules of an agent that names no profile: every service, default timeouts."""
    return AgentProfile(id=None, workspace_id=workspace_id, name=DEFAULT_PROFILE_NAME)


class AgentProfiles:
    """The agent profiles of a workspace (REST management) and :meth:`resolve` for the agent-facing routes."""

    def __init__(self, store: Store, clock: Clock, registry: ServiceRegistry) -> None:
        self._store = store
        self._clock = clock
        self._registry = registry

    # ------------------------------------------------------------------------------------------ reading

    def list(self, principal: Principal) -> builtins.list[AgentProfile]:
        """The stored profiles of the workspace, oldest first."""
        require_reader(principal)
        return [
            _profile_of(item) for item in every_item(self._store, f"WS#{principal.workspace_id}", sk_prefix="AGENT#")
        ]

    def get(self, principal: Principal, agent_id: str) -> AgentProfile:
        require_reader(principal)
        return _profile_of(self._item(principal.workspace_id, agent_id))

    def find(self, workspace_id: str, agent_id: str) -> AgentProfile | None:
        """A stored profile by id, for what its workspace already configured to use it (an endpoint's default
        agent); None when it is gone."""
        item = self._store.get(agent_key(workspace_id, agent_id))
        return None if item is None else _profile_of(item)

    def resolve(self, principal: Principal, agent_id: str | None) -> AgentProfile:
        """The profile an agent call runs under: the stored one (404 ``agent_not_found``), or the default profile
        when ``agent_id`` is None or blank."""
        require_agent(principal)
        if agent_id is None or not agent_id.strip():
            return default_profile(principal.workspace_id)
        return _profile_of(self._item(principal.workspace_id, agent_id.strip()))

    # ------------------------------------------------------------------------------------------ writing

    def create(
        self,
        principal: Principal,
        *,
        name: str,
        description: str = "",
        mcp_selection_mode: str = "all",
        mcp_services: Iterable[str] = (),
        approval_timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS,
        oauth_wait_timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS,
    ) -> AgentProfile:
        require_writer(principal)
        now = timestamp(self._clock.now())
        profile = AgentProfile(
            id=new_id(ID_PREFIX),
            workspace_id=principal.workspace_id,
            name=_clean_name(name),
            description=_clean_description(description),
            mcp_selection_mode=_clean_mode(mcp_selection_mode),
            mcp_services=self._clean_services(principal.workspace_id, mcp_services),
            approval_timeout_seconds=_clean_timeout(approval_timeout_seconds, "approval_timeout_seconds"),
            oauth_wait_timeout_seconds=_clean_timeout(oauth_wait_timeout_seconds, "oauth_wait_timeout_seconds"),
            created_at=now,
            updated_at=now,
            version=1,
        )
        item = _item_of(profile)
        item["created_by"] = principal.user_id
        self._store.put(item, condition=Condition.absent("agent_new"))
        log.info("created agent profile %s in workspace %s", profile.id, profile.workspace_id)
        return profile

    def update(
        self,
        principal: Principal,
        agent_id: str,
        *,
        name: str | Unset = UNSET,
        description: str | Unset = UNSET,
        mcp_selection_mode: str | Unset = UNSET,
        mcp_services: Iterable[str] | Unset = UNSET,
        approval_timeout_seconds: int | Unset = UNSET,
        oauth_wait_timeout_seconds: int | Unset = UNSET,
        expected_version: int | None = None,
    ) -> AgentProfile:
        """Change the given fields (validated as on create; all of them before anything is written).

        ``expected_version``: refuse (409 ``agent_version_conflict``) unless the profile is still at that version;
        without it, a concurrent change is merged by re-reading and re-applying these fields."""
        require_writer(principal)
        changes: dict[str, Any] = {}
        if not isinstance(name, Unset):
            changes["name"] = _clean_name(name)
        if not isinstance(description, Unset):
            changes["description"] = _clean_description(description)
        if not isinstance(mcp_selection_mode, Unset):
            changes["mcp_selection_mode"] = _clean_mode(mcp_selection_mode)
        if not isinstance(approval_timeout_seconds, Unset):
            changes["approval_timeout_seconds"] = _clean_timeout(approval_timeout_seconds, "approval_timeout_seconds")
        if not isinstance(oauth_wait_timeout_seconds, Unset):
            changes["oauth_wait_timeout_seconds"] = _clean_timeout(
                oauth_wait_timeout_seconds, "oauth_wait_timeout_seconds"
            )
        if not isinstance(mcp_services, Unset):
            changes["mcp_services"] = self._clean_services(principal.workspace_id, mcp_services)

        def attempt() -> AgentProfile:
            current = _profile_of(self._item(principal.workspace_id, agent_id))
            if expected_version is not None and current.version != expected_version:
                raise _version_conflict()
            effective = {field: value for field, value in changes.items() if getattr(current, field) != value}
            if not effective:
                return current
            sets = {field: list(value) if field == "mcp_services" else value for field, value in effective.items()}
            sets |= {"updated_at": timestamp(self._clock.now()), "version": current.version + 1}
            with refusing_when(gone=_not_found, pinned=_version_conflict if expected_version is not None else None):
                item = self._store.update(
                    agent_key(principal.workspace_id, agent_id), Update(set=sets), condition=_unchanged(current.version)
                )
            log.info("updated agent profile %s (%s)", agent_id, ", ".join(sorted(effective)))
            return _profile_of(item)

        busy = Conflict("the agent profile kept changing during the update; retry", code="agent_busy")
        return update_optimistically(attempt, busy=lambda: busy)

    def delete(self, principal: Principal, agent_id: str, *, expected_version: int | None = None) -> None:
        require_writer(principal)
        if not is_id(agent_id, ID_PREFIX):
            raise _not_found()
        condition = (
            Condition.exists("agent_exists")
            if expected_version is None
            else Condition.equals("agent_unchanged", "version", expected_version)
        )
        try:
            self._store.delete(agent_key(principal.workspace_id, agent_id), condition=condition)
        except ConditionFailed as lost:
            if lost.current is None:
                raise _not_found() from None
            raise _version_conflict() from None
        log.info("deleted agent profile %s", agent_id)

    # ------------------------------------------------------------------------------------------ helpers

    def _item(self, workspace_id: str, agent_id: str) -> Item:
        item = self._store.get(agent_key(workspace_id, agent_id)) if is_id(agent_id, ID_PREFIX) else None
        if item is None:
            raise _not_found()
        return item

    def _clean_services(self, workspace_id: str, service_ids: Iterable[str]) -> tuple[str, ...]:
        """Ids of services of the workspace or builtin ones, without repeats, in the order given."""
        if isinstance(service_ids, str) or not isinstance(service_ids, Iterable):
            raise InvalidInput("mcp_services must be a list of service ids", code="invalid_mcp_services")
        cleaned: builtins.list[str] = []
        for service_id in service_ids:
            if not isinstance(service_id, str):
                raise InvalidInput("mcp_services must be a list of service ids", code="invalid_mcp_services")
            value = service_id.strip()
            if value and value not in cleaned:
                cleaned.append(value)
        if len(cleaned) > MAX_SELECTED_SERVICES:
            raise InvalidInput(
                f"mcp_services lists at most {MAX_SELECTED_SERVICES} services", code="invalid_mcp_services"
            )
        for service_id in cleaned:
            try:
                self._registry.find(workspace_id, service_id)
            except NotFound:
                raise InvalidInput(
                    f"mcp_services names an unknown MCP service: {_shown(service_id)}",
                    code="unknown_service",
                    details={"service_id": _shown(service_id)},
                ) from None
        return tuple(cleaned)


# ---------------------------------------------------------------------------------------------------- validation


def _clean_name(name: Any) -> str:
    if not isinstance(name, str):
        raise InvalidInput("name must be a string", code="invalid_name")
    return clean_name(name)


def _clean_description(description: Any) -> str:
    if not isinstance(description, str):
        raise InvalidInput("description must be a string", code="invalid_description")
    return clean_description(description)


def _clean_mode(mode: Any) -> SelectionMode:
    for known in SELECTION_MODES:
        if mode == known:
            return known
    raise InvalidInput(
        "mcp_selection_mode must be all, selected or none",
        code="invalid_selection_mode",
        details={"allowed": list(SELECTION_MODES)},
    )


def _clean_timeout(value: Any, field_name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not MIN_TIMEOUT_SECONDS <= value <= MAX_TIMEOUT_SECONDS:
        raise InvalidInput(
            f"{field_name} must be an integer from {MIN_TIMEOUT_SECONDS} to {MAX_TIMEOUT_SECONDS} seconds",
            code="invalid_timeout",
            details={"field": field_name, "min": MIN_TIMEOUT_SECONDS, "max": MAX_TIMEOUT_SECONDS},
        )
    return value


def _shown(value: str) -> str:
    return value if len(value) <= 64 else value[:64] + "…"


# ---------------------------------------------------------------------------------------------------- errors


def _not_found() -> NotFound:
    return NotFound("agent not found", code="agent_not_found")


def _version_conflict() -> Conflict:
    return Conflict("the agent profile was changed by someone else; reload it and retry", code="agent_version_conflict")


# ---------------------------------------------------------------------------------------------------- items


def _unchanged(version: int) -> Condition:
    return Condition.equals("agent_unchanged", "version", version)


def _item_of(profile: AgentProfile) -> Item:
    assert profile.id is not None  # the default profile is never stored
    return {
        **agent_key(profile.workspace_id, profile.id).as_dict(),
        "id": profile.id,
        "workspace_id": profile.workspace_id,
        "name": profile.name,
        "description": profile.description,
        "mcp_selection_mode": profile.mcp_selection_mode,
        "mcp_services": list(profile.mcp_services),
        "approval_timeout_seconds": profile.approval_timeout_seconds,
        "oauth_wait_timeout_seconds": profile.oauth_wait_timeout_seconds,
        "created_at": profile.created_at,
        "updated_at": profile.updated_at,
        "version": profile.version,
    }


def _profile_of(item: Item) -> AgentProfile:
    mode = item.get("mcp_selection_mode")
    return AgentProfile(
        id=item["id"],
        workspace_id=item["workspace_id"],
        name=item["name"],
        description=item.get("description", ""),
        mcp_selection_mode=mode if mode in SELECTION_MODES else "none",  # an unreadable mode grants nothing
        mcp_services=tuple(str(s) for s in item.get("mcp_services") or ()),
        approval_timeout_seconds=int(item.get("approval_timeout_seconds", DEFAULT_TIMEOUT_SECONDS)),
        oauth_wait_timeout_seconds=int(item.get("oauth_wait_timeout_seconds", DEFAULT_TIMEOUT_SECONDS)),
        created_at=item.get("created_at"),
        updated_at=item.get("updated_at"),
        version=int(item.get("version", 1)),
    )
