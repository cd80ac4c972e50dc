"""Latency of a published endpoint's ``resources/list`` and ``resources/read`` against its ``tools/list``, interleaved
in one run.

    python tests/bench/mcp_resources.py [--rounds 6] [--requests 200] [--levels 1,8]

``mcpbridge serve`` on a fresh data directory (SQLite, the local index), one knowledge base of 40 short notes and
one long document (2,000 lines, about 100 KB), an endpoint publishing it with ``read_document``. Every round loads
the three requests in turn on the same endpoint, their order rotated by round so drift on the machine falls on each
alike: ``tools/list`` (the baseline: no store read beyond the token check), ``resources/list`` (one page: the 41
documents, read from the store), ``resources/read`` of the long document (its whole text, under the read cap: one
store read and one blob read). Each request is HTTP/1.1 keep-alive on raw asyncio streams
(:mod:`tests.bench.mcp_endpoint`'s client), protocol version 2025-11-25; every answer is checked (HTTP 200, a
result).

Reported per method and client count: requests/s, p50/p95 in ms, server CPU per request, and p50 as a ratio of
``tools/list``'s: the number to quote. For notes, never for assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench.mcp_endpoint import (
    CORPUS,
    HEADERS,
    Run,
    free_port,
    load,
    process,
    request_bytes,
    rpc,
    wait_up,
)

LONG = "\n".join(f"Line {n}: the walrus colony on floe {n % 40} counts {n * 3} animals." for n in range(1, 2001))
RATE_LIMIT = 6000
METHODS = ("tools/list", "resources/list", "resources/read")


def start(stack: ExitStack, workdir: Path) -> tuple[str, str, int, str]:
    """``mcpbridge serve`` with the corpus indexed: (base URL, admin key, server pid, the long document's URI)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPBRIDGE_")}
    env["MCPBRIDGE_LOG_LEVEL"] = "WARNING"
    data = workdir / "data"
    init = subprocess.run(
        [sys.executable, "-m", "mcpbridge.cli", "init", "--json", "--data-dir", str(data)],
        env=env,
        cwd=workdir,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    key = json.loads(init.stdout)["api_key"]
    args = [sys.executable, "-m", "mcpbridge.cli", "serve", "--port", str(port), "--data-dir", str(data)]
    pid = stack.enter_context(process(args, env, workdir, "mcpbridge")).pid
    base = f"http://127.0.0.1:{port}"
    wait_up(port)
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30) as api:
        kb = api.post("/api/v1/knowledge-bases", json={"name": "Bench"}).json()
        documents = [(f"Note {i}", text) for i, text in enumerate(CORPUS)] + [("Long", LONG)]
        ids = [
            api.post(f"/api/v1/knowledge-bases/{kb['id']}/documents", json={"title": t, "content": c}).json()["id"]
            for t, c in documents
        ]
        deadline = time.monotonic() + 60 + len(documents)
        while time.monotonic() < deadline:
            page = api.get(f"/api/v1/knowledge-bases/{kb['id']}/documents?page_size=100").json()
            docs = page["items"] if "items" in page else page["documents"]
            if len(docs) == len(documents) and all(d["parse_status"] == "completed" for d in docs):
                break
            time.sleep(0.2)
        else:
            raise RuntimeError("the corpus was not indexed in time")
    return base, key, pid, f"mcpbridge://kb/{kb['id']}/documents/{ids[-1]}"


def endpoint(base: str, key: str) -> tuple[str, dict[str, str]]:
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30) as api:
        created = api.post(
            "/api/v1/mcp-endpoints",
            json={"name": "bench", "rate_limit_per_minute": RATE_LIMIT, "tools": ["search_knowledge", "read_document"]},
        )
        created.raise_for_status()
    made = created.json()
    return made["url"], {**HEADERS, "Authorization": f"Bearer {made['token']}"}


def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    levels = [int(level) for level in args.levels.split(",")]
    totals: dict[tuple[str, int], Run] = {}
    with ExitStack() as stack:
        base, key, pid, long_uri = start(stack, workdir)
        bodies = {
            "tools/list": rpc("tools/list"),
            "resources/list": rpc("resources/list"),
            "resources/read": rpc("resources/read", {"uri": long_uri}),
        }
        url, headers = endpoint(base, key)
        listed = httpx.post(url, json=bodies["resources/list"], headers=headers, timeout=30).json()["result"]
        read = httpx.post(url, json=bodies["resources/read"], headers=headers, timeout=30).json()["result"]
        if len(listed["resources"]) != len(CORPUS) + 1 or read["contents"][0]["text"] != LONG:
            raise SystemExit("the endpoint does not list or read the corpus: the comparison would be meaningless")
        for round_ in range(args.rounds):
            order = METHODS[round_ % 3 :] + METHODS[: round_ % 3]
            for clients in levels:
                for method in order:
                    request = request_bytes(url, headers, bodies[method])
                    run = asyncio.run(load(url, request, args.requests, clients, pid))
                    totals.setdefault((method, clients), Run()).add(run)
    report: dict[str, Any] = {"python": sys.version.split()[0], "rounds": args.rounds, "requests": args.requests}
    cells = []
    for clients in levels:
        baseline = statistics.median(totals[("tools/list", clients)].latencies)
        for method in METHODS:
            run = totals[(method, clients)]
            ordered = sorted(run.latencies)
            cells.append(
                {
                    "method": method,
                    "clients": clients,
                    "rps": run.requests / run.seconds,
                    "p50_ms": statistics.median(ordered) * 1000,
                    "p95_ms": ordered[max(0, int(len(ordered) * 0.95) - 1)] * 1000,
                    "cpu_ms": run.cpu_seconds / run.requests * 1000,
                    "errors": run.errors,
                    "p50_x_tools_list": statistics.median(ordered) / baseline,
                }
            )
    report["results"] = cells
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--requests", type=int, default=200, help="measured requests per run (after 20 warm-up)")
    parser.add_argument("--levels", default="1,8", help="concurrent clients, comma-separated")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report = measure(args, Path(tmp))
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{args.rounds} rounds x {args.requests} requests per cell, Python {report['python']}")
    print(
        f"{'method':<15} {'clients':>7} {'req/s':>7} {'p50 ms':>7} {'p95 ms':>7} {'cpu ms':>7} {'errors':>6} "
        f"{'p50 x tools/list':>16}"
    )
    for row in report["results"]:
        print(
            f"{row['method']:<15} {row['clients']:>7} {row['rps']:>7.0f} {row['p50_ms']:>7.2f} {row['p95_ms']:>7.2f} "
            f"{row['cpu_ms']:>7.2f} {row['errors']:>6} {row['p50_x_tools_list']:>16.2f}"
        )


if __name__ == "__main__":
    main()
