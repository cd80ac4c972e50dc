"""Where a document's item lives (``WS#<ws> / DOC#<id>``), and which document items a caller reaches: in its own
workspace, or in a knowledge base another workspace shares with it. Apart from :mod:`.documents` so that what reads a
document's item by id (image references, image links) needs nothing else of it."""

from __future__ import annotations

from mcpbridge.domain.items import Item, Key
from mcpbridge.domain.knowledge import KnowledgeAccess
from mcpbridge.knowledge.share_records import reachable_shares
from mcpbridge.ports import Store


def doc_key(workspace_id: str, document_id: str) -> Key:
    return Key(f"WS#{workspace_id}", f"DOC#{document_id}")


def reachable_document(store: Store, access: KnowledgeAccess, document_id: str) -> Item | None:
    """The item of a document ``access`` reaches, in its workspace or in a knowledge base shared with it (a caller not
    limited to some knowledge bases names the document, so every share of its workspace counts)."""
    item = store.get(doc_key(access.workspace_id, document_id))
    if item is not None and access.allows(item["knowledge_base_id"]):
        return item
    by_owner: dict[str, set[str]] = {}
    for share in reachable_shares(store, access, named=True):
        by_owner.setdefault(share.owner_workspace_id, set()).add(share.knowledge_base_id)
    for owner, kb_ids in by_owner.items():
        item = store.get(doc_key(owner, document_id))
        if item is not None and item["knowledge_base_id"] in kb_ids:
            return item
    return None
