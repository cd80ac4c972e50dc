"""The users of a workspace, as its admins manage them: create, list, get, disable, enable, and the start and end of
a deletion (what a deleted user owned is removed by :mod:`mcpbridge.tenancy.user_removal`).

Managing users needs an admin key with ``manage_users`` (an unrestricted admin key has it). A key never acts on its
own user, nor on a user holding a key broader than itself (403 ``own_user``, ``scope_exceeded``): a key's authority
never grows by disabling someone. Disabling moves the user's unrestricted admin keys out of the workspace's count in
the same transaction (:mod:`mcpbridge.identity.admin_keys`), so the last active holder of one cannot be disabled or
deleted (409 ``last_admin_key``). A disabled or deleting user's keys are refused from the next request on
(``Accounts.authenticate`` reads the user each time).
"""

from __future__ import annotations

import builtins
import logging

from mcpbridge.domain.identity import Principal, User, UserStatus, timestamp
from mcpbridge.domain.ids import is_id, new_id
from mcpbridge.domain.items import AllOf, Compare, Condition, ItemExists, Patch, Update, WriteOp
from mcpbridge.domain.names import clean_name
from mcpbridge.errors import ConditionFailed, Conflict, Forbidden, NotFound
from mcpbridge.identity.accounts import require_user_manager
from mcpbridge.identity.admin_keys import REMAIN, AdminKeyCounts
from mcpbridge.identity.records import api_key_of, status_of, user_item, user_key, user_of
from mcpbridge.paging import every_item
from mcpbridge.ports import Clock, Store

log = logging.getLogger("mcpbridge.identity")

ID_PREFIX = "usr"
_ATTEMPTS = 5


class Users:
    """A workspace's users, always within the caller's workspace (another workspace's user is not found)."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self._store = store
        self._clock = clock
        self._counts = AdminKeyCounts(store)

    def create(self, principal: Principal, *, name: str) -> User:
        require_user_manager(principal)
        now = timestamp(self._clock.now())
        item = user_item(principal.workspace_id, new_id(ID_PREFIX), clean_name(name), now)
        item["created_by"] = principal.user_id
        self._store.put(item, condition=Condition.absent("user_new"))
        log.info("created user %s in workspace %s", item["id"], principal.workspace_id)
        return user_of(principal.workspace_id, item)

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
        self._require_outranks(principal, user_id)
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

    def _require_outranks(self, principal: Principal, user_id: str) -> None:
        for item in every_item(self._store, f"WS#{principal.workspace_id}", sk_prefix="APIKEY#"):
            key = api_key_of(item)
            if key.user_id == user_id and key.active and not principal.outranks_or_equals(key.role, key.scope):
                raise Forbidden("the user holds a key broader than this one", code="scope_exceeded")


def _is_user_id(value: str) -> bool:
    # Users of earlier releases and tests may carry ids of another shape; only bounded, plain ids are looked up.
    return is_id(value, ID_PREFIX) or (0 < len(value) <= 128 and all(c.isalnum() or c in "_.:@-" for c in value))
