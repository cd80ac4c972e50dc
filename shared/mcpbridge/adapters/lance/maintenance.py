"""Upkeep of a knowledge base's Lance dataset, run as the ``optimise_index`` job, and the statistics it leaves.

``optimise``, one job at a time per knowledge base (a lease in the store):

1. compaction with every deletion materialised: fragments holding deleted rows are rewritten without them;
2. the inverted indexes rebuilt when rows were deleted or replaced since the last run (their vocabulary would keep
   the words of removed text), else brought up to date with the rows added since;
3. the vector index (IVF-PQ, cosine) built once the knowledge base holds ``VECTOR_INDEX_MIN_ROWS`` vectors, built
   again when it has doubled since, else brought up to date;
4. a new statistics dataset: each term's and each word's document frequency, the row count, and for the vectors
   their mean and main axes (so a cosine's standing against all chunks is known without reading them);
5. old versions, retired datasets and the previous statistics removed once ``grace_seconds`` old (a search that
   opened them a moment ago may still be reading): then a deleted chunk is gone from storage, not just hidden.
"""

from __future__ import annotations

import contextlib
import io
import math
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from mcpbridge.adapters.index_files.kb_index import SEMANTIC_MIN_CHUNKS, SEMANTIC_STANDING
from mcpbridge.adapters.lance.datasets import FTS_PARAMS, TEXT_INDEXES
from mcpbridge.adapters.lance.pointers import Pointer, pointer_key
from mcpbridge.adapters.lance.tables import literal
from mcpbridge.domain.items import AttrAbsent, Compare, Condition, ItemAbsent, Key, Update, all_of, any_of
from mcpbridge.errors import ConditionFailed

if TYPE_CHECKING:
    from mcpbridge.adapters.lance.search_index import LanceSearchIndex

GRACE_SECONDS = 600.0
LEASE_SECONDS = 900.0
VECTOR_INDEX_MIN_ROWS = 20_000
VECTOR_SAMPLE = 20_000
AXES = 64
WORD_EXPANSIONS = 24
SCAN_BATCH = 8192

_STATS_SCHEMA = pa.schema(
    [
        pa.field("field", pa.string()),
        pa.field("term", pa.string()),
        pa.field("df", pa.int64()),
        pa.field("data", pa.binary()),
    ]
)


@dataclass(frozen=True)
class _Summary:
    rows: int
    vectors: _VectorStats | None


@dataclass(frozen=True)
class _VectorStats:
    count: int
    mean: np.ndarray[Any, np.dtype[np.float64]]
    axes: np.ndarray[Any, np.dtype[np.float64]]  # AXES x d, unit rows
    variances: np.ndarray[Any, np.dtype[np.float64]]  # along each axis
    residual: float  # variance per remaining dimension

    def spread(self, query: np.ndarray[Any, Any]) -> tuple[float, float]:
        """Mean and standard deviation of ``query``'s cosine with the vectors summarised (query and vectors unit)."""
        projections = self.axes @ query
        variance = float(self.variances @ projections**2) + self.residual * max(
            0.0, 1.0 - float(projections @ projections)
        )
        return float(self.mean @ query), math.sqrt(max(variance, 0.0))


_summaries: dict[str, _Summary] = {}
_summaries_lock = threading.Lock()


# ---------------------------------------------------------------------------------------------- reading statistics


def _stats_dataset(index: LanceSearchIndex, pointer: Pointer) -> Any | None:
    if pointer.stats is None:
        return None
    # Statistics datasets are written once and never change: any handle is current.
    return index.datasets.get(pointer.stats, 0)


def _summary(index: LanceSearchIndex, pointer: Pointer) -> _Summary | None:
    if pointer.stats is None:
        return None
    with _summaries_lock:
        cached = _summaries.get(pointer.stats)
    if cached is not None:
        return cached
    dataset = _stats_dataset(index, pointer)
    assert dataset is not None
    rows = dataset.to_table(filter="field IN ('meta', 'vectors')").to_pylist()
    meta = {r["term"]: r for r in rows if r["field"] == "meta"}
    vectors = next((r for r in rows if r["field"] == "vectors"), None)
    summary = _Summary(
        int(meta["rows"]["df"]) if "rows" in meta else 0,
        None if vectors is None else _load_vectors(vectors["data"], int(vectors["df"])),
    )
    with _summaries_lock:
        _summaries[pointer.stats] = summary
    return summary


def frequencies(
    index: LanceSearchIndex, pointer: Pointer, field: str, terms: Sequence[str], rows_now: int
) -> dict[str, int]:
    """The terms the statistics know, with their document frequency scaled to ``rows_now``."""
    summary = _summary(index, pointer)
    dataset = _stats_dataset(index, pointer)
    if summary is None or dataset is None or not terms:
        return {}
    found = dataset.to_table(
        columns=["term", "df"],
        filter=f"field = {literal(field)} AND term IN ({', '.join(literal(t) for t in dict.fromkeys(terms))})",
    ).to_pylist()
    scale = rows_now / summary.rows if summary.rows else 1.0
    return {str(r["term"]): max(1, round(int(r["df"]) * scale)) for r in found}


def words_starting(index: LanceSearchIndex, pointer: Pointer, word: str) -> list[str]:
    """``word`` and the most frequent words the statistics know that start with it (grep's prefix semantics)."""
    dataset = _stats_dataset(index, pointer)
    if dataset is None:
        return [word]
    upper = word + "\U0010ffff"
    found = dataset.to_table(
        columns=["term", "df"],
        filter=f"field = 'words' AND term >= {literal(word)} AND term < {literal(upper)}",
    ).to_pylist()
    found.sort(key=lambda r: (-int(r["df"]), r["term"]))
    return list(dict.fromkeys([word, *(str(r["term"]) for r in found[:WORD_EXPANSIONS])]))


def standing(index: LanceSearchIndex, pointer: Pointer, query: np.ndarray[Any, Any]) -> Callable[[float], float | None]:
    """A cosine's relevance as the SQLite index gives it (standard deviations above the mean cosine), from the
    statistics; unknown (None) before there are any, or for fewer than ``SEMANTIC_MIN_CHUNKS`` vectors."""
    summary = _summary(index, pointer)
    if summary is None or summary.vectors is None or summary.vectors.count < SEMANTIC_MIN_CHUNKS:
        return lambda score: None
    if summary.vectors.mean.shape[0] != query.shape[0]:
        return lambda score: None
    mean, spread = summary.vectors.spread(query.astype(np.float64))
    if spread <= 1e-9:
        return lambda score: 0.0
    return lambda score: min(max((score - mean) / spread / (2 * SEMANTIC_STANDING), 0.0), 1.0)


# ---------------------------------------------------------------------------------------------- optimising


def lease_key(kb_id: str) -> Key:
    return Key(f"KB#{kb_id}", "LANCE_OPTIMISING")


def optimise(index: LanceSearchIndex, pointer: Pointer, *, grace_seconds: float) -> bool:
    """Run the steps of the module docstring; False when another optimisation holds the lease."""
    store, now = index.store, index.clock.now()
    holder = uuid.uuid4().hex
    free = Condition("lance_optimise_free", any_of(ItemAbsent(), AttrAbsent("until"), Compare("until", "<", now)))
    try:
        store.update(
            lease_key(pointer.kb_id), Update(set={"holder": holder, "until": now + LEASE_SECONDS}), condition=free
        )
    except ConditionFailed:
        return False
    try:
        _optimise(index, pointer, grace_seconds)
    finally:
        with contextlib.suppress(ConditionFailed):
            store.delete(
                lease_key(pointer.kb_id),
                condition=Condition("lance_optimise_mine", all_of(Compare("holder", "=", holder))),
            )
    return True


def _optimise(index: LanceSearchIndex, pointer: Pointer, grace_seconds: float) -> None:
    writes = pointer.writes
    dataset = index.datasets.get(pointer.table, writes)
    purged = int(pointer_item(index, pointer).get("purges", 0)) > int(
        pointer_item(index, pointer).get("optimised_purges", 0)
    )
    dataset.optimize.compact_files(materialize_deletions=True, materialize_deletions_threshold=0.0)
    dataset = index.datasets.reopen(pointer.table)
    if purged:
        for column in TEXT_INDEXES:
            dataset.create_scalar_index(column, index_type="INVERTED", name=f"{column}_idx", replace=True, **FTS_PARAMS)
    dataset.optimize.optimize_indices()
    vector_rows = _vector_index(dataset, int(pointer_item(index, pointer).get("vector_index_rows", 0)))
    stats = _write_stats(index, pointer, index.datasets.reopen(pointer.table))
    item = pointer_item(index, pointer)
    retired = [[name, when] for name, when in item.get("retired", [])]
    if pointer.stats:
        retired.append([pointer.stats, index.clock.now()])
    changes: dict[str, Any] = {
        "stats": stats,
        "optimised_writes": writes,
        "optimised_purges": int(item.get("purges", 0)),
    }
    if vector_rows:
        changes["vector_index_rows"] = vector_rows
    due = [r for r in retired if float(r[1]) + grace_seconds <= index.clock.now()]
    changes["retired"] = [r for r in retired if r not in due]
    try:
        index.store.update(
            pointer_key(pointer.kb_id),
            Update(set=changes),
            condition=Condition.equals("lance_table_same", "table", pointer.table),
        )
    except ConditionFailed:
        index.datasets.drop(stats)  # the knowledge base was switched or deleted meanwhile
        return
    for name, _ in due:
        index.datasets.drop(str(name))
    dataset = index.datasets.reopen(pointer.table)
    dataset.cleanup_old_versions(older_than=timedelta(seconds=grace_seconds), delete_unverified=grace_seconds == 0)


def pointer_item(index: LanceSearchIndex, pointer: Pointer) -> dict[str, Any]:
    return dict(index.store.get(pointer_key(pointer.kb_id)) or {})


def _vector_index(dataset: Any, indexed_rows: int) -> int:
    """Build the vector index when due; the number of vectors it was built on (0: unchanged)."""
    if "vector" not in dataset.schema.names:
        return 0
    rows = int(dataset.count_rows("vector IS NOT NULL"))
    if rows < VECTOR_INDEX_MIN_ROWS or (indexed_rows and rows < 2 * indexed_rows):
        return 0
    dimension = dataset.schema.field("vector").type.list_size
    sub_vectors = next((n for n in (dimension // 8, dimension // 16, dimension // 4) if n and dimension % n == 0), 1)
    dataset.create_index(
        "vector",
        index_type="IVF_PQ",
        metric="cosine",
        num_partitions=max(16, min(4096, int(math.sqrt(rows)))),
        num_sub_vectors=sub_vectors,
        replace=True,
    )
    return rows


def _write_stats(index: LanceSearchIndex, pointer: Pointer, dataset: Any) -> str:
    counters: dict[str, Counter[str]] = {"terms": Counter(), "words": Counter()}
    rows = 0
    for batch in dataset.to_batches(columns=["terms", "words"], batch_size=SCAN_BATCH):
        rows += batch.num_rows
        for column in ("terms", "words"):
            counter = counters[column]
            for text in batch.column(column).to_pylist():
                counter.update(set(str(text or "").split()))
    records: list[dict[str, Any]] = [{"field": "meta", "term": "rows", "df": rows, "data": None}]
    for column, counter in counters.items():
        records += [{"field": column, "term": t, "df": n, "data": None} for t, n in counter.items()]
    vectors = _vector_stats(dataset)
    if vectors is not None:
        records.append({"field": "vectors", "term": "", "df": vectors[0], "data": vectors[1]})
    name = f"{pointer.kb_id}-stats-{uuid.uuid4().hex[:12]}"
    created = index.datasets.create_plain(name, pa.Table.from_pylist(records, schema=_STATS_SCHEMA))
    with contextlib.suppress(ValueError, OSError, RuntimeError):
        created.create_scalar_index("term", index_type="BTREE")
    return name


def _vector_stats(dataset: Any) -> tuple[int, bytes] | None:
    if "vector" not in dataset.schema.names:
        return None
    count = int(dataset.count_rows("vector IS NOT NULL"))
    if count == 0:
        return None
    take = min(count, VECTOR_SAMPLE)
    sample = dataset.sample(take, columns=["vector"]) if count > take else dataset.to_table(columns=["vector"])
    column = sample.column("vector").drop_null()
    matrix = np.asarray(column.combine_chunks().flatten().to_numpy(zero_copy_only=False), dtype=np.float64)
    dimension = dataset.schema.field("vector").type.list_size
    matrix = matrix.reshape(-1, dimension)
    mean = matrix.mean(axis=0)
    centred = matrix - mean
    covariance = centred.T @ centred / max(matrix.shape[0] - 1, 1)
    values, vectors = np.linalg.eigh(covariance)
    order = np.argsort(values)[::-1][: min(AXES, dimension)]
    kept = values[order]
    rest = dimension - len(order)
    residual = float((np.trace(covariance) - kept.sum()) / rest) if rest else 0.0
    buffer = io.BytesIO()
    np.savez(buffer, mean=mean, axes=vectors[:, order].T, variances=kept, residual=np.array([residual]))
    return count, buffer.getvalue()


def _load_vectors(data: bytes, count: int) -> _VectorStats:
    with np.load(io.BytesIO(data)) as arrays:
        return _VectorStats(
            count=count,
            mean=arrays["mean"],
            axes=arrays["axes"],
            variances=arrays["variances"],
            residual=float(arrays["residual"][0]),
        )
