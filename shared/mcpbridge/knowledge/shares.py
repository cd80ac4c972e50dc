"""Sharing a knowledge base with other workspaces: the owner's admin shares it (read or read-write), lists its
shares, changes or withdraws one; the receiving workspace lists what is shared with it.

The records and how a caller reaches a shared knowledge base are in :mod:`mcpbridge.knowledge.share_records`. Only
the owning workspace shares or withdraws: a receiver asking for another workspace's knowledge base gets the same 404
as for one that does not exist, so nothing tells it what else the owner holds.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass

from mcpbridge.domain.identity import Principal, timestamp
from mcpbridge.domain.ids import is_id
from mcpbridge.domain.items import Check, Condition, Item, Put, Remove
from mcpbridge.domain.knowledge import KnowledgeAccess, KnowledgeBase
from mcpbridge.errors import ConditionFailed, Forbidden, InvalidInput, NotFound
from mcpbridge.identity.records import workspace_key
from mcpbridge.knowledge.bases import KnowledgeBases, kb_key
from mcpbridge.knowledge.share_records import (
    PERMISSIONS,
    SharePermission,
    owner_share_key,
    received_share_key,
    received_shares,
)
from mcpbridge.paging import every_item
from mcpbridge.ports import Clock, Store


@dataclass(frozen=True)
class KnowledgeBaseShare:
    """A knowledge base of the owner's workspace shared with another workspace."""

    knowledge_base_id: str
    workspace_id: str
    """The workspace it is shared with."""
    permission: SharePermission
    created_at: str
    updated_at: str


@dataclass(frozen=True)
class SharedKnowledgeBase:
    """A knowledge base shared with the caller's workspace, as the caller sees it."""

    knowledge_base: KnowledgeBase
    permission: SharePermission
    shared_at: str


def clean_permission(permission: str) -> SharePermission:
    for known in PERMISSIONS:
        if permission == known:
            return known
    raise InvalidInput("permission must be read or write", code="invalid_share_permission")


class KnowledgeShares:
    """Shares of a workspace's knowledge bases with other workspaces, decided by the owner's admins."""

    def __init__(self, store: Store, clock: Clock, bases: KnowledgeBases) -> None:
        self._store = store
        self._clock = clock
        self._bases = bases

    def share(
        self, principal: Principal, kb_id: str, workspace_id: str, *, permission: str = "read"
    ) -> KnowledgeBaseShare:
        """Share ``kb_id`` with ``workspace_id`` (or change the permission of its share)."""
        access = _owner_access(principal)
        level = clean_permission(permission)
        kb = self._bases.own(access, kb_id)
        target = (workspace_id or "").strip()
        if target == principal.workspace_id:
            raise InvalidInput("a knowledge base cannot be shared with its own workspace", code="share_with_self")
        receiver = self._store.get(workspace_key(target)) if is_id(target, "ws") else None
        if receiver is None or receiver.get("status") != "active":
            raise NotFound("no such active workspace to share with", code="workspace_not_found")
        now = timestamp(self._clock.now())
        earlier = self._store.get(owner_share_key(kb.workspace_id, kb.id, target))
        created = str(earlier["created_at"]) if earlier is not None else now
        owner_side: Item = {
            **owner_share_key(kb.workspace_id, kb.id, target).as_dict(),
            "kb_id": kb.id,
            "workspace_id": target,
            "permission": level,
            "created_at": created,
            "updated_at": now,
            "created_by": principal.user_id,
        }
        receiver_side = {
            **received_share_key(target, kb.id).as_dict(),
            "kb_id": kb.id,
            "owner_workspace_id": kb.workspace_id,
            "permission": level,
            "created_at": created,
        }
        try:
            self._store.transact(
                [
                    Put(owner_side),
                    Put(receiver_side),
                    # Both still there: a knowledge base deleted meanwhile is not shared.
                    Check(workspace_key(target), Condition.equals("share_workspace_active", "status", "active")),
                    Check(kb_key(kb.workspace_id, kb.id), Condition.exists("kb_exists")),
                ]
            )
        except ConditionFailed as lost:
            if lost.condition == "share_workspace_active":
                raise NotFound("no such active workspace to share with", code="workspace_not_found") from None
            raise NotFound(f"knowledge base {kb_id!r} was not found", code="kb_not_found") from None
        return _share_of(owner_side)

    def shares(self, principal: Principal, kb_id: str) -> builtins.list[KnowledgeBaseShare]:
        """The workspaces ``kb_id`` is shared with."""
        kb = self._bases.own(_owner_access(principal), kb_id)
        items = every_item(self._store, f"WS#{kb.workspace_id}", sk_prefix=f"KBSHARE#{kb.id}#")
        return [_share_of(item) for item in items]

    def unshare(self, principal: Principal, kb_id: str, workspace_id: str) -> None:
        """Withdraw the share of ``kb_id`` with ``workspace_id``: every access from that workspace is refused at
        once, endpoints that still name the knowledge base included."""
        kb = self._bases.own(_owner_access(principal), kb_id)
        target = (workspace_id or "").strip()
        not_shared = NotFound(f"knowledge base {kb_id!r} is not shared with that workspace", code="share_not_found")
        if not target or "#" in target:
            raise not_shared
        try:
            self._store.transact(
                [
                    Remove(owner_share_key(kb.workspace_id, kb.id, target), Condition.exists("share_exists")),
                    Remove(received_share_key(target, kb.id)),
                ]
            )
        except ConditionFailed:
            raise not_shared from None

    def shared_with(self, access: KnowledgeAccess) -> builtins.list[SharedKnowledgeBase]:
        """The knowledge bases other workspaces share with the caller's, those its scope allows (a caller limited
        to some knowledge bases sees the shared ones among them)."""
        found: list[SharedKnowledgeBase] = []
        for share in received_shares(self._store, access.workspace_id):
            if not access.allows(share.knowledge_base_id):
                continue
            try:
                kb = self._bases.get(access, share.knowledge_base_id)
            except NotFound:
                continue  # deleted by its owner meanwhile
            found.append(SharedKnowledgeBase(kb, share.permission, share.shared_at))
        return sorted(found, key=lambda s: (s.knowledge_base.name.casefold(), s.knowledge_base.id))


def _owner_access(principal: Principal) -> KnowledgeAccess:
    """Sharing is the owner's admin's decision: an admin key with ``manage_knowledge``, not limited to some
    knowledge bases (a limited key could otherwise hand out more than it reaches)."""
    if not principal.is_admin:
        raise Forbidden("this needs an admin API key", code="admin_required")
    if not principal.scope.allows("manage_knowledge"):
        raise Forbidden("this API key lacks the manage_knowledge capability", code="capability_missing")
    if principal.scope.knowledge_base_ids is not None:
        raise Forbidden("a key limited to some knowledge bases cannot share them", code="scope_exceeded")
    return KnowledgeAccess(principal.workspace_id, None)


def _share_of(item: Item) -> KnowledgeBaseShare:
    return KnowledgeBaseShare(
        knowledge_base_id=str(item["kb_id"]),
        workspace_id=str(item["workspace_id"]),
        permission=clean_permission(str(item["permission"])),
        created_at=str(item["created_at"]),
        updated_at=str(item["updated_at"]),
    )
