"""The users of a workspace, as its admins manage them: create, list, get, disable, enable, and the start and end of
a deletion (what a deleted user owned is removed by :mod:`mcpbridge.tenancy.user_removal`).

Managing users needs an admin key with ``manage_users`` (an unrestricted admin key has it). A key never acts on its
own user, nor on a user holding a key broader than itself (403 ``own_user``, ``scope_exceeded``): a key's authority
never grows by disabling someone. Disabling moves the user's unrestricted admin keys out of the workspace's count in
the same transaction (:mod:`mcpbridge.identity.admin_keys`), so the last active holder of one cannot be disabled or
deleted (409 ``last_admin_key``). A disabled or deleting user's keys are refused from the next request on
(``Accounts.authenticate`` reads the user each time).

A user may have an e-mail address (unique in the workspace: it is how a sign-in with the operator's identity
provider finds the user) and an *access*: the capabilities (tool groups) and knowledge bases the user may reach
through an OAuth sign-in on a published endpoint (unrestricted when not set). A key never grants an access broader
than its own scope.
"""

from __future__ import annotations

import builtins
import enum
import logging
import re
from collections.abc import Iterable
from typing import Any, Final

from mcpbridge.domain.identity import CAPABILITIES, Principal, Scope, User, UserStatus, scope_of, timestamp
from mcpbridge.domain.ids import is_id, new_id
from mcpbridge.domain.items import AllOf, Compare, Condition, ItemExists, Patch, Put, Remove, Update, WriteOp
from mcpbridge.domain.names import clean_name
from mcpbridge.errors import ConditionFailed, Conflict, Forbidden, InvalidInput, NotFound
from mcpbridge.identity.accounts import require_user_manager
from mcpbridge.identity.admin_keys import REMAIN, AdminKeyCounts
from mcpbridge.identity.records import api_key_of, status_of, user_email_key, user_item, user_key, user_of
from mcpbridge.paging import every_item
from mcpbridge.ports import Clock, Store

log = logging.getLogger("mcpbridge.identity")

ID_PREFIX = "usr"
_ATTEMPTS = 5
_EMAIL = re.compile(r"[^@\s]{1,64}@[^@\s]{1,255}")


class Unset(enum.Enum):
    UNSET = "unset"


UNSET: Final = Unset.UNSET


class Users:
    """A workspace's users, always within the caller's workspace (another workspace's user is not found)."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self._store = store
        self._clock = clock
        self._counts = AdminKeyCounts(store)

    def create(
        self,
        principal: Principal,
        *,
        name: str,
        email: str | None = None,
        capabilities: Iterable[str] | None = None,
        knowledge_base_ids: Iterable[str] | None = None,
    ) -> User:
        """A new user (409 ``email_taken`` when another user of the workspace has the address)."""
        require_user_manager(principal)
        now = timestamp(self._clock.now())
        item = user_item(principal.workspace_id, new_id(ID_PREFIX), clean_name(name), now)
        item["created_by"] = principal.user_id
        if capabilities is None and knowledge_base_ids is None:
            # A scoped key's users get its scope: a key never makes someone broader than itself.
            capabilities, knowledge_base_ids = principal.scope.capabilities, principal.scope.knowledge_base_ids
        item.update(_access_fields(principal, capabilities, knowledge_base_ids))
        address = clean_email(email)
        ops: builtins.list[WriteOp] = [Put(item, Condition.absent("user_new"))]
        if address:
            item["email"] = address
            ops.append(_email_guard(principal.workspace_id, address, item["id"]))
        _transact_or_taken(self._store, ops)
        log.info("created user %s in workspace %s", item["id"], principal.workspace_id)
        return user_of(principal.workspace_id, item)

    def update(
        self,
        principal: Principal,
        user_id: str,
        *,
        name: str | Unset = UNSET,
        email: str | Unset | None = UNSET,
        access: tuple[Iterable[str] | None, Iterable[str] | None] | Unset = UNSET,
    ) -> User:
        """Change a user's name, e-mail address (None clears it) or access (capabilities, knowledge base ids; None
        per part: unrestricted). The same authority rules as for disabling apply."""
        require_user_manager(principal)
        self.require_outranks(principal, user_id)
        for _ in range(_ATTEMPTS):
            current = self._store.get(user_key(principal.workspace_id, user_id)) if _is_user_id(user_id) else None
            if current is None or status_of(current) == "deleting":
                raise NotFound("no such user in this workspace", code="user_not_found")
            changes: dict[str, Any] = {}
            if not isinstance(name, Unset):
                changes["name"] = clean_name(name)
            if not isinstance(access, Unset):
                changes.update(_access_fields(principal, *access))
            ops = self._email_ops(principal.workspace_id, current, email, changes)
            changes["updated_at"] = timestamp(self._clock.now())
            unchanged = Condition(
                "user_unchanged", AllOf((ItemExists(), Compare("updated_at", "=", current.get("updated_at"))))
            )
            remove = ["email"] if not isinstance(email, Unset) and not changes.get("email") else []
            changes = {k: v for k, v in changes.items() if not (k == "email" and not v)}
            ops.insert(
                0, Patch(user_key(principal.workspace_id, user_id), Update(set=changes, remove=remove), unchanged)
            )
            try:
                _transact_or_taken(self._store, ops)
            except ConditionFailed:
                continue
            return self.find(principal.workspace_id, user_id)
        raise Conflict("the user kept changing; retry", code="user_busy")

    def _email_ops(
        self, workspace_id: str, current: dict[str, Any], email: str | Unset | None, changes: dict[str, Any]
    ) -> builtins.list[WriteOp]:
        if isinstance(email, Unset):
            return []
        address, before = clean_email(email), current.get("email")
        if address == before:
            return []
        ops: builtins.list[WriteOp] = []
        if before:
            ops.append(Remove(user_email_key(workspace_id, before)))
        if address:
            ops.append(_email_guard(workspace_id, address, current["id"]))
        changes["email"] = address
        return ops

    def find_by_email(self, workspace_id: str, email: str) -> User | None:
        """The user of the workspace with this address (case-insensitive), or None."""
        address = clean_email(email)
        guard = self._store.get(user_email_key(workspace_id, address)) if address else None
        if guard is None:
            return None
        try:
            return self.find(workspace_id, str(guard["user_id"]))
        except NotFound:
            return None

    def list(
        self, principal: Principal, *, limit: int = 50, cursor: str | None = None
    ) -> tuple[list[User], str | None]:
        require_user_manager(principal)
        page = self._store.query(f"WS#{principal.workspace_id}", sk_prefix="USER#", limit=limit, cursor=cursor)
        return [user_of(principal.workspace_id, item) for item in page.items], page.cursor

    def get(self, principal: Principal, user_id: str) -> User:
        require_user_manager(principal)
        return self.find(principal.workspace_id, user_id)

    def find(self, workspace_id: str, user_id: str) -> User:
        """A user of the workspace, without an authority check (for the caller's own user, and the services)."""
        item = self._store.get(user_key(workspace_id, user_id)) if _is_user_id(user_id) else None
        if item is None:
            raise NotFound("no such user in this workspace", code="user_not_found")
        return user_of(workspace_id, item)

    def disable(self, principal: Principal, user_id: str) -> User:
        """The user's keys are refused from the next request on; disabling a disabled user changes nothing."""
        return self._move(principal, user_id, "disabled")

    def enable(self, principal: Principal, user_id: str) -> User:
        return self._move(principal, user_id, "active")

    def begin_deletion(self, principal: Principal, user_id: str) -> User:
        """Mark the user ``deleting`` (its keys refused at once); the removal of what it owns follows."""
        return self._move(principal, user_id, "deleting")

    def finish_deletion(self, workspace_id: str, user_id: str) -> None:
        """Remove the user's item, once everything it owned is gone."""
        self._store.delete(
            user_key(workspace_id, user_id), condition=Condition.equals("user_deleting", "status", "deleting")
        )
        log.info("deleted user %s of workspace %s", user_id, workspace_id)

    # ------------------------------------------------------------------------------------------ status moves

    def _move(self, principal: Principal, user_id: str, to: UserStatus) -> User:
        require_user_manager(principal)
        current = self.find(principal.workspace_id, user_id)
        if user_id == principal.user_id:
            raise Forbidden("a key cannot disable, enable or delete its own user", code="own_user")
        self.require_outranks(principal, user_id)
        for _ in range(_ATTEMPTS):
            holder = self._counts.holder(principal.workspace_id, user_id)
            if holder.item is None:
                raise NotFound("no such user in this workspace", code="user_not_found")
            status = status_of(holder.item)
            if status == to:
                return user_of(principal.workspace_id, holder.item)
            if status == "deleting":
                raise Conflict("the user is being deleted", code="user_deleting")
            ops = self._status_ops(principal.workspace_id, user_id, status, to, holder.admin_keys)
            try:
                self._store.transact(ops)
            except ConditionFailed as lost:
                if lost.condition == REMAIN:
                    raise Conflict(
                        "the workspace would be left without a usable unrestricted admin key: give another active "
                        "user one first",
                        code="last_admin_key",
                    ) from None
                continue  # the user (or its keys) changed meanwhile: read again
            log.info("user %s of workspace %s: %s -> %s", user_id, principal.workspace_id, status, to)
            return self.find(principal.workspace_id, user_id)
        raise Conflict(f"user {current.id} kept changing; retry", code="user_busy")

    def _status_ops(
        self, workspace_id: str, user_id: str, status: str, to: UserStatus, admin_keys: int
    ) -> builtins.list[WriteOp]:
        unchanged = Condition(
            "user_unchanged",
            AllOf((ItemExists(), Compare("status", "<>", "deleting"), Compare("admin_keys", "=", admin_keys))),
        )
        if status == "active":
            unchanged = Condition(unchanged.name, AllOf((unchanged.clause, Compare("status", "<>", "disabled"))))
        else:
            unchanged = Condition(unchanged.name, AllOf((unchanged.clause, Compare("status", "=", status))))
        changes = Update(set={"status": to, "updated_at": timestamp(self._clock.now())})
        ops: builtins.list[WriteOp] = [Patch(user_key(workspace_id, user_id), changes, unchanged)]
        counted_before, counted_after = status == "active", to == "active"
        if admin_keys and counted_before != counted_after:
            self._counts.ensure_workspace(workspace_id)
            ops.append(self._counts.move_workspace(workspace_id, admin_keys if counted_after else -admin_keys))
        return ops

    def require_outranks(self, principal: Principal, user_id: str) -> None:
        """403 ``scope_exceeded`` when the user holds an active key broader than the caller's."""
        for item in every_item(self._store, f"WS#{principal.workspace_id}", sk_prefix="APIKEY#"):
            key = api_key_of(item)
            if key.user_id == user_id and key.active and not principal.outranks_or_equals(key.role, key.scope):
                raise Forbidden("the user holds a key broader than this one", code="scope_exceeded")


def clean_email(value: str | None) -> str | None:
    """An e-mail address in lower case, None for none; InvalidInput for one that is not an address."""
    if value is None or not value.strip():
        return None
    address = value.strip().lower()
    if not _EMAIL.fullmatch(address):
        raise InvalidInput("email is not an e-mail address", code="invalid_email")
    return address


def _email_guard(workspace_id: str, address: str, user_id: str) -> Put:
    return Put(
        {**user_email_key(workspace_id, address).as_dict(), "user_id": user_id, "email": address},
        Condition.absent("email_free"),
    )


def _transact_or_taken(store: Store, ops: builtins.list[WriteOp]) -> None:
    try:
        store.transact(ops)
    except ConditionFailed as lost:
        if lost.condition == "email_free":
            raise Conflict("another user of this workspace has this e-mail address", code="email_taken") from None
        raise


def _access_fields(
    principal: Principal, capabilities: Iterable[str] | None, knowledge_base_ids: Iterable[str] | None
) -> dict[str, Any]:
    """The access attributes of a user item, within the caller's own scope."""
    caps = None if capabilities is None else sorted(set(capabilities))
    unknown = [c for c in caps or [] if c not in CAPABILITIES]
    if unknown:
        raise InvalidInput(
            f"unknown capability: {unknown[0][:64]}", code="unknown_capability", details={"known": sorted(CAPABILITIES)}
        )
    kbs = None if knowledge_base_ids is None else sorted({k.strip() for k in knowledge_base_ids if k.strip()})
    access: Scope = scope_of(caps, kbs)
    if not principal.scope.covers(access):
        raise Forbidden("a key cannot give a user access beyond its own scope", code="scope_exceeded")
    return {"capabilities": caps, "knowledge_base_ids": kbs}


def _is_user_id(value: str) -> bool:
    # Users of earlier releases and tests may carry ids of another shape; only bounded, plain ids are looked up.
    return is_id(value, ID_PREFIX) or (0 < len(value) <= 128 and all(c.isalnum() or c in "_.:@-" for c in value))
