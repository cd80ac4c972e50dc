"""Calls to an external MCP server's tool through mcpbridge's connection layer, against the MCP SDK client alone.

    python tests/bench/external_calls.py [--calls 200] [--json]

The upstream is npm ``@modelcontextprotocol/server-everything`` (Streamable HTTP) on 127.0.0.1, its ``echo`` tool.
Measured in the same run, one after the other, sequential calls:

- baseline: one SDK ``mcp.Client`` session kept open, calling the tool (no guard, no pool);
- pooled: mcpbridge's ``ConnectionPool`` (SSRF-guarded, pinned transport, cached session, recovery rules), the way
  agent tool calls run;
- fresh: a new mcpbridge ``Connection`` per call (handshake every time: what caching saves).

Reported: calls/s, p50 and p95 latency in ms, and each as a ratio of the baseline's throughput. For notes only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from tests.support.everything import Everything

from mcpbridge.client.connection import Connection, ConnectionSpec
from mcpbridge.client.pool import ConnectionPool, PoolKey
from mcpbridge.outbound.policy import EgressPolicy

POLICY = EgressPolicy(["127.0.0.1"])


async def timed(calls: int, one: Callable[[int], Awaitable[Any]]) -> dict[str, float]:
    latencies = []
    started = time.perf_counter()
    for i in range(calls):
        begun = time.perf_counter()
        await one(i)
        latencies.append((time.perf_counter() - begun) * 1000)
    elapsed = time.perf_counter() - started
    ordered = sorted(latencies)
    return {
        "calls_per_s": calls / elapsed,
        "p50_ms": statistics.median(ordered),
        "p95_ms": ordered[int(len(ordered) * 0.95) - 1],
    }


async def measure(url: str, calls: int) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {}

    async with Client(streamable_http_client(url), mode="auto") as client:

        async def bare(i: int) -> None:
            await client.call_tool("echo", {"message": f"m{i}"})

        await bare(-1)
        results["baseline (SDK session)"] = await timed(calls, bare)

    spec = ConnectionSpec(url, "http-streamable", timeout=15)
    pool = ConnectionPool(POLICY)
    try:

        async def pooled(i: int) -> None:
            async with pool.session(PoolKey("svc_bench"), spec) as connection:
                await connection.call_tool("echo", {"message": f"m{i}"})

        await pooled(-1)
        results["mcpbridge pooled"] = await timed(calls, pooled)
    finally:
        await pool.aclose()

    async def fresh(i: int) -> None:
        async with Connection(spec, POLICY) as connection:
            await connection.call_tool("echo", {"message": f"m{i}"})

    results["mcpbridge fresh connection"] = await timed(max(10, calls // 10), fresh)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        server = Everything("streamableHttp", Path(workdir))
        server.start()
        try:
            results = anyio.run(measure, server.url, args.calls)
        finally:
            server.kill()
    baseline = results["baseline (SDK session)"]["calls_per_s"]
    for figures in results.values():
        figures["ratio_to_baseline"] = figures["calls_per_s"] / baseline
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    for name, figures in results.items():
        print(
            f"{name:28s} {figures['calls_per_s']:8.1f} calls/s  p50 {figures['p50_ms']:6.2f} ms  "
            f"p95 {figures['p95_ms']:6.2f} ms  x{figures['ratio_to_baseline']:.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
