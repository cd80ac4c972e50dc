"""How fast a gateway call that needs a person answers: the ``InputRequiredResult`` and the Task's id, against
``tools/list`` on the same endpoint, interleaved in one run.

    python tests/bench/gateway_pause.py [--rounds 4] [--requests 25]

``mcpbridge serve`` on a fresh data directory, npm ``@modelcontextprotocol/server-everything`` registered as a
service with ``echo`` requiring approval, an endpoint publishing it. Each round sends, in an order rotated by round,
``--requests`` sequential requests of each kind over one keep-alive HTTP connection (protocol 2026-07-28):

- ``tools/list`` (the baseline: the token check and the published tools' catalog read);
- ``tools/call`` of the published ``echo`` from a client declaring URL-mode elicitation: the call's record written,
  its workflow started, the ``InputRequiredResult`` with the sealed ``requestState`` answered;
- ``tools/call`` from a client declaring the Tasks extension: the ``CreateTaskResult`` (the Task's id);
- ``tasks/get`` of one such task.

Every answer is checked. Reported: p50/p95 in ms per kind and p50 as a ratio of ``tools/list``'s. The paused calls
stay paused (their workflows wait); serve is stopped at the end. For notes, never for assertions.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench.agent_calls import start_mcpbridge
from tests.support.everything import Everything
from tests.support.modern_rpc import TASKS, modern_request


class Endpoint:
    def __init__(self, http: httpx.Client, url: str, token: str) -> None:
        self._http, self._url, self._token = http, url, token

    def rpc(self, method: str, params: dict[str, Any], capabilities: dict[str, Any]) -> dict[str, Any]:
        body, headers = modern_request(method, params, self._token, capabilities)
        answer = self._http.post(self._url, json=body, headers=headers)
        message: dict[str, Any] = answer.json()
        if answer.status_code != 200 or "result" not in message:
            raise SystemExit(f"{method} failed: {answer.status_code} {answer.text[:300]}")
        result: dict[str, Any] = message["result"]
        return result


def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    with ExitStack() as stack:
        upstream = Everything("streamableHttp", workdir)
        upstream.start()
        stack.callback(upstream.kill)
        base, key, _, _, service_id = start_mcpbridge(stack, workdir / "hub", upstream.url)
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60) as api:
            api.put(f"/api/v1/mcp-services/{service_id}/tool-approvals/echo", json={"require_approval": True})
            created = api.post(
                "/api/v1/mcp-endpoints",
                json={
                    "name": "bench",
                    "services": [{"service_id": service_id, "tools": ["echo"]}],
                    "rate_limit_per_minute": 6000,
                },
            )
            created.raise_for_status()
        with httpx.Client(timeout=60) as http:
            endpoint = Endpoint(http, created.json()["url"], created.json()["token"])
            listed = endpoint.rpc("tools/list", {}, {})["tools"]
            echo = next(tool["name"] for tool in listed if tool["name"].startswith("mcp_everything_echo_"))
            elicits: dict[str, Any] = {"elicitation": {"form": {}, "url": {}}}
            tasks: dict[str, Any] = {"extensions": {TASKS: {}}}
            call = {"name": echo, "arguments": {"message": "bench"}}
            one_task = endpoint.rpc("tools/call", call, tasks)["taskId"]

            def tools_list() -> None:
                assert endpoint.rpc("tools/list", {}, {})["tools"]

            def input_required() -> None:
                assert endpoint.rpc("tools/call", call, elicits)["resultType"] == "input_required"

            def task_id() -> None:
                assert endpoint.rpc("tools/call", call, tasks)["resultType"] == "task"

            def task_get() -> None:
                assert endpoint.rpc("tasks/get", {"taskId": one_task}, tasks)["status"] == "input_required"

            kinds = {"tools/list": tools_list, "InputRequiredResult": input_required, "task id": task_id}
            kinds["tasks/get"] = task_get
            latencies: dict[str, list[float]] = {name: [] for name in kinds}
            for work in kinds.values():  # warm-up
                work()
            names = list(kinds)
            for round_ in range(args.rounds):
                shift = round_ % len(names)
                for name in names[shift:] + names[:shift]:
                    for _ in range(args.requests):
                        begun = time.perf_counter()
                        kinds[name]()
                        latencies[name].append(time.perf_counter() - begun)
    baseline = statistics.median(latencies["tools/list"])
    rows = {}
    for name, seen in latencies.items():
        ordered = sorted(seen)
        p50 = statistics.median(ordered)
        rows[name] = {
            "p50_ms": p50 * 1000,
            "p95_ms": ordered[max(0, int(len(ordered) * 0.95) - 1)] * 1000,
            "x_tools_list": p50 / baseline,
        }
    return {"python": sys.version.split()[0], "rounds": args.rounds, "requests": args.requests, "results": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--requests", type=int, default=25, help="sequential requests of each kind per round")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report = measure(args, Path(tmp))
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{args.rounds} rounds x {args.requests} requests per kind, Python {report['python']}")
    print(f"{'kind':>20} {'p50 ms':>8} {'p95 ms':>8} {'x tools/list':>12}")
    for name, row in report["results"].items():
        print(f"{name:>20} {row['p50_ms']:>8.2f} {row['p95_ms']:>8.2f} {row['x_tools_list']:>12.2f}")


if __name__ == "__main__":
    main()
