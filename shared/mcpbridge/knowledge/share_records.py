"""The records of knowledge bases shared across workspaces, and how a caller's reach is read from them.

    WS#<owner> / KBSHARE#<kb>#<ws>   the owner's side: knowledge base <kb> is shared with workspace <ws>
    WS#<ws>    / SHAREDKB#<kb>       the receiver's side: <kb> of workspace ``owner_workspace_id`` is shared with it

Both sides are written and removed in one transaction. Every access reads the receiver's side anew, so a share that
is withdrawn refuses the very next request, whatever endpoints or keys still name the knowledge base.

A shared knowledge base is reached by a caller whose scope lists it, and, for a caller not limited to some knowledge
bases, when it names it (by id or name): "every knowledge base of the workspace" means the workspace's own ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mcpbridge.domain.items import Item, Key, Remove
from mcpbridge.domain.knowledge import KnowledgeAccess
from mcpbridge.paging import every_item
from mcpbridge.ports import Store

SharePermission = Literal["read", "write"]
PERMISSIONS: tuple[SharePermission, ...] = ("read", "write")


def owner_share_key(owner_workspace_id: str, kb_id: str, workspace_id: str) -> Key:
    return Key(f"WS#{owner_workspace_id}", f"KBSHARE#{kb_id}#{workspace_id}")


def received_share_key(workspace_id: str, kb_id: str) -> Key:
    return Key(f"WS#{workspace_id}", f"SHAREDKB#{kb_id}")


@dataclass(frozen=True)
class ReceivedShare:
    """A knowledge base another workspace shares with the caller's."""

    knowledge_base_id: str
    owner_workspace_id: str
    permission: SharePermission
    shared_at: str


def received_of(item: Item) -> ReceivedShare:
    permission: SharePermission = "write" if item.get("permission") == "write" else "read"
    return ReceivedShare(
        knowledge_base_id=str(item["kb_id"]),
        owner_workspace_id=str(item["owner_workspace_id"]),
        permission=permission,
        shared_at=str(item["created_at"]),
    )


def received_share(store: Store, workspace_id: str, kb_id: str) -> ReceivedShare | None:
    """The share of ``kb_id`` with the workspace, if there is one now."""
    item = store.get(received_share_key(workspace_id, kb_id))
    return None if item is None else received_of(item)


def received_shares(store: Store, workspace_id: str) -> list[ReceivedShare]:
    """Every knowledge base shared with the workspace now."""
    return [received_of(i) for i in every_item(store, f"WS#{workspace_id}", sk_prefix="SHAREDKB#")]


def reachable_shares(store: Store, access: KnowledgeAccess, *, named: bool = False) -> list[ReceivedShare]:
    """The shares ``access`` reaches: those its scope lists; with ``named``, also every one for a caller not limited
    to some knowledge bases (it named the knowledge base or document it asks for)."""
    if access.knowledge_base_ids is None and not named:
        return []
    if access.knowledge_base_ids is not None and len(access.knowledge_base_ids) <= 4:
        found = (received_share(store, access.workspace_id, kb_id) for kb_id in sorted(access.knowledge_base_ids))
        return [share for share in found if share is not None]
    return [s for s in received_shares(store, access.workspace_id) if access.allows(s.knowledge_base_id)]


def reachable_share(store: Store, access: KnowledgeAccess, kb_id: str) -> ReceivedShare | None:
    """The share of ``kb_id`` when ``access`` reaches it (listed in its scope, or named by an unlimited caller)."""
    if not access.allows(kb_id):
        return None
    return received_share(store, access.workspace_id, kb_id)


def owner_workspace(store: Store, access: KnowledgeAccess, kb_id: str) -> str:
    """The workspace that holds ``kb_id`` for a caller: the owner of a share it reaches, else its own."""
    share = reachable_share(store, access, kb_id)
    return access.workspace_id if share is None else share.owner_workspace_id


def forget_workspace_shares(store: Store, workspace_id: str) -> None:
    """Withdraw every share a workspace being purged gave or received, both sides of each."""
    for item in list(every_item(store, f"WS#{workspace_id}", sk_prefix="KBSHARE#")):
        withdraw_shares(store, workspace_id, str(item["kb_id"]))
    for share in received_shares(store, workspace_id):
        store.transact(
            [
                Remove(owner_share_key(share.owner_workspace_id, share.knowledge_base_id, workspace_id)),
                Remove(received_share_key(workspace_id, share.knowledge_base_id)),
            ]
        )


def withdraw_shares(store: Store, owner_workspace_id: str, kb_id: str) -> None:
    """Withdraw every share of a knowledge base (it is being deleted)."""
    for item in list(every_item(store, f"WS#{owner_workspace_id}", sk_prefix=f"KBSHARE#{kb_id}#")):
        receiver = str(item["workspace_id"])
        store.transact(
            [Remove(owner_share_key(owner_workspace_id, kb_id, receiver)), Remove(received_share_key(receiver, kb_id))]
        )
