"""Wiki pages of a knowledge base: slug (``concept/rag``), type, title, Markdown content and links.

    KB#<kb> / WIKI#<slug>     a page (the knowledge base's wiki_page_count moves with it, in one transaction)

A knowledge base "has a wiki" once it has a page. Search takes a case-insensitive RE2 pattern matched line by line
(``knowledge.patterns.line_pattern``): text RE2 cannot parse is matched literally unless the caller insisted on a
regex, but a construct only a regex has (a lookaround, a backreference, ...) is refused by name. One search scans at
most one budget of text; when it runs out the outcome says so (``truncated``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from mcpbridge.domain.identity import timestamp
from mcpbridge.domain.items import Condition, Item, Key, Patch, Put, Remove, Update
from mcpbridge.domain.knowledge import KnowledgeAccess, KnowledgeBase
from mcpbridge.errors import ConditionFailed, Conflict, InvalidInput, NotFound
from mcpbridge.knowledge.bases import KnowledgeBases, kb_key
from mcpbridge.knowledge.patterns import LinePattern, ScanBudget, line_pattern
from mcpbridge.paging import every_item
from mcpbridge.ports import Clock, Store

PAGE_TYPES = ("entity", "concept", "summary", "topic", "guide", "faq", "overview", "note")
SLUG_RE = re.compile(r"[a-z0-9][a-z0-9_-]*(?:/[a-z0-9][a-z0-9_-]*)*")
SLUG_MAX = 200
TITLE_MAX_BYTES = 255
CONTENT_MAX_BYTES = 200 * 1024
SEARCH_LIMIT_DEFAULT = 10
SEARCH_LIMIT_MAX = 50
SEARCH_LINES = 5  # lines shown per page found
INDEX_LIMIT_DEFAULT = 50
INDEX_LIMIT_MAX = 200
_WIKI_LINK = re.compile(r"\[\[([^\]|#]+)(?:[|#][^\]]*)?\]\]")


def page_key(kb_id: str, slug: str) -> Key:
    return Key(f"KB#{kb_id}", f"WIKI#{slug}")


@dataclass(frozen=True)
class WikiPage:
    knowledge_base_id: str
    slug: str
    type: str
    title: str
    content: str
    links: list[str]
    created_at: str
    updated_at: str


@dataclass(frozen=True)
class WikiMatch:
    page: WikiPage
    lines: list[tuple[int, str]]
    """Lines of the page (1-based, the title counting as line 0) holding a match."""


@dataclass(frozen=True)
class WikiSearchOutcome:
    matches: list[WikiMatch]
    truncated: bool = False
    """The scan budget ran out before every page was read: there may be more matches (``notices`` says so)."""
    notices: list[str] = field(default_factory=list)


def clean_slug(slug: str) -> str:
    slug = slug.strip().strip("/").lower()
    if not slug or len(slug) > SLUG_MAX or not SLUG_RE.fullmatch(slug):
        raise InvalidInput(
            "slug must be lower-case words of letters, digits, - or _, separated by / (e.g. concept/rag)",
            code="invalid_slug",
        )
    return slug


def _clean_type(page_type: str) -> str:
    page_type = page_type.strip().lower()
    if page_type not in PAGE_TYPES:
        raise InvalidInput(f"type must be one of {', '.join(PAGE_TYPES)}", code="invalid_page_type")
    return page_type


def _clean_title(title: str) -> str:
    title = title.strip()
    if not title or len(title.encode()) > TITLE_MAX_BYTES:
        raise InvalidInput(f"title must be 1 to {TITLE_MAX_BYTES} bytes", code="invalid_title")
    return title


def _clean_content(content: str) -> str:
    if len(content.encode()) > CONTENT_MAX_BYTES:
        raise InvalidInput(f"content is longer than {CONTENT_MAX_BYTES} bytes", code="page_too_large")
    return content


def _links(content: str, given: Iterable[str]) -> list[str]:
    found = [clean_slug(s) for s in given] + [m.group(1).strip().lower() for m in _WIKI_LINK.finditer(content)]
    return sorted({s for s in found if SLUG_RE.fullmatch(s)})


def search_pattern(query: str, regex: bool | None) -> LinePattern:
    """``regex`` None: a regex when RE2 accepts it, else literal; True: must be a valid regex; False: literal."""
    if not query.strip():
        raise InvalidInput("query is required", code="invalid_query")
    return line_pattern(query, regex)


class Wiki:
    def __init__(self, store: Store, clock: Clock, bases: KnowledgeBases) -> None:
        self._store = store
        self._clock = clock
        self._bases = bases

    def create(
        self,
        access: KnowledgeAccess,
        kb_id: str,
        *,
        slug: str,
        type: str,
        title: str,
        content: str,
        links: Sequence[str] = (),
    ) -> WikiPage:
        self._bases.own(access, kb_id)  # a shared knowledge base's wiki is its owner's to write
        slug, page_type, title, content = (
            clean_slug(slug),
            _clean_type(type),
            _clean_title(title),
            _clean_content(content),
        )
        now = timestamp(self._clock.now())
        item: Item = {
            **page_key(kb_id, slug).as_dict(),
            "knowledge_base_id": kb_id,
            "workspace_id": access.workspace_id,
            "slug": slug,
            "type": page_type,
            "title": title,
            "content": content,
            "links": _links(content, links),
            "created_at": now,
            "updated_at": now,
        }
        try:
            self._store.transact(
                [
                    Put(item, Condition.absent("page_new")),
                    Patch(
                        kb_key(access.workspace_id, kb_id),
                        Update(add={"wiki_page_count": 1}),
                        Condition.exists("kb_exists"),
                    ),
                ]
            )
        except ConditionFailed as lost:
            if lost.condition == "page_new":
                raise Conflict(f"a page with slug {slug!r} already exists", code="page_exists") from None
            raise NotFound(f"knowledge base {kb_id!r} was not found", code="kb_not_found") from None
        return _page_of(item)

    def get(self, access: KnowledgeAccess, kb_id: str, slug: str) -> WikiPage:
        owner = self._bases.get(access, kb_id).workspace_id
        item = self._store.get(page_key(kb_id, clean_slug(slug)))
        if item is None or item.get("workspace_id") != owner:
            raise NotFound(f"wiki page {slug!r} was not found", code="page_not_found")
        return _page_of(item)

    def update(
        self,
        access: KnowledgeAccess,
        kb_id: str,
        slug: str,
        *,
        type: str | None = None,
        title: str | None = None,
        content: str | None = None,
        links: Sequence[str] | None = None,
    ) -> WikiPage:
        self._bases.own(access, kb_id)
        current = self.get(access, kb_id, slug)
        changes: dict[str, object] = {"updated_at": timestamp(self._clock.now())}
        if type is not None:
            changes["type"] = _clean_type(type)
        if title is not None:
            changes["title"] = _clean_title(title)
        if content is not None:
            changes["content"] = _clean_content(content)
        if content is not None or links is not None:
            changes["links"] = _links(content if content is not None else current.content, links or [])
        try:
            item = self._store.update(
                page_key(kb_id, current.slug), Update(set=changes), condition=Condition.exists("page_exists")
            )
        except ConditionFailed:
            raise NotFound(f"wiki page {slug!r} was not found", code="page_not_found") from None
        return _page_of(item)

    def delete(self, access: KnowledgeAccess, kb_id: str, slug: str) -> None:
        self._bases.own(access, kb_id)
        current = self.get(access, kb_id, slug)
        try:
            self._store.transact(
                [
                    Remove(page_key(kb_id, current.slug), Condition.exists("page_exists")),
                    Patch(
                        kb_key(access.workspace_id, kb_id),
                        Update(add={"wiki_page_count": -1}),
                        Condition.exists("kb_exists"),
                    ),
                ]
            )
        except ConditionFailed:
            raise NotFound(f"wiki page {slug!r} was not found", code="page_not_found") from None

    def pages(self, kb_id: str) -> list[WikiPage]:
        return [_page_of(i) for i in every_item(self._store, f"KB#{kb_id}", sk_prefix="WIKI#")]

    def wiki_bases(self, access: KnowledgeAccess, selectors: Iterable[str] | None) -> list[KnowledgeBase]:
        with_wiki = [kb for kb in self._bases.select(access, selectors) if kb.wiki_page_count > 0]
        if not with_wiki:
            raise InvalidInput(
                "none of the selected knowledge bases has a wiki; list the knowledge bases and pick one whose "
                'capabilities include "wiki"',
                code="no_wiki",
            )
        return with_wiki

    def search(
        self,
        access: KnowledgeAccess,
        query: str,
        *,
        regex: bool | None = None,
        knowledge_base_ids: Iterable[str] | None = None,
        limit: int = SEARCH_LIMIT_DEFAULT,
    ) -> WikiSearchOutcome:
        """Pages whose title or lines match, title hits first; pages are read lazily, until the scan budget ends."""
        pattern = search_pattern(query, regex)
        limit = SEARCH_LIMIT_DEFAULT if limit < 1 else min(limit, SEARCH_LIMIT_MAX)
        budget = ScanBudget()
        matches: list[WikiMatch] = []
        scanned = 0
        for kb in self.wiki_bases(access, knowledge_base_ids):
            for item in every_item(self._store, f"KB#{kb.id}", sk_prefix="WIKI#"):
                page = _page_of(item)
                lines = [(0, page.title)] if pattern.matches(page.title, budget) else []
                content = page.content.split("\n")
                found = pattern.matching_lines(page.content, budget, limit=SEARCH_LINES - len(lines))
                lines += [(n + 1, content[n]) for n in found]
                if lines:
                    matches.append(WikiMatch(page, lines))
                if budget.exhausted:
                    notice = (
                        f"the search stopped after {scanned} whole page(s), at {page.slug!r} in {kb.name!r}: the scan "
                        "budget of one search ran out, so there may be more matches; narrow it with "
                        "knowledge_base_ids or use a simpler pattern"
                    )
                    return WikiSearchOutcome(_ranked(matches, limit), truncated=True, notices=[notice])
                scanned += 1
        return WikiSearchOutcome(_ranked(matches, limit))

    def read(self, access: KnowledgeAccess, slug: str, *, knowledge_base_id: str | None = None) -> WikiPage:
        slug = clean_slug(slug)
        bases = self.wiki_bases(access, [knowledge_base_id] if knowledge_base_id else None)
        found = [p for kb in bases if (p := self._store.get(page_key(kb.id, slug))) is not None]
        if not found:
            raise NotFound(f"wiki page {slug!r} was not found", code="page_not_found")
        if len(found) > 1:
            raise InvalidInput(
                f"the slug {slug!r} exists in several wikis; give knowledge_base_id",
                code="ambiguous_slug",
                details={"knowledge_base_ids": sorted(p["knowledge_base_id"] for p in found)},
            )
        return _page_of(found[0])

    def index(self, access: KnowledgeAccess, kb_id: str, *, limit: int = INDEX_LIMIT_DEFAULT) -> dict[str, object]:
        """Pages grouped by type (at most ``limit`` per type), with the knowledge base's description as intro."""
        kb = self._bases.get(access, kb_id)
        limit = INDEX_LIMIT_DEFAULT if limit < 1 else min(limit, INDEX_LIMIT_MAX)
        groups: dict[str, list[dict[str, str]]] = {}
        totals: dict[str, int] = {}
        for page in sorted(self.pages(kb.id), key=lambda p: (p.type, p.title.casefold(), p.slug)):
            totals[page.type] = totals.get(page.type, 0) + 1
            if len(groups.setdefault(page.type, [])) < limit:
                groups[page.type].append({"slug": page.slug, "title": page.title})
        return {
            "knowledge_base_id": kb.id,
            "intro": kb.description,
            "groups": [
                {"type": t, "total": totals[t], "pages": groups[t], "truncated": totals[t] > len(groups[t])}
                for t in sorted(groups)
            ],
        }


def _ranked(matches: list[WikiMatch], limit: int) -> list[WikiMatch]:
    # Title hits first, then by how much matched.
    return sorted(matches, key=lambda m: (m.lines[0][0] != 0, -len(m.lines), m.page.slug))[:limit]


def _page_of(item: Item) -> WikiPage:
    return WikiPage(
        knowledge_base_id=item["knowledge_base_id"],
        slug=item["slug"],
        type=item["type"],
        title=item["title"],
        content=item["content"],
        links=list(item.get("links", [])),
        created_at=item["created_at"],
        updated_at=item["updated_at"],
    )
