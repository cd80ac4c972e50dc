"""``ports.SearchIndex`` on Lance: one dataset per knowledge base, on local disk or on S3 (DynamoDB commit store).

Why Lance for knowledge bases of millions of chunks: a search reads only the index pages and rows it needs (not a
whole file per knowledge base), any number of writers in any number of processes commit without a lease, and its
inverted index ranks by BM25 and its vector index (IVF-PQ, refined on the exact vectors) answers top-k without a
scan. Measured against the SQLite file index in tests/bench/lance_scale.py and lance_recall.py.

Keyword search follows the same plan as the SQLite index (``index_files.kb_index``): the query's terms without
stop words, each term's document frequency, terms no chunk holds dropped and the rarest ``QUERY_TERMS_MAX`` kept;
chunks holding every kept term first (score ``1 + s/(1+s)``), then chunks holding some (``s/(1+s)``), ``s`` being
Lance's BM25 score; relevance is the share of the query's weight (idf) a hit holds. Document frequencies come from
the statistics the optimisation job writes (``maintenance``); a term they do not know (written since) is counted
in the inverted index, up to ``COUNT_CAP``.

Semantic search is a cosine top-k (vectors are stored normalised); exact while a knowledge base has fewer than
``maintenance.VECTOR_INDEX_MIN_ROWS`` chunks, through the vector index after. Its relevance is how far a cosine
stands above the mean cosine of the knowledge base's chunks, from the statistics too (unknown until they exist).

A knowledge base whose index is still an SQLite file (``legacy``) is served from that file until a migration job
has copied it (``builds``); writes meanwhile go to both. Background work goes to ``jobs``: ``optimise_index``
after every ``optimise_every`` writes, ``migrate_index`` the first time a file-indexed knowledge base is written.
"""

# Over 400 lines: the port's reads and writes on Lance, the keyword plan and the routing to the file index.

from __future__ import annotations

import contextlib
import math
import threading
import uuid
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pyarrow as pa

from mcpbridge.adapters.lance import maintenance
from mcpbridge.adapters.lance.datasets import Datasets, lance_errors
from mcpbridge.adapters.lance.pointers import MIGRATING, READY, Pointer, pointer_key
from mcpbridge.adapters.lance.tables import (
    CHUNK_COLUMNS,
    LanceLocation,
    check_vectors,
    chunk_of,
    chunk_rows,
    documents_filter,
    literal,
    new_dataset_name,
    normalised,
    vector_field,
)
from mcpbridge.domain.items import AttrAbsent, Compare, Condition, Update, any_of
from mcpbridge.domain.knowledge import Chunk, Hit, IndexAnalysis
from mcpbridge.domain.text_tokens import analyser_for, search_tokens
from mcpbridge.errors import ConditionFailed, Unavailable
from mcpbridge.ports import Clock, Jobs, SearchIndex, Store

if TYPE_CHECKING:
    import lance

    from mcpbridge.adapters.lance.builds import LegacyIndex

QUERY_TERMS_MAX = 12
COUNT_CAP = 2000
KEYWORD_COVERAGE_FLOOR = 0.25
OPTIMISE_EVERY = 50
NPROBES = 24
REFINE_FACTOR = 10
OPTIMISE_JOB = "optimise_index"  # knowledge.jobs runs them
MIGRATE_JOB = "migrate_index"

_T = TypeVar("_T")


@dataclass(frozen=True)
class _Plan:
    every: list[str]
    some: list[str]
    weights: dict[str, float]


class LanceSearchIndex:
    """``ports.SearchIndex`` on Lance datasets (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        location: LanceLocation,
        clock: Clock,
        jobs: Jobs | None = None,
        *,
        legacy: LegacyIndex | None = None,
        optimise_every: int = OPTIMISE_EVERY,
    ) -> None:
        self._store = store
        self._datasets = Datasets(location)
        self._clock = clock
        self._jobs = jobs
        self._legacy = legacy
        self._optimise_every = optimise_every
        self._migrations_asked: set[str] = set()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="lance-terms")

    @property
    def datasets(self) -> Datasets:
        return self._datasets

    @property
    def store(self) -> Store:
        return self._store

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def legacy(self) -> LegacyIndex | None:
        return self._legacy

    # ------------------------------------------------------------------------------------------ pointers

    def pointer(self, kb_id: str) -> Pointer | None:
        item = self._store.get(pointer_key(kb_id))
        return None if item is None else Pointer.of(kb_id, item)

    def dataset(self, pointer: Pointer, name: str | None = None) -> lance.LanceDataset:
        return self._datasets.get(name or pointer.table, pointer.writes)

    def _legacy_holds(self, kb_id: str) -> bool:
        return self._legacy is not None and self._legacy.analysis(kb_id) is not None

    def _reader(self, kb_id: str) -> Pointer | SearchIndex | None:
        """Where a read of ``kb_id`` goes: its Lance pointer, the file index, or nowhere (no index yet)."""
        pointer = self.pointer(kb_id)
        if pointer is not None and pointer.searchable:
            return pointer
        if self._legacy is not None and (pointer is not None or self._legacy_holds(kb_id)):
            if pointer is None:
                self._ask_migration(kb_id)
            return self._legacy
        return None

    def _read(
        self, kb_id: str, lance_read: Callable[[Pointer], _T], legacy_read: Callable[[SearchIndex], _T], empty: _T
    ) -> _T:
        where = self._reader(kb_id)
        if where is None:
            return empty
        if isinstance(where, Pointer):
            with lance_errors("be read"):
                return lance_read(where)
        return legacy_read(where)

    def _ask_migration(self, kb_id: str) -> None:
        with self._lock:
            if kb_id in self._migrations_asked or self._jobs is None:
                return
            self._migrations_asked.add(kb_id)
        self._jobs.submit(MIGRATE_JOB, {"knowledge_base_id": kb_id})

    # ------------------------------------------------------------------------------------------ writing

    def replace_document(
        self,
        kb_id: str,
        document_id: str,
        chunks: Sequence[Chunk],
        vectors: Sequence[Sequence[float]] | None,
        embedder_name: str | None,
        *,
        language: str | None = None,
    ) -> None:
        dimension = check_vectors(chunks, vectors, embedder_name)
        if any(chunk.knowledge_base_id != kb_id for chunk in chunks):
            raise ValueError(f"chunks of document {document_id!r} belong to another knowledge base than {kb_id!r}")
        pointer = self.pointer(kb_id)
        if pointer is None or pointer.state == MIGRATING:
            if self._legacy is not None and (pointer is not None or self._legacy_holds(kb_id)):
                self._legacy.replace_document(kb_id, document_id, chunks, vectors, embedder_name, language=language)
                # A migration that began meanwhile may have copied this document before: it gets the write too.
                pointer = self.pointer(kb_id)
                if pointer is None:
                    self._ask_migration(kb_id)
                    return
            elif pointer is None:
                if not chunks:
                    return
                pointer = self._create(kb_id, language, dimension)
        write_id = uuid.uuid4().hex
        with lance_errors("be written"):
            if vectors is not None and dimension is not None:
                pointer = self._use_embedder(pointer, str(embedder_name), dimension)
            purged = self.write_rows(pointer, pointer.table, pointer.language, document_id, chunks, vectors, write_id)
            if pointer.building is not None and pointer.building.table != pointer.table:
                self.write_rows(
                    pointer, pointer.building.table, pointer.building.language, document_id, chunks, vectors, write_id
                )
        self._written(pointer, purged=purged)

    def write_rows(
        self,
        pointer: Pointer,
        table: str,
        language: str | None,
        document_id: str,
        chunks: Sequence[Chunk],
        vectors: Sequence[Sequence[float]] | None,
        write_id: str,
    ) -> bool:
        """Make ``chunks`` the document's rows in ``table``, in one commit; whether rows were replaced or removed."""
        return self.write_documents(pointer, table, language, [(document_id, chunks, vectors, write_id)])

    def write_documents(
        self,
        pointer: Pointer,
        table: str,
        language: str | None,
        documents: Sequence[tuple[str, Sequence[Chunk], Sequence[Sequence[float]] | None, str]],
    ) -> bool:
        """Make each (document, chunks, vectors, write id) the document's rows in ``table``, all in one commit (a
        document without chunks loses its rows); whether rows were replaced or removed."""
        dataset = self._datasets.get(table, pointer.writes)
        has_vectors = "vector" in dataset.schema.names
        dimension = dataset.schema.field("vector").type.list_size if has_vectors else None
        analyser = analyser_for(language)
        parts = [
            chunk_rows(document_id, chunks, vectors, analyser, dimension=dimension, write_id=write_id)
            for document_id, chunks, vectors, write_id in documents
            if chunks
        ]
        scope = documents_filter([document_id for document_id, *_ in documents])
        if not parts:
            dataset.delete(scope)
            self._datasets.forget(table)
            return True
        result = (
            dataset.merge_insert("id")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .when_not_matched_by_source_delete(scope)
            .execute(pa.concat_tables(parts))
        )
        self._datasets.forget(table)
        return bool(result.get("num_updated_rows") or result.get("num_deleted_rows"))

    def _create(self, kb_id: str, language: str | None, dimension: int | None) -> Pointer:
        """The knowledge base's first dataset (empty, with its indexes), published by a conditional put; a writer
        that loses the race drops its own and uses the winner's."""
        name = new_dataset_name(kb_id)
        analyser = analyser_for(language)
        with lance_errors("be created"):
            self._datasets.create_empty(name, dimension)
        item = {
            **pointer_key(kb_id).as_dict(),
            "table": name,
            "state": READY,
            "language": analyser.language,
            "analyser": analyser.id,
            "writes": 0,
        }
        try:
            self._store.put(item, condition=Condition.absent("lance_index_new"))
        except ConditionFailed:
            self._datasets.drop(name)
            pointer = self.pointer(kb_id)
            if pointer is None:
                raise Unavailable(
                    "the knowledge base's index changed while it was created; retry", code="index_contention"
                ) from None
            return pointer
        return Pointer.of(kb_id, item)

    def _use_embedder(self, pointer: Pointer, name: str, dimension: int) -> Pointer:
        """Claim the knowledge base's embedder (refusing another while vectors of the first are held) and give the
        datasets a vector column of its dimension."""
        if (pointer.embedder, pointer.dimension) != (name, dimension):
            if pointer.embedder is not None and self._holds_vectors(pointer):
                raise ValueError(
                    f"this index holds vectors of {pointer.embedder!r} ({pointer.dimension} dimensions), not of "
                    f"{name!r} ({dimension} dimensions): a knowledge base never mixes embedders; re-index all of it "
                    "to switch"
                )
            claim = Condition(
                "lance_embedder_free",
                any_of(AttrAbsent("embedder"), Compare("embedder", "=", pointer.embedder or "")),
            )
            try:
                item = self._store.update(
                    pointer_key(pointer.kb_id), Update(set={"embedder": name, "dimension": dimension}), condition=claim
                )
            except ConditionFailed:
                latest = self.pointer(pointer.kb_id)
                if latest is None or (latest.embedder, latest.dimension) != (name, dimension):
                    raise ValueError("another embedder claimed this knowledge base's index meanwhile") from None
                item = self._store.get(pointer_key(pointer.kb_id)) or {}
            pointer = Pointer.of(pointer.kb_id, item)
        for table in (pointer.table, *([pointer.building.table] if pointer.building else [])):
            self._vector_column(pointer, table, dimension)
        return pointer

    def _holds_vectors(self, pointer: Pointer) -> bool:
        dataset = self.dataset(pointer)
        if "vector" not in dataset.schema.names:
            return False
        found = dataset.to_table(columns=["id"], filter="vector IS NOT NULL", limit=1)
        return bool(found.num_rows)

    def _vector_column(self, pointer: Pointer, table: str, dimension: int) -> None:
        dataset = self._datasets.get(table, pointer.writes)
        if "vector" in dataset.schema.names:
            if dataset.schema.field("vector").type.list_size == dimension:
                return
            dataset.drop_columns(["vector"])
        with contextlib.suppress(ValueError, OSError):  # another writer added it first
            dataset.add_columns(vector_field(dimension))
        self._datasets.forget(table)

    def _written(self, pointer: Pointer, *, purged: bool) -> None:
        """Count the write (readers reopen the dataset; ``purges`` tells the optimisation job that rows went) and ask
        for an optimisation every ``optimise_every`` writes."""
        counts = {"writes": 1, **({"purges": 1} if purged else {})}
        try:
            item = self._store.update(
                pointer_key(pointer.kb_id), Update(add=counts), condition=Condition.exists("lance_index_live")
            )
        except ConditionFailed:
            return  # the knowledge base was deleted meanwhile
        writes = int(item.get("writes", 0))
        since = writes - int(item.get("optimised_writes", 0))
        # Every ``optimise_every`` writes; before that at the 1st, 2nd, 4th, 8th... so that a small knowledge base
        # has statistics early.
        early = writes < self._optimise_every and writes & (writes - 1) == 0
        if self._jobs is not None and (early or (since >= self._optimise_every and since % self._optimise_every == 0)):
            self._jobs.submit(OPTIMISE_JOB, {"knowledge_base_id": pointer.kb_id})

    def delete_document(self, kb_id: str, document_id: str) -> None:
        pointer = self.pointer(kb_id)
        if pointer is None or pointer.state == MIGRATING:
            if self._legacy is not None:
                self._legacy.delete_document(kb_id, document_id)
                pointer = self.pointer(kb_id)
            if pointer is None:
                return
        with lance_errors("be written"):
            for table in dict.fromkeys((pointer.table, *([pointer.building.table] if pointer.building else []))):
                dataset = self._datasets.get(table, pointer.writes)
                dataset.delete(f"document_id = {literal(document_id)}")
                self._datasets.forget(table)
        self._written(pointer, purged=True)

    def delete_knowledge_base(self, kb_id: str) -> None:
        pointer = self.pointer(kb_id)
        if pointer is not None:
            names = {pointer.table, *(name for name, _ in pointer.retired)}
            if pointer.building is not None:
                names.add(pointer.building.table)
            if pointer.stats is not None:
                names.add(pointer.stats)
            self._store.delete(pointer_key(kb_id))
            for name in sorted(names):
                self._datasets.drop(name)
        if self._legacy is not None:
            self._legacy.delete_knowledge_base(kb_id)
        with self._lock:
            self._migrations_asked.discard(kb_id)

    # ------------------------------------------------------------------------------------------ analysis

    def analysis(self, kb_id: str) -> IndexAnalysis | None:
        pointer = self.pointer(kb_id)
        if pointer is None or not pointer.searchable:
            return None if self._legacy is None else self._legacy.analysis(kb_id)
        up_to_date = pointer.language is not None and analyser_for(pointer.language).id == pointer.analyser
        building = pointer.building
        if building is None or building.source != "table":
            return IndexAnalysis(pointer.language, up_to_date)
        return IndexAnalysis(pointer.language, up_to_date, building.language)

    def reanalyse(self, kb_id: str, language: str, progress: Callable[[int, int], None] | None = None) -> None:
        from mcpbridge.adapters.lance.builds import reanalyse

        pointer = self.pointer(kb_id)
        if pointer is None or not pointer.searchable:
            if self._legacy is not None:
                self._legacy.reanalyse(kb_id, language, progress)
            return
        reanalyse(self, pointer, language, progress)

    def optimise(self, kb_id: str, *, grace_seconds: float = maintenance.GRACE_SECONDS) -> None:
        """Compact the knowledge base's dataset (deleted rows rewritten away), bring its indexes up to date, build
        its vector index once it is large enough, refresh its statistics and drop what no search reads any more."""
        pointer = self.pointer(kb_id)
        if pointer is not None and pointer.searchable:
            with lance_errors("be optimised"):
                maintenance.optimise(self, pointer, grace_seconds=grace_seconds)
            if self._legacy_holds(kb_id):
                self._legacy.delete_knowledge_base(kb_id)  # type: ignore[union-attr]  # a write raced the switch

    def migrate(self, kb_id: str, progress: Callable[[int, int], None] | None = None) -> bool:
        """Copy a knowledge base's SQLite file index into Lance (searches read the file until the copy is complete),
        then drop the file. Returns whether there was anything to migrate."""
        from mcpbridge.adapters.lance.builds import migrate

        return migrate(self, kb_id, progress)

    # ------------------------------------------------------------------------------------------ searching

    def _merge(self, kb_ids: Collection[str], search: Callable[[str], list[Hit]], limit: int) -> list[Hit]:
        hits: list[Hit] = []
        for kb_id in sorted(set(kb_ids)):
            hits += search(kb_id)
        hits.sort(key=lambda h: (-h.score, h.chunk.id))
        return hits[:limit]

    def keyword(
        self, kb_ids: Collection[str], query: str, *, document_ids: Collection[str] | None = None, limit: int = 10
    ) -> list[Hit]:
        flt = None if document_ids is None else documents_filter(document_ids)
        if limit < 1 or (document_ids is not None and not document_ids):
            return []

        def one(kb_id: str) -> list[Hit]:
            return self._read(
                kb_id,
                lambda p: self._keyword(p, query, flt, limit),
                lambda legacy: legacy.keyword([kb_id], query, document_ids=document_ids, limit=limit),
                [],
            )

        return self._merge(kb_ids, one, limit)

    def _keyword(self, pointer: Pointer, query: str, flt: str | None, limit: int) -> list[Hit]:
        from lance.query import FullTextOperator, MatchQuery

        dataset = self.dataset(pointer)
        terms = analyser_for(pointer.language).query_terms(query)
        if not terms:
            return []
        total = dataset.count_rows()
        plan = self._plan(pointer, dataset, terms, total, limit)
        if not plan.every:
            return []
        every = self._ranked(
            dataset, MatchQuery(" ".join(plan.every), "terms", operator=FullTextOperator.AND), flt, limit
        )
        weight = sum(plan.weights.values()) * 2 * KEYWORD_COVERAGE_FLOOR
        kept = min(sum(plan.weights[t] for t in plan.every) / weight, 1.0)
        hits = [Hit(chunk_of(row, pointer.kb_id), 1.0 + _squash(score), kept) for row, score in every]
        if len(plan.every) > 1 and len(hits) < limit:
            seen = {hit.chunk.id for hit in hits}
            some = self._ranked(dataset, MatchQuery(" ".join(plan.some), "terms"), flt, limit + len(seen))
            for row, score in some:
                if row["id"] in seen or len(hits) >= limit:
                    continue
                held = set(str(row["terms"]).split())
                coverage = sum(w for t, w in plan.weights.items() if t in held)
                hits.append(Hit(chunk_of(row, pointer.kb_id), _squash(score), min(coverage / weight, 1.0)))
        return hits[:limit]

    def _plan(self, pointer: Pointer, dataset: Any, terms: list[str], total: int, limit: int) -> _Plan:
        frequency = self.frequencies(pointer, dataset, "terms", terms)
        counted = sorted((frequency[t], t) for t in terms if frequency.get(t, 0) > 0)[:QUERY_TERMS_MAX]
        some = [t for df, t in counted if df * 2 <= total]
        if sum(df for df, _ in counted if df * 2 <= total) < limit:
            some = [t for _, t in counted]
        return _Plan(
            every=[t for _, t in counted],
            some=some,
            weights={t: _idf(frequency.get(t, 0), max(total, 1)) for t in terms},
        )

    def frequencies(self, pointer: Pointer, dataset: Any, field: str, terms: Sequence[str]) -> dict[str, int]:
        """Each term's document frequency: from the statistics (scaled to the dataset's size now), else counted."""
        known = maintenance.frequencies(self, pointer, field, terms, dataset.count_rows())
        missing = [t for t in dict.fromkeys(terms) if t not in known]
        if missing:
            counts = self._pool.map(lambda t: self._count(dataset, field, t), missing)
            known.update(zip(missing, counts, strict=True))
        return known

    def _count(self, dataset: Any, field: str, term: str) -> int:
        """Chunks holding ``term``, up to ``COUNT_CAP``: row ids only, which the inverted index holds (any column
        would be read from the data files, row by row)."""
        from lance.query import MatchQuery

        with lance_errors("be read"):
            found = dataset.to_table(
                columns=["_rowid"],
                full_text_query=MatchQuery(term, field),
                limit=COUNT_CAP,
                with_row_id=True,
                disable_scoring_autoprojection=True,
            )
        return int(found.num_rows)

    def _ranked(self, dataset: Any, query: Any, flt: str | None, limit: int) -> list[tuple[dict[str, Any], float]]:
        found = dataset.to_table(
            columns=[*CHUNK_COLUMNS, "terms", "_score"],
            full_text_query=query,
            filter=flt,
            prefilter=flt is not None,
            limit=limit,
        )
        rows = found.to_pylist()
        rows.sort(key=lambda r: (-float(r["_score"]), r["id"]))
        return [(row, float(row["_score"])) for row in rows]

    def semantic(
        self,
        kb_ids: Collection[str],
        vector: Sequence[float],
        *,
        document_ids: Collection[str] | None = None,
        limit: int = 10,
    ) -> list[Hit]:
        flt = None if document_ids is None else documents_filter(document_ids)
        if limit < 1 or (document_ids is not None and not document_ids):
            return []

        def one(kb_id: str) -> list[Hit]:
            return self._read(
                kb_id,
                lambda p: self._semantic(p, _unit(vector), flt, limit),
                lambda legacy: legacy.semantic([kb_id], vector, document_ids=document_ids, limit=limit),
                [],
            )

        return self._merge(kb_ids, one, limit)

    def _semantic(self, pointer: Pointer, query: Any, flt: str | None, limit: int) -> list[Hit]:
        dataset = self.dataset(pointer)
        if "vector" not in dataset.schema.names:
            return []
        dimension = dataset.schema.field("vector").type.list_size
        if query.shape[0] != dimension:
            raise ValueError(
                f"the query vector has {query.shape[0]} dimensions; this index holds {dimension}-dimension vectors"
            )
        # Rows without a vector are never candidates (Lance skips null vectors). No "vector IS NOT NULL" filter:
        # as a prefilter it read the whole vector column, 1.5 GB from S3 per query at 1M chunks.
        found = dataset.to_table(
            columns=[*CHUNK_COLUMNS, "_distance"],
            nearest=vector_query(dataset, query, flt, limit),
            filter=flt,
            prefilter=flt is not None,
        )
        standing = maintenance.standing(self, pointer, query)
        hits = [
            Hit(chunk_of(row, pointer.kb_id), 1.0 - float(row["_distance"]), standing(1.0 - float(row["_distance"])))
            for row in found.to_pylist()
        ]
        hits.sort(key=lambda h: (-h.score, h.chunk.id))
        return hits[:limit]

    # ------------------------------------------------------------------------------------------ reading

    def _document_rows(self, pointer: Pointer, document_id: str) -> list[dict[str, Any]]:
        rows = self.dataset(pointer).to_table(columns=CHUNK_COLUMNS, filter=f"document_id = {literal(document_id)}")
        return sorted(rows.to_pylist(), key=lambda r: int(r["seq"]))

    def chunks(self, kb_id: str, document_id: str, *, offset: int = 0, limit: int | None = None) -> list[Chunk]:
        if offset < 0 or (limit is not None and limit < 0):
            raise ValueError("offset and limit must not be negative")

        def lance_read(pointer: Pointer) -> list[Chunk]:
            rows = self._document_rows(pointer, document_id)
            end = None if limit is None else offset + limit
            return [chunk_of(row, kb_id) for row in rows[offset:end]]

        return self._read(
            kb_id, lance_read, lambda legacy: legacy.chunks(kb_id, document_id, offset=offset, limit=limit), []
        )

    def count(self, kb_id: str, document_id: str) -> int:
        return self._read(
            kb_id,
            lambda p: int(self.dataset(p).count_rows(f"document_id = {literal(document_id)}")),
            lambda legacy: legacy.count(kb_id, document_id),
            0,
        )

    def chunk_at_line(self, kb_id: str, document_id: str, line: int) -> Chunk | None:
        def lance_read(pointer: Pointer) -> Chunk | None:
            rows = [r for r in self._document_rows(pointer, document_id) if int(r["end_line"]) >= line]
            if not rows:
                return None
            rows.sort(
                key=lambda r: (
                    r["type"] != "text",
                    int(r["start_line"]) > line,
                    int(r["start_line"]) if int(r["start_line"]) > line else 0,
                    int(r["seq"]),
                )
            )
            return chunk_of(rows[0], kb_id)

        return self._read(kb_id, lance_read, lambda legacy: legacy.chunk_at_line(kb_id, document_id, line), None)

    def candidates(
        self,
        kb_ids: Collection[str],
        words: Sequence[str],
        *,
        document_ids: Collection[str] | None = None,
        limit: int = 30,
    ) -> list[Chunk]:
        terms = list(dict.fromkeys(term for word in words for term in search_tokens(word)))
        flt = None if document_ids is None else documents_filter(document_ids)
        if not terms or limit < 1 or (document_ids is not None and not document_ids):
            return []
        found: list[Chunk] = []

        def one(kb_id: str) -> list[Chunk]:
            return self._read(
                kb_id,
                lambda p: self._candidates(p, terms, flt, limit),
                lambda legacy: legacy.candidates([kb_id], words, document_ids=document_ids, limit=limit),
                [],
            )

        for kb_id in sorted(set(kb_ids)):
            found += one(kb_id)
            if len(found) >= limit:
                break
        return found[:limit]

    def _candidates(self, pointer: Pointer, terms: list[str], flt: str | None, limit: int) -> list[Chunk]:
        """Chunks holding, for each term, a word it starts (the words the statistics know, and the term itself)."""
        from lance.query import BooleanQuery, FullTextQuery, MatchQuery, Occur

        dataset = self.dataset(pointer)
        if pointer.stats is None:
            # No statistics yet (a knowledge base written moments ago): words that start with each term, by a scan.
            starts = [f"(words LIKE {literal(t + '%')} OR words LIKE {literal('% ' + t + '%')})" for t in terms]
            where = " AND ".join([*starts, *([flt] if flt else [])])
            rows = dataset.to_table(columns=CHUNK_COLUMNS, filter=where, limit=limit).to_pylist()
            return [chunk_of(row, pointer.kb_id) for row in sorted(rows, key=lambda r: r["id"])]
        clauses: list[tuple[Occur, FullTextQuery]] = [
            (Occur.MUST, MatchQuery(" ".join(maintenance.words_starting(self, pointer, term)), "words"))
            for term in terms
        ]
        query = clauses[0][1] if len(clauses) == 1 else BooleanQuery(clauses)
        return [chunk_of(row, pointer.kb_id) for row, _ in self._ranked(dataset, query, flt, limit)]

    def has_vectors(self, kb_id: str) -> bool:
        return self._read(
            kb_id,
            lambda p: p.embedder is not None and self._holds_vectors(p),
            lambda legacy: legacy.has_vectors(kb_id),
            False,
        )

    def close(self) -> None:
        self._pool.shutdown(wait=False)
        self._datasets.close()
        if self._legacy is not None:
            self._legacy.close()


def vector_query(dataset: Any, query: Any, flt: str | None, limit: int) -> dict[str, Any]:
    """The vector search of a query: through the IVF-PQ index, or exact on the rows of a filter that keeps no more
    rows than a knowledge base searched without an index. The index probes the partitions nearest the query, and
    a filter's rows may lie in none of them: a filtered search through it probes further until it has ``limit``
    candidates, but ranks them on their compressed vectors, and those of a few documents come out in an order
    the exact vectors do not give."""
    nearest = {"column": "vector", "q": query, "k": limit, "metric": "cosine"}
    if flt is not None and int(dataset.count_rows(flt)) <= maintenance.VECTOR_INDEX_MIN_ROWS:
        return {**nearest, "use_index": False}
    return {**nearest, "minimum_nprobes": NPROBES, "refine_factor": REFINE_FACTOR}


def _unit(vector: Sequence[float]) -> Any:
    query = np.asarray(vector, dtype=np.float32)
    if query.ndim != 1:
        raise ValueError("the query vector must be one-dimensional")
    norm = float(np.linalg.norm(query))
    if not math.isfinite(norm) or norm == 0.0:
        raise ValueError("the query vector must be finite and non-zero")
    return normalised(query.reshape(1, -1))[0]


def _idf(df: int, total: int) -> float:
    return math.log(1.0 + (total - df + 0.5) / (df + 0.5))


def _squash(score: float) -> float:
    score = max(score, 0.0)
    return score / (1.0 + score)
