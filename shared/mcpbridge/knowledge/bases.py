"""Knowledge bases of a workspace: create, list, get, update, delete; names unique case-insensitively.

WS#<ws> / KB#<kb>                 the knowledge base (document_count and wiki_page_count kept by transactions)
WS#<ws> / KBNAME#<casefolded>     name guard: a conditional put makes the name unique in the workspace
"""

from __future__ import annotations

from collections.abc import Iterable

from mcpbridge.domain.identity import timestamp
from mcpbridge.domain.ids import new_id
from mcpbridge.domain.items import Condition, Item, Key, Patch, Put, Remove, Update
from mcpbridge.domain.knowledge import KnowledgeAccess, KnowledgeBase
from mcpbridge.domain.names import clean_description, clean_name, fold
from mcpbridge.errors import ConditionFailed, Conflict, NotFound
from mcpbridge.paging import every_item
from mcpbridge.ports import Clock, Jobs, Store


def kb_key(workspace_id: str, kb_id: str) -> Key:
    return Key(f"WS#{workspace_id}", f"KB#{kb_id}")


def _name_key(workspace_id: str, name: str) -> Key:
    return Key(f"WS#{workspace_id}", f"KBNAME#{fold(name)}")


class KnowledgeBases:
    """Knowledge bases, always seen through a ``KnowledgeAccess`` (a KB outside it does not exist for the caller)."""

    def __init__(self, store: Store, clock: Clock, jobs: Jobs) -> None:
        self._store = store
        self._clock = clock
        self._jobs = jobs

    def create(self, access: KnowledgeAccess, *, name: str, description: str = "") -> KnowledgeBase:
        name, description = clean_name(name), clean_description(description)
        now = timestamp(self._clock.now())
        kb_id = new_id("kb")
        item: Item = {
            **kb_key(access.workspace_id, kb_id).as_dict(),
            "id": kb_id,
            "workspace_id": access.workspace_id,
            "name": name,
            "description": description,
            "document_count": 0,
            "wiki_page_count": 0,
            "created_at": now,
            "updated_at": now,
        }
        guard = {**_name_key(access.workspace_id, name).as_dict(), "kb_id": kb_id}
        try:
            self._store.transact(
                [Put(guard, Condition.absent("kb_name_unique")), Put(item, Condition.absent("kb_new"))]
            )
        except ConditionFailed as lost:
            if lost.condition == "kb_name_unique":
                raise Conflict(f"a knowledge base named {name!r} already exists", code="kb_name_taken") from None
            raise
        return _kb_of(item)

    def list_bases(self, access: KnowledgeAccess) -> list[KnowledgeBase]:
        items = every_item(self._store, f"WS#{access.workspace_id}", sk_prefix="KB#")
        found = [_kb_of(i) for i in items if access.allows(i["id"])]
        return sorted(found, key=lambda kb: (fold(kb.name), kb.id))

    def get(self, access: KnowledgeAccess, kb_id: str) -> KnowledgeBase:
        item = self._store.get(kb_key(access.workspace_id, kb_id)) if access.allows(kb_id) else None
        if item is None:
            raise NotFound(f"knowledge base {kb_id!r} was not found", code="kb_not_found")
        return _kb_of(item)

    def select(self, access: KnowledgeAccess, selectors: Iterable[str] | None) -> list[KnowledgeBase]:
        """Knowledge bases named by id or case-insensitive name (all reachable ones when there are no selectors).

        A selector that matches nothing reachable is an error, never silently dropped: a search must not widen or
        narrow without the caller knowing.
        """
        available = self.list_bases(access)
        wanted = [s.strip() for s in selectors or [] if s and s.strip()]
        if not wanted:
            return available
        by_id = {kb.id: kb for kb in available}
        by_name = {fold(kb.name): kb for kb in available}
        chosen: dict[str, KnowledgeBase] = {}
        for selector in wanted:
            kb = by_id.get(selector) or by_name.get(fold(selector))
            if kb is None:
                raise NotFound(
                    f"knowledge base {selector!r} was not found or is out of scope; list the knowledge bases to see "
                    "what is available",
                    code="kb_not_found",
                )
            chosen[kb.id] = kb
        return list(chosen.values())

    def update(
        self, access: KnowledgeAccess, kb_id: str, *, name: str | None = None, description: str | None = None
    ) -> KnowledgeBase:
        current = self.get(access, kb_id)
        changes: dict[str, object] = {"updated_at": timestamp(self._clock.now())}
        if description is not None:
            changes["description"] = clean_description(description)
        ops: list[Put | Patch | Remove] = []
        if name is not None:
            new_name = clean_name(name)
            changes["name"] = new_name
            if fold(new_name) != fold(current.name):
                ops += [
                    Remove(
                        _name_key(access.workspace_id, current.name), Condition.equals("kb_name_owned", "kb_id", kb_id)
                    ),
                    Put(
                        {**_name_key(access.workspace_id, new_name).as_dict(), "kb_id": kb_id},
                        Condition.absent("kb_name_unique"),
                    ),
                ]
        ops.append(Patch(kb_key(access.workspace_id, kb_id), Update(set=changes), Condition.exists("kb_exists")))
        try:
            self._store.transact(ops)
        except ConditionFailed as lost:
            if lost.condition == "kb_name_unique":
                raise Conflict(f"a knowledge base named {name!r} already exists", code="kb_name_taken") from None
            raise NotFound(f"knowledge base {kb_id!r} was not found", code="kb_not_found") from None
        return self.get(access, kb_id)

    def delete(self, access: KnowledgeAccess, kb_id: str) -> None:
        """Remove the knowledge base now; its documents, pages and index are cleaned up by a job."""
        current = self.get(access, kb_id)
        try:
            self._store.transact(
                [
                    Remove(kb_key(access.workspace_id, kb_id), Condition.exists("kb_exists")),
                    Remove(
                        _name_key(access.workspace_id, current.name), Condition.equals("kb_name_owned", "kb_id", kb_id)
                    ),
                ]
            )
        except ConditionFailed:
            raise NotFound(f"knowledge base {kb_id!r} was not found", code="kb_not_found") from None
        self._jobs.submit("purge_knowledge_base", {"workspace_id": access.workspace_id, "knowledge_base_id": kb_id})


def _kb_of(item: Item) -> KnowledgeBase:
    return KnowledgeBase(
        id=item["id"],
        workspace_id=item["workspace_id"],
        name=item["name"],
        description=item.get("description", ""),
        document_count=int(item.get("document_count", 0)),
        wiki_page_count=int(item.get("wiki_page_count", 0)),
        created_at=item["created_at"],
        updated_at=item["updated_at"],
    )
