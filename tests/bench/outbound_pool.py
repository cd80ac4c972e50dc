"""One MCP ``tools/call`` POST and its event-stream answer through httpx2, over mcpbridge's outbound transport
(``GuardedAsyncTransport``: the URL check, the pinned dialler, httpcore2's pool on ``WireStream``, the answer caps)
against httpx2's own transport (httpcore2's pool, h11, anyio streams), interleaved in one run.

    python tests/bench/outbound_pool.py [--rounds 4] [--requests 1000] [--concurrency 1,8] [--json]

The upstream is npm ``@modelcontextprotocol/server-everything`` (Streamable HTTP) on 127.0.0.1, its ``echo`` tool,
one session opened first. Each (round, concurrency, loop) cell runs the reference then mcpbridge's transport, or the
reverse (alternating by round), on one keep-alive client each. Reported per loop (asyncio, uvloop) and concurrency:
requests/s and CPU microseconds per request of this process (user + system: the client's whole cost, node runs
elsewhere), summed over the rounds, and mcpbridge's CPU per request as a ratio of the reference's. For notes, never
for assertions.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.everything import Everything

from mcpbridge.outbound.http import GuardedAsyncTransport
from mcpbridge.outbound.policy import EgressPolicy

ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}},
}


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def transports() -> dict[str, Callable[[], httpx2.AsyncBaseTransport]]:
    return {
        "httpcore2": lambda: httpx2.AsyncHTTPTransport(),
        "mcpbridge": lambda: GuardedAsyncTransport(EgressPolicy(["127.0.0.1"])),
    }


async def cell(url: str, make: Callable[[], httpx2.AsyncBaseTransport], requests: int, concurrency: int) -> Any:
    """(seconds, CPU seconds) for ``requests`` tool calls, ``concurrency`` at a time, on one client."""
    async with httpx2.AsyncClient(transport=make(), timeout=30) as client:
        opened = await client.post(url, json=INITIALIZE, headers=ACCEPT)
        headers = {**ACCEPT, "mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
        await client.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
        left = requests

        async def call(i: int) -> None:
            params = {"name": "echo", "arguments": {"message": f"m{i}"}}
            body = json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": params})
            async with client.stream("POST", url, content=body, headers=headers) as answer:
                data = b"".join([chunk async for chunk in answer.aiter_bytes()])
            if answer.status_code != 200 or f"m{i}".encode() not in data:
                raise SystemExit(f"unexpected answer: {answer.status_code} {data[:300]!r}")

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                await call(left)

        for i in range(20):
            await call(i)
        started, cpu = time.perf_counter(), cpu_seconds()
        async with anyio.create_task_group() as group:
            for _ in range(concurrency):
                group.start_soon(worker)
        return time.perf_counter() - started, cpu_seconds() - cpu


def measure(args: argparse.Namespace, url: str) -> dict[str, Any]:
    levels = [int(level) for level in args.concurrency.split(",")]
    totals: dict[tuple[bool, int, str], list[float]] = {}
    for round_ in range(args.rounds):
        for uvloop in (False, True):
            for level in levels:
                order = list(transports().items())
                if round_ % 2:
                    order.reverse()
                for name, make in order:
                    seconds, cpu = anyio.run(
                        cell, url, make, args.requests, level, backend_options={"use_uvloop": uvloop}
                    )
                    total = totals.setdefault((uvloop, level, name), [0.0, 0.0])
                    total[0] += seconds
                    total[1] += cpu
    results: dict[str, Any] = {}
    count = args.requests * args.rounds
    for uvloop in (False, True):
        for level in levels:
            row = {}
            for name in transports():
                seconds, cpu = totals[(uvloop, level, name)]
                row[name] = {"requests_per_s": count / seconds, "cpu_us_per_request": cpu / count * 1e6}
            row["cpu_ratio"] = row["mcpbridge"]["cpu_us_per_request"] / row["httpcore2"]["cpu_us_per_request"]
            results[f"{'uvloop' if uvloop else 'asyncio'}/{level}"] = row
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--concurrency", default="1,8")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        upstream = Everything("streamableHttp", Path(directory))
        upstream.start()
        try:
            results = measure(args, upstream.url)
        finally:
            upstream.kill()
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{args.rounds} rounds x {args.requests} requests per cell, Python {sys.version.split()[0]}")
    print(f"{'loop/conc':>12} {'core2 r/s':>10} {'ours r/s':>9} {'core2 us':>9} {'ours us':>8} {'cpu x':>6}")
    for key, row in results.items():
        core, ours = row["httpcore2"], row["mcpbridge"]
        print(
            f"{key:>12} {core['requests_per_s']:10.0f} {ours['requests_per_s']:9.0f} "
            f"{core['cpu_us_per_request']:9.0f} {ours['cpu_us_per_request']:8.0f} {row['cpu_ratio']:6.2f}"
        )


if __name__ == "__main__":
    main()
