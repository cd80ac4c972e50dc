"""How long the slowest hostile pattern takes to be answered, at every place a caller's pattern enters.

    python tests/bench/hostile_patterns.py [--rounds 1] [--json]

Starts ``mcpbridge serve`` on a fresh data directory (127.0.0.1 only) and seeds two knowledge bases:

- small: the document and the one-sentence wiki page of tests/support/hostile_patterns.py (what CI runs against);
- large: documents whose every chunk holds ``refresh`` (grep gets its 30 full candidates), and a wiki of 100 pages
  of 8 KiB then 40 pages at the 200 KiB limit: more text than one search may read (the small pages first, so that
  patterns with big programs, which may not scan a whole 200 KiB page, still get text to work on). The text is
  pseudo-random words (seeded) with runs of letters, vowels and CJK: repetitive text would flatter RE2's DFA.

Then sends every pattern of the hostile corpus to REST grep, REST wiki search, MCP ``grep_chunks`` and MCP
``wiki_search``, against each knowledge base, one call at a time, while another thread polls ``/healthz``. Reported:
how many patterns and calls, the slowest answer (which entry, pattern and base), the median and p95, how many
answers said the scan budget ran out, and the slowest ``/healthz`` seen meanwhile. Figures are wall clock on this
machine, client side, for notes: never assertions (the machine is shared and noisy).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.hostile_patterns import CORPUS, DOCUMENT, WIKI_PAGE
from tests.support.serve import ServeProcess, cli_env, http_client, run_init

ENTRIES = ("rest_grep", "rest_wiki", "mcp_grep", "mcp_wiki")
TIMEOUT = 120.0
PAGE_BYTES = 200 * 1024


@dataclass
class Answer:
    entry: str
    base: str
    pattern: str
    seconds: float
    outcome: str  # "ok", "truncated" or the refusal's code


_WORDS = ["refresh", "token", "the", "lease", "oauth", "aaaa", "abab", "seal", "ice", "x", "zq", "知识库", "café"]
_RUNS = ["e" * 60, "aeiou " * 10, "ab" * 30, "x" * 40 + " zq", "知识库检索" * 6]


def _large_text(size: int, seed: int) -> str:
    """About ``size`` bytes of lines that start with "refresh": random words, and now and then a run."""
    rng = random.Random(seed)
    lines, total = [], 0
    while total < size:
        words = [rng.choice(_WORDS) for _ in range(10)]
        line = " ".join(["refresh", *words, rng.choice(_RUNS)] if rng.random() < 0.2 else ["refresh", *words])
        lines.append(line)
        total += len(line.encode()) + 1
    return "\n".join(lines).encode()[:size].decode(errors="ignore")


def _seed(client: httpx.Client) -> tuple[dict[str, str], str, str]:
    small = client.post("/api/v1/knowledge-bases", json={"name": "Small"}).json()["id"]
    large = client.post("/api/v1/knowledge-bases", json={"name": "Large"}).json()["id"]
    documents = [
        client.post(f"/api/v1/knowledge-bases/{small}/documents", json={"title": "Token refresh", "content": DOCUMENT})
    ]
    documents += [
        client.post(
            f"/api/v1/knowledge-bases/{large}/documents",
            json={"title": f"Large {n}", "content": _large_text(60_000, seed=n)},
        )
        for n in range(3)
    ]
    assert client.post(f"/api/v1/knowledge-bases/{small}/wiki/pages", json=WIKI_PAGE).status_code == 201
    pages = [(f"a/{n:03d}", 8 * 1024) for n in range(100)] + [(f"b/{n:02d}", PAGE_BYTES - 1024) for n in range(40)]
    for n, (slug, size) in enumerate(pages):
        created = client.post(
            f"/api/v1/knowledge-bases/{large}/wiki/pages",
            json={"slug": slug, "type": "note", "title": f"Note {n}", "content": _large_text(size, seed=100 + n)},
        )
        assert created.status_code == 201, created.text
    deadline = time.monotonic() + 300
    for response in documents:
        document_id = response.json()["id"]
        while client.get(f"/api/v1/documents/{document_id}").json()["parse_status"] != "completed":
            if time.monotonic() > deadline:
                raise SystemExit("documents were not indexed in 5 minutes")
            time.sleep(0.2)
    endpoint = client.post(
        "/api/v1/mcp-endpoints",
        json={"name": "bench", "knowledge_base_ids": [small, large], "rate_limit_per_minute": 6000},
    ).json()
    return {"small": small, "large": large}, endpoint["url"], endpoint["token"]


def _ask(rest: httpx.Client, mcp: httpx.Client, url: str, entry: str, kb_id: str, pattern: str) -> str:
    scope = {"knowledge_base_ids": [kb_id]}
    if entry.startswith("rest"):
        path, field = (
            ("/api/v1/knowledge/grep", "pattern") if entry == "rest_grep" else ("/api/v1/wiki/search", "query")
        )
        response = rest.post(path, json={field: pattern, **scope})
        if response.status_code != 200:
            return str(response.json().get("code", response.status_code))
        if entry == "rest_grep":
            return "truncated" if response.json()["truncated"] else "ok"
        return "truncated" if "mcpbridge-search-truncated" in response.headers else "ok"
    name, field = ("grep_chunks", "pattern") if entry == "mcp_grep" else ("wiki_search", "query")
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": name, "arguments": {field: pattern, **scope}},
    }
    result = mcp.post(url, json=body).json()["result"]
    if result.get("isError"):
        return str(json.loads(result["content"][0]["text"])["error"]["code"])
    return "truncated" if result["structuredContent"]["truncated"] else "ok"


def _poll_health(base_url: str, stop: threading.Event, seen: list[float]) -> None:
    with http_client(base_url) as client:
        while not stop.is_set():
            started = time.perf_counter()
            client.get("/healthz", timeout=TIMEOUT)
            seen.append(time.perf_counter() - started)
            time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1, help="times to send the whole corpus")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="mcpbridge-hostile-") as tmp:
        root = Path(tmp)
        env = cli_env()
        key = run_init(["--data-dir", str(root / "data")], cwd=root, env=env)["api_key"]
        server = ServeProcess.start(
            cwd=root, env=env, args=["--data-dir", str(root / "data")], log_dir=root, tag="serve"
        )
        try:
            server.wait_ready()
            rest = http_client(server.base_url)
            rest.headers["Authorization"] = f"Bearer {key}"
            rest.timeout = httpx.Timeout(TIMEOUT)
            bases, url, token = _seed(rest)
            mcp = httpx.Client(
                timeout=TIMEOUT,
                trust_env=False,
                headers={
                    "Authorization": f"Bearer {token}",
                    "Accept": "application/json, text/event-stream",
                    "MCP-Protocol-Version": "2025-11-25",
                },
            )
            stop, health = threading.Event(), []
            poller = threading.Thread(target=_poll_health, args=(server.base_url, stop, health), daemon=True)
            poller.start()
            answers: list[Answer] = []
            for _ in range(args.rounds):
                for base, kb_id in bases.items():
                    for entry in ENTRIES:
                        for hostile in CORPUS:
                            started = time.perf_counter()
                            outcome = _ask(rest, mcp, url, entry, kb_id, hostile.pattern)
                            answers.append(Answer(entry, base, hostile.pattern, time.perf_counter() - started, outcome))
            stop.set()
            poller.join(timeout=TIMEOUT)
            rest.close()
            mcp.close()
        finally:
            server.kill()
    _report(answers, health, args.json)


def _report(answers: list[Answer], health: list[float], as_json: bool) -> None:
    times = sorted(a.seconds for a in answers)
    slowest = max(answers, key=lambda a: a.seconds)
    by_entry = {entry: round(max(a.seconds for a in answers if a.entry == entry) * 1000, 1) for entry in ENTRIES}
    figures: dict[str, Any] = {
        "python": sys.version.split()[0],
        "patterns": len(CORPUS),
        "calls": len(answers),
        "slowest_ms": round(slowest.seconds * 1000, 1),
        "slowest": {
            "entry": slowest.entry,
            "base": slowest.base,
            "pattern": slowest.pattern,
            "outcome": slowest.outcome,
        },
        "median_ms": round(statistics.median(times) * 1000, 1),
        "p95_ms": round(times[int(0.95 * (len(times) - 1))] * 1000, 1),
        "slowest_ms_by_entry": by_entry,
        "truncated": sum(a.outcome == "truncated" for a in answers),
        "refused": sum(a.outcome not in ("ok", "truncated") for a in answers),
        "healthz_polls": len(health),
        "healthz_slowest_ms": round(max(health, default=0.0) * 1000, 1),
    }
    if as_json:
        print(json.dumps(figures, indent=2, ensure_ascii=False))
        return
    print(f"hostile patterns: {figures['patterns']}, calls: {figures['calls']} (4 entry points x 2 bases)")
    print(f"slowest answer: {figures['slowest_ms']} ms  {slowest.entry} on {slowest.base}: {slowest.pattern[:70]!r}")
    print(f"median {figures['median_ms']} ms, p95 {figures['p95_ms']} ms; slowest by entry (ms): {by_entry}")
    print(f"answers saying the scan budget ran out: {figures['truncated']}; refused: {figures['refused']}")
    print(f"/healthz meanwhile: {figures['healthz_polls']} polls, slowest {figures['healthz_slowest_ms']} ms")


if __name__ == "__main__":
    main()
