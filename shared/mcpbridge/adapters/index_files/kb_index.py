"""The search index of one knowledge base, in one SQLite file: chunks, an FTS5 keyword index and vectors.

    meta          key → value: schema_version, generation, file_id, knowledge_base_id, embedder, dimension,
                  chunk_count, analyser (the id of the analysis ``chunks_stems`` holds), language; while a
                  re-analysis runs: analysing (its language), analysing_rowid, analysing_until
    chunks        one row per chunk (rowid, id, document, reading order, text, lines, offsets, heading path JSON)
    chunks_fts    FTS5 over each chunk's ``search_tokens`` (surface words) joined by spaces, rowid = chunks.rowid:
                  grep's candidates, and keyword search until the file is analysed
    chunks_stems_a, chunks_stems_b
                  FTS5 over each chunk's analysed terms (``Analyser.index_terms``: stems, CJK bigrams): keyword
                  search, ranked by bm25(), on the one meta ``stems`` names; a re-analysis fills the other, then
                  meta switches to it in one commit (no DDL while the file is in use)
    vectors       rowid = chunks.rowid → float32 little-endian blob; one embedder (name + dimension) per file

Keyword search tokenises in Python (``domain.text_tokens``: words, accents folded, CJK bigrams, Snowball stems) and
stores the terms with FTS5's ``ascii`` tokenizer, which splits on ASCII punctuation and space only and keeps every
non-ASCII character inside its token: a term written is a term indexed, whatever SQLite's Unicode tables say.
Semantic search is a cosine over all the file's vectors with numpy, on a matrix kept in memory
(``vector_matrix``): loaded once, then changed by this instance's own writes rather than loaded again; a write by
another process or instance (a generation this instance did not make) loads it again.

The query plan: the query's terms without stop words; each term's chunk count (document frequency) read from the
vocabulary; terms no chunk holds dropped, the rarest ``QUERY_TERMS_MAX`` kept. Chunks holding every kept term come
first; then, to fill the limit, chunks holding some, matched only through the terms that at most half of the chunks
hold (BM25 gives the others no weight, and they are what makes an OR of a long question slow) unless those are too
few to fill the limit. A file of schema 1 is upgraded on its first write; until it is re-analysed
(``reanalyse``), keyword search runs on its surface words with the same plan.

Threads and processes: a call borrows a connection from a small pool (at most ``IDLE_CONNECTIONS`` kept idle, so
a server with many threads and many knowledge bases does not hold a file descriptor per pair) and gives it back
when it returns; no connection is used by two calls at once. The file is in WAL mode: any number of calls (in
threads or processes) read at once and never wait for a writer, and each read sees one committed state. Writes run
in ``BEGIN IMMEDIATE`` transactions, so one writer at a time across threads and processes (others wait up to
``BUSY_TIMEOUT_SECONDS``, then ``errors.Unavailable``). The vector cache is shared by the calls of an instance.

Files replaced on disk: every call first checks the file's identity (``os.stat``); a pooled connection opened on
an older file is closed and the path opened again, so calls see a newer copy from the next one on (a call already
running finishes on the file it started with). Replace a file by renaming a complete copy over it
(``os.replace``), never by writing into it; a copy is complete when no connection writes it any more (close the
writer, or make it with ``copy_to``). Replicas that are only ever swapped that way (the S3 reader's cache) are best
opened with ``read_only=True``: they are then read as immutable files, with no ``-wal``/``-shm`` beside them to
outlive a swap, and their identity also covers size and modification time. ``reopen()`` forces a fresh open.

Durability: ``synchronous=NORMAL``: a commit survives a crash of the process; a power cut may lose the last
writes. The index is derived data, rebuilt from the documents.
"""

# Over 400 lines: one index file's schema, writes, keyword and vector search, and its upgrades.

from __future__ import annotations

import json
import math
import os
import sqlite3
import threading
import uuid
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from mcpbridge.adapters.index_files import vector_matrix
from mcpbridge.adapters.index_files.vector_matrix import VectorSnapshot
from mcpbridge.adapters.sqlite_wal import switch_to_wal
from mcpbridge.domain.knowledge import CHUNK_TYPES, Chunk, ChunkType, Hit, IndexAnalysis
from mcpbridge.domain.text_tokens import Analyser, analyser_for, is_cjk, search_tokens
from mcpbridge.errors import Unavailable

SCHEMA_VERSION = 2
READABLE_VERSIONS = frozenset({1, 2})
BUSY_TIMEOUT_SECONDS = 30.0
IDLE_CONNECTIONS = 4
QUERY_TERMS_MAX = 12
REANALYSIS_BATCH = 500
# Relevance (``Hit.relevance``, 0.5 = the floor): a keyword hit holding a quarter of the query's weight, a semantic
# hit standing 3.6 standard deviations above the mean cosine. Chosen on tests/bench/search_quality: they refuse 9 of
# its 10 questions without an answer and keep most right answers (see tests/bench/README.md).
KEYWORD_COVERAGE_FLOOR = 0.25
SEMANTIC_STANDING = 3.6
SEMANTIC_MIN_CHUNKS = 20

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID",
    """CREATE TABLE IF NOT EXISTS chunks (
        rowid INTEGER PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        document_id TEXT NOT NULL,
        document_title TEXT NOT NULL,
        seq INTEGER NOT NULL,
        type TEXT NOT NULL,
        text TEXT NOT NULL,
        heading_path TEXT NOT NULL,
        start_line INTEGER NOT NULL,
        end_line INTEGER NOT NULL,
        start_offset INTEGER NOT NULL,
        end_offset INTEGER NOT NULL
    )""",
    "CREATE UNIQUE INDEX IF NOT EXISTS chunks_reading_order ON chunks (document_id, seq)",
    "CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(terms, tokenize = 'ascii')",
    "CREATE TABLE IF NOT EXISTS vectors (rowid INTEGER PRIMARY KEY, vector BLOB NOT NULL)",
)
# What schema 2 adds; run on new files after _SCHEMA, and on a file of schema 1 when it is opened for writing.
_SCHEMA_2 = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS chunks_stems_a USING fts5(terms, tokenize = 'ascii')",
    "CREATE VIRTUAL TABLE IF NOT EXISTS chunks_stems_b USING fts5(terms, tokenize = 'ascii')",
)
_FTS_TABLES = ("chunks_fts", "chunks_stems_a", "chunks_stems_b")

_CHUNK_COLUMNS = (
    "c.id, c.document_id, c.document_title, c.seq, c.type, c.text, c.heading_path, "
    "c.start_line, c.end_line, c.start_offset, c.end_offset"
)
# Chunks of the documents named in a JSON array: the filter of every search, applied inside the query.
_IN_DOCUMENTS = "SELECT rowid FROM chunks WHERE document_id IN (SELECT value FROM json_each(?))"

_FileIdentity = tuple[int, ...]
_Matrix = npt.NDArray[np.float32]


@dataclass
class _Connection:
    """A pooled connection, the file it opened and the epoch (of ``reopen``/``close``) it belongs to."""

    conn: sqlite3.Connection
    identity: _FileIdentity
    epoch: int
    knowledge_base_id: str | None = None


@dataclass(frozen=True)
class _Plan:
    every: list[str]
    """The phrases of the first tier (all kept terms, rarest first)."""
    some: list[str]
    """The phrases the second tier matches any of."""
    weights: dict[str, float]
    """Every query term (kept or not) → its inverse document frequency, for the relevance of a hit."""
    kept: list[str]
    """The terms of ``every``."""


@dataclass(frozen=True)
class _AnalysisState:
    """What the file's meta says about its keyword analysis."""

    current: Analyser | None
    """The analysis ``stems`` holds; None when the file was never analysed (schema 1, upgraded). When this code's
    analyser for that language has changed since (a newer ``ANALYSER_VERSION``), the file is searched with today's
    rules until it is re-analysed."""
    recorded_id: str | None
    """The analyser id meta records (``current.id`` unless the analyser changed since)."""
    stems: str
    target: Analyser | None
    """The analysis a re-analysis under way is writing into ``spare``."""

    @property
    def language(self) -> str | None:
        return None if self.current is None else self.current.language

    @property
    def spare(self) -> str:
        return "chunks_stems_b" if self.stems == "chunks_stems_a" else "chunks_stems_a"

    def tables(self) -> list[tuple[str, Analyser]]:
        """The analysed terms tables a write must feed, each with its analysis."""
        found = [] if self.current is None else [(self.stems, self.current)]
        return found if self.target is None else [*found, (self.spare, self.target)]


class KbIndexFile:
    """The search index of one knowledge base in one SQLite file (see the module docstring for the contract).

    The file and its schema are created on first use (not by the constructor); ``read_only=True`` opens an
    existing file as immutable and refuses writes.
    """

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self._path = path
        self._read_only = read_only
        self._lock = threading.Lock()
        self._idle: list[_Connection] = []  # most recently returned last
        self._epoch = 0
        self._vectors_cache: VectorSnapshot | None = None
        self._vectors_before: VectorSnapshot | None = None  # the one before, for reads that started before
        self._write_lock = threading.Lock()  # in-process writers publish vector snapshots in commit order
        self._pending_vectors: VectorSnapshot | None = None

    @property
    def path(self) -> Path:
        return self._path

    # ------------------------------------------------------------------------------------------ writing

    def replace_document(
        self,
        document_id: str,
        chunks: Sequence[Chunk],
        vectors: Sequence[Sequence[float]] | None,
        embedder_name: str | None,
        *,
        language: str | None = None,
    ) -> None:
        """Make ``chunks`` (and their ``vectors``, same order, made by ``embedder_name``) the whole indexed content
        of the document, in one transaction.

        ``language`` (a knowledge base's, ``text_tokens.LANGUAGES``) chooses the analysis of a file that holds no
        chunk yet; a file keeps its analysis otherwise (``reanalyse`` changes it). Raise ``ValueError`` for chunks of
        another document or knowledge base, duplicate ids or ``seq``, vectors that do not match the chunks, and
        vectors of another embedder (name or dimension) than the file holds: a knowledge base never mixes embedders.
        The file forgets its embedder when its last vector is removed.
        """
        rows = _chunk_rows(document_id, chunks)
        blobs = _vector_blobs(chunks, vectors, embedder_name)
        kb_ids = {chunk.knowledge_base_id for chunk in chunks}
        if len(kb_ids) > 1:
            raise ValueError(f"chunks of document {document_id!r} belong to several knowledge bases")
        wanted = analyser_for(language)
        terms = [" ".join(search_tokens(chunk.text)) for chunk in chunks]
        with self._write_lock, self._writing() as conn:
            if kb_ids:
                _claim(conn, "knowledge_base_id", next(iter(kb_ids)), "knowledge base")
            before = _vector_key(conn)
            removed = _delete_rows(conn, document_id)
            state = _analysis(conn)
            if state.current is None and _chunk_count(conn) == 0:
                state = _adopt(conn, wanted)
            conn.executemany(
                "INSERT INTO chunks (id, document_id, document_title, seq, type, text, heading_path, start_line,"
                " end_line, start_offset, end_offset) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            rowids: dict[str, int] = dict(
                conn.execute("SELECT id, rowid FROM chunks WHERE document_id = ?", (document_id,)).fetchall()
            )
            conn.executemany(
                "INSERT INTO chunks_fts (rowid, terms) VALUES (?, ?)",
                [(rowids[chunk.id], text) for chunk, text in zip(chunks, terms, strict=True)],
            )
            for table, analyser in state.tables():
                conn.executemany(
                    f"INSERT OR REPLACE INTO {table} (rowid, terms) VALUES (?, ?)",  # noqa: S608 - a fixed table
                    [(rowids[chunk.id], " ".join(analyser.index_terms(chunk.text))) for chunk in chunks],
                )
            if blobs is not None:
                dimension, data = blobs
                _use_embedder(conn, cast(str, embedder_name), dimension)
                conn.executemany(
                    "INSERT INTO vectors (rowid, vector) VALUES (?, ?)",
                    [(rowids[chunk.id], blob) for chunk, blob in zip(chunks, data, strict=True)],
                )
            _count_chunks(conn, len(chunks) - removed)
            _bump_generation(conn)
            # Published below, once committed: the snapshot of the state this write made.
            added = [rowids[chunk.id] for chunk in chunks]
            matrix = None if blobs is None else np.asarray(vectors, dtype=np.float32)
            if (old := self._snapshot_at(before)) is not None:
                self._publish_vectors(before, old.changed(_next(before), document_id, added, matrix))

    def delete_document(self, document_id: str) -> None:
        """Remove the document's chunks, terms and vectors; a document that is not there changes nothing."""
        with self._write_lock, self._writing() as conn:
            before = _vector_key(conn)
            removed = _delete_rows(conn, document_id)
            if removed:
                _count_chunks(conn, -removed)
                _bump_generation(conn)
                if (old := self._snapshot_at(before)) is not None:
                    self._publish_vectors(before, old.changed(_next(before), document_id, [], None))

    # ------------------------------------------------------------------------------------------ analysis

    def analysis(self) -> IndexAnalysis:
        """The language the keyword terms are analysed for, and the re-analysis under way with its progress."""
        with self._reading() as held:
            state = _analysis(held.conn)
            up_to_date = state.current is not None and state.current.id == state.recorded_id
            if state.target is None:
                return IndexAnalysis(state.language, up_to_date)
            done, total = _reanalysis_progress(held.conn, state)
            return IndexAnalysis(state.language, up_to_date, state.target.language, done, total)

    def reanalyse(self, language: str, *, progress: Callable[[int, int], None] | None = None) -> bool:
        """Analyse every chunk's text for ``language`` into the spare terms table, ``REANALYSIS_BATCH`` chunks per
        transaction (searches keep using the current terms meanwhile, and writes feed both), then switch to it in
        one commit. Resumes a re-analysis for the same language that was interrupted; one for another language
        starts over. ``progress(done, total)`` is called after each batch. Returns whether anything changed (False
        when the file is already analysed for ``language`` by this version of the analyser)."""
        target = analyser_for(language)
        with self._write_lock, self._writing() as conn:
            state = _analysis(conn)
            if state.target is None and state.recorded_id == target.id:
                return False
            if state.target is None or state.target.id != target.id:
                spare = state.spare
                conn.execute(f"DELETE FROM {spare}")  # noqa: S608 - a fixed table
                until = conn.execute("SELECT coalesce(max(rowid), 0) FROM chunks").fetchone()[0]
                _set_meta(conn, {"analysing": target.language, "analysing_rowid": 0, "analysing_until": until})
        while True:
            with self._write_lock, self._writing() as conn:
                state = _analysis(conn)
                if state.target is None or state.target.id != target.id:
                    raise Unavailable("another re-analysis took over this index", code="search_index_busy")
                after, until = int(_meta(conn, "analysing_rowid")), int(_meta(conn, "analysing_until"))
                batch = conn.execute(
                    "SELECT rowid, text FROM chunks WHERE rowid > ? AND rowid <= ? ORDER BY rowid LIMIT ?",
                    (after, until, REANALYSIS_BATCH),
                ).fetchall()
                if batch:
                    conn.executemany(
                        f"INSERT OR REPLACE INTO {state.spare} (rowid, terms) VALUES (?, ?)",  # noqa: S608 - fixed
                        [(rowid, " ".join(target.index_terms(text))) for rowid, text in batch],
                    )
                    _set_meta(conn, {"analysing_rowid": int(batch[-1][0])})
                done, total = _reanalysis_progress(conn, state)
                if not batch:
                    old = state.stems
                    _set_meta(conn, {"stems": state.spare, "analyser": target.id, "language": target.language})
                    conn.execute("DELETE FROM meta WHERE key IN ('analysing', 'analysing_rowid', 'analysing_until')")
                    conn.execute(f"DELETE FROM {old}")  # noqa: S608 - a fixed table
                    before = _vector_key(conn)
                    _bump_generation(conn)
                    if (snapshot := self._snapshot_at(before)) is not None:
                        self._publish_vectors(before, snapshot.moved_to(_next(before)))
            if progress is not None:
                progress(done, total)
            if not batch:
                return True

    def copy_to(self, destination: Path) -> None:
        """Write a compact, self-contained copy of the committed index (``VACUUM INTO``) to a new file: what to
        upload or to rename over a replica."""
        if destination.exists():
            raise FileExistsError(destination)
        with self._using() as held:
            held.conn.execute("VACUUM INTO ?", (str(destination),))

    # ------------------------------------------------------------------------------------------ searching

    def keyword(self, query: str, *, document_ids: Collection[str] | None = None, limit: int = 10) -> list[Hit]:
        """Chunks matching the query's terms, best first, by BM25 in two tiers: chunks holding every term, then
        (to fill ``limit``) chunks holding some (see the module docstring for the plan).

        Scores are comparable across files and agree with the order: ``1 + s/(1+s)`` in the first tier and
        ``s/(1+s)`` in the second, where ``s = -bm25()`` (BM25 statistics are the whole file's). A query term that
        is a single CJK character also matches the bigrams it starts. ``document_ids`` restricts the search before
        ranking and ``limit``; an empty collection, a query without terms or ``limit < 1`` find nothing.
        """
        documents = _documents_json(document_ids)
        if limit < 1 or documents == "[]":
            return []
        with self._reading() as held:
            state = _analysis(held.conn)
            table, analyser = (state.stems, state.current) if state.current is not None else ("chunks_fts", None)
            terms = _query_terms(query, analyser, state.language)
            if not terms:
                return []
            plan = self._plan(held, table, terms, limit)
            if not plan.every:
                return []
            every = self._ranked(held, table, " AND ".join(plan.every), documents, limit)
            weight = sum(plan.weights.values()) * 2 * KEYWORD_COVERAGE_FLOOR
            kept = min(sum(plan.weights[t] for t in plan.kept) / weight, 1.0)
            hits = [Hit(chunk, 1.0 + _squash(score), kept) for chunk, score in every]
            if len(plan.every) > 1 and len(hits) < limit:
                seen = {hit.chunk.id for hit in hits}
                some = self._ranked(held, table, " OR ".join(plan.some), documents, limit + len(seen))
                more = [(chunk, score) for chunk, score in some if chunk.id not in seen][: limit - len(hits)]
                held_terms = self._terms_of(held, table, [chunk.id for chunk, _ in more])
                hits += [
                    Hit(
                        chunk, _squash(score), min(_coverage(held_terms.get(chunk.id, set()), plan.weights) / weight, 1)
                    )
                    for chunk, score in more
                ]
        return hits[:limit]

    def _plan(self, held: _Connection, table: str, terms: list[str], limit: int) -> _Plan:
        """Which phrases the two tiers match (see the module docstring)."""
        total = _chunk_count(held.conn)
        counted: list[tuple[int, str, str]] = []
        frequency: dict[str, int] = {}
        for term in terms:
            prefix = is_cjk(term) and len(term) == 1
            # A prefix term's count is not in the vocabulary; it is a lone CJK character: count it as rare.
            df = frequency[term] = 1 if prefix else self._document_frequency(held, table, term)
            if df:
                counted.append((df, term, _phrase(term, prefix=prefix)))
        counted.sort(key=lambda item: item[0])
        counted = counted[:QUERY_TERMS_MAX]
        some = [phrase for df, _, phrase in counted if df * 2 <= total]
        if sum(df for df, _, _ in counted if df * 2 <= total) < limit:
            some = [phrase for _, _, phrase in counted]
        return _Plan(
            every=[phrase for _, _, phrase in counted],
            some=some,
            weights={term: _idf(frequency.get(term, 0), total) for term in terms},
            kept=[term for _, term, _ in counted],
        )

    def _document_frequency(self, held: _Connection, table: str, term: str) -> int:
        row = held.conn.execute(f"SELECT doc FROM temp.{table}_vocab WHERE term = ?", (term,)).fetchone()  # noqa: S608
        return 0 if row is None else int(row[0])

    def candidates(
        self, words: Sequence[str], *, document_ids: Collection[str] | None = None, limit: int = 30
    ) -> list[Chunk]:
        """Chunks holding every one of ``words`` (from ``text_tokens.literal_words``), best-ranked first: grep's
        candidates, for its regex to check.

        Each word's terms are looked up as prefixes, so ``oauth`` also selects ``oauth2`` (as the regex would). No
        words, no candidates.
        """
        terms = list(dict.fromkeys(term for word in words for term in search_tokens(word)))
        documents = _documents_json(document_ids)
        if not terms or limit < 1 or documents == "[]":
            return []
        expression = " AND ".join(_phrase(term, prefix=True) for term in terms)
        with self._reading() as held:
            return [chunk for chunk, _ in self._ranked(held, "chunks_fts", expression, documents, limit)]

    def semantic(
        self, vector: Sequence[float], *, document_ids: Collection[str] | None = None, limit: int = 10
    ) -> list[Hit]:
        """Chunks by cosine similarity to ``vector`` (the score), best first, among the chunks of ``document_ids``
        when given. Empty when the file has no vectors; ``ValueError`` for a vector of another dimension than the
        file's, or a zero or non-finite one."""
        query = np.asarray(vector, dtype=np.float32)
        if query.ndim != 1:
            raise ValueError("the query vector must be one-dimensional")
        norm = float(np.linalg.norm(query))
        if not math.isfinite(norm) or norm == 0.0:
            raise ValueError("the query vector must be finite and non-zero")
        documents = None if document_ids is None else _unique_documents(document_ids)
        if limit < 1 or documents == []:
            return []
        with self._reading() as held:
            cached = self._vectors(held)
            if cached.live == 0:
                return []
            if query.shape[0] != cached.dimension:
                raise ValueError(
                    f"the query vector has {query.shape[0]} dimensions; this index holds "
                    f"{cached.dimension}-dimension vectors"
                )
            query = query / np.float32(norm)
            if documents is None:
                rowids_of = cached.rowids
                scores = cached.scores(query)
            else:
                rowids_of, scores = cached.document_scores(documents, query)
                if scores.shape[0] == 0:
                    return []
            live = cached.live if documents is None else int(scores.shape[0])
            k = min(limit, live)
            top = np.argpartition(-scores, k - 1)[:k] if k < scores.shape[0] else np.arange(scores.shape[0])
            top = top[np.argsort(-scores[top], kind="stable")][:k]
            rowids = [int(r) for r in rowids_of[top]]
            found = self._chunks_by_rowid(held, rowids)
            relevance = _standing(scores, live)
            return [
                Hit(found[r], float(s), relevance(float(s)))
                for r, s in zip(rowids, scores[top], strict=True)
                if r in found
            ]

    # ------------------------------------------------------------------------------------------ reading

    def chunks(self, document_id: str, *, offset: int = 0, limit: int | None = None) -> list[Chunk]:
        """The document's chunks in reading order, from position ``offset`` (0-based), at most ``limit``."""
        if offset < 0 or (limit is not None and limit < 0):
            raise ValueError("offset and limit must not be negative")
        with self._using() as held:
            rows = held.conn.execute(
                f"SELECT {_CHUNK_COLUMNS} FROM chunks AS c WHERE c.document_id = ? ORDER BY c.seq LIMIT ? OFFSET ?",  # noqa: S608 - fixed columns
                (document_id, -1 if limit is None else limit, offset),
            ).fetchall()
            return [self._chunk(held, row) for row in rows]

    def count(self, document_id: str) -> int:
        """How many chunks the document has (0 when it is not indexed)."""
        with self._using() as held:
            row = held.conn.execute("SELECT count(*) FROM chunks WHERE document_id = ?", (document_id,)).fetchone()
        return int(row[0])

    def chunk_at_line(self, document_id: str, line: int) -> Chunk | None:
        """The text chunk whose line range holds ``line`` (the first in reading order), else the first text chunk
        that starts after it; the same over summaries and image chunks when no text chunk qualifies; None past the
        document's end."""
        with self._using() as held:
            row = held.conn.execute(
                f"SELECT {_CHUNK_COLUMNS} FROM chunks AS c WHERE c.document_id = ? AND c.end_line >= ? "  # noqa: S608 - fixed columns
                "ORDER BY c.type != 'text', c.start_line > ?, CASE WHEN c.start_line > ? THEN c.start_line ELSE 0 END, "
                "c.seq LIMIT 1",
                (document_id, line, line, line),
            ).fetchone()
            return None if row is None else self._chunk(held, row)

    def document_ids(self) -> list[str]:
        """The documents that have chunks, sorted."""
        with self._using() as held:
            rows = held.conn.execute("SELECT DISTINCT document_id FROM chunks ORDER BY document_id").fetchall()
        return [str(row[0]) for row in rows]

    def has_vectors(self) -> bool:
        with self._using() as held:
            return bool(held.conn.execute("SELECT EXISTS (SELECT 1 FROM vectors)").fetchone()[0])

    def embedder_name(self) -> str | None:
        """The embedder that made the file's vectors (None when it has none): compare before searching with a
        query vector, since a vector of another model with the same dimension would be accepted."""
        with self._reading() as held:
            if not held.conn.execute("SELECT EXISTS (SELECT 1 FROM vectors)").fetchone()[0]:
                return None
            value = _meta(held.conn, "embedder")
        return None if value is None else str(value)

    def vectors_of(self, document_id: str) -> tuple[str, list[list[float]]] | None:
        """The embedder and the vectors of the document's chunks in reading order (what a migration copies); None
        when the document has no chunk or some chunk no vector."""
        with self._reading() as held:
            rows = held.conn.execute(
                "SELECT v.vector FROM chunks AS c LEFT JOIN vectors AS v ON v.rowid = c.rowid "
                "WHERE c.document_id = ? ORDER BY c.seq",
                (document_id,),
            ).fetchall()
            embedder = _meta(held.conn, "embedder")
        if not rows or embedder is None or any(row[0] is None for row in rows):
            return None
        return str(embedder), [np.frombuffer(row[0], dtype="<f4").astype(float).tolist() for row in rows]

    def generation(self) -> int:
        """A number that every write that changed the file increased."""
        with self._using() as held:
            return int(_meta(held.conn, "generation") or 0)

    # ------------------------------------------------------------------------------------------ lifecycle

    def reopen(self) -> None:
        """Open the path again from the next call on (e.g. after the file was swapped in a way the identity check
        cannot see): idle connections are closed now, busy ones when their call ends."""
        self.close()

    def close(self) -> None:
        """Close the connections; calls still running finish first, on theirs. A later call opens the file again."""
        with self._lock:
            self._epoch += 1
            self._vectors_cache = self._vectors_before = None
            idle, self._idle = self._idle, []
        for held in idle:
            held.conn.close()

    # ------------------------------------------------------------------------------------------ internals

    def _identity(self) -> _FileIdentity | None:
        try:
            stat = os.stat(self._path)
        except FileNotFoundError:
            return None
        if self._read_only:
            return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
        return (stat.st_dev, stat.st_ino)

    @contextmanager
    def _using(self) -> Iterator[_Connection]:
        """A connection to the file now at the path, for this call only (then back to the pool, or closed)."""
        identity = self._identity()
        stale: list[_Connection] = []
        held: _Connection | None = None
        with self._lock:
            while self._idle and held is None:
                candidate = self._idle.pop()
                if candidate.identity == identity and candidate.epoch == self._epoch:
                    held = candidate
                else:
                    stale.append(candidate)
        for old in stale:
            old.conn.close()
        if held is None:
            held = self._open(identity)
        try:
            yield held
        finally:
            with self._lock:
                keep = held.epoch == self._epoch and not held.conn.in_transaction and len(self._idle) < IDLE_CONNECTIONS
                if keep:
                    self._idle.append(held)
            if not keep:
                held.conn.close()

    def _open(self, identity: _FileIdentity | None) -> _Connection:
        epoch = self._epoch
        conn: sqlite3.Connection | None = None
        try:
            if self._read_only:
                if identity is None:
                    raise FileNotFoundError(self._path)
                uri = f"{self._path.resolve().as_uri()}?mode=ro&immutable=1"
                conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
            else:
                self._path.parent.mkdir(parents=True, exist_ok=True)
                conn = sqlite3.connect(
                    self._path, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None, check_same_thread=False
                )
            if not self._read_only:
                conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_SECONDS * 1000)}")
                switch_to_wal(conn, timeout=BUSY_TIMEOUT_SECONDS)
                conn.execute("PRAGMA synchronous = NORMAL")
                # A deleted or replaced chunk's text is zeroed, not left in free pages (some builds do not by default).
                conn.execute("PRAGMA secure_delete = ON")
                if identity is None:
                    identity = self._identity()
            version = _schema_version(conn)
            if version is None and not self._read_only:
                _create_schema(conn)
                version = SCHEMA_VERSION
            elif version == 1 and not self._read_only:
                _upgrade_to_2(conn)
                version = SCHEMA_VERSION
            if version in READABLE_VERSIONS:
                _attach_vocabularies(conn)
        except (sqlite3.Error, OSError) as exc:
            if conn is not None:
                conn.close()
            raise Unavailable(
                f"cannot open the search index at {self._path}: {exc}", code="search_index_unavailable"
            ) from exc
        if version not in READABLE_VERSIONS:
            conn.close()
            raise Unavailable(
                f"the search index at {self._path} has schema version {version}, this code reads {SCHEMA_VERSION}",
                code="search_index_incompatible",
            )
        return _Connection(conn, identity or (), epoch)

    @contextmanager
    def _reading(self) -> Iterator[_Connection]:
        """One read transaction: the statements inside see the same committed state."""
        with self._using() as held:
            held.conn.execute("BEGIN")
            try:
                yield held
            finally:
                held.conn.execute("COMMIT")

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        if self._read_only:
            raise PermissionError(f"the search index at {self._path} is open read-only")
        with self._using() as held:
            conn = held.conn
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise Unavailable(f"the search index is busy: {exc}", code="search_index_busy") from exc
            self._pending_vectors = None
            try:
                yield conn
            except BaseException:
                self._pending_vectors = None
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            pending = self._take_pending_vectors()
            if pending is not None:
                with self._lock:
                    self._vectors_before, self._vectors_cache = self._vectors_cache, pending

    def _ranked(
        self, held: _Connection, table: str, expression: str, documents: str | None, limit: int
    ) -> list[tuple[Chunk, float]]:
        """Chunks matching an FTS5 expression with -bm25(), best first.

        The document filter sits inside the ranked subquery, so it applies before ``LIMIT``. It is written
        ``+rowid IN (...)`` so that SQLite checks it on each match (and computes bm25() only for the rows that pass)
        instead of handing FTS5 one ``rowid =`` lookup per chunk, each of which would recompute the BM25 statistics.
        """
        where = f"{table} MATCH ?"
        params: list[Any] = [expression]
        if documents is not None:
            where += f" AND +rowid IN ({_IN_DOCUMENTS})"
            params.append(documents)
        params.append(limit)
        rows = held.conn.execute(
            f"SELECT {_CHUNK_COLUMNS}, -f.score FROM "  # noqa: S608 - fixed SQL; values are bound
            f"(SELECT rowid, bm25({table}) AS score FROM {table} WHERE {where} ORDER BY score LIMIT ?) AS f "
            "JOIN chunks AS c ON c.rowid = f.rowid ORDER BY f.score, c.rowid",
            params,
        ).fetchall()
        return [(self._chunk(held, row[:-1]), float(row[-1])) for row in rows]

    def _terms_of(self, held: _Connection, table: str, chunk_ids: list[str]) -> dict[str, set[str]]:
        """The indexed terms of some chunks, as the terms table holds them (no need to analyse their text again)."""
        rows = held.conn.execute(
            f"SELECT c.id, t.terms FROM chunks AS c JOIN {table} AS t ON t.rowid = c.rowid "  # noqa: S608 - fixed
            "WHERE c.id IN (SELECT value FROM json_each(?))",
            (json.dumps(chunk_ids),),
        ).fetchall()
        return {str(row[0]): set(str(row[1]).split()) for row in rows}

    def _chunks_by_rowid(self, held: _Connection, rowids: list[int]) -> dict[int, Chunk]:
        rows = held.conn.execute(
            f"SELECT c.rowid, {_CHUNK_COLUMNS} FROM chunks AS c WHERE c.rowid IN (SELECT value FROM json_each(?))",  # noqa: S608 - fixed columns
            (json.dumps(rowids),),
        ).fetchall()
        return {int(row[0]): self._chunk(held, row[1:]) for row in rows}

    def _chunk(self, held: _Connection, row: Sequence[Any]) -> Chunk:
        if held.knowledge_base_id is None:
            # Set by the first write that had chunks, and never changed: safe to keep per connection.
            value = _meta(held.conn, "knowledge_base_id")
            held.knowledge_base_id = None if value is None else str(value)
        (doc_id, title, seq, type_, text, headings, start_line, end_line, start_offset, end_offset) = row[1:]
        return Chunk(
            id=row[0],
            knowledge_base_id=held.knowledge_base_id or "",
            document_id=doc_id,
            document_title=title,
            seq=seq,
            text=text,
            start_line=start_line,
            end_line=end_line,
            start_offset=start_offset,
            end_offset=end_offset,
            heading_path=() if headings == "[]" else tuple(json.loads(headings)),
            type=cast(ChunkType, type_),
        )

    def _vectors(self, held: _Connection) -> VectorSnapshot:
        """The vectors of the generation this read sees: the snapshot a write of this instance published, the one
        before it (for a read that started before that write), or, after a write by another process or instance,
        the file's vectors loaded again."""
        key = _vector_key(held.conn)
        for cached in (self._vectors_cache, self._vectors_before):
            if cached is not None and cached.key == key:
                return cached
        with self._lock:
            for cached in (self._vectors_cache, self._vectors_before):
                if cached is not None and cached.key == key:
                    return cached
            dimension = int(_meta(held.conn, "dimension") or 0)
            loaded = vector_matrix.load(held.conn, key, dimension)
            latest = self._vectors_cache
            if latest is None or latest.key[0] != key[0] or latest.key[1] < key[1]:
                self._vectors_before, self._vectors_cache = latest, loaded
            return loaded

    def _publish_vectors(self, before: tuple[str, int], changed: VectorSnapshot | None) -> None:
        """Inside a write transaction that moves the file from generation ``before``: ``changed`` (the vectors it
        leaves) becomes the current snapshot once the transaction commits."""
        self._pending_vectors = changed

    def _take_pending_vectors(self) -> VectorSnapshot | None:
        pending, self._pending_vectors = self._pending_vectors, None
        return pending

    def _snapshot_at(self, key: tuple[str, int]) -> VectorSnapshot | None:
        """The current snapshot when it is the one of ``key`` (a write changes it only then; otherwise the next
        search loads the file's vectors again)."""
        cached = self._vectors_cache
        return cached if cached is not None and cached.key == key else None


# ---------------------------------------------------------------------------------------------- file helpers


def _schema_version(conn: sqlite3.Connection) -> int | None:
    exists = conn.execute("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'meta'").fetchone()
    if exists is None:
        return None
    value = _meta(conn, "schema_version")
    return None if value is None else int(value)


def _create_schema(conn: sqlite3.Connection) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        for statement in (*_SCHEMA, *_SCHEMA_2):
            conn.execute(statement)
        conn.executemany(
            "INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)",
            [
                ("schema_version", SCHEMA_VERSION),
                ("generation", 0),
                ("file_id", uuid.uuid4().hex),
                ("chunk_count", 0),
                ("stems", "chunks_stems_a"),
            ],
        )
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _upgrade_to_2(conn: sqlite3.Connection) -> None:
    """Schema 1 → 2: the analysed terms tables (empty: the file is searched by its surface words until it is
    re-analysed) and the chunk count."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        if int(_meta(conn, "schema_version")) == 1:
            for statement in _SCHEMA_2:
                conn.execute(statement)
            count = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
            _set_meta(conn, {"schema_version": 2, "chunk_count": count, "stems": "chunks_stems_a"})
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _attach_vocabularies(conn: sqlite3.Connection) -> None:
    """Per-connection (temp) fts5vocab tables over the terms tables the file has: they also serve read-only files."""
    present = {
        str(row[0])
        for row in conn.execute(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND name IN (SELECT value FROM json_each(?))",
            (json.dumps(_FTS_TABLES),),
        )
    }
    for table in _FTS_TABLES:
        if table in present:
            conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{table}_vocab USING fts5vocab(main, {table}, 'row')")


def _set_meta(conn: sqlite3.Connection, values: dict[str, Any]) -> None:
    conn.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", list(values.items()))


def _analysis(conn: sqlite3.Connection) -> _AnalysisState:
    meta = dict(conn.execute("SELECT key, value FROM meta WHERE key IN ('analyser', 'language', 'stems', 'analysing')"))
    recorded = meta.get("analyser")
    current = None if recorded is None else analyser_for(str(meta.get("language")))
    target = None if meta.get("analysing") is None else analyser_for(str(meta["analysing"]))
    return _AnalysisState(current, None if recorded is None else str(recorded), str(meta.get("stems")), target)


def _adopt(conn: sqlite3.Connection, analyser: Analyser) -> _AnalysisState:
    """An empty file takes the analysis it is asked for, with nothing to re-analyse."""
    stems = str(_meta(conn, "stems") or "chunks_stems_a")
    _set_meta(conn, {"analyser": analyser.id, "language": analyser.language, "stems": stems})
    return _analysis(conn)


def _chunk_count(conn: sqlite3.Connection) -> int:
    value = _meta(conn, "chunk_count")
    if value is None:  # a file of schema 1, read-only
        return int(conn.execute("SELECT count(*) FROM chunks").fetchone()[0])
    return int(value)


def _count_chunks(conn: sqlite3.Connection, delta: int) -> None:
    if delta:
        conn.execute("UPDATE meta SET value = value + ? WHERE key = 'chunk_count'", (delta,))


def _reanalysis_progress(conn: sqlite3.Connection, state: _AnalysisState) -> tuple[int, int]:
    if state.target is None:
        return 0, 0
    after, until = int(_meta(conn, "analysing_rowid") or 0), int(_meta(conn, "analysing_until") or 0)
    total = conn.execute("SELECT count(*) FROM chunks WHERE rowid <= ?", (until,)).fetchone()[0]
    done = conn.execute("SELECT count(*) FROM chunks WHERE rowid <= ?", (min(after, until),)).fetchone()[0]
    return int(done), int(total)


def _query_terms(query: str, analyser: Analyser | None, language: str | None) -> list[str]:
    if analyser is not None:
        return analyser.query_terms(query)
    # Not analysed yet: surface words, without the stop words of the default analysis.
    words = list(dict.fromkeys(search_tokens(query)))
    default = analyser_for(language)
    return [w for w in words if not default.is_stop_word(w)] or words


def _meta(conn: sqlite3.Connection, key: str) -> Any:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else row[0]


def _claim(conn: sqlite3.Connection, key: str, value: str, what: str) -> None:
    """Record ``value`` under ``key`` the first time; refuse a different one later."""
    current = _meta(conn, key)
    if current is None:
        conn.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (key, value))
    elif current != value:
        raise ValueError(f"this index file belongs to {what} {current!r}, not {value!r}")


def _use_embedder(conn: sqlite3.Connection, name: str, dimension: int) -> None:
    held_vectors = conn.execute("SELECT EXISTS (SELECT 1 FROM vectors)").fetchone()[0]
    current = (_meta(conn, "embedder"), _meta(conn, "dimension"))
    if held_vectors and current != (name, dimension):
        raise ValueError(
            f"this index holds vectors of {current[0]!r} ({current[1]} dimensions), not of {name!r} "
            f"({dimension} dimensions): a knowledge base never mixes embedders; re-index all of it to switch"
        )
    conn.executemany(
        "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", [("embedder", name), ("dimension", dimension)]
    )


def _delete_rows(conn: sqlite3.Connection, document_id: str) -> int:
    of_document = "SELECT rowid FROM chunks WHERE document_id = ?"
    for table in _FTS_TABLES:
        if table == "chunks_fts" or _has_table(conn, table):
            conn.execute(f"DELETE FROM {table} WHERE rowid IN ({of_document})", (document_id,))  # noqa: S608 - fixed
    conn.execute(f"DELETE FROM vectors WHERE rowid IN ({of_document})", (document_id,))  # noqa: S608 - fixed SQL
    return conn.execute("DELETE FROM chunks WHERE document_id = ?", (document_id,)).rowcount


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?", (name,)).fetchone() is not None


def _bump_generation(conn: sqlite3.Connection) -> None:
    conn.execute("UPDATE meta SET value = value + 1 WHERE key = 'generation'")


def _vector_key(conn: sqlite3.Connection) -> tuple[str, int]:
    meta = dict(conn.execute("SELECT key, value FROM meta WHERE key IN ('file_id', 'generation')").fetchall())
    return (str(meta.get("file_id")), int(meta.get("generation") or 0))


def _next(key: tuple[str, int]) -> tuple[str, int]:
    return (key[0], key[1] + 1)


# ---------------------------------------------------------------------------------------------- value helpers


def _chunk_rows(document_id: str, chunks: Sequence[Chunk]) -> list[tuple[Any, ...]]:
    ids: set[str] = set()
    seqs: set[int] = set()
    rows: list[tuple[Any, ...]] = []
    for chunk in chunks:
        if chunk.document_id != document_id:
            raise ValueError(f"chunk {chunk.id!r} belongs to document {chunk.document_id!r}, not {document_id!r}")
        if chunk.id in ids or chunk.seq in seqs:
            raise ValueError(f"chunk {chunk.id!r} (seq {chunk.seq}) appears twice in document {document_id!r}")
        if chunk.type not in CHUNK_TYPES:
            raise ValueError(f"chunk {chunk.id!r} has an unknown type {chunk.type!r}")
        ids.add(chunk.id)
        seqs.add(chunk.seq)
        rows.append(
            (
                chunk.id,
                chunk.document_id,
                chunk.document_title,
                chunk.seq,
                chunk.type,
                chunk.text,
                json.dumps(list(chunk.heading_path), ensure_ascii=False),
                chunk.start_line,
                chunk.end_line,
                chunk.start_offset,
                chunk.end_offset,
            )
        )
    return rows


def _vector_blobs(
    chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]] | None, embedder_name: str | None
) -> tuple[int, list[bytes]] | None:
    """(dimension, one float32 blob per chunk), or None when no vectors are given."""
    if vectors is None:
        return None
    if not embedder_name:
        raise ValueError("vectors need the name of the embedder that made them")
    if len(vectors) != len(chunks):
        raise ValueError(f"{len(vectors)} vectors for {len(chunks)} chunks")
    if not chunks:
        return None
    try:
        matrix = np.asarray(vectors, dtype="<f4")
    except ValueError as exc:
        raise ValueError("vectors must all have the same dimension") from exc
    if matrix.ndim != 2 or matrix.shape[1] == 0:
        raise ValueError("vectors must be non-empty sequences of numbers")
    if not np.isfinite(matrix).all():
        raise ValueError("vectors must hold finite numbers")
    return int(matrix.shape[1]), [row.tobytes() for row in matrix]


def _unique_documents(document_ids: Collection[str]) -> list[str]:
    if isinstance(document_ids, str):
        raise TypeError("document_ids must be a collection of ids, not one string")
    return sorted(set(document_ids))


def _documents_json(document_ids: Collection[str] | None) -> str | None:
    return None if document_ids is None else json.dumps(_unique_documents(document_ids))


def _phrase(term: str, *, prefix: bool) -> str:
    quoted = '"' + term.replace('"', '""') + '"'
    return quoted + "*" if prefix else quoted


def _standing(scores: npt.NDArray[np.float32], live: int) -> Callable[[float], float | None]:
    """A cosine's relevance: how many standard deviations it stands above the mean cosine of the chunks searched,
    ``SEMANTIC_STANDING`` of them making 0.5 (cosines themselves are not comparable across models: E5's sit between
    0.7 and 0.9 for anything). Fewer than ``SEMANTIC_MIN_CHUNKS`` chunks give no statistics: unknown (None)."""
    if live < SEMANTIC_MIN_CHUNKS:
        return lambda score: None
    finite = scores[np.isfinite(scores)]
    mean, spread = float(finite.mean()), float(finite.std())
    if spread <= 1e-9:
        return lambda score: 0.0
    return lambda score: min(max((score - mean) / spread / (2 * SEMANTIC_STANDING), 0.0), 1.0)


def _idf(df: int, total: int) -> float:
    """BM25's inverse document frequency in its always-positive form; a term no chunk holds weighs the most."""
    return math.log(1.0 + (total - df + 0.5) / (df + 0.5))


def _coverage(held: set[str], weights: dict[str, float]) -> float:
    """The summed weight of the query terms a chunk holds (a lone CJK character: as the start of a term)."""
    found = 0.0
    for term, weight in weights.items():
        if term in held or (is_cjk(term) and len(term) == 1 and any(t.startswith(term) for t in held)):
            found += weight
    return found


def _squash(score: float) -> float:
    """Map -bm25() (≥ 0) into [0, 1), keeping its order."""
    score = max(score, 0.0)
    return score / (1.0 + score)
