"""The time a rule set of 100 rules adds to an agent tool call, against the same call with no rule set, interleaved.

    python tests/bench/policy_rules.py [--rounds 10] [--calls 50] [--json]

One process: the embedded backend (SQLite) in a temporary directory, the REST app called in-process
(``fastapi.testclient``), an SDK MCP server on 127.0.0.1 whose ``echo`` tool answers at once. Each round makes
``--calls`` calls with no rule set stored, then ``--calls`` with 100 rules, or the reverse (alternating by round), so
drift on the machine affects both alike. The 100 rules all name the called tool and are all evaluated (none decides,
the default allows): 60 argument conditions (ranges, sets, RE2 patterns), 20 time windows, 10 caller conditions, 5
secret detectors on the arguments, 4 personal-data detectors and 1 redaction on the result. Reported: p50 and p95
of each, in ms, the p50 ratio (rules / none) and the added p50 in ms; and, apart, ``decide`` alone on the 100 rules
(µs per call). For notes, never for assertions.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fastapi.testclient import TestClient
from mcp import types
from mcp.server.lowlevel import Server
from tests.support.everything import handle_stateless, serve

from mcpbridge.bootstrap import Container
from mcpbridge.domain.items import Key
from mcpbridge.http.apps import create_combined_app
from mcpbridge.outbound.policy import EgressPolicy
from mcpbridge.rules.evaluate import CallFacts, decide
from mcpbridge.rules.model import parse_rule_set
from mcpbridge.settings import Settings


def hundred_rules() -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = []
    for n in range(60):
        test = [
            {"path": "$.text", "op": "matches", "value": f"^never-{n}-[0-9]+$"},
            {"path": "$.amount", "op": "between", "value": [n * 1000, n * 1000 + 10]},
            {"path": "$.text", "op": "in", "value": [f"no-{n}", f"none-{n}"]},
        ][n % 3]
        rules.append({"id": f"args-{n}", "outcome": "deny", "match": {"tools": ["ec*"], "arguments": [test]}})
    for n in range(20):
        window = {"days": ["sat"], "from": f"{n % 24:02d}:00", "to": f"{n % 24:02d}:30", "time_zone": "Asia/Tokyo"}
        rules.append({"id": f"time-{n}", "outcome": "deny", "match": {"tools": ["echo"], "time": window}})
    for n in range(10):
        rules.append({"id": f"caller-{n}", "outcome": "deny", "match": {"callers": {"users": [f"usr_nobody{n}"]}}})
    for n in range(5):
        kinds = [["aws_access_key"], ["private_key"], ["github_token"], ["slack_token"], ["jwt"]][n]
        rules.append({"id": f"secret-{n}", "outcome": "deny", "match": {"detected": {"kinds": kinds}}})
    for n, kind in enumerate(["email", "phone", "card_number", "iban"]):
        rules.append({"id": f"personal-{n}", "outcome": "deny", "match": {"detected": {"kinds": [kind]}}})
    rules.append({"id": "mask", "outcome": "redact", "redact": {"kinds": ["personal"], "in": "results"}})
    assert len(rules) == 100
    return rules


def echo_server() -> Any:
    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        schema = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
        return types.ListToolsResult(tools=[types.Tool(name="echo", description="Echo", input_schema=schema)])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        text = str((params.arguments or {}).get("text"))
        return types.CallToolResult(content=[types.TextContent(type="text", text=f"Echo: {text}")])

    server: Server[Any] = Server("bench", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await handle_stateless(server, scope, receive, send)

    return app


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    with serve(echo_server(), lifespan="off") as base:
        container = Container(Settings(data_dir=workdir / "data"), egress=EgressPolicy(["127.0.0.1"]))
        with TestClient(create_combined_app(container)) as client:
            client.headers["Authorization"] = f"Bearer {container.identity.initialize().api_key}"
            service = client.post("/api/v1/mcp-services", json={"name": "bench", "url": f"{base}/mcp"}).json()["id"]
            client.post(f"/api/v1/mcp-services/{service}/metadata/refresh").raise_for_status()
            ref = client.get(
                "/api/v1/agent/tools/describe", params={"service_id": service, "tool_name": "echo"}
            ).json()["tool_ref"]
            saved = client.put("/api/v1/policy-rules", json={"expected_version": 0, "rules": hundred_rules()})
            saved.raise_for_status()
            workspace = container.identity.installed_workspace_id()
            key = Key(f"WS#{workspace}", "RULESET")
            stored = container.store.get(key)
            assert stored is not None
            times: dict[str, list[float]] = {"none": [], "rules": []}

            def batch(mode: str) -> None:
                if mode == "none":
                    container.store.delete(key)
                else:
                    container.store.put(stored)
                for n in range(args.calls):
                    started = time.perf_counter()
                    answered = client.post(
                        "/api/v1/agent/tool-calls", json={"tool_ref": ref, "arguments": {"text": f"hi {n}"}}
                    )
                    elapsed = time.perf_counter() - started
                    body = answered.json()
                    assert answered.status_code == 200, answered.text
                    assert body["status"] == "completed", answered.text
                    assert (body["policy"] is None) == (mode == "none"), body["policy"]
                    times[mode].append(elapsed * 1000)

            batch("none")  # warm up both paths, not counted
            batch("rules")
            times = {"none": [], "rules": []}
            for round_number in range(args.rounds):
                order = ("none", "rules") if round_number % 2 == 0 else ("rules", "none")
                for mode in order:
                    batch(mode)
        container.close()
    rule_set = parse_rule_set({"rules": hundred_rules()}, 1)
    facts = CallFacts("ws", "svc", "bench", "echo", "usr_a", "admin", "key", None, {"text": "hello there"}, time.time())
    loops = 2000
    started = time.perf_counter()
    for _ in range(loops):
        decide(rule_set, facts, None)  # type: ignore[arg-type]  # no history rule among the 100
    decide_us = (time.perf_counter() - started) / loops * 1e6
    none_p50, rules_p50 = statistics.median(times["none"]), statistics.median(times["rules"])
    return {
        "calls_each": len(times["none"]),
        "none_p50_ms": round(none_p50, 2),
        "none_p95_ms": round(percentile(times["none"], 0.95), 2),
        "rules_p50_ms": round(rules_p50, 2),
        "rules_p95_ms": round(percentile(times["rules"], 0.95), 2),
        "p50_ratio": round(rules_p50 / none_p50, 3),
        "added_p50_ms": round(rules_p50 - none_p50, 2),
        "decide_100_rules_us": round(decide_us, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        report = measure(args, Path(workdir))
    if args.json:
        print(json.dumps(report))
        return
    for name, value in report.items():
        print(f"{name:>22}: {value}")


if __name__ == "__main__":
    main()
