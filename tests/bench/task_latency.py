"""A Task's time to its id against the synchronous ``ask``, interleaved in one run.

    python tests/bench/task_latency.py [--rounds 5] [--requests 30] [--model-seconds 2]

``mcpbridge serve`` on a fresh data directory (SQLite, the local index, no language model: ``ask`` answers
extractively; with ``--model-seconds``, an OpenAI-compatible model on 127.0.0.1 that takes that long to reply, the
same reply each time), one knowledge base of the bench corpus (:mod:`tests.bench.mcp_endpoint`), an endpoint offering
``ask``. Each round sends, one request at a time and in an order rotated by round, ``requests`` calls of each kind,
2026-07-28 over HTTP/1.1 keep-alive:

* ``ask (synchronous)``: ``tools/call`` of ``ask``, no Tasks extension declared: the time to the answer;
* ``ask as a Task: id``: the same call with the extension declared: the time to the ``CreateTaskResult``;
* ``ask as a Task: done``: from that call to the first ``tasks/get`` that answers ``completed``, polled every
  ``--poll-ms`` (the server's ``pollIntervalMs`` is 1000; the bench polls faster to see the run's own time).

Every answer is checked (a task id; a completed task whose answer matches the synchronous one's). Reported: p50 and
p95 in ms per kind. For notes, never for assertions. Without a language model ``ask`` is fast, so the id's time is
close to the synchronous answer's; with ``--model-seconds`` the answer takes the model's seconds and the id does not.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench.mcp_endpoint import CORPUS, free_port, process, wait_up
from tests.support.modern_rpc import TASKS, modern_request

KINDS = ("ask (synchronous)", "ask as a Task: id", "ask as a Task: done")
QUESTION = {"question": "What do walruses eat?"}


def slow_model(stack: ExitStack, seconds: float) -> str:
    """An OpenAI-compatible chat model on 127.0.0.1 replying after ``seconds``: its base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", "0")))
            time.sleep(seconds)
            reply = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "On sea ice [1]."}}]}
            body = json.dumps({"id": "bench", "object": "chat.completion", **reply}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    stack.callback(server.shutdown)
    return f"http://127.0.0.1:{server.server_address[1]}/v1"


def start(stack: ExitStack, workdir: Path, model_seconds: float | None) -> tuple[str, str]:
    """``mcpbridge serve`` with the corpus indexed: (base URL, admin key)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPBRIDGE_")}
    env["MCPBRIDGE_LOG_LEVEL"] = "WARNING"
    if model_seconds is not None:
        env["MCPBRIDGE_LLM_PROVIDER"] = "openai"
        env["MCPBRIDGE_LLM_BASE_URL"] = slow_model(stack, model_seconds)
        env["MCPBRIDGE_LLM_API_KEY"] = "bench-key"
        env["MCPBRIDGE_LLM_MODEL"] = "bench"
        env["MCPBRIDGE_SSRF_ALLOWLIST"] = "127.0.0.1"
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
    stack.enter_context(process(args, env, workdir, "mcpbridge"))
    base = f"http://127.0.0.1:{port}"
    wait_up(port)
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30) as api:
        kb = api.post("/api/v1/knowledge-bases", json={"name": "Bench"}).json()
        for i, text in enumerate(CORPUS):
            api.post(f"/api/v1/knowledge-bases/{kb['id']}/documents", json={"title": f"Note {i}", "content": text})
        deadline = time.monotonic() + 60 + len(CORPUS)
        while time.monotonic() < deadline:
            page = api.get(f"/api/v1/knowledge-bases/{kb['id']}/documents?page_size=100").json()
            docs = page["items"] if "items" in page else page["documents"]
            if len(docs) == len(CORPUS) and all(d["parse_status"] == "completed" for d in docs):
                break
            time.sleep(0.2)
        else:
            raise RuntimeError("the corpus was not indexed in time")
    return base, key


def endpoint(base: str, key: str) -> dict[str, Any]:
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30) as api:
        created = api.post(
            "/api/v1/mcp-endpoints", json={"name": "bench", "rate_limit_per_minute": 6000, "tools": ["ask"]}
        )
        created.raise_for_status()
    made: dict[str, Any] = created.json()
    return made


def call(http: httpx.Client, made: dict[str, Any], method: str, params: dict[str, Any], tasks: bool) -> Any:
    body, headers = modern_request(method, params, made["token"], {"extensions": {TASKS: {}}} if tasks else None)
    if "taskId" in params:
        headers["mcp-name"] = params["taskId"]
    answered = http.post(made["url"], json=body, headers=headers)
    answered.raise_for_status()
    return answered.json()["result"]


def _answer(result: dict[str, Any]) -> str:
    return str(result["structuredContent"]["answer"])


def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    times: dict[str, list[float]] = {kind: [] for kind in KINDS}
    with ExitStack() as stack:
        base, key = start(stack, workdir, args.model_seconds)
        made = endpoint(base, key)
        params = {"name": "ask", "arguments": QUESTION}
        with httpx.Client(timeout=60) as http:
            expected = _answer(call(http, made, "tools/call", params, tasks=False))

            def synchronous() -> None:
                began = time.perf_counter()
                result = call(http, made, "tools/call", params, tasks=False)
                times[KINDS[0]].append(time.perf_counter() - began)
                if _answer(result) != expected:
                    raise SystemExit("the synchronous answer changed")

            def as_task() -> None:
                began = time.perf_counter()
                created = call(http, made, "tools/call", params, tasks=True)
                times[KINDS[1]].append(time.perf_counter() - began)
                if created.get("resultType") != "task":
                    raise SystemExit(f"no task: {created}")
                while True:
                    got = call(http, made, "tasks/get", {"taskId": created["taskId"]}, tasks=True)
                    if got["status"] != "working":
                        break
                    time.sleep(args.poll_ms / 1000)
                times[KINDS[2]].append(time.perf_counter() - began)
                if got["status"] != "completed" or _answer(got["result"]) != expected:
                    raise SystemExit(f"the task did not complete with the synchronous answer: {got}")

            kinds = [synchronous, as_task]
            for round_ in range(args.rounds):
                for run in kinds[round_ % 2 :] + kinds[: round_ % 2]:
                    for _ in range(args.requests):
                        run()
    report: dict[str, Any] = {
        "python": sys.version.split()[0],
        "rounds": args.rounds,
        "requests": args.requests,
        "model_seconds": args.model_seconds,
    }
    report["results"] = [
        {
            "kind": kind,
            "count": len(values),
            "p50_ms": statistics.median(values) * 1000,
            "p95_ms": sorted(values)[max(0, int(len(values) * 0.95) - 1)] * 1000,
        }
        for kind, values in times.items()
    ]
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=30, help="calls of each kind per round")
    parser.add_argument("--poll-ms", type=int, default=10, help="tasks/get interval while a task works")
    parser.add_argument("--model-seconds", type=float, default=None, help="a language model this slow (default none)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report = measure(args, Path(tmp))
    if args.json:
        print(json.dumps(report, indent=2))
        return
    model = "no language model" if args.model_seconds is None else f"a model replying in {args.model_seconds} s"
    print(f"{args.rounds} rounds x {args.requests} calls per kind, {model}, Python {report['python']}")
    print(f"{'kind':<22} {'count':>5} {'p50 ms':>8} {'p95 ms':>8}")
    for row in report["results"]:
        print(f"{row['kind']:<22} {row['count']:>5} {row['p50_ms']:>8.2f} {row['p95_ms']:>8.2f}")


if __name__ == "__main__":
    main()
