"""What an oversize upstream answer costs ``mcpbridge serve``: time to the error, memory, and other requests meanwhile.

    python tests/bench/upstream_answers.py [--rounds 2] [--ceiling-mb 300] [--against SRC_DIR] [--json]

An upstream MCP server on 127.0.0.1, in a process of its own, answers one method with an answer that does not end
(see ``tests/support/oversize_upstream.py``): ``json-length`` promises 300 MB in its ``Content-Length``,
``json-chunked`` has no length and no end; both stop by themselves at ``--ceiling-mb`` (what an unbounded reader
takes in); ``--shapes json-valid`` is instead a valid listing of 1,000 tools of ``--ceiling-mb`` in all (under the
cap: what parsing a large answer costs the other requests). Three operations meet it through a fresh ``serve``
(default settings, so the 16 MiB cap):

- ``test``: ``POST /api/v1/mcp-services/{id}/test`` (the answer to ``tools/list``);
- ``refresh``: ``POST .../metadata/refresh`` (the same);
- ``call``: ``POST /api/v1/agent/tool-calls`` (the answer to ``tools/call``).

For each (operation, shape), interleaved with a control of the same length (no operation running): the time to the
answer and its error code, serve's RSS before, at its peak (sampled every 20 ms) and 2 s after, and ``/healthz``
latency (p50 / max, one request at a time) during the operation against the control. With ``--against SRC_DIR`` the
same runs through a second serve on that checkout's code (``PYTHONPATH=SRC_DIR/shared``), e.g. an older commit.
For notes, never for assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench.agent_calls import start_serve
from tests.bench.mcp_endpoint import free_port, process, wait_up

ROOT = Path(__file__).resolve().parents[2]
OPERATIONS = ("test", "refresh", "call")
SHAPES = ("json-length", "json-chunked")
SETTLE = 2.0


@contextmanager
def upstream_process(workdir: Path, method: str, shape: str, ceiling: int) -> Iterator[tuple[str, Path]]:
    """The oversize upstream in a process of its own (so that its writes do not slow this one's probes)."""
    port = free_port()
    report = workdir / f"upstream-{port}.json"
    args = [
        sys.executable,
        "-m",
        "tests.support.oversize_upstream",
        method,
        shape,
        str(ceiling),
        str(port),
        str(report),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with process(args, env, workdir, f"upstream-{port}"):
        wait_up(port)
        yield f"http://127.0.0.1:{port}", report


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def prepare(api: httpx.Client, upstream: str, operation: str) -> dict[str, Any]:
    """Register the upstream; what the operation posts: (path, body)."""
    service = api.post("/api/v1/mcp-services", json={"name": f"o{time.monotonic_ns()}", "url": f"{upstream}/mcp"})
    service.raise_for_status()
    service_id = service.json()["id"]
    if operation == "test":
        return {"url": f"/api/v1/mcp-services/{service_id}/test"}
    if operation == "refresh":
        return {"url": f"/api/v1/mcp-services/{service_id}/metadata/refresh"}
    api.post(f"/api/v1/mcp-services/{service_id}/metadata/refresh").raise_for_status()
    described = api.get("/api/v1/agent/tools/describe", params={"service_id": service_id, "tool_name": "echo"})
    described.raise_for_status()
    return {"url": "/api/v1/agent/tool-calls", "json": {"tool_ref": described.json()["tool_ref"], "arguments": {}}}


def observe(base: str, pid: int, busy: threading.Event, seconds: float | None) -> dict[str, Any]:
    """Poll /healthz and RSS while ``busy`` is set (or for ``seconds``)."""
    latencies: list[float] = []
    peak = 0.0
    stop_at = None if seconds is None else time.monotonic() + seconds
    with httpx.Client(base_url=base, timeout=60) as probe:
        while (busy.is_set() if stop_at is None else time.monotonic() < stop_at) or not latencies:
            peak = max(peak, rss_mb(pid))
            begun = time.perf_counter()
            probe.get("/healthz")
            latencies.append(time.perf_counter() - begun)
            peak = max(peak, rss_mb(pid))
            time.sleep(0.02)
    return {"latencies": latencies, "peak": peak}


def run_operation(base: str, key: str, pid: int, upstream_base: str, operation: str) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=base, headers=headers, timeout=600) as api:
        request = prepare(api, upstream_base, operation)
        time.sleep(SETTLE)
        before = rss_mb(pid)
        busy = threading.Event()
        busy.set()
        outcome: dict[str, Any] = {}

        def go() -> None:
            begun = time.perf_counter()
            try:
                answer = api.post(request["url"], json=request.get("json"))
                body = answer.json()
                outcome["code"] = body.get("error_code") or body.get("code") or (body.get("error") or {}).get("code")
                outcome["status"] = answer.status_code
            except httpx.HTTPError as exc:
                outcome["code"] = type(exc).__name__
            outcome["seconds"] = time.perf_counter() - begun
            busy.clear()

        worker = threading.Thread(target=go)
        worker.start()
        seen = observe(base, pid, busy, None)
        worker.join()
        time.sleep(SETTLE)
        return {**outcome, "rss_before": before, "rss_peak": seen["peak"], "rss_after": rss_mb(pid), **_lat(seen)}


def _lat(seen: dict[str, Any]) -> dict[str, float]:
    values = seen["latencies"]
    return {"healthz_p50_ms": statistics.median(values) * 1000, "healthz_max_ms": max(values) * 1000}


def measure(args: argparse.Namespace, workdir: Path) -> list[dict[str, Any]]:
    rows = []
    ceiling = args.ceiling_mb * 1024 * 1024
    with ExitStack() as stack:
        hubs = {"this tree": start_serve(stack, workdir / "this")}
        if args.against is not None:
            hubs["baseline"] = start_serve(stack, workdir / "baseline", args.against)
        for round_ in range(args.rounds):
            for operation in OPERATIONS:
                for shape in args.shapes.split(","):
                    if shape == "json-valid" and operation == "call":
                        continue
                    order = list(hubs) if round_ % 2 == 0 else list(hubs)[::-1]
                    for name in order:
                        base, key, pid = hubs[name]
                        method = "tools/call" if operation == "call" else "tools/list"
                        with upstream_process(workdir, method, shape, ceiling) as (upstream_base, report):
                            row = run_operation(base, key, pid, upstream_base, operation)
                            upstream = json.loads(report.read_text()) if report.exists() else {"sent": -1}
                        control = observe(base, pid, threading.Event(), max(row["seconds"], 1.0))
                        control_lat = _lat(control)
                        rows.append(
                            {
                                "serve": name,
                                "round": round_,
                                "operation": operation,
                                "shape": shape,
                                **row,
                                "upstream_sent_mb": upstream["sent"] / 1024 / 1024,
                                "control_p50_ms": control_lat["healthz_p50_ms"],
                                "control_max_ms": control_lat["healthz_max_ms"],
                            }
                        )
                        print(_line(rows[-1]), flush=True)
    return rows


def _line(row: dict[str, Any]) -> str:
    return (
        f"{row['serve']:>9} {row['operation']:>7} {row['shape']:>12} {row.get('status', '-')!s:>4} "
        f"{row['code']!s:>17} {row['seconds']:>7.2f} s  rss {row['rss_before']:>6.0f} / {row['rss_peak']:>6.0f} / "
        f"{row['rss_after']:>6.0f} MB  sent {row['upstream_sent_mb']:>6.1f} MB  healthz p50/max "
        f"{row['healthz_p50_ms']:>6.1f}/{row['healthz_max_ms']:>7.1f} ms (control {row['control_p50_ms']:>5.1f}/"
        f"{row['control_max_ms']:>6.1f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--ceiling-mb", type=int, default=300, help="the most an oversize answer writes")
    parser.add_argument("--against", type=Path, help="another checkout, run as a second serve (the baseline)")
    parser.add_argument(
        "--shapes", default=",".join(SHAPES), help="json-length, json-chunked, json-valid (a listing of --ceiling-mb)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    print(
        f"{'serve':>9} {'op':>7} {'shape':>12} {'http':>4} {'error':>17} {'time':>9}  rss before / peak / after"
        "          upstream sent   healthz during (control)"
    )
    with tempfile.TemporaryDirectory() as tmp:
        rows = measure(args, Path(tmp))
    if args.json:
        print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
