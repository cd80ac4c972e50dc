"""Recall@10 of the Lance index's vector search (IVF-PQ as the upkeep job builds it, searched with the adapter's
own query, ``vector_query``: at least ``NPROBES`` partitions, ``REFINE_FACTOR``) against exact cosine search (numpy,
every vector) on the same vectors.

Sources of vectors:

    synthetic   the corpus of ``lance_scale.py`` (unit vectors around 256 centres) and its semantic queries
    e5          real embeddings from the local embedder (multilingual-e5-small, the ``local-embedder`` extra) of
                docstrings of Python's standard library (documents), the queries being the first sentence of
                other docstrings, embedded as queries; the vectors are kept in ``--cache`` for the next run

The dataset holds only ids and vectors (text plays no part in a vector search); the index is built by
``maintenance._vector_index``, the adapter's own code, with its threshold (``VECTOR_INDEX_MIN_ROWS``) lowered to the
number of rows when it is smaller, so that a small real-embedding set is indexed as a large one would be.

    .venv/bin/python tests/bench/lance_recall.py --source synthetic --rows 100000
    .venv/bin/python tests/bench/lance_recall.py --source e5 --rows 3000 --queries 100
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import sysconfig
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def docstrings(limit: int) -> list[str]:
    """Docstrings of the standard library's functions and classes, 80 to 1,500 characters, deduplicated."""
    found: dict[str, None] = {}
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py")):
        if "test" in path.parts or "idlelib" in path.parts:
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef):
                text = " ".join((ast.get_docstring(node) or "").split())
                if 80 <= len(text) <= 1500:
                    found[text] = None
        if len(found) >= limit:
            break
    return list(found)[:limit]


EMBED_BATCH = 500


def e5_vectors(rows: int, queries: int, cache: Path) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Documents and queries embedded by the local embedder, kept in ``cache``: batch by batch, so that a run stopped
    half-way goes on from its last batch (embedding 20,000 docstrings takes about an hour on 2 cores), and a run with
    more rows reuses the batches of a smaller one (the documents are a prefix of the same list)."""
    cached = cache / f"e5-{rows}-{queries}.npz"
    if cached.exists():
        with np.load(cached) as held:
            return held["documents"], held["queries"]
    from mcpbridge.adapters.local.e5_embedder import E5Embedder

    texts = docstrings(rows + queries)
    if len(texts) < rows + queries:
        raise SystemExit(f"only {len(texts)} docstrings found")
    embedder = E5Embedder()
    cache.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    documents = _embedded_in_batches(embedder, texts[:rows], cache / "e5-documents")
    asked = [text.split(". ")[0][:200] for text in texts[rows:]]
    query_vectors = np.asarray(embedder.embed(asked, purpose="query"), dtype=np.float32)
    print(f"embedded {rows + queries} texts in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    np.savez(cached, documents=documents, queries=query_vectors)
    return documents, query_vectors


def _embedded_in_batches(embedder: Any, texts: Sequence[str], folder: Path) -> np.ndarray[Any, Any]:
    folder.mkdir(exist_ok=True)
    parts = []
    for at in range(0, len(texts), EMBED_BATCH):
        batch = texts[at : at + EMBED_BATCH]
        part = folder / f"{at:08d}-{len(batch)}.npy"
        if not part.exists():
            vectors = np.asarray(embedder.embed(batch, purpose="document"), dtype=np.float32)
            np.save(part.with_suffix(".tmp.npy"), vectors)
            part.with_suffix(".tmp.npy").rename(part)
            print(f"embedded {min(at + EMBED_BATCH, len(texts))} of {len(texts)} documents", file=sys.stderr)
        parts.append(np.load(part))
    return np.concatenate(parts)


def synthetic_vectors(
    rows: int, queries: int, dim: int, seed: int
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    from tests.bench.lance_scale import BATCH_ROWS, Corpus

    corpus = Corpus.make(seed, dim)
    parts = [corpus.batch(at, min(BATCH_ROWS, rows - at))[1] for at in range(0, rows, BATCH_ROWS)]
    asked = np.asarray([q["vector"] for q in corpus.queries(queries, rows // 10, 1)], dtype=np.float32)
    return np.concatenate(parts), asked


def recall(documents: np.ndarray[Any, Any], queries: np.ndarray[Any, Any]) -> dict[str, Any]:
    import lance
    import pyarrow as pa

    from mcpbridge.adapters.lance import maintenance
    from mcpbridge.adapters.lance.search_index import NPROBES, REFINE_FACTOR, vector_query
    from mcpbridge.adapters.lance.tables import normalised

    documents = normalised(documents)
    queries = normalised(queries)
    rows, dim = documents.shape
    table = pa.table(
        {
            "id": pa.array(np.arange(rows), type=pa.int64()),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(documents.reshape(-1)), dim),
        }
    )
    with tempfile.TemporaryDirectory(prefix="mcpbridge-recall-") as tmp:
        dataset = lance.write_dataset(table, f"{tmp}/vectors.lance")
        threshold = maintenance.VECTOR_INDEX_MIN_ROWS
        maintenance.VECTOR_INDEX_MIN_ROWS = min(threshold, rows)  # type: ignore[misc]
        start = time.perf_counter()
        try:
            built = maintenance._vector_index(dataset, 0)
        finally:
            maintenance.VECTOR_INDEX_MIN_ROWS = threshold  # type: ignore[misc]
        build_s = time.perf_counter() - start
        dataset = lance.dataset(f"{tmp}/vectors.lance")
        (index,) = [i for i in dataset.list_indices() if i["type"] != "BTree"]
        hits, times = 0, []
        for query in queries:
            exact = set(np.argsort(-(documents @ query))[:10].tolist())
            start = time.perf_counter()
            found = dataset.to_table(
                columns=["id"],
                nearest=vector_query(dataset, query, None, 10),
            )
            times.append(time.perf_counter() - start)
            hits += len(exact & set(found.column("id").to_pylist()))
    partitions = max(16, min(4096, int(rows**0.5)))
    return {
        "rows": rows,
        "dim": dim,
        "queries": len(queries),
        "index": index["type"],
        "indexed_rows": built,
        "partitions": partitions,
        "nprobes": NPROBES,
        "refine_factor": REFINE_FACTOR,
        "build_s": round(build_s, 1),
        "recall@10": hits / (10 * len(queries)),
        "query_p50_ms": round(1000 * float(np.median(times)), 2),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", choices=["synthetic", "e5"], default="synthetic")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--dim", type=int, default=384, help="synthetic vectors' dimension")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "mcpbridge-recall")
    args = parser.parse_args(argv)
    if args.source == "e5":
        documents, queries = e5_vectors(args.rows, args.queries, args.cache)
    else:
        documents, queries = synthetic_vectors(args.rows, args.queries, args.dim, args.seed)
    print(json.dumps({"source": args.source, **recall(documents, queries)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
