"""Gateway mode through the real ``mcpbridge serve``: an endpoint publishes server-everything's ``echo``; the official
MCP SDK client lists it beside the knowledge tools and calls it over real HTTP, through the agent broker (approval
policy, a person approving with other arguments or rejecting, ``check_call``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import ElicitResult

from tests.support.everything_hub import Hub, everything_hub
from tests.support.modern_rpc import TASKS, modern_request
from tests.support.serve import SERVE_TEST_TIMEOUT, bearer, http_client

pytestmark = [pytest.mark.slow, pytest.mark.timeout(SERVE_TEST_TIMEOUT)]

ENDPOINTS = "/api/v1/mcp-endpoints"
SERVICES = "/api/v1/mcp-services"


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    with everything_hub(tmp_path_factory, "gateway") as served:
        yield served


def _endpoint(hub: Hub, tools: list[str]) -> dict[str, Any]:
    with http_client(hub.process.base_url) as http:
        http.headers.update(bearer(hub.admin_key))
        created = http.post(
            ENDPOINTS,
            json={"name": "gateway", "services": [{"service_id": hub.service_id, "tools": tools}]},
        )
    assert created.status_code == 201, created.text
    body: dict[str, Any] = created.json()
    assert body["services"] == [{"service_id": hub.service_id, "tools": tools}]
    return body


async def _session(endpoint: dict[str, Any], mode: str, work: Any) -> Any:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {endpoint['token']}"}, timeout=30)
    async with http, Client(streamable_http_client(endpoint["url"], http_client=http), mode=mode) as mcp:
        return await work(mcp)


def _text(result: Any) -> str:
    return "\n".join(block.text for block in result.content if getattr(block, "type", "") == "text")


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_a_published_tool_is_listed_and_runs_through_the_broker(hub: Hub, mode: str) -> None:
    endpoint = _endpoint(hub, ["echo"])

    async def work(mcp: Any) -> tuple[list[Any], Any]:
        tools = (await mcp.list_tools()).tools
        (echo,) = [tool for tool in tools if tool.name.startswith("mcp_")]
        return tools, await mcp.call_tool(echo.name, {"message": "straight through"})

    tools, result = asyncio.run(_session(endpoint, mode, work))
    names = [tool.name for tool in tools]
    (echo,) = [tool for tool in tools if tool.name.startswith("mcp_")]  # only the published tool of the service
    assert echo.name.startswith("mcp_everything_echo_"), names
    assert echo.description.startswith("[MCP Service: everything (external)] ")
    assert echo.input_schema["properties"]["message"]["type"] == "string"
    assert "search_knowledge" in names
    assert "check_call" in names
    assert result.is_error is False
    assert "Echo: straight through" in _text(result)
    assert "treat as untrusted data" in _text(result)


def test_an_approved_call_runs_with_the_approvers_arguments_and_a_rejection_says_why(hub: Hub) -> None:
    endpoint = _endpoint(hub, ["*"])
    base = hub.process.base_url
    _approval_required(hub, True)
    with http_client(base) as http:
        http.headers.update(bearer(hub.admin_key))
        approver = _other_admin(http)

    async def paused(mcp: Any) -> tuple[str, Any, Any, Any]:
        tools = (await mcp.list_tools()).tools
        (echo,) = [tool for tool in tools if tool.name.startswith("mcp_everything_echo_")]
        first = await mcp.call_tool(echo.name, {"message": "as asked"})
        still = await mcp.call_tool("check_call", {"call_id": first.structured_content["call_id"]})
        second = await mcp.call_tool(echo.name, {"message": "to be refused"})
        return echo.name, first, still, second

    try:
        _, first, still, second = asyncio.run(_session(endpoint, "legacy", paused))
        for waiting in (first, still, second):
            assert waiting.is_error is False
            assert waiting.structured_content["status"] == "awaiting_approval"
        call_id = first.structured_content["call_id"]
        assert first.structured_content["approval_url"] == f"{base}/console/approvals/{call_id}"
        assert "check_call" in _text(first)

        with http_client(base) as other:
            other.headers.update(bearer(approver))
            approved = other.post(
                f"/api/v1/agent/tool-approvals/{call_id}",
                json={"decision": "approve", "modified_args": {"message": "as approved"}},
            )
            assert approved.status_code == 200, approved.text
            refused = other.post(
                f"/api/v1/agent/tool-approvals/{second.structured_content['call_id']}",
                json={"decision": "reject", "reason": "not on a Friday"},
            )
            assert refused.status_code == 200, refused.text

        done = _checked_until_settled(hub, endpoint, call_id)
        assert done.is_error is False
        assert "Echo: as approved" in _text(done)
        assert "as asked" not in _text(done)
        rejected = _checked_until_settled(hub, endpoint, second.structured_content["call_id"])
        assert rejected.is_error is True
        assert "not on a Friday" in _text(rejected)
        assert rejected.structured_content["status"] == "rejected"

        with http_client(base) as http:
            http.headers.update(bearer(hub.admin_key))
            trail = http.get("/api/v1/calls", params={"endpoint_id": endpoint["id"]})
            assert trail.status_code == 200, trail.text
            by_id = {entry["call_id"]: entry for entry in trail.json()["items"]}
            assert by_id[call_id]["approval"]["modified_args"] is True
            assert by_id[call_id]["outcome"] == "completed"
            assert by_id[call_id]["user_id"] == f"endpoint:{endpoint['id']}"
            refused_entry = by_id[second.structured_content["call_id"]]
            assert refused_entry["outcome"] == "rejected"
            assert refused_entry["approval"]["reason"] == "not on a Friday"
            assert refused_entry["approval"]["by"] != refused_entry["user_id"]
            assert "as asked" not in trail.text, "a digest of the arguments, never their values"
            only = http.get("/api/v1/calls", params={"endpoint_id": endpoint["id"], "outcome": "rejected"}).json()
            assert [entry["call_id"] for entry in only["items"]] == [second.structured_content["call_id"]]
    finally:
        _approval_required(hub, False)


def test_check_call_answers_only_its_caller_through_its_endpoint(hub: Hub) -> None:
    endpoint, other = _endpoint(hub, ["echo"]), _endpoint(hub, ["echo"])
    _approval_required(hub, True)

    async def call(mcp: Any) -> Any:
        (echo,) = [tool for tool in (await mcp.list_tools()).tools if tool.name.startswith("mcp_")]
        return await mcp.call_tool(echo.name, {"message": "mine"})

    try:
        call_id = asyncio.run(_session(endpoint, "legacy", call)).structured_content["call_id"]

        async def peek(mcp: Any) -> Any:
            return await mcp.call_tool("check_call", {"call_id": call_id})

        seen = asyncio.run(_session(other, "legacy", peek))
        assert seen.is_error is True
        assert "pending_not_found" in _text(seen)
    finally:
        _approval_required(hub, False)


def test_bad_services_are_refused_naming_the_field_and_change_nothing(hub: Hub) -> None:
    with http_client(hub.process.base_url) as http:
        http.headers.update(bearer(hub.admin_key))
        before = http.get(ENDPOINTS, params={"limit": 200}).json()["items"]
        unknown = http.post(
            ENDPOINTS,
            json={"name": "x", "services": [{"service_id": "svc_01jd8x2k7m0000000000000000", "tools": ["echo"]}]},
        )
        assert unknown.status_code == 404, unknown.text
        assert unknown.json()["code"] == "service_not_found"
        assert "services" in unknown.json()["detail"]
        shapes: list[Any] = [
            [{"service_id": hub.service_id, "tools": "echo"}],
            [{"service_id": hub.service_id}],
            [{"service_id": hub.service_id, "tools": []}],
            [{"service_id": hub.service_id, "tools": ["echo"], "extra": 1}],
            "everything",
        ]
        for services in shapes:
            bad = http.post(ENDPOINTS, json={"name": "x", "services": services})
            assert bad.status_code in (400, 422), bad.text
            assert "services" in bad.text
        star = http.post(
            ENDPOINTS, json={"name": "x", "services": [{"service_id": hub.service_id, "tools": ["*", "echo"]}]}
        )
        assert star.status_code == 400, star.text
        assert star.json()["code"] == "invalid_services"
        assert http.get(ENDPOINTS, params={"limit": 200}).json()["items"] == before

        endpoint = _endpoint(hub, ["echo"])
        changed = http.put(
            f"{ENDPOINTS}/{endpoint['id']}",
            json={"services": [{"service_id": "svc_01jd8x2k7m0000000000000001", "tools": ["*"]}]},
        )
        assert changed.status_code == 404, changed.text
        kept = http.get(f"{ENDPOINTS}/{endpoint['id']}").json()
        assert kept["services"] == [{"service_id": hub.service_id, "tools": ["echo"]}]
        assert kept["version"] == endpoint["version"]
        cleared = http.put(f"{ENDPOINTS}/{endpoint['id']}", json={"services": []})
        assert cleared.status_code == 200, cleared.text
        assert cleared.json()["services"] == []


def _other_admin(http: httpx.Client) -> str:
    """A second user of the workspace holding an admin key with ``approve_calls``: the approver."""
    user = http.post("/api/v1/users", json={"name": "Approver"})
    assert user.status_code == 201, user.text
    key = http.post(
        f"/api/v1/users/{user.json()['id']}/api-keys",
        json={"name": "approvals", "role": "admin", "capabilities": ["approve_calls"]},
    )
    assert key.status_code == 201, key.text
    secret: str = key.json()["key"]
    return secret


def _checked_until_settled(hub: Hub, endpoint: dict[str, Any], call_id: str) -> Any:
    """``check_call`` until the call no longer waits (the workflow runs it after the resolution)."""
    seen: list[Any] = []

    async def check(mcp: Any) -> Any:
        return await mcp.call_tool("check_call", {"call_id": call_id})

    def settled() -> bool:
        result = asyncio.run(_session(endpoint, "legacy", check))
        seen.append(result)
        status = (result.structured_content or {}).get("status")
        return status not in ("awaiting_approval", "approved", "ready", "running")

    hub.process.wait_for(settled, f"call {call_id} to settle")
    return seen[-1]


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_an_idempotency_key_in_meta_returns_the_first_call(hub: Hub, mode: str) -> None:
    """With approval required, a retried call with the same key is the same paused call (no second record); the
    same key with other arguments is refused as invalid params."""
    from mcp.shared.exceptions import MCPError

    endpoint = _endpoint(hub, ["echo"])
    key = {"io.mcpbridge/idempotency-key": f"retry-{mode}"}
    _approval_required(hub, True)
    with http_client(hub.process.base_url) as http:
        http.headers.update(bearer(hub.admin_key))
        pending_before = len(http.get("/api/v1/agent/pending").json()["items"])

    async def twice(mcp: Any) -> tuple[Any, Any, str]:
        (echo,) = [tool for tool in (await mcp.list_tools()).tools if tool.name.startswith("mcp_")]
        first = await mcp.call_tool(echo.name, {"message": "once"}, meta=key)
        again = await mcp.call_tool(echo.name, {"message": "once"}, meta=key)
        try:
            await mcp.call_tool(echo.name, {"message": "other"}, meta=key)
        except MCPError as refused:
            return first, again, f"{refused.error.code} {refused.error.message}"
        return first, again, "accepted"

    try:
        first, again, other = asyncio.run(_session(endpoint, mode, twice))
        assert first.structured_content["status"] == "awaiting_approval"
        assert again.structured_content["call_id"] == first.structured_content["call_id"]
        assert other.startswith("-32602 "), other
        assert "idempotency key" in other
        with http_client(hub.process.base_url) as http:
            http.headers.update(bearer(hub.admin_key))
            assert len(http.get("/api/v1/agent/pending").json()["items"]) == pending_before + 1
    finally:
        _approval_required(hub, False)


# ------------------------------------------------------------------------------------- 2026-07-28: InputRequiredResult


async def _modern_session(endpoint: dict[str, Any], work: Any, **client: Any) -> Any:
    """A 2026-07-28 session of a client that takes URL-mode elicitations (by default it accepts them)."""

    async def accept(context: Any, params: Any) -> ElicitResult:
        return ElicitResult(action="accept")

    client.setdefault("elicitation_callback", accept)
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {endpoint['token']}"}, timeout=30)
    async with (
        http,
        Client(streamable_http_client(endpoint["url"], http_client=http), mode="2026-07-28", **client) as mcp,
    ):
        return await work(mcp)


def _approval_required(hub: Hub, required: bool) -> None:
    with http_client(hub.process.base_url) as http:
        http.headers.update(bearer(hub.admin_key))
        policy = http.put(f"{SERVICES}/{hub.service_id}/tool-approvals/echo", json={"require_approval": required})
        assert policy.status_code == 200, policy.text


def test_a_paused_call_answers_input_required_and_its_retry_gets_what_the_approver_decided(hub: Hub) -> None:
    from mcp.shared.exceptions import MCPError

    endpoint, elsewhere = _endpoint(hub, ["echo"]), _endpoint(hub, ["echo"])
    base = hub.process.base_url
    _approval_required(hub, True)
    with http_client(base) as http:
        http.headers.update(bearer(hub.admin_key))
        approver = _other_admin(http)

    async def echo_of(mcp: Any) -> str:
        (echo,) = [tool for tool in (await mcp.list_tools()).tools if tool.name.startswith("mcp_everything_echo_")]
        return str(echo.name)

    async def pause(mcp: Any) -> tuple[str, Any, Any, Any]:
        name = await echo_of(mcp)
        first = await mcp.session.call_tool(name, {"message": "as asked"}, allow_input_required=True)
        accepted = {"approval": ElicitResult(action="accept")}
        again = await mcp.session.call_tool(
            name,
            {"message": "as asked"},
            input_responses=accepted,
            request_state=first.request_state,
            allow_input_required=True,
        )
        refused = await mcp.session.call_tool(name, {"message": "to be refused"}, allow_input_required=True)
        return name, first, again, refused

    async def refusals(mcp: Any, name: str, state: str) -> list[str]:
        """What a retry gets with a state that is not this request's."""
        tampered = state[:-6] + ("A" if state[-6] != "A" else "B") + state[-5:]
        tries = [({"message": "as asked"}, tampered), ({"message": "other arguments"}, state)]
        codes = []
        for arguments, request_state in tries:
            try:
                await mcp.session.call_tool(name, arguments, request_state=request_state, allow_input_required=True)
                codes.append("accepted")
            except MCPError as exc:
                codes.append(f"{exc.error.code} {exc.error.message}")
        return codes

    try:
        name, first, again, refused = asyncio.run(_modern_session(endpoint, pause))
        assert first.result_type == "input_required"
        (asked,) = first.input_requests.values()
        assert asked.method == "elicitation/create"
        assert asked.params.mode == "url"
        prefix = f"{base}/console/approvals/"
        assert asked.params.url.startswith(prefix), asked.params.url
        call_id = asked.params.url.removeprefix(prefix)
        assert "waits for a person's approval" in asked.params.message
        assert call_id not in first.request_state, "the state is sealed"
        # Asked once: while the call still waits, a retry answers the state alone (no second page to open).
        assert again.result_type == "input_required"
        assert not again.input_requests
        assert again.request_state == first.request_state

        bad = asyncio.run(_modern_session(endpoint, lambda mcp: refusals(mcp, name, first.request_state)))
        assert bad == ["-32602 Invalid or expired requestState"] * 2, bad

        async def through_elsewhere(mcp: Any) -> list[str]:
            return await refusals(mcp, await echo_of(mcp), first.request_state)

        other_endpoint = asyncio.run(_modern_session(elsewhere, through_elsewhere))
        assert other_endpoint[0] == "-32602 Invalid or expired requestState", "bound to the endpoint and caller"

        refused_id = refused.input_requests["approval"].params.url.removeprefix(prefix)
        with http_client(base) as other:
            other.headers.update(bearer(approver))
            approved = other.post(
                f"/api/v1/agent/tool-approvals/{call_id}",
                json={"decision": "approve", "modified_args": {"message": "as approved"}},
            )
            assert approved.status_code == 200, approved.text
            rejected = other.post(
                f"/api/v1/agent/tool-approvals/{refused_id}", json={"decision": "reject", "reason": "not today"}
            )
            assert rejected.status_code == 200, rejected.text

        done = _retried_until_settled(hub, endpoint, name, {"message": "as asked"}, first.request_state)
        assert done.is_error is False
        assert "Echo: as approved" in _text(done)
        assert "as asked" not in _text(done)
        ended = _retried_until_settled(hub, endpoint, name, {"message": "to be refused"}, refused.request_state)
        assert ended.is_error is True
        assert "not today" in _text(ended)
        assert ended.structured_content["status"] == "rejected"
    finally:
        _approval_required(hub, False)


def test_the_sdk_driver_follows_the_page_to_the_result_and_a_declined_page_leaves_the_call_waiting(hub: Hub) -> None:
    """The SDK client's own loop: its elicitation callback (a person opening the page, who is also an approver here)
    approves through REST, then the client retries until the result. A person who declines gets the waiting
    notice: the call still waits for its approver."""
    endpoint = _endpoint(hub, ["echo"])
    base = hub.process.base_url
    _approval_required(hub, True)
    with http_client(base) as http:
        http.headers.update(bearer(hub.admin_key))
        approver = _other_admin(http)
    pages: list[str] = []

    async def approve_on_the_page(context: Any, params: Any) -> ElicitResult:
        pages.append(params.url)
        call_id = params.url.rsplit("/", 1)[-1]

        def approve() -> None:
            with http_client(base) as other:
                other.headers.update(bearer(approver))
                answer = other.post(f"/api/v1/agent/tool-approvals/{call_id}", json={"decision": "approve"})
                assert answer.status_code == 200, answer.text

        await asyncio.to_thread(approve)
        return ElicitResult(action="accept")

    async def decline(context: Any, params: Any) -> ElicitResult:
        return ElicitResult(action="decline")

    async def call(mcp: Any) -> Any:
        (echo,) = [tool for tool in (await mcp.list_tools()).tools if tool.name.startswith("mcp_everything_echo_")]
        return await mcp.call_tool(echo.name, {"message": "through the page"})

    try:
        # Rounds: enough state-only polls (0.25 s apart) for the workflow to run the approved call on a busy machine.
        done = asyncio.run(
            _modern_session(endpoint, call, elicitation_callback=approve_on_the_page, input_required_max_rounds=2000)
        )
        assert len(pages) == 1, pages
        assert done.is_error is False
        assert "Echo: through the page" in _text(done)

        waiting = asyncio.run(_modern_session(endpoint, call, elicitation_callback=decline))
        assert waiting.is_error is False
        assert waiting.structured_content["status"] == "awaiting_approval"
        assert waiting.structured_content["approval_url"].startswith(f"{base}/console/approvals/")
        assert "check_call" in _text(waiting)
    finally:
        _approval_required(hub, False)


def _retried_until_settled(hub: Hub, endpoint: dict[str, Any], name: str, arguments: Any, state: str) -> Any:
    """The 2026-07-28 retry with ``state`` until it answers something other than ``InputRequiredResult``."""
    seen: list[Any] = []

    async def retry(mcp: Any) -> Any:
        return await mcp.session.call_tool(name, arguments, request_state=state, allow_input_required=True)

    def settled() -> bool:
        seen.append(asyncio.run(_modern_session(endpoint, retry)))
        return getattr(seen[-1], "result_type", "complete") != "input_required"

    hub.process.wait_for(settled, "the paused call to settle")
    return seen[-1]


# ------------------------------------------------------------------------------- 2026-07-28: the Tasks extension


def _rpc(endpoint: dict[str, Any], method: str, params: dict[str, Any], *, tasks: bool = True) -> dict[str, Any]:
    """One 2026-07-28 request over HTTP, its client declaring the Tasks extension (or not); the JSON-RPC answer."""
    body, headers = modern_request(method, params, endpoint["token"], {"extensions": {TASKS: {}}} if tasks else None)
    answer: dict[str, Any] = httpx.post(endpoint["url"], json=body, headers=headers, timeout=30).json()
    return answer


def test_a_paused_call_is_a_task_polled_to_the_approvers_result_and_cancelled_by_its_caller(hub: Hub) -> None:
    endpoint, elsewhere = _endpoint(hub, ["echo"]), _endpoint(hub, ["echo"])
    base = hub.process.base_url
    discovered = _rpc(endpoint, "server/discover", {})["result"]
    assert discovered["capabilities"]["extensions"] == {TASKS: {}}
    tools = _rpc(endpoint, "tools/list", {})["result"]["tools"]
    (echo,) = [tool["name"] for tool in tools if tool["name"].startswith("mcp_everything_echo_")]

    def call(message: str, **options: Any) -> dict[str, Any]:
        params = {"name": echo, "arguments": {"message": message}}
        return _rpc(endpoint, "tools/call", params, **options)

    # Without approval the call runs at once: the plain result (the extension's immediate-result shortcut).
    at_once = call("now")["result"]
    assert at_once["resultType"] == "complete"
    assert "Echo: now" in json.dumps(at_once)

    _approval_required(hub, True)
    with http_client(base) as http:
        http.headers.update(bearer(hub.admin_key))
        approver = _other_admin(http)
    try:
        created = call("as asked")["result"]
        assert created["resultType"] == "task"
        assert set(created) >= {"taskId", "status", "createdAt", "lastUpdatedAt", "ttlMs", "pollIntervalMs"}
        assert "requestState" not in created
        assert "result" not in created
        assert created["status"] == "input_required"
        assert created["ttlMs"] == 30 * 86_400 * 1000, "kept as long as the call's record"
        task_id = created["taskId"]

        waiting = _rpc(endpoint, "tasks/get", {"taskId": task_id})["result"]
        assert waiting["resultType"] == "complete"
        assert waiting["status"] == "input_required"
        (asked,) = waiting["inputRequests"].values()
        assert asked["params"] == {
            "mode": "url",
            "message": asked["params"]["message"],
            "url": f"{base}/console/approvals/{task_id}",
        }

        acked = _rpc(
            endpoint, "tasks/update", {"taskId": task_id, "inputResponses": {"approval": {"action": "accept"}}}
        )
        assert acked["result"] == {"resultType": "complete", "_meta": acked["result"]["_meta"]}
        answered = _rpc(endpoint, "tasks/get", {"taskId": task_id})["result"]
        assert answered["status"] == "working", "the client did its part; a person decides"
        assert "inputRequests" not in answered

        # Only this caller, through this endpoint, and only with the extension declared.
        assert _rpc(elsewhere, "tasks/get", {"taskId": task_id})["error"]["code"] == -32602
        assert _rpc(endpoint, "tasks/get", {"taskId": "call_01jd8x2k7m0000000000000000"})["error"]["code"] == -32602
        assert _rpc(endpoint, "tasks/get", {"taskId": task_id}, tasks=False)["error"]["code"] == -32021
        assert _rpc(endpoint, "tasks/result", {"taskId": task_id})["error"]["code"] == -32601
        assert _rpc(endpoint, "tasks/get", {"taskId": 7})["error"]["code"] == -32602

        with http_client(base) as other:
            other.headers.update(bearer(approver))
            approved = other.post(
                f"/api/v1/agent/tool-approvals/{task_id}",
                json={"decision": "approve", "modified_args": {"message": "as approved"}},
            )
            assert approved.status_code == 200, approved.text

        def ended() -> bool:
            return _rpc(endpoint, "tasks/get", {"taskId": task_id})["result"]["status"] not in (
                "working",
                "input_required",
            )

        hub.process.wait_for(ended, "the task to end")
        done = _rpc(endpoint, "tasks/get", {"taskId": task_id})["result"]
        assert done["status"] == "completed", done
        assert done["result"]["isError"] is False
        assert "Echo: as approved" in json.dumps(done["result"])

        withdrawn = call("never mind")["result"]
        cancelled = _rpc(endpoint, "tasks/cancel", {"taskId": withdrawn["taskId"]})["result"]
        assert cancelled["resultType"] == "complete"
        assert "status" not in cancelled
        after = _rpc(endpoint, "tasks/get", {"taskId": withdrawn["taskId"]})["result"]
        assert after["status"] == "cancelled"
        assert _rpc(endpoint, "tasks/cancel", {"taskId": withdrawn["taskId"]})["result"]["resultType"] == "complete"
        with http_client(base) as other:
            other.headers.update(bearer(approver))
            late = other.post(f"/api/v1/agent/tool-approvals/{withdrawn['taskId']}", json={"decision": "approve"})
            assert late.status_code == 409, "a withdrawn call can no longer be approved"

        without = call("no tasks", tasks=False)["result"]
        assert without["resultType"] == "complete", "a client without the extension gets no task"
        assert without["structuredContent"]["status"] == "awaiting_approval"
    finally:
        _approval_required(hub, False)
