"""Keyword search latency for short and long queries, and semantic search right after a write, next to baselines
measured in the same run (see tests/bench/README.md).

The corpus is ``search_index.py``'s (seeded, Zipf English with 5% Chinese, 10 chunks per document) with vectors of
``--dim`` dimensions. Queries are drawn from the corpus's own mid-frequency words: "2-word" is two of them, "9-word"
a question of nine words, five of them stop words ("how do I <w> the <w> with <w> <w>"), as people ask them.

    ours       KbIndexFile of the working tree
    base       KbIndexFile of ``--base`` (default: the commit before the analyser), loaded from git at run time
    bm25s      bm25s with a Snowball stemmer, English stop words and CJK bigrams (as in search_quality.py)
    fts5       a bare FTS5 table (unicode61), the query's words OR-ed: MATCH '"a" OR "b" ...' ORDER BY rank LIMIT 10

Every query goes to every system in turn (interleaved), after warm-up rounds; p50 and p95 per system, and each as a
ratio to bm25s and to fts5. Then, for ours and base: semantic p50 at steady state, and the first semantic search
after replacing one small document (``--writes`` rounds), as a ratio to that steady state.

    .venv/bin/python tests/bench/search_latency.py [--chunks 10000] [--queries 200] [--dim 384] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
import types
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from search_quality import Bm25sBaseline

from mcpbridge.adapters.index_files.kb_index import KbIndexFile
from mcpbridge.domain.knowledge import Chunk
from search_index import _COMMON_WORDS, _chunk_objects, _latencies, _p, build_corpus

BASE = "c998a99"
REPO = Path(__file__).resolve().parents[2]


def base_index_class(commit: str) -> Any:
    """The KbIndexFile of ``commit``, as a module of its own (it imports today's domain modules, as it did then)."""
    source = subprocess.run(
        ["git", "show", f"{commit}:shared/mcpbridge/adapters/index_files/kb_index.py"],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    module = types.ModuleType("kb_index_base")
    sys.modules[module.__name__] = module
    exec(compile(source, f"{commit}:kb_index.py", "exec"), module.__dict__)  # noqa: S102 - our own history
    return module.KbIndexFile


def make_queries(texts: list[str], count: int, seed: int) -> dict[str, list[str]]:
    common = set(_COMMON_WORDS.split())
    words = Counter(w for t in texts for w in re.findall(r"[a-z]+", t.lower()) if w not in common)
    ranked = [w for w, _ in words.most_common(2000)][30:]
    rng = np.random.default_rng(seed)

    def pick(n: int) -> list[str]:
        return [ranked[int(rng.integers(len(ranked)))] for _ in range(n)]

    two = [" ".join(pick(2)) for _ in range(count)]
    nine = ["how do I {} the {} with {} {}".format(*pick(4)) for _ in range(count)]
    return {"2-word": two, "9-word": nine}


def run(chunks: int, n_queries: int, dim: int, seed: int, base: str, writes: int) -> dict[str, Any]:
    corpus = build_corpus(chunks, n_queries, dim, seed)
    queries = make_queries(corpus.texts, n_queries, seed)
    by_document = _chunk_objects(corpus)
    results: dict[str, Any] = {"chunks": len(corpus.texts), "dim": dim, "base": base}
    with tempfile.TemporaryDirectory(prefix="mcpbridge-latency-") as tmp:
        work = Path(tmp)
        systems: dict[str, Any] = {"ours": KbIndexFile(work / "ours.sqlite3")}
        systems["base"] = base_index_class(base)(work / "base.sqlite3")
        for name, index in systems.items():
            started = time.perf_counter()
            for document_id, rows in by_document.items():
                vectors = corpus.vectors[[int(c.id) for c in rows]].tolist()
                index.replace_document(document_id, rows, vectors, "bench:random")
            results[f"index s {name}"] = time.perf_counter() - started
        bm25 = Bm25sBaseline(corpus.texts)
        fts = sqlite3.connect(work / "fts5.sqlite3", isolation_level=None)
        fts.execute("CREATE VIRTUAL TABLE t USING fts5(text)")
        fts.execute("BEGIN")
        fts.executemany("INSERT INTO t (rowid, text) VALUES (?, ?)", [(i + 1, t) for i, t in enumerate(corpus.texts)])
        fts.execute("COMMIT")

        def fts_keyword(query: str) -> list[int]:
            expression = " OR ".join(f'"{w}"' for w in query.split())
            rows = fts.execute("SELECT rowid FROM t WHERE t MATCH ? ORDER BY rank LIMIT 10", (expression,))
            return [r[0] for r in rows.fetchall()]

        for kind, texts in queries.items():
            calls: dict[tuple[str, str], Callable[[int], object]] = {
                (kind, "ours"): lambda i, t=texts: systems["ours"].keyword(t[i]),
                (kind, "base"): lambda i, t=texts: systems["base"].keyword(t[i]),
                (kind, "bm25s"): lambda i, t=texts: bm25.search(t[i]),
                (kind, "fts5"): lambda i, t=texts: fts_keyword(t[i]),
            }
            times, found = _latencies(calls, n_queries)
            for (_, system), samples in times.items():
                results[f"{kind} p50 ms {system}"] = _p(samples, 50)
                results[f"{kind} p95 ms {system}"] = _p(samples, 95)
            results[f"{kind} found share ours"] = float(np.mean([bool(f) for f in found[kind, "ours"]]))
            results[f"{kind} found share base"] = float(np.mean([bool(f) for f in found[kind, "base"]]))

        # Semantic: steady state, then the first search after a write, interleaved ours / base.
        query_vectors = corpus.query_vectors.tolist()
        steady = {name: [] for name in systems}
        after = {name: [] for name in systems}
        for index in systems.values():
            index.semantic(query_vectors[0])  # loads the vectors
        for i in range(max(n_queries, 20)):
            for name, index in systems.items():
                started = time.perf_counter()
                index.semantic(query_vectors[i % n_queries])
                steady[name].append((time.perf_counter() - started) * 1000)
        rng = np.random.default_rng(seed + 1)
        for round_ in range(writes):
            for name, index in systems.items():
                chunk = Chunk(f"w{round_}", "kb_bench", f"written{round_ % 3}", "w", 0, "a small note", 1, 1, 0, 12)
                index.replace_document(chunk.document_id, [chunk], [rng.standard_normal(dim).tolist()], "bench:random")
                started = time.perf_counter()
                index.semantic(query_vectors[round_ % n_queries])
                after[name].append((time.perf_counter() - started) * 1000)
        for name in systems:
            results[f"semantic p50 ms {name}"] = _p(steady[name], 50)
            results[f"semantic after a write p50 ms {name}"] = _p(after[name], 50)
        results["file MB ours"] = (work / "ours.sqlite3").stat().st_size / 1e6
        results["file MB base"] = (work / "base.sqlite3").stat().st_size / 1e6
        for index in systems.values():
            index.close()
        fts.close()
    return results


def report(results: dict[str, Any]) -> str:
    lines = [f"{results['chunks']} chunks, {results['dim']} dimensions, base = {results['base']}"]
    lines.append(f"{'measure':<34} {'ours':>9} {'base':>9} {'bm25s':>9} {'fts5':>9}  ours/bm25s ours/fts5 ours/base")
    for kind in ("2-word", "9-word"):
        for q in ("p50", "p95"):
            row = {s: results[f"{kind} {q} ms {s}"] for s in ("ours", "base", "bm25s", "fts5")}
            lines.append(
                f"{kind + ' keyword ' + q + ' ms':<34} {row['ours']:>9.3f} {row['base']:>9.3f} {row['bm25s']:>9.3f} "
                f"{row['fts5']:>9.3f}  {row['ours'] / row['bm25s']:>10.2f} {row['ours'] / row['fts5']:>9.2f} "
                f"{row['ours'] / row['base']:>9.2f}"
            )
    for name in ("ours", "base"):
        steady, after = results[f"semantic p50 ms {name}"], results[f"semantic after a write p50 ms {name}"]
        lines.append(
            f"semantic {name}: steady p50 {steady:.2f} ms, first after a write p50 {after:.2f} ms "
            f"= {after / steady:.2f}x steady"
        )
    lines.append(
        f"index s: ours {results['index s ours']:.1f}, base {results['index s base']:.1f}; "
        f"file MB: ours {results['file MB ours']:.0f}, base {results['file MB base']:.0f}; "
        f"9-word queries with hits: ours {results['9-word found share ours']:.2f}, "
        f"base {results['9-word found share base']:.2f}"
    )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--writes", type=int, default=15)
    parser.add_argument("--base", default=BASE)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = run(args.chunks, args.queries, args.dim, args.seed, args.base, args.writes)
    print(json.dumps(results, indent=2) if args.json else report(results))
    print(f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', '(unset)')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
