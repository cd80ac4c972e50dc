"""The two counters that keep a workspace from locking itself out (see :mod:`mcpbridge.identity.records`): the
writes that move them, and their recount for items written before they existed."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from mcpbridge.domain.items import (
    AllOf,
    AttrAbsent,
    Check,
    Compare,
    Condition,
    Item,
    ItemAbsent,
    ItemExists,
    Patch,
    Update,
    WriteOp,
)
from mcpbridge.errors import ConditionFailed
from mcpbridge.identity.records import admin_keys_key, api_key_of, status_of, user_key, user_usable
from mcpbridge.paging import every_item
from mcpbridge.ports import Store

REMAIN = "admin_keys_remain"
"""The condition that fails when a write would leave no usable unrestricted admin key."""


@dataclass(frozen=True)
class Holder:
    """A key's user as the counters see it: its item (None for a user known only by keys) and its count."""

    workspace_id: str
    user_id: str
    item: Item | None
    admin_keys: int

    @property
    def counted(self) -> bool:
        """Whether the user's unrestricted admin keys count for the workspace (it is active, or has no item)."""
        return self.item is None or status_of(self.item) == "active"


class AdminKeyCounts:
    def __init__(self, store: Store) -> None:
        self._store = store

    def holder(self, workspace_id: str, user_id: str) -> Holder:
        """The user, with its counter recounted from its keys when its item predates the counter."""
        item = self._store.get(user_key(workspace_id, user_id))
        if item is not None and "admin_keys" not in item:
            count = sum(1 for key in self._keys(workspace_id) if key["user_id"] == user_id)
            with contextlib.suppress(ConditionFailed):  # another request counted first
                self._store.update(
                    user_key(workspace_id, user_id),
                    Update(set={"admin_keys": count}),
                    condition=Condition("user_admin_keys_new", AllOf((ItemExists(), AttrAbsent("admin_keys")))),
                )
            item = self._store.get(user_key(workspace_id, user_id))
        return Holder(workspace_id, user_id, item, int((item or {}).get("admin_keys", 0)))

    def ensure_workspace(self, workspace_id: str) -> None:
        """Workspaces initialised before the counter existed get it now, counted from their keys and users."""
        if self._store.get(admin_keys_key(workspace_id)) is not None:
            return
        statuses: dict[str, str] = {}
        count = 0
        for key in self._keys(workspace_id):
            user_id = key["user_id"]
            if user_id not in statuses:
                user = self._store.get(user_key(workspace_id, user_id))
                statuses[user_id] = "active" if user is None else status_of(user)
            count += statuses[user_id] == "active"
        with contextlib.suppress(ConditionFailed):  # another request counted first
            self._store.put(
                {**admin_keys_key(workspace_id).as_dict(), "count": count},
                condition=Condition.absent("admin_keys_new"),
            )

    def _keys(self, workspace_id: str) -> list[Item]:
        """The workspace's unrevoked unrestricted admin keys."""
        items = every_item(self._store, f"WS#{workspace_id}", sk_prefix="APIKEY#")
        return [item for item in items if (key := api_key_of(item)).active and key.unrestricted_admin]

    # -- the writes that go with a key ------------------------------------------------------------------------

    def with_key(self, holder: Holder, *, unrestricted: bool, delta: int) -> list[WriteOp]:
        """What must go with minting (``delta`` 1) or revoking (-1) a key of ``holder``: the user still as read
        (usable, to mint), and for an unrestricted admin key both counters moved."""
        key = user_key(holder.workspace_id, holder.user_id)
        unrecorded = Check(key, Condition("user_unrecorded", ItemAbsent()))
        if not unrestricted:
            if delta < 0:
                return []  # revoking a restricted key changes no counter, whatever the user's state
            return [unrecorded if holder.item is None else Check(key, user_usable())]
        ops: list[WriteOp] = []
        if holder.item is None:
            ops.append(unrecorded)
        else:
            count = Compare("admin_keys", "=", holder.admin_keys)
            if delta > 0 or holder.counted:
                unchanged = user_usable(count)
            else:  # a disabled user's key: only the user's own counter moves
                unchanged = Condition("user_unchanged", AllOf((Compare("status", "=", status_of(holder.item)), count)))
            ops.append(Patch(key, Update(add={"admin_keys": delta}), unchanged))
        if holder.counted:
            ops.append(self.move_workspace(holder.workspace_id, delta))
        return ops

    @staticmethod
    def move_workspace(workspace_id: str, delta: int) -> Patch:
        """The workspace's counter moved by ``delta``; a decrease must leave at least one."""
        condition = Condition(REMAIN, Compare("count", ">", -delta)) if delta < 0 else Condition.exists("admin_keys")
        return Patch(admin_keys_key(workspace_id), Update(add={"count": delta}), condition)
