"""Tool search on the labelled set of tests/bench/tool_search/ (the published tool definitions of 20 MCP servers,
67 requests in English and Chinese, labelled before any tuning), next to bm25s over the same tool texts.

* Quality: recall@5 and MRR@10 of keyword, semantic and hybrid (mcpbridge's ``ToolIndex`` on the knowledge engine's
  index files, the local multilingual-e5-small when installed) and of bm25s (Snowball stems, English stop words,
  CJK bigrams: ``search_quality.Bm25sBaseline``), over all requests and per language.
* Tokens: an endpoint's ``tools/list`` in search mode (``search_tools``, ``call_tool``, ``check_call``) against
  listing every tool, as ``mcpbridge.agent.gateway`` builds them, counted with o200k_base (the ``bpe-openai``
  package: its vocabularies are inside the wheel, nothing is downloaded).
* Latency: p50 of a search at 200 and 2,000 tools (the set, then ten copies of it under other service names),
  keyword and hybrid against bm25s, the same queries interleaved, one run.

    .venv/bin/python tests/bench/tool_search.py [--json] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

sys.path.insert(0, str(Path(__file__).parent))
from search_quality import Bm25sBaseline, mrr_at_10, recall_at_5

from mcpbridge.adapters.index_files.search_index import DirectoryIndexFiles, FileSearchIndex
from mcpbridge.adapters.local.e5_embedder import E5Embedder, local_embedder_unavailable
from mcpbridge.adapters.local.sqlite import SqliteStore
from mcpbridge.adapters.system_clock import SystemClock
from mcpbridge.agent.discovery import PublishedTool
from mcpbridge.agent.gateway import listed
from mcpbridge.agent.paused_call_tools import ANSWER_CALL_TOOL, CHECK_CALL_TOOL
from mcpbridge.agent.search_mode import CALL_TOOL_TOOL, SEARCH_TOOLS_TOOL
from mcpbridge.agent.tool_search import CatalogDocument, SearchMode, ToolIndex, embedding_text, tool_text
from mcpbridge.client.tool_catalog import definition_hash
from mcpbridge.domain.external_services import AdvancedConfig, AuthConfig, ExternalService
from mcpbridge.domain.tool_names import FunctionNames
from mcpbridge.ports import Embedder

HERE = Path(__file__).parent / "tool_search"
WORKSPACE = "ws_bench"


def service(name: str, index: int) -> ExternalService:
    return ExternalService(
        id=f"svc_{index:04d}",
        workspace_id=WORKSPACE,
        name=name,
        description="",
        enabled=True,
        transport="http-streamable",
        url="http://127.0.0.1:9/mcp",
        headers={},
        auth=AuthConfig(),
        advanced=AdvancedConfig(),
        usage_instructions="",
        catalog_stale=False,
        created_at="2026-01-01T00:00:00Z",
        updated_at="2026-01-01T00:00:00Z",
        version=1,
    )


def load_servers() -> list[tuple[str, list[dict[str, Any]]]]:
    return [
        (data["server"], data["tools"])
        for data in (json.loads(path.read_text()) for path in sorted((HERE / "servers").glob("*.json")))
    ]


def documents(servers: list[tuple[str, list[dict[str, Any]]]], copies: int) -> list[CatalogDocument]:
    found = []
    for copy in range(copies):
        for position, (name, tools) in enumerate(servers):
            shown = name if copy == 0 else f"{name}-{copy}"
            entries = [{"name": t["name"], "definition": t, "definition_hash": definition_hash(t)} for t in tools]
            found.append(CatalogDocument(service(shown, copy * 100 + position), "workspace", entries))
    return found


class CopiesEmbedder:
    """The run's embedder, remembering each tool's vector by its text without the service line: the copies of the
    set made for the 2,000-tool latency run (same tools, other service names) reuse the originals' vectors, which
    leaves what a search costs unchanged and spares embedding 1,800 texts again."""

    def __init__(self, embedder: Embedder) -> None:
        self._embedder = embedder
        self._seen: dict[str, list[float]] = {}

    @property
    def name(self) -> str:
        return self._embedder.name

    def embed(self, texts: Sequence[str], *, purpose: Literal["document", "query"]) -> list[list[float]]:
        if purpose == "query":
            return self._embedder.embed(texts, purpose=purpose)
        keys = [text.rsplit("\n", 1)[0] for text in texts]
        missing = [i for i, key in enumerate(keys) if key not in self._seen]
        if missing:
            made = self._embedder.embed([texts[i] for i in missing], purpose=purpose)
            for i, vector in zip(missing, made, strict=True):
                self._seen[keys[i]] = vector
        return [self._seen[key] for key in keys]


def build(root: Path, docs: list[CatalogDocument], embedder: Embedder | None) -> ToolIndex:
    store = SqliteStore(root / "store.sqlite3", SystemClock())
    index = FileSearchIndex(DirectoryIndexFiles(root / "indexes"))
    tools = ToolIndex(store, lambda: index, lambda: embedder)
    tools.sync(WORKSPACE, docs, existing_services=[d.service.id for d in docs])
    return tools


def label_of(docs: list[CatalogDocument]) -> dict[tuple[str, str], str]:
    return {(d.service.id, str(t["name"])): f"{d.service.name}/{t['name']}" for d in docs for t in d.tools}


def ranked(tools: ToolIndex, docs: list[CatalogDocument], mode: SearchMode) -> Callable[[str], list[str]]:
    labels, ids = label_of(docs), {d.id for d in docs}

    def search(query: str) -> list[str]:
        outcome = tools.search(
            WORKSPACE, query, documents=ids, may_use=lambda _s, _t: True, hidden=0, mode=mode, limit=10
        )
        return [labels[(hit.service_id, hit.tool_name)] for hit in outcome.hits]

    return search


def bm25s_of(docs: list[CatalogDocument], text: Callable[..., str] = tool_text) -> Callable[[str], list[str]]:
    labels = [f"{d.service.name}/{t['name']}" for d in docs for t in d.tools]
    baseline = Bm25sBaseline([text(d.service, t["definition"]) for d in docs for t in d.tools])
    return lambda query: [labels[i] for i in baseline.search(query, 10)]


def quality(systems: dict[str, Callable[[str], list[str]]], intents: list[dict[str, Any]]) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for name, search in systems.items():
        rows = {"all": [], "en": [], "zh": []}  # type: dict[str, list[tuple[float, float, float]]]
        for intent in intents:
            found, relevant = search(intent["query"]), frozenset(intent["relevant"])
            hit = 1.0 if relevant & set(found[:5]) else 0.0
            row = (recall_at_5(found, relevant), mrr_at_10(found, relevant), hit)
            rows["all"].append(row)
            rows[intent["lang"]].append(row)
        table[name] = {
            part: {
                "recall@5": round(statistics.fmean(r[0] for r in values), 3),
                "MRR@10": round(statistics.fmean(r[1] for r in values), 3),
                "hit@5": round(statistics.fmean(r[2] for r in values), 3),
                "n": len(values),
            }
            for part, values in rows.items()
        }
    return table


def tokens(servers: list[tuple[str, list[dict[str, Any]]]]) -> dict[str, int]:
    import bpe_openai

    encoding = bpe_openai.get_encoding("o200k_base")
    names = FunctionNames()
    every = []
    for position, (name, tools) in enumerate(servers):
        owner = service(name, position)
        for tool in tools:
            names.register(owner.name, owner.id, tool["name"])
            function = names.name_of(owner.id, tool["name"])
            assert function is not None
            every.append(listed(PublishedTool(function, owner, tool["name"], tool, False)))

    def count(tools: Sequence[dict[str, Any]]) -> int:
        return len(encoding.encode(json.dumps({"tools": list(tools)}, ensure_ascii=False)))

    return {
        "tools_behind": len(every),
        "search_mode": count([SEARCH_TOOLS_TOOL, CALL_TOOL_TOOL, CHECK_CALL_TOOL, ANSWER_CALL_TOOL]),
        "list_all": count([*every, CHECK_CALL_TOOL, ANSWER_CALL_TOOL]),
    }


def latency(systems: dict[str, Callable[[str], list[str]]], queries: list[str], rounds: int) -> dict[str, float]:
    for search in systems.values():  # warm-up
        for query in queries[:5]:
            search(query)
    times: dict[str, list[float]] = {name: [] for name in systems}
    for _ in range(rounds):
        for query in queries:
            for name, search in systems.items():
                start = time.perf_counter()
                search(query)
                times[name].append(time.perf_counter() - start)
    return {name: round(statistics.median(values) * 1000, 2) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="one line of JSON")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency-only", action="store_true", help="skip the quality figures")
    args = parser.parse_args()
    servers = load_servers()
    intents = json.loads((HERE / "intents.json").read_text())["intents"]
    reason = local_embedder_unavailable()
    embedder = CopiesEmbedder(E5Embedder()) if reason is None else None
    report: dict[str, Any] = {
        "servers": len(servers),
        "intents": {"all": len(intents), "en": sum(i["lang"] == "en" for i in intents)},
        "embedder": embedder.name if embedder else f"none ({reason})",
    }
    queries = [i["query"] for i in intents]
    with tempfile.TemporaryDirectory() as tmp:
        for copies in (1, 10):
            docs = documents(servers, copies)
            started = time.perf_counter()
            tools = build(Path(tmp) / f"x{copies}", docs, embedder)
            indexed = time.perf_counter() - started
            systems = {"keyword": ranked(tools, docs, "keyword"), "bm25s": bm25s_of(docs)}
            if copies == 1 and not args.latency_only:  # bm25s over each field once, as a tool's definition has them
                systems["bm25s_fields_once"] = bm25s_of(docs, embedding_text)
            if embedder is not None:
                systems["semantic"] = ranked(tools, docs, "semantic")
                systems["hybrid"] = ranked(tools, docs, "hybrid")
            size = sum(len(d.tools) for d in docs)
            if copies == 1 and not args.latency_only:
                report["tools"] = size
                report["tools_list_tokens_o200k"] = tokens(servers)
                report["quality"] = quality(systems, intents)
                print(json.dumps(report, indent=None if args.json else 1, ensure_ascii=False), flush=True)
            systems.pop("bm25s_fields_once", None)
            timing = latency(systems, queries, args.rounds)
            part = {
                f"latency_ms_p50_at_{size}": {
                    **timing,
                    **{f"{n}/bm25s": round(timing[n] / timing["bm25s"], 1) for n in timing if n != "bm25s"},
                    "indexing_s": round(indexed, 1),
                }
            }
            print(json.dumps(part, indent=None if args.json else 1, ensure_ascii=False), flush=True)


if __name__ == "__main__":
    main()
