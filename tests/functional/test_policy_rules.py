"""The workspace's rules for tool calls, on both backends, through the agent API (REST) and through a published
endpoint (the gateway, with the MCP SDK client over real HTTP), against a real SDK MCP server on 127.0.0.1 that
records what it ran: allow, deny with a reason, ask routed to a group (N of M, the caller never counted),
redaction of results, guardrails, time windows, exact history counts, log-only mode; races; bad input."""

from __future__ import annotations

import asyncio
import copy
import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest
from fastapi.testclient import TestClient
from mcp import Client, types
from mcp.client.streamable_http import streamable_http_client
from mcp.server.lowlevel import Server
from starlette.types import Receive, Scope, Send

from mcpbridge.bootstrap import Container
from mcpbridge.domain.items import Key
from mcpbridge.http.apps import create_combined_app
from mcpbridge.outbound.policy import EgressPolicy
from tests.support.clock import FakeClock
from tests.support.containers import container_on
from tests.support.everything import handle_stateless, serve
from tests.support.live_server import live_server
from tests.support.local_calls import wait_for_call

SERVICES = "/api/v1/mcp-services"
CALLS = "/api/v1/agent/tool-calls"
APPROVALS = "/api/v1/agent/tool-approvals"
RULES = "/api/v1/policy-rules"
GROUPS = "/api/v1/groups"
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
FRIDAY_1030_PARIS = 1_800_005_400.0  # 2027-01-15 09:30 UTC
FRIDAY_2000_PARIS = 1_800_039_600.0  # 2027-01-15 19:00 UTC


def _schema(**fields: str) -> dict[str, Any]:
    return {"type": "object", "properties": {n: {"type": t} for n, t in fields.items()}, "required": list(fields)}


class Upstream:
    """``refund`` (amount, order), ``lookup`` (answers a customer's e-mail address), ``delete_order``, ``send``."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, dict[str, Any]]] = []
        self.lock = threading.Lock()
        tools = [
            types.Tool(name="refund", description="Refund", input_schema=_schema(amount="number", order="string")),
            types.Tool(name="lookup", description="Find a customer", input_schema=_schema(customer="string")),
            types.Tool(name="delete_order", description="Delete", input_schema=_schema(order="string")),
            types.Tool(name="send", description="Send a note", input_schema=_schema(text="string")),
        ]

        async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            return types.ListToolsResult(tools=copy.deepcopy(tools))

        async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            arguments = dict(params.arguments or {})
            with self.lock:
                self.ran.append((params.name, arguments))
            if params.name == "lookup":
                text = f"{arguments['customer']}: ana.lima@example.org, +33 6 12 34 56 78"
                return types.CallToolResult(
                    content=[types.TextContent(type="text", text=text)],
                    structured_content={"email": "ana.lima@example.org"},
                )
            return types.CallToolResult(content=[types.TextContent(type="text", text=f"{params.name} done")])

        self.server: Server[Any] = Server("shop", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool)
        self.url = ""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await handle_stateless(self.server, scope, receive, send)

    def count(self, tool: str) -> int:
        with self.lock:
            return sum(1 for name, _ in self.ran if name == tool)


class SetClock(FakeClock):
    def set(self, at: float) -> None:
        with self._lock:
            self._now = at


@dataclass
class World:
    container: Container
    client: TestClient
    clock: SetClock
    upstream: Upstream
    service_id: str
    keys: dict[str, str] = field(default_factory=dict)
    users: dict[str, str] = field(default_factory=dict)

    def as_(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[who]}"}

    def ref(self, tool: str) -> str:
        described = self.client.get(
            "/api/v1/agent/tools/describe", params={"service_id": self.service_id, "tool_name": tool}
        )
        assert described.status_code == 200, described.text
        return str(described.json()["tool_ref"])

    def call(self, who: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        answered = self.client.post(
            CALLS, json={"tool_ref": self.ref(tool), "arguments": arguments}, headers=self.as_(who)
        )
        assert answered.status_code == (202 if answered.json().get("status") == "awaiting_approval" else 200)
        body: dict[str, Any] = answered.json()
        return body

    def save_rules(self, body: dict[str, Any]) -> dict[str, Any]:
        current = self.client.get(RULES).json()["version"]
        saved = self.client.put(RULES, json={"expected_version": current, **body})
        assert saved.status_code == 200, saved.text
        result: dict[str, Any] = saved.json()
        return result

    def settled(self, call_id: str) -> dict[str, Any]:
        def final() -> dict[str, Any] | None:
            body: dict[str, Any] = self.client.get(f"{CALLS}/{call_id}").json()
            return body if body["status"] in ("completed", "failed", "rejected", "cancelled") else None

        return wait_for_call(call_id, final, what="a final status")


@pytest.fixture(params=["local", "aws"])
def world(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    clock = SetClock(FRIDAY_1030_PARIS)
    upstream = Upstream()
    with (
        serve(upstream, lifespan="off") as base,
        container_on(request.param, tmp_path, monkeypatch, clock=clock, egress=EgressPolicy(["127.0.0.1"])) as built,
        TestClient(create_combined_app(built), raise_server_exceptions=False) as client,
    ):
        client.headers["Authorization"] = f"Bearer {built.identity.initialize().api_key}"
        created = client.post(SERVICES, json={"name": "shop", "url": f"{base}/mcp"})
        assert created.status_code == 201, created.text
        service_id = created.json()["id"]
        assert client.post(f"{SERVICES}/{service_id}/metadata/refresh").status_code == 200
        found = World(built, client, clock, upstream, service_id)
        for name in ("alice", "bob", "carol", "dave", "erin", "hank"):
            user = client.post("/api/v1/users", json={"name": name})
            assert user.status_code == 201, user.text
            found.users[name] = user.json()["id"]
            key = client.post(
                f"/api/v1/users/{found.users[name]}/api-keys",
                json={"name": name, "role": "viewer", "capabilities": ["call_tools", "read"]},
            )
            assert key.status_code == 201, key.text
            found.keys[name] = key.json()["key"]
        yield found
        built.workflow.close()  # type: ignore[attr-defined]


def shop_rules(world: World, *, mode: str = "enforce") -> dict[str, Any]:
    finance = [world.users[n] for n in ("alice", "bob", "carol")]
    made = world.client.post(GROUPS, json={"name": "finance", "members": finance})
    assert made.status_code in (201, 409), made.text
    return {
        "mode": mode,
        "default": "allow",
        "rules": [
            {
                "id": "no-secrets",
                "outcome": "deny",
                "reason": "arguments may not carry credentials",
                "match": {"detected": {"kinds": ["secret"], "in": "arguments"}},
            },
            {
                "id": "working-hours",
                "outcome": "deny",
                "reason": "refunds are made in working hours only",
                "match": {
                    "tools": ["refund"],
                    "time": {
                        "days": ["mon", "tue", "wed", "thu", "fri"],
                        "from": "09:00",
                        "to": "18:00",
                        "time_zone": "Europe/Paris",
                        "when": "outside",
                    },
                },
            },
            {
                "id": "test-orders",
                "outcome": "deny",
                "reason": "test orders are refused",
                "match": {"arguments": [{"path": "$.order", "op": "matches", "value": "^TEST-[0-9]+$"}]},
            },
            {
                "id": "refunds-a-day",
                "outcome": "deny",
                "reason": "at most 3 refunds a day",
                "match": {"tools": ["refund"], "history": {"window_seconds": 86400, "per": "user", "max_count": 3}},
            },
            {
                "id": "big-refunds",
                "outcome": "ask",
                "match": {"tools": ["refund"], "arguments": [{"path": "$.amount", "op": "gt", "value": 500}]},
                "approvers": {"groups": ["finance"], "required": 2},
            },
            {
                "id": "viewers-delete-nothing",
                "outcome": "deny",
                "reason": "viewers may not delete",
                "match": {"tools": ["delete_*"], "callers": {"roles": ["viewer"]}},
            },
            {"id": "mask-personal", "outcome": "redact", "redact": {"kinds": ["personal"], "in": "results"}},
            {
                "id": "mask-addresses-in-notes",
                "outcome": "redact",
                "match": {"tools": ["send"]},
                "redact": {"kinds": ["email"], "in": "arguments"},
            },
        ],
    }


# ------------------------------------------------------------------------------------------ the table


@dataclass(frozen=True)
class Scenario:
    name: str
    caller: str
    tool: str
    arguments: dict[str, Any]
    status: str
    rule_id: str | None
    code: str | None = None
    reason: str | None = None
    at: float = FRIDAY_1030_PARIS
    ran: bool | None = None
    check: Callable[[dict[str, Any], World], None] | None = None
    gateway: bool = True
    """Also through the gateway (rows about who calls are for the agent API: a static endpoint token is no user)."""


def _masked(body: dict[str, Any], world: World) -> None:
    shown = json.dumps(body["result"])
    assert "ana.lima@example.org" not in shown, shown
    assert "+33 6 12" not in shown, shown
    assert "[redacted:email]" in shown, shown
    assert "[redacted:phone]" in shown, shown
    assert body["policy_result"]["redacted_by"] == ["mask-personal"]
    assert body["policy_result"]["detected"] == ["email", "phone"]


def _sent_masked(body: dict[str, Any], world: World) -> None:
    assert world.upstream.ran[-1] == ("send", {"text": "write to [redacted:email]"})
    assert body["policy"]["redacted_by"] == ["mask-addresses-in-notes"]
    assert body["policy"]["detected"] == ["email"]
    assert "bo@example.com" not in json.dumps(body)


def _unmasked(body: dict[str, Any]) -> None:
    assert "ana.lima@example.org" in json.dumps(body["result"])


SCENARIOS = [
    Scenario("refund of 400 allowed", "alice", "refund", {"amount": 400, "order": "A-1"}, "completed", None, ran=True),
    Scenario(
        "refund of 900 waits for two of three finance approvers",
        "alice",
        "refund",
        {"amount": 900, "order": "A-2"},
        "awaiting_approval",
        "big-refunds",
        ran=False,
        gateway=False,
    ),
    Scenario(
        "an argument holding an AWS key is denied",
        "erin",
        "send",
        {"text": f"use {AWS_KEY} to log in"},
        "failed",
        "no-secrets",
        code="denied_by_rule",
        reason="arguments may not carry credentials",
        ran=False,
    ),
    Scenario(
        "a test order is denied by an RE2 pattern",
        "erin",
        "delete_order",
        {"order": "TEST-42"},
        "failed",
        "test-orders",
        code="denied_by_rule",
        ran=False,
    ),
    Scenario(
        "a viewer deleting an order is denied by role",
        "erin",
        "delete_order",
        {"order": "B-7"},
        "failed",
        "viewers-delete-nothing",
        code="denied_by_rule",
        reason="viewers may not delete",
        ran=False,
        gateway=False,
    ),
    Scenario(
        "a result with an e-mail address is redacted",
        "erin",
        "lookup",
        {"customer": "Ana"},
        "completed",
        None,
        ran=True,
        check=_masked,
    ),
    Scenario("a plain note goes through", "erin", "send", {"text": "hello"}, "completed", None, ran=True),
    Scenario(
        "an e-mail address in a note is masked before it leaves",
        "erin",
        "send",
        {"text": "write to bo@example.com"},
        "completed",
        None,
        ran=True,
        check=_sent_masked,
    ),
    Scenario(
        "a refund outside working hours is denied",
        "erin",
        "refund",
        {"amount": 10, "order": "C-1"},
        "failed",
        "working-hours",
        code="denied_by_rule",
        reason="refunds are made in working hours only",
        at=FRIDAY_2000_PARIS,
        ran=False,
    ),
]


def _history_rows(world: World, call: Callable[[str, dict[str, Any]], dict[str, Any]], already: int = 0) -> None:
    """Scenarios 9-12: three refunds in a day pass (``already`` made by this caller today, the rest now), the fourth
    is denied and not counted; a day later one passes."""
    done = [call("refund", {"amount": 20, "order": f"H-{n}"}) for n in range(3 - already)]
    assert [d["status"] for d in done] == ["completed"] * (3 - already), done
    fourth = call("refund", {"amount": 20, "order": "H-3"})
    assert fourth["status"] == "failed", fourth
    assert fourth["error"]["code"] == "denied_by_rule", fourth
    assert fourth["policy"]["rule_id"] == "refunds-a-day"
    assert "at most 3 refunds a day" in fourth["error"]["message"]
    world.clock.set(FRIDAY_1030_PARIS + 86_400 * 3 + 60)  # Monday: a fresh window, in working hours
    again = call("refund", {"amount": 20, "order": "H-4"})
    assert again["status"] == "completed", again
    world.clock.set(FRIDAY_1030_PARIS)


def _expect(scenario: Scenario, body: dict[str, Any], before: int, world: World) -> None:
    assert body["status"] == scenario.status, (scenario.name, body)
    assert body["policy"]["rule_id"] == scenario.rule_id, (scenario.name, body["policy"])
    assert body["policy"]["rule_set_version"] >= 1
    assert body["policy"]["enforced"] is True
    if scenario.code:
        assert body["error"]["code"] == scenario.code, body
    if scenario.reason:
        assert body["error"]["message"] == scenario.reason, body
    ran = world.upstream.count(scenario.tool) > before
    assert ran is scenario.ran, (scenario.name, world.upstream.ran)
    if scenario.check:
        scenario.check(body, world)


def test_the_rules_decide_each_call_through_the_agent_api(world: World) -> None:
    rules = world.save_rules(shop_rules(world))
    assert rules["version"] == 1
    for scenario in SCENARIOS:
        world.clock.set(scenario.at)
        before = world.upstream.count(scenario.tool)
        body = world.call(scenario.caller, scenario.tool, scenario.arguments)
        _expect(scenario, body, before, world)
    world.clock.set(FRIDAY_1030_PARIS)
    _history_rows(world, lambda tool, args: world.call("hank", tool, args))
    # The audit trail names the rule and version of every decision.
    audit = world.client.get("/api/v1/calls", params={"limit": 100}).json()["items"]
    decided = {(e["policy"] or {}).get("rule_id") for e in audit}
    assert {"no-secrets", "working-hours", "test-orders", "refunds-a-day", "big-refunds"} <= decided
    assert all(e["policy"]["rule_set_version"] == 1 for e in audit)
    by_rule = world.client.get("/api/v1/calls", params={"rule_id": "refunds-a-day"}).json()["items"]
    assert len(by_rule) == 1
    assert by_rule[0]["outcome"] == "failed"
    assert AWS_KEY not in json.dumps(audit)


def test_two_of_three_finance_approvers_and_never_the_caller(world: World) -> None:
    world.save_rules(shop_rules(world))
    waiting = world.call("alice", "refund", {"amount": 900, "order": "A-9"})
    call_id = waiting["pending_id"]
    assert waiting["status"] == "awaiting_approval"
    assert waiting["approvers"] == sorted([world.users["bob"], world.users["carol"]])
    assert waiting["approvals_required"] == 2
    broker = world.container.tool_calls
    stored = broker.records.find(world.container.identity.installed_workspace_id() or "", call_id)
    assert broker.approvers_of(stored) == waiting["approvers"]
    own = world.client.post(f"{APPROVALS}/{call_id}", json={"decision": "approve"}, headers=world.as_("alice"))
    assert own.status_code == 403, own.text
    assert own.json()["code"] == "own_call", own.text
    outsider = world.client.post(f"{APPROVALS}/{call_id}", json={"decision": "approve"}, headers=world.as_("erin"))
    assert outsider.status_code == 403, outsider.text
    assert outsider.json()["code"] == "not_an_approver", outsider.text
    # The workspace admin (approve_calls) is not among the approvers the rule named either.
    admin = world.client.post(f"{APPROVALS}/{call_id}", json={"decision": "approve"})
    assert admin.status_code == 403, admin.text
    inbox = world.client.get("/api/v1/agent/pending", headers=world.as_("bob")).json()["items"]
    assert [c["pending_id"] for c in inbox] == [call_id]
    first = world.client.post(f"{APPROVALS}/{call_id}", json={"decision": "approve"}, headers=world.as_("bob"))
    assert first.status_code == 200, first.text
    assert first.json()["status"] == "awaiting_approval", first.text
    twice = world.client.post(f"{APPROVALS}/{call_id}", json={"decision": "approve"}, headers=world.as_("bob"))
    assert twice.status_code == 409, twice.text
    assert twice.json()["code"] == "already_approved", twice.text
    assert world.upstream.count("refund") == 0
    second = world.client.post(f"{APPROVALS}/{call_id}", json={"decision": "approve"}, headers=world.as_("carol"))
    assert second.status_code == 200, second.text
    done = world.settled(call_id)
    assert done["status"] == "completed"
    assert [a["by"] for a in done["approvals"]] == [world.users["bob"], world.users["carol"]]
    assert world.upstream.count("refund") == 1

    # One rejection ends a call, whoever approved before.
    other = world.call("dave", "refund", {"amount": 700, "order": "A-10"})["pending_id"]
    assert world.client.post(
        f"{APPROVALS}/{other}", json={"decision": "approve"}, headers=world.as_("alice")
    ).is_success
    no = world.client.post(
        f"{APPROVALS}/{other}", json={"decision": "reject", "reason": "not this one"}, headers=world.as_("carol")
    )
    assert no.status_code == 200, no.text
    assert no.json()["status"] == "rejected", no.text
    rejected = world.settled(other)
    assert [(a["by"], a["decision"]) for a in rejected["approvals"]] == [
        (world.users["alice"], "approve"),
        (world.users["carol"], "reject"),
    ]
    late = world.client.post(f"{APPROVALS}/{other}", json={"decision": "approve"}, headers=world.as_("bob"))
    assert late.status_code == 409, late.text
    assert world.upstream.count("refund") == 1


def test_approvers_approving_at_once_count_once_each(world: World) -> None:
    world.save_rules(shop_rules(world))
    call_id = world.call("erin", "refund", {"amount": 900, "order": "R-1"})["pending_id"]
    voters = ["alice", "bob", "bob", "carol", "alice"]
    barrier = threading.Barrier(len(voters))

    def vote(who: str) -> int:
        barrier.wait()
        answer = world.client.post(f"{APPROVALS}/{call_id}", json={"decision": "approve"}, headers=world.as_(who))
        return answer.status_code

    with ThreadPoolExecutor(len(voters)) as pool:
        codes = list(pool.map(vote, voters))
    done = world.settled(call_id)
    assert done["status"] == "completed"
    counted = [a["by"] for a in done["approvals"]]
    assert len(counted) == len(set(counted)) == 2, counted  # approved by the second distinct approver, once
    assert codes.count(200) == 2, codes
    assert all(code == 409 for code in codes if code != 200), codes
    assert world.upstream.count("refund") == 1


def test_a_per_user_count_is_exact_under_fifty_concurrent_calls(world: World) -> None:
    limit = 20
    world.save_rules(
        {
            "rules": [
                {
                    "id": "twenty-notes",
                    "outcome": "deny",
                    "reason": "20 notes a day",
                    "match": {"tools": ["send"], "history": {"window_seconds": 86400, "max_count": limit}},
                }
            ]
        }
    )
    ref = world.ref("send")
    barrier = threading.Barrier(50)

    def one(n: int) -> str:
        barrier.wait()
        answered = world.client.post(
            CALLS, json={"tool_ref": ref, "arguments": {"text": f"n{n}"}}, headers=world.as_("erin")
        )
        assert answered.status_code == 200, answered.text
        return str(answered.json()["status"])

    with ThreadPoolExecutor(50) as pool:
        statuses = list(pool.map(one, range(50)))
    assert statuses.count("completed") == limit, statuses
    assert statuses.count("failed") == 50 - limit
    assert world.upstream.count("send") == limit
    # Per user: another user has a count of their own.
    assert world.call("bob", "send", {"text": "mine"})["status"] == "completed"


def test_log_only_records_what_the_rules_would_do_and_changes_nothing(world: World) -> None:
    world.save_rules(shop_rules(world, mode="log_only"))
    denied = world.call("erin", "send", {"text": f"key {AWS_KEY}"})
    assert denied["status"] == "completed"
    assert denied["policy"] == {
        "rule_id": "no-secrets",
        "rule_set_version": 1,
        "outcome": "deny",
        "enforced": False,
        "redacted_by": [],
        "detected": ["aws_access_key"],
    }
    asked = world.call("alice", "refund", {"amount": 900, "order": "L-1"})
    assert asked["status"] == "completed"
    assert asked["policy"]["outcome"] == "ask"
    looked = world.call("erin", "lookup", {"customer": "Ana"})
    _unmasked(looked)
    assert looked["policy_result"]["redacted_by"] == ["mask-personal"]
    assert looked["policy_result"]["enforced"] is False
    assert world.upstream.count("send") == 1
    assert world.upstream.count("refund") == 1
    # Switching the mode keeps the rules and their version, and only then are they acted on.
    switched = world.client.put(f"{RULES}/mode", json={"mode": "enforce"})
    assert switched.status_code == 200, switched.text
    assert switched.json()["version"] == 1, switched.text
    again = world.call("erin", "send", {"text": f"key {AWS_KEY}"})
    assert again["status"] == "failed"
    assert again["policy"]["enforced"] is True
    assert world.upstream.count("send") == 1


# ------------------------------------------------------------------------------------------ the gateway


def _gateway_call(base: str, endpoint: dict[str, Any], tool: str, arguments: dict[str, Any]) -> Any:
    async def work() -> Any:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {endpoint['token']}"}, timeout=30)
        url = f"{base}/mcp/{endpoint['id']}"
        async with http, Client(streamable_http_client(url, http_client=http), mode="legacy") as mcp:
            (named,) = [t.name for t in (await mcp.list_tools()).tools if t.name.startswith(f"mcp_shop_{tool}_")]
            return await mcp.call_tool(named, arguments)

    return asyncio.run(work())


def test_the_rules_decide_each_call_through_the_gateway(world: World) -> None:
    rules = shop_rules(world)
    world.save_rules(rules)
    created = world.client.post(
        "/api/v1/mcp-endpoints", json={"name": "shop", "services": [{"service_id": world.service_id, "tools": ["*"]}]}
    )
    assert created.status_code == 201, created.text
    endpoint = created.json()
    # A rule on the endpoint as the caller: its clients may not delete.
    rules["rules"].insert(
        5,  # after the rules on every caller, before the one on viewers
        {
            "id": "endpoint-no-delete",
            "outcome": "deny",
            "reason": "not through this endpoint",
            "match": {"tools": ["delete_*"], "callers": {"endpoints": [endpoint["id"]]}},
        },
    )
    world.save_rules(rules)
    records = world.container.tool_call_records
    with live_server(create_combined_app(world.container)) as base:
        for scenario in [s for s in SCENARIOS if s.gateway]:
            world.clock.set(scenario.at)
            before = world.upstream.count(scenario.tool)
            result = _gateway_call(base, endpoint, scenario.tool, scenario.arguments)
            data = result.structured_content or {}
            if scenario.status == "completed":
                assert result.is_error is False, (scenario.name, result)
                calls = list(records.every_call(world.container.identity.installed_workspace_id() or ""))
                latest = max(calls, key=lambda c: c.id)  # ids sort by real time; created_at follows the test clock
                body = {"status": latest.status, "policy": latest.item["policy"], "result": latest.result}
                body["policy_result"] = latest.item.get("policy_result")
            else:
                assert result.is_error is True, (scenario.name, result)
                body = world.client.get(f"{CALLS}/{data['call_id']}").json()
            _expect(scenario, body, before, world)
            if scenario.check is _masked:
                shown = json.dumps(result.model_dump(mode="json"))
                assert "ana.lima@example.org" not in shown
                assert "[redacted:email]" in shown
        world.clock.set(FRIDAY_1030_PARIS)
        refused = _gateway_call(base, endpoint, "delete_order", {"order": "Z-1"})
        assert refused.is_error
        assert refused.structured_content["code"] == "denied_by_rule"
        assert "not through this endpoint" in refused.structured_content["reason"]
        waiting = _gateway_call(base, endpoint, "refund", {"amount": 900, "order": "G-1"})
        assert waiting.structured_content["status"] == "awaiting_approval"
        _history_rows(
            world,
            lambda tool, args: _gateway_body(world, _gateway_call(base, endpoint, tool, args)),
            already=2,  # the refunds of 400 and 900 above, by the same caller (the endpoint)
        )


def _gateway_body(world: World, result: Any) -> dict[str, Any]:
    data = result.structured_content or {}
    if "call_id" in data:
        body: dict[str, Any] = world.client.get(f"{CALLS}/{data['call_id']}").json()
        return body
    calls = world.container.tool_call_records.every_call(world.container.identity.installed_workspace_id() or "")
    latest = max(calls, key=lambda c: c.id)  # ids sort by real time; created_at follows the test clock
    return {"status": latest.status, "policy": latest.item["policy"], "error": latest.error}


# ------------------------------------------------------------------------------------------ bad input


def _stored(world: World) -> list[Any]:
    workspace = world.container.identity.installed_workspace_id()
    rows = [world.container.store.get(Key(f"WS#{workspace}", "RULESET"))]
    rows += [world.container.store.get(Key(f"WS#{workspace}", "GROUP#finance"))]
    return rows


@pytest.mark.parametrize(
    ("change", "field_name"),
    [
        (lambda r: r["rules"][0].update(outcome="maybe"), "rules[0].outcome"),
        (lambda r: r["rules"][4]["match"]["arguments"][0].update(op="bigger"), "rules[4].match.arguments[0].op"),
        (lambda r: r["rules"][4]["match"]["arguments"][0].update(path="amount"), "rules[4].match.arguments[0].path"),
        (lambda r: r["rules"][2]["match"]["arguments"][0].update(value="(?=x)"), "rules[2].match.arguments[0].value"),
        (lambda r: r["rules"][1]["match"]["time"].update(time_zone="Mars/Base"), "rules[1].match.time.time_zone"),
        (lambda r: r["rules"][1]["match"]["time"].update(days=["fri", "funday"]), "rules[1].match.time.days"),
        (lambda r: r["rules"][4]["approvers"].update(required=0), "rules[4].approvers.required"),
        (lambda r: r["rules"][4]["approvers"].update(groups=["nobody"]), "rules[4]"),
        (lambda r: r["rules"][0]["match"]["detected"].update(kinds=["passwords"]), "rules[0].match.detected.kinds"),
        (lambda r: r["rules"][3]["match"]["history"].pop("max_count"), "rules[3].match.history"),
        (lambda r: r["rules"].append(dict(r["rules"][0])), "rules[8].id"),
        (lambda r: r["rules"][0].update(colour="red"), "rules[0].colour"),
    ],
)
def test_a_wrong_rule_is_refused_by_name_and_nothing_changes(
    world: World, change: Callable[[dict[str, Any]], None], field_name: str
) -> None:
    good = shop_rules(world)
    world.save_rules(good)
    before = _stored(world)
    bad = copy.deepcopy(good)
    change(bad)
    refused = world.client.put(RULES, json={"expected_version": 1, **bad})
    assert refused.status_code == 400, refused.text
    assert refused.json()["code"] == "invalid_rule", refused.text
    assert refused.json()["details"]["field"] == field_name, refused.text
    assert field_name.split(".")[-1].split("[")[0] in refused.json()["detail"], refused.text
    assert _stored(world) == before


def test_bad_group_and_version_requests_are_refused_and_nothing_changes(world: World) -> None:
    world.save_rules(shop_rules(world))
    before = _stored(world)
    stale = world.client.put(RULES, json={"expected_version": 0, "rules": []})
    assert stale.status_code == 409, stale.text
    assert stale.json()["code"] == "version_conflict", stale.text
    unknown = world.client.put(f"{GROUPS}/finance", json={"members": ["usr_nobody"]})
    assert unknown.status_code == 400, unknown.text
    assert unknown.json()["code"] == "unknown_member", unknown.text
    named = world.client.post(GROUPS, json={"name": "Finance Team", "members": []})
    assert named.status_code == 400, named.text
    assert named.json()["code"] == "invalid_group", named.text
    again = world.client.post(GROUPS, json={"name": "finance", "members": []})
    assert again.status_code == 409, again.text
    assert again.json()["code"] == "group_exists", again.text
    in_use = world.client.delete(f"{GROUPS}/finance")
    assert in_use.status_code == 409, in_use.text
    assert in_use.json()["code"] == "group_in_use", in_use.text
    viewer = world.client.put(RULES, json={"expected_version": 1, "rules": []}, headers=world.as_("erin"))
    assert viewer.status_code == 403, viewer.text
    mode = world.client.put(f"{RULES}/mode", json={"mode": "sometimes"})
    assert mode.status_code in (400, 422), mode.text
    assert _stored(world) == before
    assert world.client.get(f"{RULES}/versions/1").json()["rules"] == shop_rules(world)["rules"]
    assert world.client.get(f"{RULES}/versions/2").status_code == 404


def test_a_total_per_workspace_counts_every_caller_and_not_what_it_refused(world: World) -> None:
    world.save_rules(
        {
            "rules": [
                {
                    "id": "refunds-budget",
                    "outcome": "deny",
                    "reason": "the day's refund budget is spent",
                    "match": {
                        "tools": ["refund"],
                        "history": {
                            "window_seconds": 86400,
                            "per": "workspace",
                            "total_of": "$.amount",
                            "max_total": 1000,
                        },
                    },
                }
            ]
        }
    )
    assert world.call("alice", "refund", {"amount": 400, "order": "T-1"})["status"] == "completed"
    assert world.call("bob", "refund", {"amount": 500.5, "order": "T-2"})["status"] == "completed"
    over = world.call("carol", "refund", {"amount": 200, "order": "T-3"})
    assert over["status"] == "failed"
    assert over["error"]["message"] == "the day's refund budget is spent"
    assert world.call("carol", "refund", {"amount": 99.5, "order": "T-4"})["status"] == "completed"  # 1000 exactly
    assert world.call("dave", "refund", {"amount": 1, "order": "T-5"})["status"] == "failed"
    assert world.upstream.count("refund") == 3


def test_a_routed_call_runs_with_its_own_arguments(world: World) -> None:
    world.save_rules(shop_rules(world))
    call_id = world.call("erin", "refund", {"amount": 900, "order": "M-1"})["pending_id"]
    changed = world.client.post(
        f"{APPROVALS}/{call_id}",
        json={"decision": "approve", "modified_args": {"amount": 9000, "order": "M-1"}},
        headers=world.as_("bob"),
    )
    assert changed.status_code == 400, changed.text
    assert changed.json()["code"] == "invalid_modified_args"
    after = world.client.get(f"{CALLS}/{call_id}").json()
    assert after["approvals"] == []
    assert after["arguments"] == {"amount": 900, "order": "M-1"}
    assert after["status"] == "awaiting_approval"


def test_a_routed_call_expires_as_any_approval_does(world: World) -> None:
    world.save_rules(shop_rules(world))
    agent = world.client.post("/api/v1/agents", json={"name": "quick", "approval_timeout_seconds": 30}).json()
    paused = world.client.post(
        CALLS,
        json={"tool_ref": world.ref("refund"), "arguments": {"amount": 800, "order": "E-1"}, "agent_id": agent["id"]},
        headers=world.as_("erin"),
    )
    assert paused.status_code == 202, paused.text
    call_id = paused.json()["pending_id"]
    one = world.client.post(f"{APPROVALS}/{call_id}", json={"decision": "approve"}, headers=world.as_("alice"))
    assert one.status_code == 200, one.text
    world.clock.set(FRIDAY_1030_PARIS + 31)
    done = world.settled(call_id)
    assert done["status"] == "rejected"
    assert done["error"]["message"] == "approval timeout"
    assert [a["by"] for a in done["approvals"]] == [world.users["alice"]]
    late = world.client.post(f"{APPROVALS}/{call_id}", json={"decision": "approve"}, headers=world.as_("bob"))
    assert late.status_code == 409, late.text
    assert world.upstream.count("refund") == 0


def test_a_result_holding_personal_data_is_withheld_by_a_deny_rule_on_results(world: World) -> None:
    world.save_rules(
        {
            "rules": [
                {
                    "id": "no-addresses-back",
                    "outcome": "deny",
                    "reason": "the answer held personal data and was withheld",
                    "match": {"tools": ["lookup"], "detected": {"kinds": ["email"], "in": "results"}},
                }
            ]
        }
    )
    body = world.call("erin", "lookup", {"customer": "Ana"})
    assert world.upstream.count("lookup") == 1  # it ran: what came back is what the rule judged
    assert body["result"]["isError"] is True
    assert "withheld" in json.dumps(body["result"])
    assert body["policy_result"]["denied_by"] == "no-addresses-back"
    assert body["policy_result"]["detected"] == ["email"]
    stored = world.client.get(f"{CALLS}/{body['pending_id']}").text
    assert "ana.lima@example.org" not in stored
    assert "ana.lima@example.org" not in json.dumps(world.client.get("/api/v1/calls").json())
