"""Throughput and latency of a published MCP endpoint against a bare SDK server, measured in the same run.

    python tests/bench/mcp_endpoint.py [--requests 600] [--concurrency 8] [--json]

Both servers run as uvicorn subprocesses on 127.0.0.1, one at a time, loaded by this process over HTTP with the
same client code:

- baseline: the MCP SDK's low-level server (stateless Streamable HTTP, JSON responses) with one trivial tool and
  no authentication, scope or rate limit;
- mcpbridge: ``mcpbridge serve`` on a fresh data directory, with a published endpoint (bearer token, KB scope,
  rate limit high enough never to trigger), serving ``tools/list`` and ``search_knowledge`` over a small corpus.

Reported per target: requests/s, p50 and p95 latency in ms, and mcpbridge's throughput as a ratio of the
baseline's for the same method. The figures are for notes, never for assertions: the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

BARE_SERVER = textwrap.dedent(
    """
    import contextlib, sys
    import uvicorn
    from mcp import types
    from mcp.server.lowlevel import Server
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.applications import Starlette
    from starlette.routing import Mount

    TOOL = types.Tool(name="echo", description="echo", input_schema={"type": "object", "properties": {}})

    async def list_tools(ctx, params):
        return types.ListToolsResult(tools=[TOOL])

    async def call_tool(ctx, params):
        return types.CallToolResult(content=[types.TextContent(type="text", text="{}")], structured_content={})

    server = Server("bare", on_list_tools=list_tools, on_call_tool=call_tool)
    manager = StreamableHTTPSessionManager(
        app=server, json_response=True, stateless=True,
        security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )

    @contextlib.asynccontextmanager
    async def lifespan(app):
        async with manager.run():
            yield

    app = Starlette(routes=[Mount("/mcp", app=manager.handle_request)], lifespan=lifespan)
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
    """
)

CORPUS = [
    f"# Note {i}\n\nWalruses and seals share the ice floe {i}. Colony {i} counts {i * 7} animals near the shore."
    for i in range(40)
]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_up(port: int, timeout: float = 30.0) -> None:
    """Until the port accepts connections (a GET on an MCP path may open a stream that never ends)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on port {port}")


@contextmanager
def process(args: list[str], env: dict[str, str], cwd: Path) -> Iterator[subprocess.Popen[bytes]]:
    log = (cwd / f"{Path(args[1]).stem}.log").open("wb")
    proc = subprocess.Popen(args, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def rpc(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": method}
    if params is not None:
        message["params"] = params
    return message


async def load(
    url: str, headers: dict[str, str], body: dict[str, Any], requests: int, concurrency: int
) -> dict[str, float]:
    latencies: list[float] = []
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(requests):
        queue.put_nowait(i)
    errors = 0

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal errors
        while True:
            try:
                queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            start = time.perf_counter()
            response = await client.post(url, json=body, headers=headers)
            latencies.append(time.perf_counter() - start)
            if response.status_code != 200 or "error" in response.json() or response.json()["result"].get("isError"):
                errors += 1

    async with httpx.AsyncClient(timeout=30) as client:
        for _ in range(10):  # warm-up
            await client.post(url, json=body, headers=headers)
        started = time.perf_counter()
        await asyncio.gather(*[worker(client) for _ in range(concurrency)])
        elapsed = time.perf_counter() - started
    ordered = sorted(latencies)
    return {
        "rps": len(latencies) / elapsed,
        "p50_ms": statistics.median(ordered) * 1000,
        "p95_ms": ordered[int(len(ordered) * 0.95) - 1] * 1000,
        "errors": errors,
    }


HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}


def bench_bare(requests: int, concurrency: int, workdir: Path) -> dict[str, dict[str, float]]:
    port = free_port()
    script = workdir / "bare_server.py"
    script.write_text(BARE_SERVER)
    with process([sys.executable, str(script), str(port)], dict(os.environ), workdir):
        url = f"http://127.0.0.1:{port}/mcp/"
        wait_up(port)
        return {
            "tools/list": asyncio.run(load(url, HEADERS, rpc("tools/list"), requests, concurrency)),
            "tools/call": asyncio.run(
                load(url, HEADERS, rpc("tools/call", {"name": "echo", "arguments": {}}), requests, concurrency)
            ),
        }


def bench_mcpbridge(requests: int, concurrency: int, workdir: Path) -> dict[str, dict[str, float]]:
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
    with process(args, env, workdir):
        base = f"http://127.0.0.1:{port}"
        wait_up(port)
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30) as api:
            kb = api.post("/api/v1/knowledge-bases", json={"name": "Bench"}).json()
            for i, text in enumerate(CORPUS):
                api.post(f"/api/v1/knowledge-bases/{kb['id']}/documents", json={"title": f"Note {i}", "content": text})
            endpoint = api.post(
                "/api/v1/mcp-endpoints",
                json={
                    "name": "bench",
                    "knowledge_base_ids": [kb["id"]],
                    "rate_limit_per_minute": 6000,
                    "tools": ["list_knowledge_bases", "search_knowledge"],
                },
            ).json()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                docs = api.get(f"/api/v1/knowledge-bases/{kb['id']}/documents?limit=200").json()["items"]
                if all(d["parse_status"] == "completed" for d in docs):
                    break
                time.sleep(0.2)
        headers = {**HEADERS, "Authorization": f"Bearer {endpoint['token']}"}
        url = endpoint["url"]
        search = rpc(
            "tools/call", {"name": "search_knowledge", "arguments": {"query": "walrus colony", "mode": "keyword"}}
        )
        # The rate limit (6000/min) would cap a long run: calls stay under it.
        calls = min(requests, 5000)
        return {
            "tools/list": asyncio.run(load(url, headers, rpc("tools/list"), requests, concurrency)),
            "tools/call": asyncio.run(load(url, headers, search, calls, concurrency)),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        bare = bench_bare(args.requests, args.concurrency, workdir)
        ours = bench_mcpbridge(args.requests, args.concurrency, workdir)
    report = {"baseline": bare, "mcpbridge": ours}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{args.requests} requests per method, concurrency {args.concurrency}, Python {sys.version.split()[0]}")
    print(f"{'target':<30} {'req/s':>8} {'p50 ms':>8} {'p95 ms':>8} {'errors':>7} {'x baseline':>11}")
    for method in ("tools/list", "tools/call"):
        base = bare[method]
        label = "echo (trivial tool)" if method == "tools/call" else method
        print(
            f"{'baseline ' + label:<30} {base['rps']:>8.0f} {base['p50_ms']:>8.2f} {base['p95_ms']:>8.2f} "
            f"{base['errors']:>7.0f} {1.0:>11.2f}"
        )
        mine = ours[method]
        label = "search_knowledge" if method == "tools/call" else method
        print(
            f"{'mcpbridge ' + label:<30} {mine['rps']:>8.0f} {mine['p50_ms']:>8.2f} {mine['p95_ms']:>8.2f} "
            f"{mine['errors']:>7.0f} {mine['rps'] / base['rps']:>11.2f}"
        )


if __name__ == "__main__":
    main()
