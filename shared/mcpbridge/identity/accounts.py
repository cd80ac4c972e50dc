"""Workspaces, users and API keys on the store: first-run initialisation, authentication, key management.

Items (single table):

    INSTALL / INSTALL                      the install marker: which workspace ``init`` created
    WS#<ws> / WS                           a workspace
    WS#<ws> / USER#<user>                  a user of the workspace
    WS#<ws> / APIKEY#<key>                 an API key; gsi1 = APIKEY#<sha256> / APIKEY while it is active
    WS#<ws> / ADMINKEYS                    how many active unrestricted admin keys the workspace has

Managing keys (list, get, create, revoke) needs an admin key with the ``manage_keys`` capability (an unrestricted
admin key has it). A key never mints or revokes a key broader than itself (role and scope), and the workspace's last
active unrestricted admin key cannot be revoked: the ``ADMINKEYS`` counter moves in the same transaction as the key,
on condition that it stays above zero, so two racing revocations cannot both take the last two. An operator who lost
every admin key mints a new one from the machine or account that holds the data (:meth:`recover_admin_key`, run by
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
    Key,
    Patch,
    Put,
    Update,
    all_of,
    any_of,
)
from mcpbridge.domain.names import clean_name
from mcpbridge.errors import ConditionFailed, Conflict, Forbidden, InvalidInput, NotFound, Unauthenticated
from mcpbridge.paging import every_item
from mcpbridge.ports import Clock, Store

log = logging.getLogger("mcpbridge.identity")

INSTALL_KEY = Key("INSTALL", "INSTALL")
LAST_USED_EVERY_SECONDS = 60


def workspace_key(workspace_id: str) -> Key:
    return Key(f"WS#{workspace_id}", "WS")


def user_key(workspace_id: str, user_id: str) -> Key:
    return Key(f"WS#{workspace_id}", f"USER#{user_id}")


def api_key_key(workspace_id: str, key_id: str) -> Key:
    return Key(f"WS#{workspace_id}", f"APIKEY#{key_id}")


def admin_keys_key(workspace_id: str) -> Key:
    return Key(f"WS#{workspace_id}", "ADMINKEYS")


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


class Accounts:
    """Initialisation, authentication and API-key management for workspaces."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    # ------------------------------------------------------------------------------------------ first run

    def initialize(self, workspace_name: str = "Default workspace") -> Initialization:
        """Create the default workspace, its first user and an admin key, exactly once per install."""
        existing = self._store.get(INSTALL_KEY)
        if existing is not None:
            return Initialization(created=False, workspace_id=existing["workspace_id"], api_key=None)
        now = timestamp(self._clock.now())
        workspace_id, user_id = new_id("ws"), new_id("usr")
        issued = credentials.issue(credentials.API_KEY_PREFIX)
        key_id = new_id("key")
        try:
            self._store.transact(
                [
                    Put(
                        {**INSTALL_KEY.as_dict(), "workspace_id": workspace_id, "created_at": now},
                        Condition.absent("first_install"),
                    ),
                    Put(_workspace_item(workspace_id, workspace_name, now), Condition.absent("workspace_new")),
                    Put(
                        {
                            **user_key(workspace_id, user_id).as_dict(),
                            "id": user_id,
                            "name": "admin",
                            "created_at": now,
                        },
                        Condition.absent("user_new"),
                    ),
                    Put(
                        _api_key_item(
                            workspace_id, key_id, user_id, "admin (created by init)", "admin", Scope(), issued, now
                        ),
                        Condition.absent("api_key_new"),
                    ),
                    Put({**admin_keys_key(workspace_id).as_dict(), "count": 1}, Condition.absent("admin_keys_new")),
                ]
            )
        except ConditionFailed as lost:
            if lost.condition != "first_install" or lost.current is None:
                raise
            # Another process initialised first: report its workspace, create nothing.
            return Initialization(created=False, workspace_id=lost.current["workspace_id"], api_key=None)
        log.info("initialised workspace %s with admin API key %s", workspace_id, key_id)
        return Initialization(created=True, workspace_id=workspace_id, api_key=issued.plaintext)

    def installed_workspace_id(self) -> str | None:
        install = self._store.get(INSTALL_KEY)
        return None if install is None else str(install["workspace_id"])

    # ------------------------------------------------------------------------------------------ auth

    def authenticate(self, presented: str | None) -> Principal:
        """The principal behind an API key, checked against the store on every call (no cache)."""
        if not presented:
            raise Unauthenticated("an API key is required (Authorization: Bearer sk_... or X-API-Key)")
        if not credentials.well_formed(presented, credentials.API_KEY_PREFIX):
            raise Unauthenticated("the API key is not valid", code="invalid_api_key")
        sha = credentials.digest(presented)
        page = self._store.query(f"APIKEY#{sha}", index="gsi1", limit=2)
        if not page.items:
            raise Unauthenticated("the API key is not valid", code="invalid_api_key")
        indexed = page.items[0]
        # The index may lag a revocation: the base item, read consistently, has the last word.
        item = self._store.get(api_key_key(indexed["workspace_id"], indexed["id"]))
        if item is None or item.get("revoked_at") or not credentials.same_digest(item["sha256"], sha):
            raise Unauthenticated("the API key is not valid", code="invalid_api_key")
        workspace = self._store.get(workspace_key(item["workspace_id"]))
        if workspace is None or workspace.get("status") != "active":
            raise Forbidden("the workspace is not active", code="workspace_inactive")
        self._touch(item)
        record = _api_key_of(item)
        return Principal(
            workspace_id=record.workspace_id,
            user_id=record.user_id,
            api_key_id=record.id,
            role=record.role,
            scope=record.scope,
        )

    def _touch(self, item: Item) -> None:
        now = self._clock.now()
        cutoff = timestamp(now - LAST_USED_EVERY_SECONDS)
        if (item.get("last_used_at") or "") >= cutoff:
            return
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
    ) -> NewApiKey:
        _require_key_manager(principal)
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
        return self._issue(principal.workspace_id, principal.user_id, name, role, scope)

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
        now = timestamp(self._clock.now())
        issued = credentials.issue(credentials.API_KEY_PREFIX)
        item = _api_key_item(workspace_id, new_id("key"), user_id, name, role, scope, issued, now)
        record = _api_key_of(item)
        if record.unrestricted_admin:
            self._ensure_admin_count(workspace_id)
            self._store.transact(
                [
                    Put(item, Condition.absent("api_key_new")),
                    Patch(admin_keys_key(workspace_id), Update(add={"count": 1}), Condition.exists("admin_keys")),
                ]
            )
        else:
            self._store.put(item, condition=Condition.absent("api_key_new"))
        return NewApiKey(record=record, plaintext=issued.plaintext)

    def _ensure_admin_count(self, workspace_id: str) -> None:
        """Workspaces initialised before the counter existed get it now, counted from their keys."""
        if self._store.get(admin_keys_key(workspace_id)) is not None:
            return
        keys = every_item(self._store, f"WS#{workspace_id}", sk_prefix="APIKEY#")
        count = sum(1 for item in keys if (key := _api_key_of(item)).active and key.unrestricted_admin)
        with contextlib.suppress(ConditionFailed):  # another request counted first
            self._store.put(
                {**admin_keys_key(workspace_id).as_dict(), "count": count},
                condition=Condition.absent("admin_keys_new"),
            )

    def list_api_keys(
        self, principal: Principal, *, limit: int = 50, cursor: str | None = None
    ) -> tuple[list[ApiKey], str | None]:
        _require_key_manager(principal)
        page = self._store.query(f"WS#{principal.workspace_id}", sk_prefix="APIKEY#", limit=limit, cursor=cursor)
        return [_api_key_of(i) for i in page.items], page.cursor

    def get_api_key(self, principal: Principal, key_id: str) -> ApiKey:
        _require_key_manager(principal)
        item = self._store.get(api_key_key(principal.workspace_id, key_id))
        if item is None:
            raise NotFound("no such API key", code="api_key_not_found")
        return _api_key_of(item)

    def revoke_api_key(self, principal: Principal, key_id: str) -> ApiKey:
        """Revoke at once (the next request with it fails). Revoking a revoked key changes nothing.

        403 ``scope_exceeded`` for a key broader than the caller's; 409 ``last_admin_key`` for the workspace's last
        active unrestricted admin key."""
        _require_key_manager(principal)
        key = api_key_key(principal.workspace_id, key_id)
        current = self._store.get(key)
        if current is None:
            raise NotFound("no such API key", code="api_key_not_found")
        target = _api_key_of(current)
        if not target.active:
            return target
        if not principal.outranks_or_equals(target.role, target.scope):
            raise Forbidden("a key cannot revoke a key broader than itself", code="scope_exceeded")
        revoke = Update(set={"revoked_at": timestamp(self._clock.now())}, remove=["gsi1pk", "gsi1sk"])
        active = Condition("key_active", all_of(ItemExists(), AttrAbsent("revoked_at")))
        try:
            if target.unrestricted_admin:
                self._ensure_admin_count(principal.workspace_id)
                others_remain = Condition("admin_keys_remain", Compare("count", ">", 1))
                self._store.transact(
                    [
                        Patch(key, revoke, active),
                        Patch(admin_keys_key(principal.workspace_id), Update(add={"count": -1}), others_remain),
                    ]
                )
            else:
                self._store.update(key, revoke, condition=active)
        except ConditionFailed as lost:
            if lost.condition == "admin_keys_remain":
                raise Conflict(
                    "this is the workspace's last unrestricted admin key: create another one before revoking it",
                    code="last_admin_key",
                ) from None
            after = self._store.get(key)
            if after is None:
                raise NotFound("no such API key", code="api_key_not_found") from None
            return _api_key_of(after)  # revoked meanwhile by another request
        log.info("revoked API key %s", key_id)
        after = self._store.get(key)
        return _api_key_of(after) if after is not None else target

    # ------------------------------------------------------------------------------------------ workspaces

    def get_workspace(self, workspace_id: str) -> Workspace:
        item = self._store.get(workspace_key(workspace_id))
        if item is None:
            raise NotFound("no such workspace", code="workspace_not_found")
        return Workspace(id=item["id"], name=item["name"], status=item["status"], created_at=item["created_at"])


def _require_admin(principal: Principal) -> None:
    if not principal.is_admin:
        raise Forbidden("this needs an admin API key", code="admin_required")


def _require_key_manager(principal: Principal) -> None:
    _require_admin(principal)
    if not principal.scope.allows("manage_keys"):
        raise Forbidden("this API key lacks the manage_keys capability", code="capability_missing")


def _workspace_item(workspace_id: str, name: str, now: str) -> Item:
    return {
        **workspace_key(workspace_id).as_dict(),
        "id": workspace_id,
        "name": name,
        "status": "active",
        "created_at": now,
        "gsi1pk": "WORKSPACES",
        "gsi1sk": workspace_id,
    }


def _api_key_item(
    workspace_id: str,
    key_id: str,
    user_id: str,
    name: str,
    role: Role,
    scope: Scope,
    issued: credentials.IssuedCredential,
    now: str,
) -> Item:
    return {
        **api_key_key(workspace_id, key_id).as_dict(),
        "gsi1pk": f"APIKEY#{issued.sha256}",
        "gsi1sk": "APIKEY",
        "id": key_id,
        "workspace_id": workspace_id,
        "user_id": user_id,
        "name": name,
        "role": role,
        "capabilities": None if scope.capabilities is None else sorted(scope.capabilities),
        "knowledge_base_ids": None if scope.knowledge_base_ids is None else sorted(scope.knowledge_base_ids),
        "sha256": issued.sha256,
        "hint": issued.hint,
        "created_at": now,
    }


def _api_key_of(item: Item) -> ApiKey:
    return ApiKey(
        id=item["id"],
        workspace_id=item["workspace_id"],
        user_id=item["user_id"],
        name=item["name"],
        role=item["role"],
        scope=scope_of(item.get("capabilities"), item.get("knowledge_base_ids")),
        hint=item["hint"],
        created_at=item["created_at"],
        last_used_at=item.get("last_used_at"),
        revoked_at=item.get("revoked_at"),
    )
