"""The vectors of one index file in memory, as immutable snapshots that a write turns into the next one.

A snapshot holds unit rows in a few segments: the one loaded from the file, then one per write that added vectors
(a document replaced adds its new rows and marks its old ones dead). A write costs what it adds, not what the file
holds, so the first semantic search after a small write is as fast as any other. Segments are merged when there
are many (the small ones only), and the whole matrix is rebuilt without its dead rows when they reach a quarter of
it: both amortised over the writes that caused them.

Snapshots are never changed once published: a search running on one is not disturbed by a write, which publishes
a new snapshot beside it. Loading reads the file's vectors in rowid order straight into one preallocated float32
matrix, a batch of rows at a time: time linear in the rows, memory the size of the matrix plus one batch.

The matrix products run on one BLAS thread (``threadpoolctl``, set once per process on first load): a
matrix-vector product of this size is memory-bound, and OpenBLAS's worker threads cost more than they save, on a
few shared cores most of all (a search at 10,000 x 384 went from 3.6 ms to 0.5 ms).
"""

from __future__ import annotations

import functools
import sqlite3
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

Matrix = npt.NDArray[np.float32]
Positions = npt.NDArray[np.int64]

LOAD_BATCH = 4096
MAX_SEGMENTS = 16
DEAD_SHARE_MAX = 0.25


@functools.cache
def limit_blas_threads() -> None:
    """One BLAS thread for this process (once; a no-op without threadpoolctl)."""
    try:
        from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - a declared dependency
        return
    threadpool_limits(limits=1, user_api="blas")


@dataclass(frozen=True)
class VectorSnapshot:
    """The file's vectors at one generation (``key`` = file id, generation)."""

    key: tuple[str, int]
    dimension: int
    segments: tuple[Matrix, ...]
    starts: tuple[int, ...]
    """Global position of each segment's first row."""
    rowids: Positions
    """Chunk rowid of each global position; -1 for a dead row."""
    documents: dict[str, tuple[int, Positions]]
    """Document id → (segment, positions of its live rows in that segment)."""
    live: int

    @property
    def size(self) -> int:
        return int(self.rowids.shape[0])

    def dead(self) -> Positions:
        return np.flatnonzero(self.rowids < 0)

    def scores(self, query: Matrix) -> npt.NDArray[np.float32]:
        """Cosine of every global position to a unit ``query``; dead rows score -inf."""
        parts = [segment @ query for segment in self.segments]
        scores = np.concatenate(parts) if len(parts) > 1 else parts[0]
        if self.live < self.size:
            scores[self.rowids < 0] = -np.inf
        return scores

    def document_scores(self, documents: list[str], query: Matrix) -> tuple[Positions, npt.NDArray[np.float32]]:
        """(chunk rowids, cosines) of the live rows of ``documents``."""
        rowids: list[Positions] = []
        scores: list[npt.NDArray[np.float32]] = []
        for document_id in documents:
            found = self.documents.get(document_id)
            if found is None:
                continue
            segment, positions = found
            rowids.append(self.rowids[self.starts[segment] + positions])
            scores.append(self.segments[segment][positions] @ query)
        if not rowids:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        return np.concatenate(rowids), np.concatenate(scores)

    # ------------------------------------------------------------------------------------------ writes

    def changed(
        self,
        key: tuple[str, int],
        document_id: str,
        rowids: list[int],
        vectors: Matrix | None,
    ) -> VectorSnapshot:
        """The snapshot after a write that replaced ``document_id``'s rows by ``rowids`` with ``vectors`` (none: the
        document now has no vectors)."""
        dimension = self.dimension if vectors is None else int(vectors.shape[1])
        base = self if dimension == self.dimension else empty(key, dimension)
        documents = dict(base.documents)
        all_rowids = base.rowids
        live = base.live
        old = documents.pop(document_id, None)
        if old is not None:
            segment, positions = old
            all_rowids = all_rowids.copy()
            all_rowids[base.starts[segment] + positions] = -1
            live -= int(positions.shape[0])
        segments, starts = base.segments, base.starts
        if vectors is not None and vectors.shape[0]:
            unit = _unit_rows(np.array(vectors, dtype=np.float32))
            documents[document_id] = (len(segments), np.arange(unit.shape[0], dtype=np.int64))
            starts = (*starts, int(all_rowids.shape[0]))
            segments = (*segments, unit)
            all_rowids = np.concatenate([all_rowids, np.asarray(rowids, dtype=np.int64)])
            live += unit.shape[0]
        snapshot = VectorSnapshot(key, dimension, segments, starts, all_rowids, documents, live)
        if snapshot.size - snapshot.live > DEAD_SHARE_MAX * max(snapshot.size, 1):
            return snapshot.compacted(range(len(snapshot.segments)))
        if len(snapshot.segments) > MAX_SEGMENTS:
            return snapshot.compacted(range(1, len(snapshot.segments)))
        return snapshot

    def moved_to(self, key: tuple[str, int]) -> VectorSnapshot:
        """The same vectors at another generation (a write that changed no vector)."""
        return replace(self, key=key)

    def compacted(self, merged: range) -> VectorSnapshot:
        """The snapshot with the segments ``merged`` (consecutive, to the end) made one, without their dead rows."""
        keep = list(range(merged.start))
        first = merged.start
        rows: list[Matrix] = []
        ids: list[Positions] = []
        moved: dict[str, tuple[int, Positions]] = {}
        offset = 0
        by_segment: dict[int, list[tuple[str, Positions]]] = {}
        for document_id, (segment, positions) in self.documents.items():
            by_segment.setdefault(segment, []).append((document_id, positions))
        for segment in merged:
            for document_id, positions in by_segment.get(segment, []):
                rows.append(self.segments[segment][positions])
                ids.append(self.rowids[self.starts[segment] + positions])
                count = int(positions.shape[0])
                moved[document_id] = (first, np.arange(offset, offset + count, dtype=np.int64))
                offset += count
        segments = [self.segments[s] for s in keep]
        starts = [self.starts[s] for s in keep]
        end = self.starts[first] if first < len(self.starts) else self.size
        rowids = [self.rowids[:end]]
        if rows:
            segments.append(np.concatenate(rows) if len(rows) > 1 else rows[0])
            starts.append(end)
            rowids.append(np.concatenate(ids))
        documents = {d: found for d, found in self.documents.items() if found[0] < first} | moved
        all_rowids = np.concatenate(rowids) if len(rowids) > 1 else rowids[0].copy()
        if not segments:
            return empty(self.key, self.dimension)
        return VectorSnapshot(
            self.key, self.dimension, tuple(segments), tuple(starts), all_rowids, documents, self.live
        )


def empty(key: tuple[str, int], dimension: int) -> VectorSnapshot:
    return VectorSnapshot(
        key, dimension, (np.zeros((0, dimension), dtype=np.float32),), (0,), np.zeros(0, dtype=np.int64), {}, 0
    )


def load(conn: sqlite3.Connection, key: tuple[str, int], dimension: int) -> VectorSnapshot:
    """Every vector of the file (in a read transaction of ``conn``), in one matrix."""
    limit_blas_threads()
    count = int(conn.execute("SELECT count(*) FROM vectors").fetchone()[0])
    if count == 0 or dimension <= 0:
        return empty(key, max(dimension, 0))
    matrix = np.empty((count, dimension), dtype=np.float32)
    rowids = np.empty(count, dtype=np.int64)
    positions: dict[str, list[int]] = {}
    cursor = conn.execute(
        "SELECT v.rowid, c.document_id, v.vector FROM vectors AS v JOIN chunks AS c ON c.rowid = v.rowid "
        "ORDER BY v.rowid"
    )
    filled = 0
    while batch := cursor.fetchmany(LOAD_BATCH):
        size = len(batch)
        block = np.frombuffer(b"".join(row[2] for row in batch), dtype="<f4").reshape(size, dimension)
        matrix[filled : filled + size] = _unit_rows(block.astype(np.float32))
        for i, row in enumerate(batch):
            rowids[filled + i] = row[0]
            positions.setdefault(row[1], []).append(filled + i)
        filled += size
    if filled != count:  # the read transaction makes this impossible; a short matrix would misplace rows
        matrix, rowids = matrix[:filled], rowids[:filled]
    documents = {d: (0, np.asarray(p, dtype=np.int64)) for d, p in positions.items()}
    return VectorSnapshot(key, dimension, (matrix,), (0,), rowids, documents, filled)


def _unit_rows(matrix: Matrix) -> Matrix:
    norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix))
    matrix /= np.maximum(norms, np.float32(1e-12))[:, None]
    return matrix
