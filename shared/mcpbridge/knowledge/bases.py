"""Knowledge bases of a workspace: create, list, get, update, delete; names unique case-insensitively.

WS#<ws> / KB#<kb>                 the knowledge base (document_count and wiki_page_count kept by transactions;
                                  language; reanalysing + reanalysis_done/_total while its index is re-analysed)
WS#<ws> / KBNAME#<casefolded>     name guard: a conditional put makes the name unique in the workspace

A knowledge base's ``language`` decides how keyword search analyses its text (stems, stop words). Changing it, or
finding its index analysed by an older release, starts a ``reanalyse_index`` job; searches keep working meanwhile,
and the knowledge base shows the job's progress until it is done.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterable

from mcpbridge.domain.identity import timestamp
from mcpbridge.domain.ids import new_id
from mcpbridge.domain.items import AllOf, Compare, Condition, Item, ItemExists, Key, Patch, Put, Remove, Update
from mcpbridge.domain.knowledge import KnowledgeAccess, KnowledgeBase, Reanalysis
from mcpbridge.domain.names import clean_description, clean_name, fold
from mcpbridge.domain.text_tokens import DEFAULT_LANGUAGE, LANGUAGES
from mcpbridge.errors import ConditionFailed, Conflict, Forbidden, InvalidInput, NotFound
from mcpbridge.knowledge.share_records import (
    ReceivedShare,
    reachable_share,
    reachable_shares,
    received_shares,
    withdraw_shares,
)
from mcpbridge.paging import every_item
from mcpbridge.ports import Clock, Jobs, Store


def kb_key(workspace_id: str, kb_id: str) -> Key:
    return Key(f"WS#{workspace_id}", f"KB#{kb_id}")


def _name_key(workspace_id: str, name: str) -> Key:
    return Key(f"WS#{workspace_id}", f"KBNAME#{fold(name)}")


def clean_language(language: str) -> str:
    language = language.strip().lower()
    if language not in LANGUAGES:
        raise InvalidInput(
            f"unknown language {language[:40]!r}: use auto, none or one of {', '.join(LANGUAGES[2:])}",
            code="invalid_language",
        )
    return language


class KnowledgeBases:
    """Knowledge bases, always seen through a ``KnowledgeAccess`` (a KB outside it does not exist for the caller)."""

    def __init__(self, store: Store, clock: Clock, jobs: Jobs) -> None:
        self._store = store
        self._clock = clock
        self._jobs = jobs

    def create(
        self, access: KnowledgeAccess, *, name: str, description: str = "", language: str = DEFAULT_LANGUAGE
    ) -> KnowledgeBase:
        name, description, language = clean_name(name), clean_description(description), clean_language(language)
        now = timestamp(self._clock.now())
        kb_id = new_id("kb")
        item: Item = {
            **kb_key(access.workspace_id, kb_id).as_dict(),
            "id": kb_id,
            "workspace_id": access.workspace_id,
            "name": name,
            "description": description,
            "language": language,
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
        """The workspace's own knowledge bases ``access`` allows, and those shared with it that its scope lists."""
        items = every_item(self._store, f"WS#{access.workspace_id}", sk_prefix="KB#")
        found = [_kb_of(i) for i in items if access.allows(i["id"])]
        found += self._shared(reachable_shares(self._store, access))
        return sorted(found, key=lambda kb: (fold(kb.name), kb.id))

    def get(self, access: KnowledgeAccess, kb_id: str) -> KnowledgeBase:
        """One knowledge base ``access`` reaches: its workspace's own, or one shared with the workspace (see
        ``knowledge.share_records`` for when a share is reached)."""
        item = self._store.get(kb_key(access.workspace_id, kb_id)) if access.allows(kb_id) else None
        if item is not None:
            return _kb_of(item)
        share = reachable_share(self._store, access, kb_id)
        for kb in self._shared([share] if share is not None else []):
            return kb
        raise NotFound(f"knowledge base {kb_id!r} was not found", code="kb_not_found")

    def own(self, access: KnowledgeAccess, kb_id: str) -> KnowledgeBase:
        """One of the workspace's own knowledge bases (a shared one is not found: only its owner changes it)."""
        item = self._store.get(kb_key(access.workspace_id, kb_id)) if access.allows(kb_id) else None
        if item is None:
            raise NotFound(f"knowledge base {kb_id!r} was not found", code="kb_not_found")
        return _kb_of(item)

    def owner_access(self, access: KnowledgeAccess, kb_id: str, *, write: bool = False) -> KnowledgeAccess:
        """The access to act on ``kb_id`` with, in the workspace that owns it: ``access`` itself for an own
        knowledge base; for a shared one, that knowledge base alone in its owner's workspace (``write``: only when
        the share allows writing, 403 otherwise)."""
        kb = self.get(access, kb_id)
        if kb.workspace_id == access.workspace_id:
            return access
        if write and kb.shared_permission != "write":
            raise Forbidden(
                f"knowledge base {kb_id!r} is shared with this workspace read-only", code="kb_share_read_only"
            )
        return KnowledgeAccess(kb.workspace_id, frozenset({kb_id}))

    def _shared(self, shares: Iterable[ReceivedShare]) -> list[KnowledgeBase]:
        found: list[KnowledgeBase] = []
        for share in shares:
            item = self._store.get(kb_key(share.owner_workspace_id, share.knowledge_base_id))
            if item is not None:
                found.append(dataclasses.replace(_kb_of(item), shared_permission=share.permission))
        return found

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
        named: dict[str, KnowledgeBase] | None = None
        chosen: dict[str, KnowledgeBase] = {}
        for selector in wanted:
            kb = by_id.get(selector) or by_name.get(fold(selector))
            if kb is None and access.knowledge_base_ids is None:
                # A caller not limited to some knowledge bases reaches a shared one by naming it.
                if named is None:
                    shared = self._shared(received_shares(self._store, access.workspace_id))
                    named = {kb.id: kb for kb in shared} | {fold(kb.name): kb for kb in shared}
                kb = named.get(selector) or named.get(fold(selector))
            if kb is None:
                raise NotFound(
                    f"knowledge base {selector!r} was not found or is out of scope; list the knowledge bases to see "
                    "what is available",
                    code="kb_not_found",
                )
            chosen[kb.id] = kb
        return list(chosen.values())

    def update(
        self,
        access: KnowledgeAccess,
        kb_id: str,
        *,
        name: str | None = None,
        description: str | None = None,
        language: str | None = None,
    ) -> KnowledgeBase:
        """Change the name, description and/or language; a new language re-analyses the index in the background."""
        current = self.own(access, kb_id)
        changes: dict[str, object] = {"updated_at": timestamp(self._clock.now())}
        if description is not None:
            changes["description"] = clean_description(description)
        if language is not None:
            changes["language"] = clean_language(language)
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
        if language is not None and changes["language"] != current.language:
            self.request_reanalysis(access.workspace_id, kb_id, str(changes["language"]))
        return self.get(access, kb_id)

    def request_reanalysis(self, workspace_id: str, kb_id: str, language: str) -> bool:
        """Start a re-analysis of the index for ``language`` unless one for it is already under way (returns
        whether one was started)."""
        key = kb_key(workspace_id, kb_id)
        fresh = Condition("kb_reanalysis_new", AllOf((ItemExists(), Compare("reanalysing", "<>", language))))
        changes = {"reanalysing": language, "reanalysis_done": 0, "reanalysis_total": 0}
        try:
            self._store.update(key, Update(set=changes), condition=fresh)
        except ConditionFailed:
            return False
        self._jobs.submit(
            "reanalyse_index", {"workspace_id": workspace_id, "knowledge_base_id": kb_id, "language": language}
        )
        return True

    def record_reanalysis(self, workspace_id: str, kb_id: str, language: str, done: int, total: int) -> None:
        """The progress of the re-analysis for ``language`` (ignored once another one replaced it)."""
        mine = Condition.equals("kb_reanalysis_mine", "reanalysing", language)
        changes = {"reanalysis_done": done, "reanalysis_total": total}
        with contextlib.suppress(ConditionFailed):
            self._store.update(kb_key(workspace_id, kb_id), Update(set=changes), condition=mine)

    def finish_reanalysis(self, workspace_id: str, kb_id: str, language: str) -> None:
        mine = Condition.equals("kb_reanalysis_mine", "reanalysing", language)
        gone = Update(remove=["reanalysing", "reanalysis_done", "reanalysis_total"])
        with contextlib.suppress(ConditionFailed):
            self._store.update(kb_key(workspace_id, kb_id), gone, condition=mine)

    def language_of(self, workspace_id: str, kb_id: str) -> str | None:
        """The knowledge base's language, for jobs (None when it no longer exists)."""
        item = self._store.get(kb_key(workspace_id, kb_id))
        return None if item is None else str(item.get("language") or DEFAULT_LANGUAGE)

    def delete(self, access: KnowledgeAccess, kb_id: str) -> None:
        """Remove the knowledge base now; its documents, pages and index are cleaned up by a job."""
        current = self.own(access, kb_id)
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
        withdraw_shares(self._store, access.workspace_id, kb_id)


def _kb_of(item: Item) -> KnowledgeBase:
    reanalysing = item.get("reanalysing")
    return KnowledgeBase(
        id=item["id"],
        workspace_id=item["workspace_id"],
        name=item["name"],
        description=item.get("description", ""),
        document_count=int(item.get("document_count", 0)),
        wiki_page_count=int(item.get("wiki_page_count", 0)),
        created_at=item["created_at"],
        updated_at=item["updated_at"],
        language=str(item.get("language") or DEFAULT_LANGUAGE),
        reanalysis=None
        if reanalysing is None
        else Reanalysis(str(reanalysing), int(item.get("reanalysis_done", 0)), int(item.get("reanalysis_total", 0))),
    )
