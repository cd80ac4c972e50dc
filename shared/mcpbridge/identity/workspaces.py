"""Workspaces as the platform's operator manages them: create (with a first admin user and key), list, get, rename,
disable, enable, and delete (marked at once, purged by a background job: :mod:`mcpbridge.tenancy.workspace_purge`).

**Who the operator is.** The platform's own workspace is the one ``init`` created (the ``INSTALL`` item names it).
An admin key *of that workspace* whose scope allows ``manage_workspaces`` (its unrestricted admin keys do) is a
platform admin; so is the ``mcpbridge`` command on the machine or account that holds the data (:data:`OPERATOR`). A
key of any other workspace is never one, whatever its capabilities: a workspace's admins manage their own users and
keys, never another workspace. The platform's own workspace cannot be disabled or deleted (409
``platform_workspace``): the operators' keys live there.

Disabling a workspace, or marking it ``deleting``, refuses each of its API keys and endpoint tokens from the very
next request (both read the workspace item on every request).
"""

from __future__ import annotations

import builtins
import logging
from dataclasses import dataclass

from mcpbridge.domain.identity import OPERATOR, Operator, Principal, Workspace, WorkspaceStatus, timestamp
from mcpbridge.domain.ids import is_id, new_id
from mcpbridge.domain.items import AllOf, Compare, Condition, ItemExists, Update
from mcpbridge.domain.names import clean_name
from mcpbridge.errors import ConditionFailed, Conflict, Forbidden, InvalidInput, NotFound
from mcpbridge.identity.accounts import NewApiKey, first_admin
from mcpbridge.identity.records import INSTALL_KEY, WORKSPACES_PARTITION, workspace_key, workspace_of
from mcpbridge.ports import Clock, Jobs, Store

log = logging.getLogger("mcpbridge.identity")

ID_PREFIX = "ws"
PURGE_JOB = "purge_workspace"
"""The background job that removes a ``deleting`` workspace and everything it holds."""

Authority = Principal | Operator
__all__ = ["OPERATOR", "PURGE_JOB", "Authority", "CreatedWorkspace", "Workspaces"]


@dataclass(frozen=True)
class CreatedWorkspace:
    """A new workspace, its first user (its admin) and that user's unrestricted admin key (shown once)."""

    workspace: Workspace
    admin_user_id: str
    admin_key: NewApiKey


class Workspaces:
    def __init__(self, store: Store, clock: Clock, jobs: Jobs) -> None:
        self._store = store
        self._clock = clock
        self._jobs = jobs

    def require_operator(self, by: Authority) -> None:
        """403 ``platform_admin_required`` unless ``by`` is a platform admin (see the module docstring)."""
        if isinstance(by, Operator):
            return
        install = self._store.get(INSTALL_KEY)
        own = install is not None and by.workspace_id == install["workspace_id"]
        if not (own and by.is_admin and by.scope.allows("manage_workspaces")):
            raise Forbidden(
                "managing workspaces needs an admin key of the platform's own workspace with manage_workspaces",
                code="platform_admin_required",
            )

    def create(self, by: Authority, *, name: str, admin_name: str = "admin") -> CreatedWorkspace:
        self.require_operator(by)
        name, admin_name = clean_name(name), clean_name(admin_name)
        now = timestamp(self._clock.now())
        workspace_id = new_id(ID_PREFIX)
        first = first_admin(workspace_id, name, admin_name, f"{admin_name} (created with the workspace)", now)
        self._store.transact(first.ops)
        log.info("created workspace %s with admin API key %s", workspace_id, first.key.record.id)
        return CreatedWorkspace(self.find(workspace_id), first.user_id, first.key)

    def list(self, by: Authority, *, limit: int = 50, cursor: str | None = None) -> tuple[list[Workspace], str | None]:
        self.require_operator(by)
        page = self._store.query(WORKSPACES_PARTITION, index="gsi1", limit=limit, cursor=cursor)
        # The index may lag a change: each workspace is read again, consistently (a purged one is left out).
        found = [self._store.get(workspace_key(item["id"])) for item in page.items]
        return [workspace_of(item) for item in found if item is not None], page.cursor

    def get(self, by: Authority, workspace_id: str) -> Workspace:
        self.require_operator(by)
        return self.find(workspace_id)

    def find(self, workspace_id: str) -> Workspace:
        item = self._store.get(workspace_key(workspace_id)) if is_id(workspace_id, ID_PREFIX) else None
        if item is None:
            raise NotFound("no such workspace", code="workspace_not_found")
        return workspace_of(item)

    def find_for_sign_in(self, id_or_name: str) -> Workspace:
        """The workspace a person signing in names, by id or by name (a name several workspaces have is refused:
        400 ``workspace_ambiguous``, use the id). 404 ``workspace_not_found`` when none is."""
        wanted = id_or_name.strip()
        if is_id(wanted, ID_PREFIX):
            return self.find(wanted)
        named: builtins.list[Workspace] = []
        cursor: str | None = None
        while True:
            page = self._store.query(WORKSPACES_PARTITION, index="gsi1", limit=100, cursor=cursor)
            named += [
                workspace_of(item)
                for item in (self._store.get(workspace_key(found["id"])) for found in page.items)
                if item is not None and str(item.get("name") or "").casefold() == wanted.casefold()
            ]
            cursor = page.cursor
            if cursor is None:
                break
        if not named:
            raise NotFound("no such workspace", code="workspace_not_found")
        if len(named) > 1:
            raise InvalidInput("several workspaces have this name: use the workspace's id", code="workspace_ambiguous")
        return named[0]

    def rename(self, by: Authority, workspace_id: str, *, name: str) -> Workspace:
        self.require_operator(by)
        name = clean_name(name)
        self.find(workspace_id)
        live = Condition("workspace_not_deleting", AllOf((ItemExists(), Compare("status", "<>", "deleting"))))
        changes = Update(set={"name": name, "updated_at": timestamp(self._clock.now())})
        try:
            self._store.update(workspace_key(workspace_id), changes, condition=live)
        except ConditionFailed as lost:
            raise _deleting() if lost.current is not None else _not_found() from None
        return self.find(workspace_id)

    def disable(self, by: Authority, workspace_id: str) -> Workspace:
        """Every key and endpoint token of the workspace is refused from the next request on."""
        return self._move(by, workspace_id, "active", "disabled")

    def enable(self, by: Authority, workspace_id: str) -> Workspace:
        return self._move(by, workspace_id, "disabled", "active")

    def delete(self, by: Authority, workspace_id: str) -> Workspace:
        """Mark the workspace ``deleting`` (every key and token refused at once) and start its purge; deleting one
        already being deleted starts the purge again (it resumes where it stopped)."""
        self.require_operator(by)
        current = self.find(workspace_id)
        self._refuse_platform(workspace_id)
        if current.status != "deleting":
            mark = Update(set={"status": "deleting", "updated_at": timestamp(self._clock.now())})
            try:
                self._store.update(workspace_key(workspace_id), mark, condition=Condition.exists("workspace_exists"))
            except ConditionFailed:
                raise _not_found() from None
            log.warning("workspace %s is being deleted", workspace_id)
        marked = self.find(workspace_id)
        self._jobs.submit(PURGE_JOB, {"workspace_id": workspace_id})
        return marked

    def deleting(self) -> builtins.list[str]:
        """The workspaces marked for deletion whose purge has not finished (to resume after a restart)."""
        found = []
        cursor: str | None = None
        while True:
            page = self._store.query(WORKSPACES_PARTITION, index="gsi1", limit=200, cursor=cursor)
            for entry in page.items:
                item = self._store.get(workspace_key(entry["id"]))
                if item is not None and item.get("status") == "deleting":
                    found.append(str(item["id"]))
            cursor = page.cursor
            if cursor is None:
                return found

    def _move(self, by: Authority, workspace_id: str, leaving: WorkspaceStatus, to: WorkspaceStatus) -> Workspace:
        self.require_operator(by)
        current = self.find(workspace_id)
        self._refuse_platform(workspace_id)
        if current.status == to:
            return current
        if current.status == "deleting":
            raise _deleting()
        changes = Update(set={"status": to, "updated_at": timestamp(self._clock.now())})
        try:
            self._store.update(
                workspace_key(workspace_id),
                changes,
                condition=Condition.equals("workspace_unchanged", "status", leaving),
            )
        except ConditionFailed:
            raise Conflict("the workspace changed meanwhile; read it again", code="workspace_busy") from None
        log.warning("workspace %s: %s -> %s", workspace_id, leaving, to)
        return self.find(workspace_id)

    def _refuse_platform(self, workspace_id: str) -> None:
        install = self._store.get(INSTALL_KEY)
        if install is not None and install["workspace_id"] == workspace_id:
            raise Conflict(
                "this is the platform's own workspace (the one init created): it cannot be disabled or deleted",
                code="platform_workspace",
            )


def _deleting() -> Conflict:
    return Conflict("the workspace is being deleted", code="workspace_deleting")


def _not_found() -> NotFound:
    return NotFound("no such workspace", code="workspace_not_found")
