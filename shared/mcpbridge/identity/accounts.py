"""API keys on the store: first-run initialisation, authentication, key management.

The items are laid out in :mod:`mcpbridge.identity.records`; workspaces and users are managed in
:mod:`mcpbridge.identity.workspaces` and :mod:`mcpbridge.identity.users`.

A key authenticates only while it is unrevoked, its workspace is ``active`` and its user is neither disabled nor being
deleted, all read consistently on every request (nothing cached), so each of those changes applies to the very next
request. Managing keys (list, get, create, revoke) needs an admin key with the ``manage_keys`` capability (an
unrestricted admin key has it); minting a key for another user of the workspace needs ``manage_users``. A key never
mints or revokes a key broader than itself (role and scope), and the workspace's last usable unrestricted admin key
cannot be revoked: the counters of :mod:`mcpbridge.identity.admin_keys` move in the same transaction as the key, on
condition that one stays, so two racing revocations cannot both take the last two. An operator who lost every admin
key mints a new one from the machine or account that holds the data (:meth:`Accounts.recover_admin_key`, run by
``mcpbridge keys create --admin``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from mcpbridge.domain import credentials
from mcpbridge.domain.identity import (
    CAPABILITIES,
    ROLES,
    ApiKey,
    Principal,
    Role,
    Scope,
    Workspace,
    scope_of,
    timestamp,
)
from mcpbridge.domain.ids import new_id
from mcpbridge.domain.items import (
    AttrAbsent,
    Compare,
    Condition,
    Item,
    ItemExists,
    Patch,
    Put,
    Update,
    WriteOp,
    all_of,
    any_of,
)
from mcpbridge.domain.names import clean_name
from mcpbridge.errors import ConditionFailed, Conflict, Forbidden, InvalidInput, NotFound, Unauthenticated
from mcpbridge.identity.admin_keys import REMAIN, AdminKeyCounts
from mcpbridge.identity.records import (
    INSTALL_KEY,
    admin_keys_key,
    api_key_item,
    api_key_key,
    api_key_of,
    status_of,
    user_item,
    user_key,
    workspace_item,
    workspace_key,
    workspace_of,
)
from mcpbridge.ports import Clock, Store

__all__ = [
    "INSTALL_KEY",
    "Accounts",
    "Initialization",
    "NewApiKey",
    "_api_key_item",
    "_workspace_item",
    "admin_keys_key",
    "api_key_key",
    "user_key",
    "workspace_key",
]

log = logging.getLogger("mcpbridge.identity")

LAST_USED_EVERY_SECONDS = 60
_ATTEMPTS = 5
_api_key_item, _workspace_item = api_key_item, workspace_item  # the names tests and earlier releases import


@dataclass(frozen=True)
class Initialization:
    created: bool
    workspace_id: str
    api_key: str | None
    """The admin key's plaintext, present only when this call created it."""


@dataclass(frozen=True)
class NewApiKey:
    record: ApiKey
    plaintext: str


@dataclass(frozen=True)
class FirstAdmin:
    """The items of a new workspace with its first user and that user's unrestricted admin key."""

    ops: list[WriteOp]
    user_id: str
    key: NewApiKey


def first_admin(workspace_id: str, name: str, user_name: str, key_name: str, now: str) -> FirstAdmin:
    user_id, key_id = new_id("usr"), new_id("key")
    issued = credentials.issue(credentials.API_KEY_PREFIX)
    key = api_key_item(workspace_id, key_id, user_id, key_name, "admin", Scope(), issued, now)
    ops: list[WriteOp] = [
        Put(workspace_item(workspace_id, name, now), Condition.absent("workspace_new")),
        Put(user_item(workspace_id, user_id, user_name, now, admin_keys=1), Condition.absent("user_new")),
        Put(key, Condition.absent("api_key_new")),
        Put({**admin_keys_key(workspace_id).as_dict(), "count": 1}, Condition.absent("admin_keys_new")),
    ]
    return FirstAdmin(ops, user_id, NewApiKey(api_key_of(key), issued.plaintext))


class Accounts:
    """Initialisation, authentication and API-key management for workspaces."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self._store = store
        self._clock = clock
        self._counts = AdminKeyCounts(store)

    # ------------------------------------------------------------------------------------------ first run

    def initialize(self, workspace_name: str = "Default workspace") -> Initialization:
        """Create the default workspace, its first user and an admin key, exactly once per install."""
        existing = self._store.get(INSTALL_KEY)
        if existing is not None:
            return Initialization(created=False, workspace_id=existing["workspace_id"], api_key=None)
        now = timestamp(self._clock.now())
        workspace_id = new_id("ws")
        first = first_admin(workspace_id, workspace_name, "admin", "admin (created by init)", now)
        install = {**INSTALL_KEY.as_dict(), "workspace_id": workspace_id, "created_at": now}
        try:
            self._store.transact([Put(install, Condition.absent("first_install")), *first.ops])
        except ConditionFailed as lost:
            if lost.condition != "first_install" or lost.current is None:
                raise
            # Another process initialised first: report its workspace, create nothing.
            return Initialization(created=False, workspace_id=lost.current["workspace_id"], api_key=None)
        log.info("initialised workspace %s with admin API key %s", workspace_id, first.key.record.id)
        return Initialization(created=True, workspace_id=workspace_id, api_key=first.key.plaintext)

    def installed_workspace_id(self) -> str | None:
        install = self._store.get(INSTALL_KEY)
        return None if install is None else str(install["workspace_id"])

    # ------------------------------------------------------------------------------------------ auth

    def authenticate(self, presented: str | None) -> Principal:
        """The principal behind an API key, checked against the store on every call (no cache)."""
        principal, stale = self.verify(presented)
        if stale is not None:
            self.touch(stale)
        return principal

    def verify(self, presented: str | None) -> tuple[Principal, Item | None]:
        """``authenticate`` without its one write: the principal, and the key's item when its last-use time is due
        for :meth:`touch` (at most once a minute), else None. Only reads the store, so a caller whose store reads
        are local may run it on the event loop and hand the rare write to a worker thread."""
        if not presented:
            raise Unauthenticated("an API key is required (Authorization: Bearer sk_... or X-API-Key)")
        if not credentials.well_formed(presented, credentials.API_KEY_PREFIX):
            raise Unauthenticated("the API key is not valid", code="invalid_api_key")
        sha = credentials.digest(presented)
        page = self._store.query(f"APIKEY#{sha}", index="gsi1", limit=2)
        if not page.items:
            raise Unauthenticated("the API key is not valid", code="invalid_api_key")
        item: Item | None = page.items[0]
        if not self._store.indexes_are_consistent:
            # The index may lag a revocation: the base item, read consistently, has the last word.
            item = self._store.get(api_key_key(page.items[0]["workspace_id"], page.items[0]["id"]))
        if item is None or item.get("revoked_at") or not credentials.same_digest(item["sha256"], sha):
            raise Unauthenticated("the API key is not valid", code="invalid_api_key")
        workspace = self._store.get(workspace_key(item["workspace_id"]))
        if workspace is None or workspace.get("status") != "active":
            raise Forbidden("the workspace is not active", code="workspace_inactive")
        user = self._store.get(user_key(item["workspace_id"], item["user_id"]))
        if user is not None and status_of(user) != "active":
            raise Forbidden("this API key's user is disabled or being deleted", code="user_inactive")
        record = api_key_of(item)
        principal = Principal(
            workspace_id=record.workspace_id,
            user_id=record.user_id,
            api_key_id=record.id,
            role=record.role,
            scope=record.scope,
        )
        cutoff = timestamp(self._clock.now() - LAST_USED_EVERY_SECONDS)
        return principal, (None if (item.get("last_used_at") or "") >= cutoff else item)

    def touch(self, item: Item) -> None:
        """Record that the key of ``item`` (from :meth:`verify`) was used now, unless another request did it this
        minute or the key was revoked meanwhile."""
        now = self._clock.now()
        cutoff = timestamp(now - LAST_USED_EVERY_SECONDS)
        stale_and_active = all_of(
            ItemExists(),
            AttrAbsent("revoked_at"),
            any_of(AttrAbsent("last_used_at"), Compare("last_used_at", "<", cutoff)),
        )
        # Losing means another request recorded it this minute (or the key was just revoked): nothing to do.
        with contextlib.suppress(ConditionFailed):
            self._store.update(
                api_key_key(item["workspace_id"], item["id"]),
                Update(set={"last_used_at": timestamp(now)}),
                condition=Condition("last_used_stale", stale_and_active),
                durable=False,  # a use time is not worth a disk sync: a power cut may forget the last one
            )

    # ------------------------------------------------------------------------------------------ keys

    def create_api_key(
        self,
        principal: Principal,
        *,
        name: str,
        role: Role,
        capabilities: Iterable[str] | None = None,
        knowledge_base_ids: Iterable[str] | None = None,
        user_id: str | None = None,
    ) -> NewApiKey:
        """A key for the caller's user, or with ``user_id`` (and ``manage_users``) for another user of the workspace;
        never broader than the caller's own key."""
        if user_id is None or user_id == principal.user_id:
            _require_key_manager(principal)
            user_id = principal.user_id
        else:
            require_user_manager(principal)
            if self._store.get(user_key(principal.workspace_id, user_id)) is None:
                raise NotFound("no such user", code="user_not_found")
        name = clean_name(name)
        if role not in ROLES:
            raise InvalidInput(f"role must be one of {', '.join(ROLES)}", code="invalid_role")
        caps = None if capabilities is None else sorted(set(capabilities))
        unknown = [c for c in caps or [] if c not in CAPABILITIES]
        if unknown:
            raise InvalidInput(
                f"unknown capabilities: {', '.join(unknown)}",
                code="unknown_capability",
                details={"known": sorted(CAPABILITIES)},
            )
        kbs = None if knowledge_base_ids is None else sorted({k.strip() for k in knowledge_base_ids if k.strip()})
        scope = scope_of(caps, kbs)
        if role == "admin" and not principal.is_admin:
            raise Forbidden("a key cannot grant a role above its own", code="scope_exceeded")
        if not principal.scope.covers(scope):
            raise Forbidden("a key cannot grant capabilities or knowledge bases beyond its own", code="scope_exceeded")
        return self._issue(principal.workspace_id, user_id, name, role, scope)

    def recover_admin_key(self, workspace_id: str, user_id: str, *, name: str = "admin (recovered)") -> NewApiKey:
        """For an operator on the machine or account that holds the data, not for any API caller: a new unrestricted
        admin key for ``user_id`` of the workspace, whatever keys exist (the way back after every admin key is lost).
        """
        if self._store.get(workspace_key(workspace_id)) is None:
            raise NotFound("no such workspace", code="workspace_not_found")
        created = self._issue(workspace_id, user_id, clean_name(name), "admin", Scope())
        log.warning("minted a recovery admin API key %s for workspace %s", created.record.id, workspace_id)
        return created

    def _issue(self, workspace_id: str, user_id: str, name: str, role: Role, scope: Scope) -> NewApiKey:
        issued = credentials.issue(credentials.API_KEY_PREFIX)
        item = api_key_item(
            workspace_id, new_id("key"), user_id, name, role, scope, issued, timestamp(self._clock.now())
        )
        record = api_key_of(item)
        for _ in range(_ATTEMPTS):
            holder = self._counts.holder(workspace_id, user_id)
            if record.unrestricted_admin:
                self._counts.ensure_workspace(workspace_id)
            ops = self._counts.with_key(holder, unrestricted=record.unrestricted_admin, delta=1)
            try:
                self._store.transact([Put(item, Condition.absent("api_key_new")), *ops])
            except ConditionFailed as lost:
                if lost.condition == "user_active" and (lost.current is None or status_of(lost.current) != "active"):
                    raise Conflict(
                        "the user is disabled or being deleted: enable it before giving it keys", code="user_inactive"
                    ) from None
                if lost.condition not in ("user_active", "user_unrecorded"):
                    raise
                continue  # the user changed meanwhile: read it again
            return NewApiKey(record=record, plaintext=issued.plaintext)
        raise Conflict("the user changed while the key was minted; retry", code="user_busy")

    def list_api_keys(
        self, principal: Principal, *, limit: int = 50, cursor: str | None = None
    ) -> tuple[list[ApiKey], str | None]:
        _require_key_manager(principal)
        page = self._store.query(f"WS#{principal.workspace_id}", sk_prefix="APIKEY#", limit=limit, cursor=cursor)
        return [api_key_of(i) for i in page.items], page.cursor

    def get_api_key(self, principal: Principal, key_id: str) -> ApiKey:
        _require_key_manager(principal)
        item = self._store.get(api_key_key(principal.workspace_id, key_id))
        if item is None:
            raise NotFound("no such API key", code="api_key_not_found")
        return api_key_of(item)

    def revoke_api_key(self, principal: Principal, key_id: str) -> ApiKey:
        """Revoke at once (the next request with it fails). Revoking a revoked key changes nothing.

        403 ``scope_exceeded`` for a key broader than the caller's; 409 ``last_admin_key`` for the workspace's last
        usable unrestricted admin key."""
        _require_key_manager(principal)
        key = api_key_key(principal.workspace_id, key_id)
        current = self._store.get(key)
        if current is None:
            raise NotFound("no such API key", code="api_key_not_found")
        target = api_key_of(current)
        if target.active and not principal.outranks_or_equals(target.role, target.scope):
            raise Forbidden("a key cannot revoke a key broader than itself", code="scope_exceeded")
        revoked = self.revoke_key(target)
        if revoked is None:
            raise NotFound("no such API key", code="api_key_not_found")
        return revoked

    def revoke_key(self, target: ApiKey) -> ApiKey | None:
        """Revoke ``target`` with the counters moved (for callers that checked their authority over it); None when
        it is gone. 409 ``last_admin_key`` when it is the workspace's last usable unrestricted admin key."""
        key = api_key_key(target.workspace_id, target.id)
        revoke = Update(set={"revoked_at": timestamp(self._clock.now())}, remove=["gsi1pk", "gsi1sk"])
        active = Condition("key_active", all_of(ItemExists(), AttrAbsent("revoked_at")))
        for _ in range(_ATTEMPTS):
            current = self._store.get(key)
            if current is None or current.get("revoked_at"):
                return None if current is None else api_key_of(current)
            ops: list[WriteOp] = []
            if target.unrestricted_admin:
                self._counts.ensure_workspace(target.workspace_id)
                holder = self._counts.holder(target.workspace_id, target.user_id)
                ops = self._counts.with_key(holder, unrestricted=True, delta=-1)
            try:
                self._store.transact([Patch(key, revoke, active), *ops])
            except ConditionFailed as lost:
                if lost.condition == REMAIN:
                    raise Conflict(
                        "this is the workspace's last usable unrestricted admin key: create another one before "
                        "revoking it",
                        code="last_admin_key",
                    ) from None
                continue  # revoked, or its user changed, meanwhile: look again
            log.info("revoked API key %s", target.id)
            after = self._store.get(key)
            return api_key_of(after) if after is not None else target
        raise Conflict("the key's user changed while the key was revoked; retry", code="user_busy")

    def user_usable(self, workspace_id: str, user_id: str) -> bool:
        """Whether a user may be acted for: active, or known only by its keys (users of earlier releases, end users
        an agent platform names with ``act_as``)."""
        user = self._store.get(user_key(workspace_id, user_id))
        return user is None or status_of(user) == "active"

    # ------------------------------------------------------------------------------------------ workspaces

    def get_workspace(self, workspace_id: str) -> Workspace:
        item = self._store.get(workspace_key(workspace_id))
        if item is None:
            raise NotFound("no such workspace", code="workspace_not_found")
        return workspace_of(item)


def _require_admin(principal: Principal) -> None:
    if not principal.is_admin:
        raise Forbidden("this needs an admin API key", code="admin_required")


def _require_key_manager(principal: Principal) -> None:
    _require_admin(principal)
    if not principal.scope.allows("manage_keys"):
        raise Forbidden("this API key lacks the manage_keys capability", code="capability_missing")


def require_user_manager(principal: Principal) -> None:
    """An admin key with ``manage_users`` (an unrestricted admin key has it)."""
    _require_admin(principal)
    if not principal.scope.allows("manage_users"):
        raise Forbidden("this API key lacks the manage_users capability", code="capability_missing")
