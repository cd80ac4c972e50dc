"""Agent tool calls over REST (``/api/v1/agent/tool-calls``, ``/pending``, ``/tool-approvals/{id}``) with the
in-process workflow, on both backends, against a real SDK MCP server on 127.0.0.1 that records what it ran."""

from __future__ import annotations

import base64
import copy
import json
import logging
import sqlite3
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mcp import types
from mcp.server.lowlevel import Server
from starlette.types import Receive, Scope, Send

from mcpbridge.adapters.local.sqlite import SqliteStore
from mcpbridge.agent import audit
from mcpbridge.agent.arguments import MAX_ARGUMENT_BYTES
from mcpbridge.agent.calls import call_key
from mcpbridge.bootstrap import Container
from mcpbridge.domain import credentials
from mcpbridge.domain.identity import Scope as KeyScope
from mcpbridge.errors import Conflict
from mcpbridge.identity.accounts import _api_key_item, _workspace_item
from mcpbridge.outbound.policy import EgressPolicy
from tests.support.admin_api import admin_client
from tests.support.clock import FakeClock
from tests.support.containers import container_on
from tests.support.everything import handle_stateless, serve
from tests.support.local_calls import wait_for_call, wait_idle

SERVICES = "/api/v1/mcp-services"
CALLS = "/api/v1/agent/tool-calls"
APPROVALS = "/api/v1/agent/tool-approvals"
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64).decode()


def schema(**fields: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: {"type": kind} for name, kind in fields.items()},
        "required": list(fields),
        "additionalProperties": False,
    }


class Upstream:
    """Tools ``echo`` (text + structured), ``delete_page`` (records what it deleted) and ``snapshot`` (an image)."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, dict[str, Any]]] = []
        self.tools = [
            types.Tool(name="echo", description="Echo text", input_schema=schema(text="string")),
            types.Tool(name="delete_page", description="Delete a page", input_schema=schema(id="integer")),
            types.Tool(name="snapshot", description="A picture", input_schema=schema()),
        ]

        async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
            return types.ListToolsResult(tools=copy.deepcopy(self.tools))

        async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            arguments = dict(params.arguments or {})
            self.ran.append((params.name, arguments))
            if params.name == "echo":
                return types.CallToolResult(
                    content=[types.TextContent(type="text", text=f"Echo: {arguments['text']}")],
                    structured_content={"echoed": arguments["text"]},
                )
            if params.name == "snapshot":
                return types.CallToolResult(content=[types.ImageContent(type="image", data=PNG, mime_type="image/png")])
            return types.CallToolResult(content=[types.TextContent(type="text", text=f"deleted {arguments['id']}")])

        self.server: Server[Any] = Server("pages", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await handle_stateless(self.server, scope, receive, send)


@pytest.fixture(params=["local", "aws"])
def container(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Container]:
    with container_on(
        request.param, tmp_path, monkeypatch, clock=FakeClock(), egress=EgressPolicy(["127.0.0.1"])
    ) as built:
        yield built
        built.workflow.close()  # type: ignore[attr-defined]


@pytest.fixture
def client(container: Container) -> Iterator[TestClient]:
    with admin_client(container) as test_client:
        yield test_client


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    app = Upstream()
    with serve(app, lifespan="off") as base:
        app.url = f"{base}/mcp"  # type: ignore[attr-defined]
        yield app


@pytest.fixture
def service_id(client: TestClient, upstream: Upstream) -> str:
    created = client.post(SERVICES, json={"name": "pages", "url": upstream.url})  # type: ignore[attr-defined]
    assert created.status_code == 201, created.text
    service = str(created.json()["id"])
    assert client.post(f"{SERVICES}/{service}/metadata/refresh").status_code == 200
    return service


def tool_ref(client: TestClient, service_id: str, tool: str) -> str:
    described = client.get("/api/v1/agent/tools/describe", params={"service_id": service_id, "tool_name": tool})
    assert described.status_code == 200, described.text
    return str(described.json()["tool_ref"])


def require_approval(client: TestClient, service_id: str, tool: str, **policy: bool) -> None:
    body = {"require_approval": True, **policy}
    assert client.put(f"{SERVICES}/{service_id}/tool-approvals/{tool}", json=body).status_code == 200


def _seconds(rfc3339: str) -> float:
    return datetime.strptime(rfc3339, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def settled(client: TestClient, call_id: str) -> dict[str, Any]:
    """The call once it has reached a final status (the workflow runs it in a thread: waited for while it works)."""

    def final() -> dict[str, Any] | None:
        body: dict[str, Any] = client.get(f"{CALLS}/{call_id}").json()
        return body if body["status"] in ("completed", "failed", "rejected", "cancelled", "uncertain") else None

    return wait_for_call(call_id, final, what="a final status")


def parked(container: Container, workspace_id: str, call_id: str) -> dict[str, Any] | None:
    stored = container.store.get(call_key(workspace_id, call_id))
    assert stored is not None
    return stored if "sealed_task_token" in stored else None


def problem(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["code"] == code, response.text


def second_user_key(container: Container, client: TestClient) -> str:
    """An admin key of another user of the same workspace, an agent's but not an approver's (no approve_calls)."""
    workspace_id = container.identity.installed_workspace_id()
    assert workspace_id is not None
    issued = credentials.issue(credentials.API_KEY_PREFIX)
    scope = KeyScope(capabilities=frozenset({"call_tools", "read"}))
    container.store.put(
        _api_key_item(workspace_id, "key_bob", "usr_bob", "bob", "admin", scope, issued, "2027-01-01T00:00:00Z")
    )
    return issued.plaintext


# ---------------------------------------------------------------------------------------------- at once


def test_a_call_without_pause_runs_at_once(client: TestClient, service_id: str, upstream: Upstream) -> None:
    ref = tool_ref(client, service_id, "echo")
    answered = client.post(CALLS, json={"tool_ref": ref, "arguments": {"text": "hi"}})
    assert answered.status_code == 200, answered.text
    body = answered.json()
    assert body["status"] == "completed"
    assert body["kind"] is None
    assert body["result"]["structuredContent"] == {"echoed": "hi"}
    assert body["result"]["isError"] is False
    texts = [block.get("text", "") for block in body["result"]["content"]]
    assert "untrusted" in texts[0]
    assert "Echo: hi" in texts
    assert upstream.ran == [("echo", {"text": "hi"})]
    assert client.get(f"{CALLS}/{body['pending_id']}").json()["status"] == "completed"


def test_an_idempotency_key_returns_the_first_call_and_never_runs_the_tool_twice(
    client: TestClient, service_id: str, upstream: Upstream
) -> None:
    ref = tool_ref(client, service_id, "echo")
    once = {"Idempotency-Key": "order-42"}
    first = client.post(CALLS, json={"tool_ref": ref, "arguments": {"text": "pay"}}, headers=once)
    assert first.status_code == 200, first.text
    again = client.post(CALLS, json={"tool_ref": ref, "arguments": {"text": "pay"}}, headers=once)
    assert again.status_code == 200, again.text
    assert again.json()["pending_id"] == first.json()["pending_id"]
    assert again.json()["result"] == first.json()["result"]
    other = client.post(CALLS, json={"tool_ref": ref, "arguments": {"text": "pay twice"}}, headers=once)
    assert other.status_code == 409, other.text
    assert other.json()["code"] == "idempotency_key_reused"
    assert upstream.ran == [("echo", {"text": "pay"})], "the tool ran once"
    fresh = client.post(CALLS, json={"tool_ref": ref, "arguments": {"text": "pay"}}, headers={"Idempotency-Key": "b"})
    assert fresh.json()["pending_id"] != first.json()["pending_id"]
    assert upstream.ran == [("echo", {"text": "pay"})] * 2
    blank = client.post(CALLS, json={"tool_ref": ref, "arguments": {"text": "x"}}, headers={"Idempotency-Key": " "})
    assert blank.status_code == 400, blank.text
    assert upstream.ran == [("echo", {"text": "pay"})] * 2


def test_the_audit_trail_finds_each_call_with_a_digest_of_its_arguments(
    client: TestClient, service_id: str, upstream: Upstream
) -> None:
    ref = tool_ref(client, service_id, "echo")
    made = [client.post(CALLS, json={"tool_ref": ref, "arguments": {"text": f"secret-{n}"}}).json() for n in range(3)]
    listed = client.get("/api/v1/calls", params={"service_id": service_id, "tool": "echo", "limit": 2})
    assert listed.status_code == 200, listed.text
    first = listed.json()
    assert [e["call_id"] for e in first["items"]] == [made[2]["pending_id"], made[1]["pending_id"]], "newest first"
    rest = client.get(
        "/api/v1/calls", params={"service_id": service_id, "tool": "echo", "limit": 2, "cursor": first["next_cursor"]}
    ).json()
    assert [e["call_id"] for e in rest["items"]] == [made[0]["pending_id"]]
    assert rest["next_cursor"] is None
    entry = rest["items"][0]
    assert entry["outcome"] == "completed"
    assert entry["arguments_digest"].startswith("sha256:")
    assert entry["agent_id"] is None
    assert entry["endpoint_id"] is None
    assert entry["duration_ms"] is not None
    assert "secret-" not in listed.text + json.dumps(rest), "never the values"
    assert client.get("/api/v1/calls", params={"outcome": "rejected", "service_id": service_id}).json()["items"] == []
    assert client.get("/api/v1/calls", params={"tool": "nope"}).json()["items"] == []
    # Records are kept for the retention setting (TTL on DynamoDB), and the audit trail with them.
    container = client.app.state.container  # type: ignore[attr-defined]
    container.clock.advance(container.settings.call_retention_days * 86_400 + 1)
    gone = client.get("/api/v1/calls", params={"service_id": service_id})
    assert gone.json()["items"] == []
    bad = client.get("/api/v1/calls", params={"since": "yesterday"})
    assert bad.status_code == 400, bad.text
    assert bad.json()["code"] == "invalid_time_range"


def test_the_audit_trail_reads_a_bounded_number_of_records_per_page_and_misses_none(
    client: TestClient, service_id: str, upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a read budget of 3 records a page, a filter that keeps every other call walks the history in short
    pages: each kept call appears once, newest first, and the last page says there is nothing after it."""
    monkeypatch.setattr(audit, "SCAN_BUDGET", 3)
    ref = tool_ref(client, service_id, "echo")
    made = []
    for n in range(7):
        body = client.post(CALLS, json={"tool_ref": ref, "arguments": {"text": f"t{n}"}}).json()
        made.append(body["pending_id"])
        if n % 2:  # every other call is followed by one of another tool, which the filter leaves out
            client.post(CALLS, json={"tool_ref": tool_ref(client, service_id, "snapshot"), "arguments": {}})
    seen: list[str] = []
    pages = 0
    cursor: str | None = None
    cursors: list[str] = []
    while True:
        params = {"tool": "echo", "limit": 2} | ({"cursor": cursor} if cursor else {})
        page = client.get("/api/v1/calls", params=params)
        assert page.status_code == 200, page.text
        assert len(page.json()["items"]) <= 2
        seen += [e["call_id"] for e in page.json()["items"]]
        pages += 1
        cursor = page.json()["next_cursor"]
        if cursor is None:
            break
        cursors.append(cursor)
        assert pages < 20, "the listing ends"
    assert seen == made[::-1], "every echo call once, newest first"
    assert pages >= 4
    other_listing = client.get("/api/v1/calls", params={"tool": "snapshot", "cursor": cursors[0]})
    assert other_listing.status_code == 400, other_listing.text
    assert other_listing.json()["code"] == "invalid_cursor"


def test_a_call_runs_at_once_while_another_process_holds_the_store(
    client: TestClient, container: Container, service_id: str, upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The call's record is written on the event loop only when it need not wait; otherwise in a worker thread,
    which waits for the other writer: the call runs all the same, recorded once."""
    if container.settings.backend != "local":
        pytest.skip("SQLite's write lock")
    ref = tool_ref(client, service_id, "echo")
    writers: list[str] = []  # the thread that wrote each new call's record
    put = SqliteStore.put

    def spied(store: SqliteStore, item: dict[str, Any], **kwargs: Any) -> None:
        if str(item.get("sk", "")).startswith("CALL#"):
            writers.append(threading.current_thread().name)
        put(store, item, **kwargs)

    monkeypatch.setattr(SqliteStore, "put", spied)
    answered = client.post(CALLS, json={"tool_ref": ref, "arguments": {"text": "free"}})
    assert answered.json()["status"] == "completed", answered.text
    assert writers == [writers[0]]
    assert not writers[0].startswith("AnyIO worker"), "no one else was writing: recorded on the event loop"

    calls = "SELECT count(*) FROM items WHERE sk LIKE 'CALL#%'"
    blocker = sqlite3.connect(container.settings.sqlite_path, isolation_level=None, check_same_thread=False)
    try:
        before = blocker.execute(calls).fetchone()[0]
        blocker.execute("BEGIN IMMEDIATE")
        threading.Timer(0.3, blocker.execute, ["COMMIT"]).start()
        answered = client.post(CALLS, json={"tool_ref": ref, "arguments": {"text": "held"}})
        assert answered.status_code == 200, answered.text
        assert answered.json()["status"] == "completed"
        assert blocker.execute(calls).fetchone()[0] == before + 1
    finally:
        blocker.close()
    assert len(writers) == 3, writers
    assert writers[2].startswith("AnyIO worker"), writers  # [1] refused at once on the loop, [2] in a worker
    assert upstream.ran == [("echo", {"text": "free"}), ("echo", {"text": "held"})]


def test_a_call_is_answered_only_once_its_record_is_on_disk(
    client: TestClient, container: Container, service_id: str, upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The running call's record is synced while the tool runs upstream: asked for before the tool runs, waited for
    before the answer; its outcome is synced right behind the answer."""
    if container.settings.backend != "local":
        pytest.skip("every acknowledged DynamoDB write is durable already")
    ref = tool_ref(client, service_id, "echo")
    events: list[tuple[str, int]] = []  # what happened, and how many times the tool had run by then
    waits: list[Any] = []
    sync_soon = SqliteStore.sync_soon

    def spied(store: SqliteStore, **kwargs: Any) -> Any:
        wait = sync_soon(store, **kwargs)
        events.append(("asked", len(upstream.ran)))

        def waited() -> None:
            wait()
            events.append(("synced", len(upstream.ran)))

        waits.append(waited)
        return waited

    monkeypatch.setattr(SqliteStore, "sync_soon", spied)
    answered = client.post(CALLS, json={"tool_ref": ref, "arguments": {"text": "kept"}})
    assert answered.json()["status"] == "completed", answered.text
    assert events == [("asked", 0), ("synced", 1), ("asked", 1)], events
    waits[1]()  # the outcome's sync, asked for behind the answer, ends
    assert events[-1] == ("synced", 1)


def test_arguments_are_checked_against_the_schema(client: TestClient, service_id: str, upstream: Upstream) -> None:
    ref = tool_ref(client, service_id, "delete_page")
    for arguments in ({"id": "seven"}, {}, {"id": 7, "extra": True}):
        problem(client.post(CALLS, json={"tool_ref": ref, "arguments": arguments}), 400, "invalid_arguments")
    # Every problem at once, each naming its field, never the value sent.
    several = client.post(CALLS, json={"tool_ref": ref, "arguments": {"Id": "sk_not_for_logs", "token": 1}})
    problem(several, 400, "invalid_arguments")
    listed = [(e["path"], e["rule"], e["problem"]) for e in several.json()["details"]["errors"]]
    assert listed == [
        ("id", "required", "required"),
        ("(root)", "additionalProperties", "unknown properties 'Id', 'token' (not in the schema)"),
    ]
    assert "id: required; (root): unknown properties 'Id', 'token'" in several.json()["detail"]
    assert "sk_not_for_logs" not in several.text
    wrong_type = client.post(CALLS, json={"tool_ref": ref, "arguments": {"id": "seven"}}).json()
    assert wrong_type["details"]["errors"] == [{"path": "id", "rule": "type", "problem": "must be of type integer"}]
    problem(client.post(CALLS, json={"tool_ref": "mcpt_" + "0" * 64, "arguments": {}}), 404, "tool_ref_unknown")
    problem(client.post(CALLS, json={"tool_ref": ref, "arguments": "[]"}), 422, "validation_failed")
    assert upstream.ran == []
    assert client.get("/api/v1/agent/pending").json()["items"] == []


def test_images_reach_the_agent_but_are_redacted_in_what_is_stored(
    client: TestClient, container: Container, service_id: str, upstream: Upstream
) -> None:
    answered = client.post(CALLS, json={"tool_ref": tool_ref(client, service_id, "snapshot"), "arguments": {}})
    assert answered.status_code == 200, answered.text
    # The agent gets the image (a png within the limits); what is stored, and read back later, has it redacted.
    images = [block for block in answered.json()["result"]["content"] if block.get("type") == "image"]
    assert [image["data"] for image in images] == [PNG]
    assert PNG not in client.get(f"{CALLS}/{answered.json()['pending_id']}").text
    workspace_id = container.identity.installed_workspace_id()
    assert workspace_id is not None
    stored = container.store.get(call_key(workspace_id, answered.json()["pending_id"]))
    assert stored is not None
    assert PNG not in json.dumps(stored)
    assert "redacted" in json.dumps(stored["result"])


# ---------------------------------------------------------------------------------------------- approvals


def test_approval_with_modified_arguments(
    client: TestClient, container: Container, service_id: str, upstream: Upstream
) -> None:
    require_approval(client, service_id, "delete_page")
    ref = tool_ref(client, service_id, "delete_page")
    paused = client.post(CALLS, json={"tool_ref": ref, "arguments": {"id": 1}, "session_id": "s1"})
    assert paused.status_code == 202, paused.text
    pending = paused.json()
    assert (pending["status"], pending["kind"]) == ("awaiting_approval", "approval")
    assert pending["arguments"] == {"id": 1}
    listed = client.get("/api/v1/agent/pending").json()["items"]
    assert [p["pending_id"] for p in listed] == [pending["pending_id"]]
    assert upstream.ran == []

    call_id = pending["pending_id"]
    problem(
        client.post(f"{APPROVALS}/{call_id}", json={"decision": "approve", "modified_args": None}),
        400,
        "invalid_modified_args",
    )
    problem(
        client.post(f"{APPROVALS}/{call_id}", json={"decision": "approve", "modified_args": {"id": "x"}}),
        400,
        "invalid_arguments",
    )
    assert client.get(f"{CALLS}/{call_id}").json()["status"] == "awaiting_approval"  # nothing changed

    approved = client.post(f"{APPROVALS}/{call_id}", json={"decision": "approve", "modified_args": {"id": 2}})
    assert approved.status_code == 200, approved.text
    # The caller's arguments stay beside the approved ones: in the answer, the call's record and its stored item.
    assert (approved.json()["arguments"], approved.json()["original_arguments"]) == ({"id": 2}, {"id": 1})
    assert approved.json()["approval"]["modified_args"] is True
    done = settled(client, call_id)
    assert done["status"] == "completed"
    assert upstream.ran == [("delete_page", {"id": 2})]
    assert done["approval"]["decision"] == "approve"
    assert (done["arguments"], done["original_arguments"]) == ({"id": 2}, {"id": 1})
    workspace_id = container.identity.installed_workspace_id()
    assert workspace_id is not None
    stored = container.store.get(call_key(workspace_id, call_id))
    assert stored is not None
    assert (stored["arguments"], stored["original_arguments"]) == ({"id": 2}, {"id": 1})
    problem(client.post(f"{APPROVALS}/{call_id}", json={"decision": "reject"}), 409, "already_resolved")
    assert client.get("/api/v1/agent/pending").json()["items"] == []


def test_approval_as_asked_has_no_original_arguments(client: TestClient, service_id: str) -> None:
    require_approval(client, service_id, "delete_page")
    paused = client.post(CALLS, json={"tool_ref": tool_ref(client, service_id, "delete_page"), "arguments": {"id": 1}})
    assert paused.json()["original_arguments"] is None
    call_id = paused.json()["pending_id"]
    approved = client.post(f"{APPROVALS}/{call_id}", json={"decision": "approve"})
    assert approved.status_code == 200, approved.text
    assert (approved.json()["arguments"], approved.json()["original_arguments"]) == ({"id": 1}, None)
    assert settled(client, call_id)["original_arguments"] is None


def test_modified_arguments_kept_beside_the_original_keep_to_one_sets_limit(
    client: TestClient, service_id: str, upstream: Upstream
) -> None:
    require_approval(client, service_id, "echo")
    original = {"text": "o" * (MAX_ARGUMENT_BYTES * 2 // 3)}
    paused = client.post(CALLS, json={"tool_ref": tool_ref(client, service_id, "echo"), "arguments": original})
    assert paused.status_code == 202, paused.text
    call_id = paused.json()["pending_id"]
    too_much = {"text": "m" * (MAX_ARGUMENT_BYTES // 2)}
    refused = client.post(f"{APPROVALS}/{call_id}", json={"decision": "approve", "modified_args": too_much})
    problem(refused, 400, "invalid_modified_args")
    assert "original arguments" in refused.json()["detail"], refused.text
    unchanged = client.get(f"{CALLS}/{call_id}").json()
    assert (unchanged["status"], unchanged["arguments"], unchanged["original_arguments"]) == (
        "awaiting_approval",
        original,
        None,
    )
    fits = {"text": "m" * 1000}
    approved = client.post(f"{APPROVALS}/{call_id}", json={"decision": "approve", "modified_args": fits})
    assert approved.status_code == 200, approved.text
    assert settled(client, call_id)["status"] == "completed"
    assert upstream.ran == [("echo", fits)]


def test_reject_ends_the_call_with_the_reason(client: TestClient, service_id: str, upstream: Upstream) -> None:
    require_approval(client, service_id, "delete_page")
    paused = client.post(CALLS, json={"tool_ref": tool_ref(client, service_id, "delete_page"), "arguments": {"id": 1}})
    call_id = paused.json()["pending_id"]
    rejected = client.post(f"{APPROVALS}/{call_id}", json={"decision": "reject", "reason": "not that page"})
    assert rejected.status_code == 200
    done = settled(client, call_id)
    assert done["status"] == "rejected"
    assert done["error"]["message"] == "not that page"
    assert upstream.ran == []


def test_only_the_owner_resolves(client: TestClient, container: Container, service_id: str) -> None:
    require_approval(client, service_id, "delete_page")
    paused = client.post(CALLS, json={"tool_ref": tool_ref(client, service_id, "delete_page"), "arguments": {"id": 1}})
    call_id = paused.json()["pending_id"]
    bob = {"Authorization": f"Bearer {second_user_key(container, client)}"}
    problem(client.post(f"{APPROVALS}/{call_id}", json={"decision": "approve"}, headers=bob), 403, "user_mismatch")
    assert client.get("/api/v1/agent/pending", headers=bob).json()["items"] == []

    # Another workspace does not even see the call.
    issued = credentials.issue(credentials.API_KEY_PREFIX)
    container.store.put(_workspace_item("ws_other", "Other", "2027-01-01T00:00:00Z"))
    container.store.put(
        _api_key_item("ws_other", "key_o", "usr_o", "o", "admin", KeyScope(), issued, "2027-01-01T00:00:00Z")
    )
    other = {"Authorization": f"Bearer {issued.plaintext}"}
    problem(
        client.post(f"{APPROVALS}/{call_id}", json={"decision": "approve"}, headers=other), 404, "pending_not_found"
    )
    assert client.get(f"{CALLS}/{call_id}").json()["status"] == "awaiting_approval"


def test_a_call_made_for_an_end_user_is_resolved_by_an_approver(
    client: TestClient, service_id: str, upstream: Upstream
) -> None:
    require_approval(client, service_id, "delete_page")
    platform = client.post(
        "/api/v1/api-keys", json={"name": "platform", "role": "admin", "capabilities": ["call_tools", "act_as"]}
    ).json()
    approver = client.post(
        "/api/v1/api-keys", json={"name": "approver", "role": "admin", "capabilities": ["approve_calls"]}
    ).json()
    as_platform = {"Authorization": f"Bearer {platform['key']}"}
    as_approver = {"Authorization": f"Bearer {approver['key']}"}
    ref = tool_ref(client, service_id, "delete_page")
    paused = client.post(
        CALLS, headers=as_platform, json={"tool_ref": ref, "arguments": {"id": 4}, "principal": {"user_id": "usr_end"}}
    )
    assert paused.status_code == 202, paused.text
    call_id = paused.json()["pending_id"]
    assert paused.json()["user_id"] == "usr_end"

    # The platform acts for the user but is not the user: it may not approve what it submitted.
    problem(
        client.post(f"{APPROVALS}/{call_id}", headers=as_platform, json={"decision": "approve"}), 403, "user_mismatch"
    )
    assert client.get("/api/v1/agent/pending", headers=as_platform).json()["items"] == []
    # An approver sees the end user's call among the workspace's pending calls, and resolves it.
    for headers in (as_approver, {}):  # the unrestricted admin holds approve_calls too
        listed = client.get("/api/v1/agent/pending", headers=headers).json()["items"]
        assert [(c["pending_id"], c["user_id"]) for c in listed] == [(call_id, "usr_end")]
    approved = client.post(f"{APPROVALS}/{call_id}", headers=as_approver, json={"decision": "approve"})
    assert approved.status_code == 200, approved.text
    assert approved.json()["approval"]["by_api_key"] == approver["id"]
    assert settled(client, call_id)["status"] == "completed"
    assert upstream.ran == [("delete_page", {"id": 4})]
    problem(
        client.post(f"{APPROVALS}/{call_id}", headers=as_approver, json={"decision": "reject"}), 409, "already_resolved"
    )
    assert client.get("/api/v1/agent/pending", headers=as_approver).json()["items"] == []


def test_approval_timeout_rejects(
    client: TestClient, container: Container, service_id: str, upstream: Upstream
) -> None:
    require_approval(client, service_id, "delete_page")
    agent = client.post("/api/v1/agents", json={"name": "quick", "approval_timeout_seconds": 30}).json()
    ref = tool_ref(client, service_id, "delete_page")
    paused = client.post(CALLS, json={"tool_ref": ref, "arguments": {"id": 1}, "agent_id": agent["id"]})
    assert paused.status_code == 202, paused.text
    call_id = paused.json()["pending_id"]
    # When the wait ends is known from the 202 on, in the same format as every other time.
    expires_at = paused.json()["expires_at"]
    assert _seconds(expires_at) - _seconds(paused.json()["created_at"]) == 30
    assert client.get(f"{CALLS}/{call_id}").json()["expires_at"] == expires_at
    container.clock.advance(31)  # type: ignore[attr-defined]
    done = settled(client, call_id)
    assert done["status"] == "rejected"
    assert done["error"]["message"] == "approval timeout"
    problem(client.post(f"{APPROVALS}/{call_id}", json={"decision": "approve"}), 409, "already_resolved")
    assert upstream.ran == []


def test_a_question_of_the_upstream_left_unanswered_times_out_as_such(
    client: TestClient, container: Container, service_id: str, upstream: Upstream
) -> None:
    """A call waiting for an answer to its upstream's own question (as the relay pauses it) ends rejected when no
    one answers in time, its reason an input timeout, not an approval timeout."""
    agent = client.post("/api/v1/agents", json={"name": "quick", "approval_timeout_seconds": 30}).json()
    require_approval(client, service_id, "delete_page")
    ref = tool_ref(client, service_id, "delete_page")
    paused = client.post(CALLS, json={"tool_ref": ref, "arguments": {"id": 1}, "agent_id": agent["id"]})
    assert paused.status_code == 202, paused.text
    call_id = paused.json()["pending_id"]
    calls = container.tool_call_records
    call = calls.find(client.get("/api/v1/me").json()["workspace_id"], call_id)
    question = {"key": "q1", "message": "Which page?", "requested_schema": {"type": "object", "properties": {}}}
    calls.move(call, "awaiting_approval", sets=calls.input_pause(call, question))
    container.clock.advance(31)  # type: ignore[attr-defined]
    done = settled(client, call_id)
    assert done["status"] == "rejected"
    assert done["error"] == {"code": "input_timeout", "message": "input timeout"}
    assert upstream.ran == []


def test_a_tool_disabled_while_waiting_is_refused(client: TestClient, service_id: str, upstream: Upstream) -> None:
    require_approval(client, service_id, "delete_page")
    paused = client.post(CALLS, json={"tool_ref": tool_ref(client, service_id, "delete_page"), "arguments": {"id": 1}})
    call_id = paused.json()["pending_id"]
    assert client.put(f"{SERVICES}/{service_id}/tool-approvals/delete_page", json={"enabled": False}).status_code == 200
    client.post(f"{APPROVALS}/{call_id}", json={"decision": "approve"})
    done = settled(client, call_id)
    assert done["status"] == "failed"
    assert done["error"]["code"] == "tool_disabled"
    assert upstream.ran == []


def test_nothing_secret_in_records_events_or_logs(
    client: TestClient, container: Container, service_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    require_approval(client, service_id, "snapshot")
    paused = client.post(CALLS, json={"tool_ref": tool_ref(client, service_id, "snapshot"), "arguments": {}})
    call_id = paused.json()["pending_id"]
    workspace_id = container.identity.installed_workspace_id()
    assert workspace_id is not None
    # The workflow parks its token on the record.
    stored = wait_for_call(call_id, lambda: parked(container, workspace_id, call_id), what="its parked token")
    assert "task_token" not in stored  # only the sealed form
    assert str(stored["sealed_task_token"]).startswith("enc:v1:")
    client.post(f"{APPROVALS}/{call_id}", json={"decision": "approve"})
    settled(client, call_id)
    wait_idle(call_id)  # finish has announced it
    events = [r.getMessage() for r in caplog.records if r.name == "mcpbridge.events"]
    assert any("tool_call.approval_required" in e for e in events)
    assert any("tool_call.resolved" in e for e in events)
    for record in caplog.records:
        message = record.getMessage()
        assert PNG not in message
        assert "local:" not in message


def test_concurrent_resolutions_one_wins(
    client: TestClient, container: Container, service_id: str, upstream: Upstream
) -> None:
    """Eight people-clicks at once (approve and reject): exactly one resolution is applied, the others are told
    the call was already resolved, and the tool runs at most once."""
    require_approval(client, service_id, "delete_page")
    paused = client.post(CALLS, json={"tool_ref": tool_ref(client, service_id, "delete_page"), "arguments": {"id": 1}})
    call_id = paused.json()["pending_id"]
    owner = container.identity.authenticate(client.headers["Authorization"].removeprefix("Bearer "))
    outcomes: list[str] = []
    lock = threading.Lock()

    def resolve(i: int) -> None:
        decision = "approve" if i % 2 else "reject"
        try:
            container.tool_calls.resolve_approval(owner, call_id, decision=decision)  # type: ignore[arg-type]
            outcome = decision
        except Conflict as lost:
            outcome = lost.code
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=resolve, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    winners = [o for o in outcomes if o in ("approve", "reject")]
    assert len(winners) == 1, outcomes
    assert outcomes.count("already_resolved") == 7
    done = settled(client, call_id)
    assert done["status"] == ("completed" if winners[0] == "approve" else "rejected")
    assert len(upstream.ran) == (1 if winners[0] == "approve" else 0)
