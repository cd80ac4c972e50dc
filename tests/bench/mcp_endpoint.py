"""Throughput of a published MCP endpoint against a bare MCP SDK server doing the same work, interleaved in one run.

    python tests/bench/mcp_endpoint.py [--rounds 3] [--requests 300] [--levels 1,8,32] [--json]

Both servers are uvicorn subprocesses on 127.0.0.1 with one worker each (h11, the asyncio loop: the same stack),
up at the same time and loaded one after the other by the same client:

- baseline: the MCP SDK's low-level server (one stateless Streamable HTTP session manager, JSON responses), with
  no authentication, scope or rate limit. Its ``tools/list`` answers the very tool list mcpbridge's endpoint
  offers (read from mcpbridge once at start); its ``search_knowledge`` runs the same keyword search over the same
  index file (mcpbridge's ``FileSearchIndex``, read-only, in a worker thread as blocking I/O must be) and returns
  the same JSON. The two answers are compared once before measuring: same chunks, same scores.
- mcpbridge: ``mcpbridge serve`` on a fresh data directory, a published endpoint (bearer token, KB scope, the
  per-endpoint rate limit, its usage record), ``tools/list`` and ``search_knowledge`` (mode keyword).

Every (round, method, clients) cell runs baseline then mcpbridge, or mcpbridge then baseline (alternating by
round), so drift on the machine affects both alike. Each mcpbridge run uses an endpoint of its own with the
highest rate limit (6000 a minute), so no run is ever refused while all its clients contend for one endpoint's
limit. The load comes from a small keep-alive HTTP/1.1 client on raw asyncio streams (one connection per client),
cheap enough that the servers, not the client, are what is measured; every answer is checked (HTTP 200, a
JSON-RPC result, not ``isError``).

Reported per method and client count: requests/s of each (summed over the rounds), p50/p95 latency in ms, errors,
and mcpbridge's throughput as a ratio of the baseline's: the number to quote. For notes, never for assertions.
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
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

BARE_SERVER = textwrap.dedent(
    """
    import contextlib, json, sys
    from pathlib import Path
    import anyio.to_thread
    import uvicorn
    from mcp import types
    from mcp.server.lowlevel import Server
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.applications import Starlette
    from starlette.routing import Mount

    from mcpbridge.adapters.index_files.search_index import DirectoryIndexFiles, FileSearchIndex
    from mcpbridge.http.views import ChunkOut

    port, tools_file, index_dir, kb_id = int(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
    TOOLS = [types.Tool.model_validate(t) for t in json.loads(tools_file.read_text())]
    INDEX = FileSearchIndex(DirectoryIndexFiles(index_dir))

    def search(query, limit):
        hits = INDEX.keyword([kb_id], query, limit=limit)
        return {
            "query": query,
            "mode": "keyword",
            "notices": [],
            "results": [{**ChunkOut.of(h.chunk).model_dump(), "score": round(h.score, 6)} for h in hits],
        }

    async def list_tools(ctx, params):
        return types.ListToolsResult(tools=TOOLS)

    async def call_tool(ctx, params):
        args = params.arguments or {}
        data = await anyio.to_thread.run_sync(search, str(args["query"]), int(args.get("limit", 10)))
        text = json.dumps(data, ensure_ascii=False, indent=2)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], structured_content=data)

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
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", server_header=False)
    """
)

CORPUS = [
    f"# Note {i}\n\nWalruses and seals share the ice floe {i}. Colony {i} counts {i * 7} animals near the shore."
    for i in range(40)
]
QUERY = "walrus colony"
HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
WARMUP = 20
RATE_LIMIT = 6000


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_up(port: int, timeout: float = 60.0) -> None:
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
def process(args: list[str], env: dict[str, str], cwd: Path, name: str) -> Iterator[subprocess.Popen[bytes]]:
    log = (cwd / f"{name}.log").open("wb")
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


SEARCH = rpc("tools/call", {"name": "search_knowledge", "arguments": {"query": QUERY, "mode": "keyword"}})
LIST = rpc("tools/list")


# ---------------------------------------------------------------------------------------------------- the client


def request_bytes(url: str, headers: dict[str, str], body: dict[str, Any]) -> bytes:
    parts = httpx.URL(url)
    payload = json.dumps(body).encode()
    lines = [
        f"POST {parts.raw_path.decode()} HTTP/1.1",
        f"Host: {parts.host}:{parts.port}",
        "Content-Type: application/json",
        f"Content-Length: {len(payload)}",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + payload


async def exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> tuple[int, bytes]:
    """One request on a kept-alive connection: (status, body). Content-Length or chunked bodies."""
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    status = int(status_line.split(" ", 2)[1])
    headers = {}
    for line in header_lines:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        return status, await reader.readexactly(int(headers["content-length"]))
    body = b""
    while True:  # chunked
        size = int((await reader.readuntil(b"\r\n")).strip(), 16)
        chunk = await reader.readexactly(size + 2)
        if size == 0:
            return status, body
        body += chunk[:-2]


def failed(status: int, body: bytes) -> bool:
    if status != 200:
        return True
    message = json.loads(body)
    return "error" in message or bool(message["result"].get("isError"))


@dataclass
class Run:
    requests: int = 0
    seconds: float = 0.0
    errors: int = 0
    cpu_seconds: float = 0.0
    """CPU time the server process spent meanwhile (all its threads, user + system)."""
    latencies: list[float] = field(default_factory=list)

    def add(self, other: Run) -> None:
        self.requests += other.requests
        self.seconds += other.seconds
        self.errors += other.errors
        self.cpu_seconds += other.cpu_seconds
        self.latencies += other.latencies


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def load(url: str, request: bytes, requests: int, clients: int, pid: int) -> Run:
    port = httpx.URL(url).port
    assert port is not None
    connections = [await asyncio.open_connection("127.0.0.1", port) for _ in range(clients)]
    run = Run()
    try:
        for i in range(WARMUP):
            reader, writer = connections[i % clients]
            await exchange(reader, writer, request)
        left = requests

        async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal left
            while left > 0:
                left -= 1
                begun = time.perf_counter()
                status, body = await exchange(reader, writer, request)
                run.latencies.append(time.perf_counter() - begun)
                run.errors += failed(status, body)

        started, cpu = time.perf_counter(), cpu_seconds(pid)
        await asyncio.gather(*(client(r, w) for r, w in connections))
        run.seconds = time.perf_counter() - started
        run.cpu_seconds = cpu_seconds(pid) - cpu
        run.requests = len(run.latencies)
    finally:
        for _, writer in connections:
            writer.close()
    return run


# ---------------------------------------------------------------------------------------------------- the servers


@dataclass
class Hub:
    base: str
    key: str
    kb_id: str
    index_dir: Path
    pid: int

    def endpoint(self) -> tuple[str, dict[str, str]]:
        """A new endpoint (its own rate limit), its URL and request headers."""
        with httpx.Client(base_url=self.base, headers={"Authorization": f"Bearer {self.key}"}, timeout=30) as api:
            created = api.post(
                "/api/v1/mcp-endpoints",
                json={
                    "name": "bench",
                    "knowledge_base_ids": [self.kb_id],
                    "rate_limit_per_minute": RATE_LIMIT,
                    "tools": ["list_knowledge_bases", "search_knowledge"],
                },
            )
            created.raise_for_status()
        endpoint = created.json()
        return endpoint["url"], {**HEADERS, "Authorization": f"Bearer {endpoint['token']}"}


def start_mcpbridge(stack: ExitStack, workdir: Path) -> Hub:
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
        for i, text in enumerate(CORPUS):
            api.post(f"/api/v1/knowledge-bases/{kb['id']}/documents", json={"title": f"Note {i}", "content": text})
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            page = api.get(f"/api/v1/knowledge-bases/{kb['id']}/documents?limit=100&page_size=100").json()
            docs = page["items"] if "items" in page else page["documents"]
            if len(docs) == len(CORPUS) and all(d["parse_status"] == "completed" for d in docs):
                break
            time.sleep(0.2)
        else:
            raise RuntimeError("the corpus was not indexed in time")
    return Hub(base, key, kb["id"], data / "indexes", pid)


def start_bare(stack: ExitStack, workdir: Path, hub: Hub, tools: list[dict[str, Any]]) -> tuple[str, int]:
    port = free_port()
    script = workdir / "bare_server.py"
    script.write_text(BARE_SERVER)
    tools_file = workdir / "tools.json"
    tools_file.write_text(json.dumps(tools))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPBRIDGE_")}
    args = [sys.executable, str(script), str(port), str(tools_file), str(hub.index_dir), hub.kb_id]
    pid = stack.enter_context(process(args, env, workdir, "bare")).pid
    wait_up(port)
    return f"http://127.0.0.1:{port}/mcp/", pid


def structured(url: str, headers: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
    answer = httpx.post(url, json=body, headers=headers, timeout=30)
    answer.raise_for_status()
    if "result" not in answer.json():
        raise SystemExit(f"{url}: {answer.text}")
    result: dict[str, Any] = answer.json()["result"]
    return result


# ---------------------------------------------------------------------------------------------------- the run


def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    levels = [int(level) for level in args.levels.split(",")]
    with ExitStack() as stack:
        hub = start_mcpbridge(stack, workdir)
        url, headers = hub.endpoint()
        tools = structured(url, headers, LIST)["tools"]
        bare, bare_pid = start_bare(stack, workdir, hub, tools)
        ours = structured(url, headers, SEARCH)["structuredContent"]
        theirs = structured(bare, HEADERS, SEARCH)["structuredContent"]
        if ours["results"] != theirs["results"] or not ours["results"]:
            raise SystemExit("the two servers do not find the same chunks: the comparison would be meaningless")
        if structured(bare, HEADERS, LIST)["tools"] != tools:
            raise SystemExit("the two servers do not list the same tools")
        totals: dict[tuple[str, str, int], Run] = {}
        for round_ in range(args.rounds):
            for method, body in (("tools/list", LIST), ("search_knowledge", SEARCH)):
                for clients in levels:
                    url, headers = hub.endpoint()  # a fresh rate limit for every run
                    targets = [("baseline", request_bytes(bare, HEADERS, body))]
                    targets.append(("mcpbridge", request_bytes(url, headers, body)))
                    if round_ % 2:
                        targets.reverse()
                    for name, request in targets:
                        target, pid = (bare, bare_pid) if name == "baseline" else (url, hub.pid)
                        run = asyncio.run(load(target, request, args.requests, clients, pid))
                        totals.setdefault((name, method, clients), Run()).add(run)
    report: dict[str, Any] = {"python": sys.version.split()[0], "rounds": args.rounds, "requests": args.requests}
    cells = []
    for method in ("tools/list", "search_knowledge"):
        for clients in levels:
            row: dict[str, Any] = {"method": method, "clients": clients}
            for name in ("baseline", "mcpbridge"):
                run = totals[(name, method, clients)]
                ordered = sorted(run.latencies)
                row[name] = {
                    "rps": run.requests / run.seconds,
                    "cpu_ms": run.cpu_seconds / run.requests * 1000,
                    "p50_ms": statistics.median(ordered) * 1000,
                    "p95_ms": ordered[max(0, int(len(ordered) * 0.95) - 1)] * 1000,
                    "errors": run.errors,
                }
            row["ratio"] = row["mcpbridge"]["rps"] / row["baseline"]["rps"]
            row["cpu_ratio"] = row["baseline"]["cpu_ms"] / row["mcpbridge"]["cpu_ms"]
            cells.append(row)
    report["results"] = cells
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--requests", type=int, default=200, help="measured requests per run (after 20 warm-up)")
    parser.add_argument("--levels", default="1,8,32", help="concurrent clients, comma-separated")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.requests + WARMUP > RATE_LIMIT:
        parser.error(f"--requests must stay under the endpoint's rate limit ({RATE_LIMIT - WARMUP})")
    with tempfile.TemporaryDirectory() as tmp:
        report = measure(args, Path(tmp))
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{args.rounds} rounds x {args.requests} requests per cell, Python {report['python']}")
    print(
        f"{'method':<17} {'clients':>7} {'base req/s':>10} {'ours req/s':>10} {'base p50':>8} {'ours p50':>8} "
        f"{'base p95':>8} {'ours p95':>8} {'base cpu':>8} {'ours cpu':>8} {'errors':>6} {'x baseline':>10} "
        f"{'x cpu':>6}"
    )
    for row in report["results"]:
        base, ours = row["baseline"], row["mcpbridge"]
        print(
            f"{row['method']:<17} {row['clients']:>7} {base['rps']:>10.0f} {ours['rps']:>10.0f} "
            f"{base['p50_ms']:>8.2f} {ours['p50_ms']:>8.2f} {base['p95_ms']:>8.2f} {ours['p95_ms']:>8.2f} "
            f"{base['cpu_ms']:>8.2f} {ours['cpu_ms']:>8.2f} {base['errors'] + ours['errors']:>6} "
            f"{row['ratio']:>10.2f} {row['cpu_ratio']:>6.2f}"
        )


if __name__ == "__main__":
    main()
