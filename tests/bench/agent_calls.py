"""Agent tool calls through mcpbridge against direct calls to the same upstream, interleaved in one run.

    python tests/bench/agent_calls.py [--rounds 3] [--calls 200] [--workers 1,8] [--serve-workers 1]
        [--via agent|gateway] [--against SRC_DIR] [--contextforge MCPGATEWAY] [--json]

The upstream is npm ``@modelcontextprotocol/server-everything`` (Streamable HTTP) on 127.0.0.1, its ``echo`` tool.
For each worker count:

- direct: each worker holds one MCP SDK client session to the upstream and calls the tool (no mcpbridge at all);
- mcpbridge: ``mcpbridge serve`` on a fresh data directory (``--workers`` as ``--serve-workers`` says), the upstream
  registered as a service; each worker holds one keep-alive HTTP connection to it and calls
  ``POST /api/v1/agent/tool-calls`` (schema and policy check, the call's record, the pooled upstream connection, the
  outcome), every answer checked (200, ``completed``, the echo); with ``--via gateway``, each worker holds one MCP SDK
  client session to a published endpoint of that serve that publishes the tool, and calls it there (gateway mode:
  the same broker behind ``tools/call``).

Each (round, workers) cell runs direct then mcpbridge, or the reverse (alternating by round), so drift on the
machine affects both alike. Reported per worker count: calls/s of each (summed over the rounds), p50/p95 latency in
ms, serve's CPU ms per call (user + system of serve and its processes, from ``/proc``: where a 2-core machine bounds
the 8-worker figure), and
mcpbridge's throughput as a ratio of direct's: the number to quote. With ``--against SRC_DIR`` (another checkout of
the repository, e.g. a ``git worktree`` of an older commit), a second ``serve`` runs that checkout's code
(``PYTHONPATH=SRC_DIR/shared``, same interpreter and packages) beside this one, interleaved with the others as
``baseline``, and the report adds this tree's throughput as a ratio of the baseline's. With ``--contextforge`` (the
``mcpgateway`` command of a virtual environment holding pip ``mcp-contextforge-gateway``, see
:mod:`tests.bench.contextforge`), ContextForge serves the same ``echo`` through a virtual server, called with one MCP
SDK client session per worker, interleaved with the others as ``contextforge``. For notes, never for assertions.
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
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, ExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from tests.bench.contextforge import start_contextforge
from tests.bench.mcp_endpoint import cpu_seconds, free_port, process, wait_up
from tests.support.everything import Everything

WARMUP = 5


@dataclass
class Run:
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    serve_cpu_seconds: float = 0.0  # mcpbridge serve's CPU time over the measured calls (0 for direct)

    def add(self, other: Run) -> None:
        self.seconds += other.seconds
        self.latencies += other.latencies
        self.serve_cpu_seconds += other.serve_cpu_seconds


async def spread(workers: int, calls: int, make: Any, serve_pid: int | None = None) -> Run:
    """``calls`` calls shared by ``workers`` concurrent workers; ``make()`` opens one worker's caller. With
    ``serve_pid``, the CPU time that process spends over the measured calls is recorded too."""
    run = Run()
    left = calls
    async with make_many(workers, make) as callers:
        for i in range(WARMUP):
            await callers[i % workers](i)

        async def worker(call: Any) -> None:
            nonlocal left
            while left > 0:
                left -= 1
                begun = time.perf_counter()
                await call(left)
                run.latencies.append(time.perf_counter() - begun)

        started, cpu = time.perf_counter(), tree_cpu_seconds(serve_pid) if serve_pid else 0.0
        await asyncio.gather(*(worker(c) for c in callers))
        run.seconds = time.perf_counter() - started
        run.serve_cpu_seconds = tree_cpu_seconds(serve_pid) - cpu if serve_pid else 0.0
    return run


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU time so far of a process and the processes it started (``serve --workers``'s)."""
    total, parents = 0.0, {pid}
    total += cpu_seconds(pid)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) in parents:
                total += cpu_seconds(int(entry.name))
        except (OSError, ValueError):
            continue
    return total


@asynccontextmanager
async def make_many(workers: int, make: Any) -> AsyncIterator[list[Any]]:
    async with AsyncExitStack() as stack:
        yield [await stack.enter_async_context(make()) for _ in range(workers)]


@asynccontextmanager
async def direct_caller(url: str) -> AsyncIterator[Any]:
    """One SDK client session to the upstream."""
    async with Client(streamable_http_client(url), mode="auto") as client:

        async def call(i: int) -> None:
            result = await client.call_tool("echo", {"message": f"m{i}"})
            if result.is_error or f"m{i}" not in json.dumps(result.model_dump(mode="json")):
                raise SystemExit(f"direct call failed: {result}")

        yield call


@asynccontextmanager
async def hub_caller(base: str, key: str, tool_ref: str) -> AsyncIterator[Any]:
    """One keep-alive HTTP connection to mcpbridge, calling the tool as an agent."""
    async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30) as http:

        async def call(i: int) -> None:
            body = {"tool_ref": tool_ref, "arguments": {"message": f"m{i}"}}
            answer = await http.post("/api/v1/agent/tool-calls", json=body)
            shown = answer.json()
            if answer.status_code != 200 or shown.get("status") != "completed" or f"m{i}" not in json.dumps(shown):
                raise SystemExit(f"call through mcpbridge failed: {answer.status_code} {answer.text[:500]}")

        yield call


@asynccontextmanager
async def gateway_caller(url: str, token: str, name: str) -> AsyncIterator[Any]:
    """One SDK client session to a published endpoint, calling the published tool (gateway mode)."""
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        Client(streamable_http_client(url, http_client=http), mode="auto") as client,
    ):

        async def call(i: int) -> None:
            result = await client.call_tool(name, {"message": f"m{i}"})
            if result.is_error or f"m{i}" not in json.dumps(result.model_dump(mode="json")):
                raise SystemExit(f"gateway call failed: {result}")

        yield call


def publish(base: str, key: str, service_id: str) -> tuple[str, str, str]:
    """An endpoint publishing the service's ``echo``: (its URL, its token, the tool's listed name)."""
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30) as api:
        created = api.post(
            "/api/v1/mcp-endpoints",
            json={
                "name": "bench",
                "services": [{"service_id": service_id, "tools": ["echo"]}],
                "rate_limit_per_minute": 6000,  # the most an endpoint takes: above every cell's calls in a minute
            },
        )
        created.raise_for_status()
    endpoint = created.json()

    async def listed() -> str:
        headers = {"Authorization": f"Bearer {endpoint['token']}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http,
            Client(streamable_http_client(endpoint["url"], http_client=http), mode="auto") as client,
        ):
            tools = (await client.list_tools()).tools
        return next(tool.name for tool in tools if tool.name.startswith("mcp_everything_echo_"))

    return endpoint["url"], endpoint["token"], asyncio.run(listed())


def start_serve(stack: ExitStack, workdir: Path, source: Path | None = None, workers: int = 1) -> tuple[str, str, int]:
    """serve on a fresh data directory (the code of ``source``, a checkout, when given), 127.0.0.1 allowlisted;
    (base URL, the admin key ``init`` printed, serve's process id)."""
    workdir.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPBRIDGE_")}
    env.update({"MCPBRIDGE_LOG_LEVEL": "WARNING", "MCPBRIDGE_SSRF_ALLOWLIST": "127.0.0.1"})
    if source is not None:
        env["PYTHONPATH"] = str(source.resolve() / "shared")
    data = workdir / "data"
    init = subprocess.run(
        [sys.executable, "-m", "mcpbridge.cli", "init", "--json", "--data-dir", str(data)],
        env=env,
        cwd=workdir,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    key = json.loads(init.stdout)["api_key"]
    port = free_port()
    args = [sys.executable, "-m", "mcpbridge.cli", "serve", "--port", str(port), "--data-dir", str(data)]
    args += ["--workers", str(workers)]
    serve = stack.enter_context(process(args, env, workdir, "mcpbridge"))
    wait_up(port, timeout=300)
    return f"http://127.0.0.1:{port}", key, serve.pid


def start_mcpbridge(
    stack: ExitStack, workdir: Path, upstream: str, workers: int = 1, source: Path | None = None
) -> tuple[str, str, str, int, str]:
    """:func:`start_serve` with the upstream registered; (base URL, key, the echo tool's tool_ref, serve's pid, the
    service's id)."""
    base, key, pid = start_serve(stack, workdir, source, workers)
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30) as api:
        service = api.post("/api/v1/mcp-services", json={"name": "everything", "url": upstream})
        service.raise_for_status()
        service_id = service.json()["id"]
        api.post(f"/api/v1/mcp-services/{service_id}/metadata/refresh").raise_for_status()
        described = api.get("/api/v1/agent/tools/describe", params={"service_id": service_id, "tool_name": "echo"})
        described.raise_for_status()
    return base, key, described.json()["tool_ref"], pid, service_id


def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    levels = [int(level) for level in args.workers.split(",")]
    totals: dict[tuple[str, int], Run] = {}
    with ExitStack() as stack:
        upstream = Everything("streamableHttp", workdir)
        upstream.start()
        stack.callback(upstream.kill)
        hubs = {"mcpbridge": start_mcpbridge(stack, workdir, upstream.url, args.serve_workers)}
        if args.against is not None:
            hubs["baseline"] = start_mcpbridge(
                stack, workdir / "baseline", upstream.url, args.serve_workers, args.against
            )
        names = ["direct", *hubs]
        forge: tuple[str, str, str, int] | None = None
        if args.contextforge is not None:
            forge = start_contextforge(stack, workdir / "contextforge", args.contextforge, upstream.url)
            names.append("contextforge")
        published: dict[str, tuple[str, str, str]] = {}
        for round_ in range(args.rounds):
            for workers in levels:
                order = names if round_ % 2 == 0 else names[::-1]
                for name in order:
                    make: Any
                    if name == "direct":
                        run = asyncio.run(spread(workers, args.calls, lambda: direct_caller(upstream.url)))
                    elif name == "contextforge" and forge is not None:
                        url, token, listed, pid = forge
                        make = lambda u=url, t=token, n=listed: gateway_caller(u, t, n)  # noqa: E731
                        run = asyncio.run(spread(workers, args.calls, make, pid))
                    else:
                        base, key, tool_ref, pid, service_id = hubs[name]
                        make = lambda b=base, k=key, t=tool_ref: hub_caller(b, k, t)  # noqa: E731
                        if args.via == "gateway":
                            if name not in published:
                                published[name] = publish(base, key, service_id)
                            url, token, listed = published[name]
                            make = lambda u=url, t=token, n=listed: gateway_caller(u, t, n)  # noqa: E731
                        run = asyncio.run(spread(workers, args.calls, make, pid))
                    totals.setdefault((name, workers), Run()).add(run)
    cells = []
    for workers in levels:
        row: dict[str, Any] = {"workers": workers}
        for name in names:
            run = totals[(name, workers)]
            ordered = sorted(run.latencies)
            row[name] = {
                "calls_per_s": len(ordered) / run.seconds,
                "p50_ms": statistics.median(ordered) * 1000,
                "p95_ms": ordered[max(0, int(len(ordered) * 0.95) - 1)] * 1000,
            }
        ours = totals[("mcpbridge", workers)]
        row["mcpbridge"]["serve_cpu_ms"] = ours.serve_cpu_seconds / len(ours.latencies) * 1000
        row["ratio"] = row["mcpbridge"]["calls_per_s"] / row["direct"]["calls_per_s"]
        if "baseline" in row:
            theirs = totals[("baseline", workers)]
            row["baseline"]["serve_cpu_ms"] = theirs.serve_cpu_seconds / len(theirs.latencies) * 1000
            row["vs_baseline"] = row["mcpbridge"]["calls_per_s"] / row["baseline"]["calls_per_s"]
        if "contextforge" in row:
            forged = totals[("contextforge", workers)]
            row["contextforge"]["serve_cpu_ms"] = forged.serve_cpu_seconds / len(forged.latencies) * 1000
            row["contextforge"]["ratio"] = row["contextforge"]["calls_per_s"] / row["direct"]["calls_per_s"]
        cells.append(row)
    return {
        "python": sys.version.split()[0],
        "rounds": args.rounds,
        "calls": args.calls,
        "serve_workers": args.serve_workers,
        "via": args.via,
        "results": cells,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=200, help=f"measured calls per run (after {WARMUP} warm-up)")
    parser.add_argument("--workers", default="1,8", help="concurrent workers, comma-separated")
    parser.add_argument("--serve-workers", type=int, default=1, help="serve's --workers (processes)")
    parser.add_argument("--against", type=Path, help="another checkout, run as a second serve (the baseline)")
    parser.add_argument("--via", choices=["agent", "gateway"], default="agent", help="REST agent calls or MCP")
    parser.add_argument("--contextforge", type=Path, help="ContextForge's mcpgateway command, run beside as a peer")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report = measure(args, Path(tmp))
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(
        f"{args.rounds} rounds x {args.calls} calls per cell, via {args.via}, serve --workers {args.serve_workers}, "
        f"Python {report['python']}"
    )
    print(
        f"{'workers':>7} {'direct/s':>9} {'ours/s':>9} {'direct p50':>10} {'ours p50':>9} {'direct p95':>10} "
        f"{'ours p95':>9} {'serve cpu':>9} {'x direct':>8}"
    )
    for row in report["results"]:
        direct, ours = row["direct"], row["mcpbridge"]
        print(
            f"{row['workers']:>7} {direct['calls_per_s']:>9.0f} {ours['calls_per_s']:>9.0f} {direct['p50_ms']:>10.2f} "
            f"{ours['p50_ms']:>9.2f} {direct['p95_ms']:>10.2f} {ours['p95_ms']:>9.2f} {ours['serve_cpu_ms']:>9.2f} "
            f"{row['ratio']:>8.2f}"
        )
        if "baseline" in row:
            base = row["baseline"]
            print(
                f"{'':>7} baseline {base['calls_per_s']:>9.0f}/s p50 {base['p50_ms']:.2f} ms "
                f"p95 {base['p95_ms']:.2f} ms serve cpu {base['serve_cpu_ms']:.2f} ms/call; "
                f"this tree x baseline {row['vs_baseline']:.2f}"
            )
        if "contextforge" in row:
            forge = row["contextforge"]
            print(
                f"{'':>7} contextforge {forge['calls_per_s']:>9.0f}/s p50 {forge['p50_ms']:.2f} ms "
                f"p95 {forge['p95_ms']:.2f} ms cpu {forge['serve_cpu_ms']:.2f} ms/call; x direct {forge['ratio']:.2f}"
            )


if __name__ == "__main__":
    main()
