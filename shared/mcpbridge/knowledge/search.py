"""Search (keyword, semantic, hybrid) and grep over the knowledge bases a caller may reach.

Scope rules, shared by the REST API and the MCP tools: knowledge bases are selected by id or case-insensitive
name; ``knowledge_ids`` (documents) must be non-empty once given, are trimmed and de-duplicated, and each must
belong to the selected knowledge bases. A filter is applied before recall and never falls back to a wider search.

Drafts: only a scope made with ``include_drafts`` (the REST API's, when the caller asks) reads the drafts' indexes
(``knowledge.documents.drafts_index``); their hits carry their knowledge base's own id and are named in ``drafts``.
The MCP tools never ask, so endpoints see published documents only.

Grep patterns run on RE2 (``knowledge.patterns``): linear time, a bounded scan per call, and a clear refusal for what
RE2 cannot run.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from mcpbridge.domain.knowledge import Chunk, Hit, KnowledgeAccess, KnowledgeBase
from mcpbridge.domain.ranking import fuse
from mcpbridge.domain.text_tokens import literal_words
from mcpbridge.errors import InvalidInput, NotFound
from mcpbridge.knowledge.bases import KnowledgeBases
from mcpbridge.knowledge.documents import Documents, drafts_index
from mcpbridge.knowledge.patterns import ScanBudget, grep_pattern
from mcpbridge.ports import Embedder, SearchIndex

SearchMode = Literal["hybrid", "semantic", "keyword"]
LIMIT_DEFAULT = 10
LIMIT_MAX = 30
GREP_CANDIDATES = 30
QUERY_MAX_CHARS = 2000
NO_EMBEDDER = "no embedding provider configured"
NOTHING_RELEVANT = "nothing relevant found: no result reaches the relevance floor, these are only the closest matches"


@dataclass(frozen=True)
class Scope:
    """The resolved target of a search: knowledge bases, and documents when the caller named some."""

    knowledge_bases: list[KnowledgeBase]
    document_ids: frozenset[str] | None
    include_drafts: bool = False

    @property
    def kb_ids(self) -> list[str]:
        return [kb.id for kb in self.knowledge_bases]

    @property
    def with_drafts(self) -> list[KnowledgeBase]:
        """The knowledge bases whose drafts are searched: none unless asked, and never a base another workspace
        shares with the caller's (its drafts are its owner's work in progress)."""
        return [kb for kb in self.knowledge_bases if kb.shared_permission is None] if self.include_drafts else []

    @property
    def index_ids(self) -> list[str]:
        """The indexes searched: the knowledge bases', and their drafts' when asked."""
        return self.kb_ids + [drafts_index(kb.id) for kb in self.with_drafts]

    def of_knowledge_base(self, chunk: Chunk) -> tuple[Chunk, bool]:
        """A chunk found in one of ``index_ids`` under its knowledge base's id, and whether it is a draft's."""
        for kb in self.with_drafts:
            if chunk.knowledge_base_id == drafts_index(kb.id):
                return replace(chunk, knowledge_base_id=kb.id), True
        return chunk, False


@dataclass(frozen=True)
class SearchOutcome:
    hits: list[Hit]
    mode: SearchMode
    """The mode that ran (hybrid falls back to keyword when no embedder is configured, and says so)."""
    notices: list[str] = field(default_factory=list)
    drafts: frozenset[str] = frozenset()
    """Ids of the hits' chunks that belong to drafts (only with a scope that includes drafts)."""


@dataclass(frozen=True)
class GrepMatch:
    chunk: Chunk
    lines: list[tuple[int, str]]
    """(line number in the document, the line's text) for each line where a match starts."""


@dataclass(frozen=True)
class GrepOutcome:
    matches: list[GrepMatch]
    truncated: bool = False
    """The scan budget ran out before every candidate was checked: there may be more matches (``notices`` says so)."""
    notices: list[str] = field(default_factory=list)
    drafts: frozenset[str] = frozenset()
    """Ids of the matches' chunks that belong to drafts (only with a scope that includes drafts)."""


class KnowledgeSearch:
    def __init__(
        self, bases: KnowledgeBases, documents: Documents, index: SearchIndex, embedder: Embedder | None
    ) -> None:
        self._bases = bases
        self._documents = documents
        self._index = index
        self._embedder = embedder
        self._analysis_checked: set[str] = set()
        self._drafts_checked: set[str] = set()

    @property
    def semantic_available(self) -> bool:
        return self._embedder is not None

    def scope(
        self,
        access: KnowledgeAccess,
        knowledge_base_ids: Iterable[str] | None = None,
        knowledge_ids: Sequence[str] | None = None,
        *,
        include_drafts: bool = False,
    ) -> Scope:
        """What a search reaches; drafts only with ``include_drafts``."""
        bases = self._bases.select(access, knowledge_base_ids)
        if not bases:
            raise NotFound("no knowledge base is available to search", code="kb_not_found")
        if knowledge_ids is None:
            return Scope(bases, None, include_drafts)
        wanted = list(dict.fromkeys(k.strip() for k in knowledge_ids if k and k.strip()))
        if not wanted:
            raise InvalidInput("knowledge_ids must name at least one document when given", code="invalid_knowledge_ids")
        allowed = {kb.id for kb in bases}
        for document_id in wanted:
            try:
                document = self._documents.get(access, document_id)
            except NotFound:
                raise NotFound(f"document {document_id!r} was not found", code="document_not_found") from None
            if document.knowledge_base_id not in allowed:
                raise InvalidInput(
                    f"document {document_id!r} is not in the selected knowledge bases", code="document_out_of_scope"
                )
        return Scope(bases, frozenset(wanted), include_drafts)

    def search(
        self, scope: Scope, query: str, *, mode: SearchMode = "hybrid", limit: int = LIMIT_DEFAULT
    ) -> SearchOutcome:
        """The best chunks for ``query``; when none of them reaches the relevance floor (``Hit.relevant``), a notice
        says they are only the closest matches."""
        catching_up = self._index_old_drafts(scope)
        outcome = self._search(scope, query, mode=mode, limit=limit)
        if outcome.hits and not any(hit.relevant for hit in outcome.hits):
            outcome.notices.append(NOTHING_RELEVANT)
        if not scope.include_drafts:
            return outcome
        outcome.notices.extend(catching_up)
        hits, drafts = [], set()
        for hit in outcome.hits:
            chunk, draft = scope.of_knowledge_base(hit.chunk)
            hits.append(replace(hit, chunk=chunk))
            if draft:
                drafts.add(chunk.id)
        return replace(outcome, hits=hits, drafts=frozenset(drafts))

    def _search(self, scope: Scope, query: str, *, mode: SearchMode, limit: int) -> SearchOutcome:
        query = _clean_query(query)
        limit = LIMIT_DEFAULT if limit < 1 else min(limit, LIMIT_MAX)
        if mode == "keyword":
            return SearchOutcome(self._keyword(scope, query, limit), "keyword")
        if self._embedder is None:
            if mode == "semantic":
                raise InvalidInput(
                    f"semantic search is unavailable: {NO_EMBEDDER}; use mode keyword", code="no_embedding_provider"
                )
            return SearchOutcome(
                self._keyword(scope, query, limit), "keyword", [f"hybrid ran keyword only: {NO_EMBEDDER}"]
            )
        notices = self._vector_notices(scope)
        (vector,) = self._embedder.embed([query], purpose="query")
        if not _usable(vector):
            # A query of punctuation or control characters may embed to nothing to compare: no semantic ranking.
            notices.append("the query gave no usable embedding (nothing to compare): semantic results are empty")
        if mode == "semantic":
            return SearchOutcome(self._semantic(scope, vector, limit), "semantic", notices)
        # Each side is asked for more than the limit so fusion has overlap to work with (domain.ranking).
        keyword = self._keyword(scope, query, limit * 2)
        semantic = self._semantic(scope, vector, limit * 2)
        return SearchOutcome(fuse(keyword, semantic, limit=limit), "hybrid", notices)

    def _index_old_drafts(self, scope: Scope) -> list[str]:
        """Once per knowledge base and process, when drafts are asked for and the knowledge base has no drafts' index
        yet: its drafts stored before drafts were indexed are indexed now (inline jobs: before this search runs)."""
        notices: list[str] = []
        for kb in scope.with_drafts:
            if kb.id in self._drafts_checked:
                continue
            self._drafts_checked.add(kb.id)
            if self._index.analysis(drafts_index(kb.id)) is not None:
                continue
            submitted = self._documents.index_unindexed_drafts(kb.workspace_id, kb.id)
            if submitted:
                notices.append(
                    f"{submitted} draft(s) of {kb.name} stored before drafts were searchable are being indexed: "
                    "search again shortly if one is missing"
                )
        return notices

    def _keyword(self, scope: Scope, query: str, limit: int) -> list[Hit]:
        self._check_analysis(scope)
        return self._index.keyword(scope.index_ids, query, document_ids=scope.document_ids, limit=limit)

    def _check_analysis(self, scope: Scope) -> None:
        """Once per knowledge base and process: an index analysed for another language or by an older release (a
        file made before this release was installed) is re-analysed in the background; search goes on meanwhile."""
        for kb in scope.knowledge_bases:
            if kb.id in self._analysis_checked or kb.reanalysis is not None:
                continue
            analysis = self._index.analysis(kb.id)
            if analysis is not None and analysis.needs_reanalysis(kb.language):
                self._bases.request_reanalysis(kb.workspace_id, kb.id, kb.language)
            self._analysis_checked.add(kb.id)

    def _semantic(self, scope: Scope, vector: Sequence[float], limit: int) -> list[Hit]:
        if not _usable(vector):
            return []
        return self._index.semantic(scope.index_ids, vector, document_ids=scope.document_ids, limit=limit)

    def _vector_notices(self, scope: Scope) -> list[str]:
        missing = [kb.name for kb in scope.knowledge_bases if kb.document_count and not self._index.has_vectors(kb.id)]
        if not missing:
            return []
        return [f"no embeddings yet in {', '.join(missing)}: semantic results there are empty until it is re-indexed"]

    def grep(self, scope: Scope, pattern: str, *, limit: int = LIMIT_DEFAULT) -> GrepOutcome:
        """Chunks matching a case-insensitive, multi-line RE2 pattern: literal words in the pattern pick candidates
        from the keyword index (at most 30), then the pattern decides, within one scan budget."""
        regex = grep_pattern(pattern)
        pattern = pattern.strip()
        words = literal_words(pattern)
        if not words:
            raise InvalidInput(
                "the pattern has no literal word to look up (e.g. ^\\d+$); include at least one word it must contain",
                code="pattern_without_words",
            )
        limit = LIMIT_DEFAULT if limit < 1 else min(limit, LIMIT_MAX)
        budget = ScanBudget()
        matches: list[GrepMatch] = []
        candidates = self._index.candidates(
            scope.index_ids, words, document_ids=scope.document_ids, limit=GREP_CANDIDATES
        )
        drafts: set[str] = set()
        for checked, found in enumerate(candidates):
            chunk, draft = scope.of_knowledge_base(found)
            lines = _matching_lines(regex.starting_lines(chunk.text, budget), chunk)
            if lines:
                matches.append(GrepMatch(chunk, lines))
                if draft:
                    drafts.add(chunk.id)
                if len(matches) >= limit:
                    break
            if budget.exhausted:
                notice = (
                    f"the scan stopped at candidate {checked + 1} of {len(candidates)}: this pattern's scan budget "
                    "ran out, so there may be more matches; a simpler pattern (smaller repetition counts, fewer "
                    "alternatives) or knowledge_ids scans further"
                )
                return GrepOutcome(matches, truncated=True, notices=[notice], drafts=frozenset(drafts))
        return GrepOutcome(matches, drafts=frozenset(drafts))


def _usable(vector: Sequence[float]) -> bool:
    return any(v != 0 for v in vector) and all(math.isfinite(v) for v in vector)


def _clean_query(query: str) -> str:
    query = query.strip()
    if not query:
        raise InvalidInput("query is required", code="invalid_query")
    if len(query) > QUERY_MAX_CHARS:
        raise InvalidInput(f"query is longer than {QUERY_MAX_CHARS} characters", code="invalid_query")
    return query


def _matching_lines(found: list[int], chunk: Chunk) -> list[tuple[int, str]]:
    lines = chunk.text.split("\n")
    return [(chunk.start_line + i, lines[i]) for i in found]
