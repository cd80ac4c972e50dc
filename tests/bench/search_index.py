"""Speed of a knowledge base's search index file (``KbIndexFile``) next to baselines measured in the same run.

A deterministic corpus (seeded): documents of 10 chunks of English-like text drawn from a fixed vocabulary with a
Zipf distribution, 5% of the documents in Chinese, and a random 256-dimension unit vector per chunk. The same
corpus, queries and query vectors go to:

    ours            KbIndexFile: replace_document per document (chunks + vectors); keyword(limit=10);
                    semantic(limit=10); hybrid = keyword(20) + semantic(20) fused by reciprocal rank (k=60)
                    (the product's fusion before ``domain.ranking.fuse``; the cost is alike)
    bm25s           bm25s.tokenize + BM25.index; per query tokenize + retrieve(k=10)
    fts5            a bare SQLite FTS5 table of the texts (unicode61), one transaction per document;
                    SELECT rowid, text ... MATCH '"a" OR "b"' ORDER BY rank LIMIT 10
    numpy           brute-force cosine over the normalised vectors held in memory (argpartition top 10)
    fts5+numpy      the hybrid baseline: fts5 (20) + numpy (20), the same fusion

Latencies are per query: p50/p95 of ``--queries`` queries after 10 warm-up ones, the systems taking turns on each
query so that drift in the machine's load hits them alike. ``ours/baseline`` is ours divided by the baseline: above
1 means ours takes longer (or, for chunks/s, indexes faster). "agreement@10" is the mean share of our keyword top 10
that a baseline also returns (English queries; the tokenisers differ on CJK).

    .venv/bin/python tests/bench/search_index.py [--chunks 10000] [--queries 200] [--dim 256] [--seed 7] [--json]

Numbers depend on the machine: quote the ratios, never assert on them (see tests/bench/README.md). On a machine
with few cores, OpenBLAS's worker threads can cost more than the product itself (a 10,000 x 256 product then
takes a fixed ~8 ms instead of ~2 ms, ours and the numpy baseline alike): compare with ``OPENBLAS_NUM_THREADS=1``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bm25s  # type: ignore[import-untyped]
import numpy as np

from mcpbridge.adapters.index_files.kb_index import KbIndexFile
from mcpbridge.domain.knowledge import Chunk

CHUNKS_PER_DOCUMENT = 10
CHINESE_SHARE = 0.05
WARMUP_QUERIES = 10
RRF_K = 60

_COMMON_WORDS = (
    "the of and to in a is that for it as was with be by on not he this are or his from at which but have an they "
    "you were her she there been one all we their has would when if so what out up more who will can no into them "
    "only some time could these its than two may then first any like now over such our man me even most made "
    "after also did many before must through back years where much your way well down should because each just "
    "those people how too little state good very make world still own see men work long get here between both "
    "life being under never day same another know while last might us great old year off come since against go "
    "came right used take three token oauth2 refresh server client index search document chunk lambda bucket "
    "query vector embedding knowledge answer agent tool endpoint request response cache deploy invoice payment "
    "policy secret approval"
)
_HAN = (
    "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法"
    "所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政"
    "四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最"
    "立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根"
    "论运农指几九区强放决西被干做必战先回则任取据处府局检索库识"
)


@dataclass(frozen=True)
class Corpus:
    texts: list[str]
    documents: list[str]  # document id of each chunk
    vectors: np.ndarray[Any, np.dtype[np.float32]]  # unit rows
    queries: list[str]
    english: list[bool]  # whether each query is English
    query_vectors: np.ndarray[Any, np.dtype[np.float32]]
    filters: list[list[str]]  # five documents per query, for the filtered runs


def _vocabulary(rng: np.random.Generator, size: int) -> list[str]:
    consonants, vowels = "bcdfghjklmnprstvwz", "aeiou"
    words = list(dict.fromkeys(_COMMON_WORDS.split()))
    seen = set(words)
    while len(words) < size:
        word = "".join(
            consonants[rng.integers(len(consonants))] + vowels[rng.integers(len(vowels))]
            for _ in range(int(rng.integers(2, 5)))
        )
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


def _zipf(size: int, exponent: float = 1.07) -> np.ndarray[Any, np.dtype[np.float64]]:
    weights: np.ndarray[Any, np.dtype[np.float64]] = 1.0 / np.power(np.arange(size) + 2.7, exponent)
    weights /= weights.sum()
    return weights


def build_corpus(chunks: int, queries: int, dim: int, seed: int) -> Corpus:
    rng = np.random.default_rng(seed)
    english = _vocabulary(rng, 6000)
    english_p = _zipf(len(english))
    chinese = list(dict.fromkeys(_HAN[rng.integers(len(_HAN))] + _HAN[rng.integers(len(_HAN))] for _ in range(1500)))
    chinese_p = _zipf(len(chinese))
    n_documents = max(1, chunks // CHUNKS_PER_DOCUMENT)
    texts: list[str] = []
    documents: list[str] = []
    for d in range(n_documents):
        in_chinese = rng.random() < CHINESE_SHARE
        for _ in range(CHUNKS_PER_DOCUMENT):
            if in_chinese:
                words = rng.choice(chinese, size=int(rng.integers(30, 70)), p=chinese_p)
                sentences = ["".join(words[i : i + 6]) for i in range(0, len(words), 6)]
                texts.append("，".join(sentences) + "。")
            else:
                words = rng.choice(english, size=int(rng.integers(50, 130)), p=english_p)
                sentences = [" ".join(words[i : i + 12]) for i in range(0, len(words), 12)]
                texts.append(". ".join(s.capitalize() for s in sentences) + ".")
            documents.append(f"doc{d:05d}")
    vectors = rng.standard_normal((len(texts), dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)

    query_texts: list[str] = []
    is_english: list[bool] = []
    for i in range(queries):
        if i % 10 == 9:  # one query in ten is Chinese: a word, or a two-word phrase
            picked = [chinese[int(rng.integers(5, 400))] for _ in range(int(rng.integers(1, 3)))]
            query_texts.append("".join(picked))
            is_english.append(False)
        else:
            size = int(rng.choice([1, 2, 3], p=[0.3, 0.4, 0.3]))
            query_texts.append(" ".join(english[int(rng.integers(30, 2000))] for _ in range(size)))
            is_english.append(True)
    query_vectors = rng.standard_normal((queries, dim)).astype(np.float32)
    query_vectors /= np.linalg.norm(query_vectors, axis=1, keepdims=True)
    names = sorted(set(documents))
    filters = [
        [names[int(j)] for j in rng.choice(len(names), size=min(5, len(names)), replace=False)] for _ in range(queries)
    ]
    return Corpus(texts, documents, vectors, query_texts, is_english, query_vectors, filters)


def rrf(*rankings: Sequence[int], k: int = RRF_K, limit: int = 10) -> list[int]:
    """Reciprocal-rank fusion: each list adds 1 / (k + rank) to the items it holds (rank from 1)."""
    scores: dict[int, float] = defaultdict(float)
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            scores[item] += 1.0 / (k + rank)
    return sorted(scores, key=lambda item: (-scores[item], item))[:limit]


def _latencies(
    calls: dict[tuple[str, str], Callable[[int], object]], count: int
) -> tuple[dict[tuple[str, str], list[float]], dict[tuple[str, str], list[object]]]:
    """Time every call on every query, interleaved (query by query, each system in turn), so that drift in the
    machine's load hits all systems alike; the first ``WARMUP_QUERIES`` rounds are not counted."""
    times: dict[tuple[str, str], list[float]] = {name: [] for name in calls}
    found: dict[tuple[str, str], list[object]] = {name: [] for name in calls}
    for i in range(min(WARMUP_QUERIES, count)):
        for call in calls.values():
            call(i)
    for i in range(count):
        for name, call in calls.items():
            started = time.perf_counter()
            answer = call(i)
            times[name].append((time.perf_counter() - started) * 1000)
            found[name].append(answer)
    return times, found


def _p(times: list[float], q: float) -> float:
    return float(np.percentile(times, q))


# ---------------------------------------------------------------------------------------------- systems


def _chunk_objects(corpus: Corpus) -> dict[str, list[Chunk]]:
    by_document: dict[str, list[Chunk]] = defaultdict(list)
    for i, (text, document_id) in enumerate(zip(corpus.texts, corpus.documents, strict=True)):
        seq = len(by_document[document_id])
        by_document[document_id].append(
            Chunk(
                id=f"{i}",
                knowledge_base_id="kb_bench",
                document_id=document_id,
                document_title=document_id,
                seq=seq,
                text=text,
                start_line=seq * 5 + 1,
                end_line=seq * 5 + 5,
                start_offset=0,
                end_offset=len(text),
            )
        )
    return by_document


Results = dict[tuple[str, str], float]  # (metric, system) → value


def run(corpus: Corpus, work: Path) -> Results:
    n_queries = len(corpus.queries)
    results: Results = {}
    chunk_rows = _chunk_objects(corpus)
    vector_lists = {d: corpus.vectors[[int(c.id) for c in rows]].tolist() for d, rows in chunk_rows.items()}

    # ours: index
    ours = KbIndexFile(work / "ours.sqlite3")
    started = time.perf_counter()
    for document_id, rows in chunk_rows.items():
        ours.replace_document(document_id, rows, vector_lists[document_id], "bench:random")
    results["index_s", "ours"] = time.perf_counter() - started

    # bm25s: index
    started = time.perf_counter()
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(corpus.texts, stopwords=None, show_progress=False), show_progress=False)
    results["index_s", "bm25s"] = time.perf_counter() - started

    # bare FTS5: index
    fts_path = work / "fts5.sqlite3"
    fts = sqlite3.connect(fts_path, isolation_level=None)
    fts.execute("PRAGMA journal_mode = WAL")
    fts.execute("PRAGMA synchronous = NORMAL")
    fts.execute("CREATE VIRTUAL TABLE t USING fts5(text)")
    started = time.perf_counter()
    for rows in chunk_rows.values():
        fts.execute("BEGIN")
        fts.executemany("INSERT INTO t (rowid, text) VALUES (?, ?)", [(int(c.id) + 1, c.text) for c in rows])
        fts.execute("COMMIT")
    results["index_s", "fts5"] = time.perf_counter() - started

    # numpy: "index" = the matrix in memory
    started = time.perf_counter()
    matrix = np.asarray(corpus.vectors, dtype=np.float32)
    matrix = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    results["index_s", "numpy"] = time.perf_counter() - started

    query_lists = corpus.query_vectors.tolist()

    def ours_keyword(i: int, limit: int = 10) -> list[int]:
        return [int(h.chunk.id) for h in ours.keyword(corpus.queries[i], limit=limit)]

    def ours_semantic(i: int, limit: int = 10) -> list[int]:
        return [int(h.chunk.id) for h in ours.semantic(query_lists[i], limit=limit)]

    def bm25s_keyword(i: int) -> list[int]:
        tokens = bm25s.tokenize(corpus.queries[i], stopwords=None, show_progress=False)
        found, scores = retriever.retrieve(tokens, k=10, show_progress=False)
        return [int(d) for d, s in zip(found[0], scores[0], strict=True) if s > 0]

    def fts_keyword(i: int, limit: int = 10) -> list[int]:
        expression = " OR ".join(f'"{word}"' for word in corpus.queries[i].split())
        rows = fts.execute("SELECT rowid, text FROM t WHERE t MATCH ? ORDER BY rank LIMIT ?", (expression, limit))
        return [rowid - 1 for rowid, _ in rows.fetchall()]

    def numpy_semantic(i: int, limit: int = 10) -> list[int]:
        query = np.asarray(query_lists[i], dtype=np.float32)
        query /= np.linalg.norm(query)
        scores = matrix @ query
        top = np.argpartition(-scores, limit)[:limit]
        return [int(j) for j in top[np.argsort(-scores[top])]]

    started = time.perf_counter()
    ours.semantic(query_lists[0])  # loads the vector cache
    results["first_semantic_ms", "ours"] = (time.perf_counter() - started) * 1000

    runs: dict[tuple[str, str], Callable[[int], object]] = {
        ("keyword", "ours"): ours_keyword,
        ("keyword", "bm25s"): bm25s_keyword,
        ("keyword", "fts5"): fts_keyword,
        ("semantic", "ours"): ours_semantic,
        ("semantic", "numpy"): numpy_semantic,
        ("hybrid", "ours"): lambda i: rrf(ours_keyword(i, 20), ours_semantic(i, 20)),
        ("hybrid", "fts5+numpy"): lambda i: rrf(fts_keyword(i, 20), numpy_semantic(i, 20)),
        ("keyword filtered to 5 documents", "ours"): lambda i: ours.keyword(
            corpus.queries[i], document_ids=corpus.filters[i]
        ),
        ("semantic filtered to 5 documents", "ours"): lambda i: ours.semantic(
            query_lists[i], document_ids=corpus.filters[i]
        ),
    }
    times, found = _latencies(runs, n_queries)
    answers: dict[str, list[object]] = {}
    for (operation, system), samples in times.items():
        results[f"{operation} p50 ms", system] = _p(samples, 50)
        results[f"{operation} p95 ms", system] = _p(samples, 95)
        answers[f"{operation}/{system}"] = found[operation, system]

    english = [i for i in range(n_queries) if corpus.english[i]]
    for system in ("bm25s", "fts5"):
        shares = []
        for i in english:
            mine = set(answers["keyword/ours"][i])  # type: ignore[call-overload]
            theirs = set(answers[f"keyword/{system}"][i])  # type: ignore[call-overload]
            if mine:
                shares.append(len(mine & theirs) / len(mine))
        results["agreement@10", system] = float(np.mean(shares)) if shares else float("nan")
    results["semantic top-10 equal", "numpy"] = float(
        np.mean([answers["semantic/ours"][i] == answers["semantic/numpy"][i] for i in range(n_queries)])
    )
    results["found (share of queries with hits)", "ours"] = float(np.mean([bool(a) for a in answers["keyword/ours"]]))
    results["file MB", "ours"] = (work / "ours.sqlite3").stat().st_size / 1e6
    fts.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    results["file MB", "fts5"] = fts_path.stat().st_size / 1e6
    ours.close()
    fts.close()
    for system in ("ours", "bm25s", "fts5"):
        results["index chunks/s", system] = len(corpus.texts) / results["index_s", system]
    return results


# ---------------------------------------------------------------------------------------------- report

_METRICS = (
    "index_s",
    "index chunks/s",
    "keyword p50 ms",
    "keyword p95 ms",
    "semantic p50 ms",
    "semantic p95 ms",
    "hybrid p50 ms",
    "hybrid p95 ms",
    "keyword filtered to 5 documents p50 ms",
    "keyword filtered to 5 documents p95 ms",
    "semantic filtered to 5 documents p50 ms",
    "semantic filtered to 5 documents p95 ms",
    "first_semantic_ms",
    "file MB",
    "found (share of queries with hits)",
    "agreement@10",
    "semantic top-10 equal",
)
_LABELS = {"index_s": "index s", "first_semantic_ms": "first semantic query ms (loads vectors)"}
_BASELINES = ("bm25s", "fts5", "numpy", "fts5+numpy")
_NO_RATIO = {"agreement@10", "semantic top-10 equal", "found (share of queries with hits)"}


def rows(results: Results) -> list[tuple[str, str, str, str, str]]:
    table: list[tuple[str, str, str, str, str]] = []
    for metric in _METRICS:
        ours = results.get((metric, "ours"))
        label = _LABELS.get(metric, metric)
        baselines = [b for b in _BASELINES if (metric, b) in results]
        if not baselines:
            table.append((label, _fmt(ours), "", "", ""))
            continue
        for n, baseline in enumerate(baselines):
            value = results[metric, baseline]
            ratio = "" if ours is None or metric in _NO_RATIO or value == 0 else f"{ours / value:.2f}x"
            table.append((label if n == 0 else "", _fmt(ours) if n == 0 else "", baseline, _fmt(value), ratio))
    return table


def _fmt(value: float | None) -> str:
    if value is None:
        return ""
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3f}" if value < 10 else f"{value:.1f}"


def render(table: list[tuple[str, str, str, str, str]]) -> str:
    header = ("metric", "ours", "baseline", "value", "ours/baseline")
    widths = [max(len(cell) for cell in column) for column in zip(header, *table, strict=True)]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(
            cell.ljust(w) if i in (0, 2) else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(cells, widths, strict=True))
        )

    return "\n".join([line(header), line(tuple("-" * w for w in widths)), *(line(row) for row in table)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--chunks", type=int, default=10_000, help="chunks in the corpus (default 10000)")
    parser.add_argument("--queries", type=int, default=200, help="queries per system (default 200)")
    parser.add_argument("--dim", type=int, default=256, help="vector dimension (default 256)")
    parser.add_argument("--seed", type=int, default=7, help="corpus and query seed (default 7)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    if args.chunks < CHUNKS_PER_DOCUMENT * 5 or args.queries < 1 or args.dim < 1:
        parser.error(f"--chunks must be at least {CHUNKS_PER_DOCUMENT * 5}, --queries and --dim at least 1")

    started = time.perf_counter()
    corpus = build_corpus(args.chunks, args.queries, args.dim, args.seed)
    with tempfile.TemporaryDirectory(prefix="mcpbridge-bench-") as work:
        results = run(corpus, Path(work))
    meta = {
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "numpy": np.__version__,
        "bm25s": getattr(bm25s, "__version__", "?"),
        "machine": platform.machine(),
        "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default"),
        "chunks": len(corpus.texts),
        "documents": len(set(corpus.documents)),
        "chinese_chunks": sum(1 for t in corpus.texts if t.endswith("。")),
        "queries": args.queries,
        "dim": args.dim,
        "seed": args.seed,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    if args.json:
        flat = [{"metric": m, "system": s, "value": v} for (m, s), v in results.items()]
        print(json.dumps({**meta, "results": flat}, indent=2))
    else:
        print(
            f"search index, {meta['chunks']} chunks ({meta['documents']} documents, {meta['chinese_chunks']} chunks "
            f"in Chinese), {args.queries} queries, dim {args.dim}; Python {meta['python']}, SQLite {meta['sqlite']}, "
            f"numpy {meta['numpy']}, bm25s {meta['bm25s']}, {meta['machine']}, OPENBLAS_NUM_THREADS "
            f"{meta['blas_threads']}; {meta['wall_s']} s"
        )
        print(render(rows(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
