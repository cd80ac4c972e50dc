"""An upstream that asks for input during a call (server-everything's ``trigger-elicitation-request``, a form-mode
``elicitation/create``), through the real ``mcpbridge serve``: relayed to the MCP client of a gateway call
(2026-07-28 ``InputRequiredResult``, Tasks, ``answer_call`` on earlier versions) and to the approvals inbox for an
agent call; the answer is checked against the upstream's schema, the tool runs again with it, and the answer is
never logged."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import ElicitResult

from tests.support.chromium import BROWSER, chromium
from tests.support.everything_hub import Hub, everything_hub
from tests.support.modern_rpc import TASKS, modern_request
from tests.support.serve import SERVE_TEST_TIMEOUT, assert_problem

pytestmark = [pytest.mark.slow, pytest.mark.timeout(SERVE_TEST_TIMEOUT)]

ENDPOINTS = "/api/v1/mcp-endpoints"
SERVICES = "/api/v1/mcp-services"
CALLS = "/api/v1/agent/tool-calls"
APPROVALS = "/api/v1/agent/tool-approvals"
TOOL = "trigger-elicitation-request"
QUESTION = "Please provide inputs for the following fields:"
WAITING = ("awaiting_approval", "approved", "ready", "running")


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    with everything_hub(tmp_path_factory, "relay") as served:
        yield served


def _call(hub: Hub, call_id: str) -> dict[str, Any]:
    with hub.http() as http:
        found = http.get(f"{CALLS}/{call_id}")
    assert found.status_code == 200, found.text
    body: dict[str, Any] = found.json()
    return body


def _settled(hub: Hub, call_id: str) -> dict[str, Any]:
    seen: list[dict[str, Any]] = []

    def settled() -> bool:
        seen.append(_call(hub, call_id))
        return seen[-1]["status"] not in WAITING

    hub.process.wait_for(settled, f"call {call_id} to settle")
    return seen[-1]


def _text(result: Any) -> str:
    return "\n".join(block.text for block in result.content if getattr(block, "type", "") == "text")


# ------------------------------------------------------------------------------------------- agent calls: the inbox


def test_an_agent_calls_question_waits_in_the_inbox_and_its_answer_runs_the_tool_again(hub: Hub) -> None:
    with hub.http() as http:
        described = http.get("/api/v1/agent/tools/describe", params={"service_id": hub.service_id, "tool_name": TOOL})
        assert described.status_code == 200, described.text
        made = http.post(CALLS, json={"tool_ref": described.json()["tool_ref"], "arguments": {}})
        assert made.status_code in (200, 202), made.text
        call_id = made.json()["pending_id"]
        paused = made.json() if made.json()["status"] == "awaiting_approval" else None
        if paused is None:  # run in the background: the question reaches the record shortly
            hub.process.wait_for(lambda: _call(hub, call_id)["status"] == "awaiting_approval", "the question")
            paused = _call(hub, call_id)
        assert paused["kind"] == "approval"
        question = paused["input_request"]
        assert question["message"] == QUESTION
        assert question["requested_schema"]["required"] == ["name"]
        assert paused["upstream_runs"] == 1
        inbox = {item["pending_id"]: item for item in http.get("/api/v1/agent/pending").json()["items"]}
        assert inbox[call_id]["input_request"]["message"] == QUESTION

        # Bad answers: refused naming what is wrong; the call still waits, nothing ran again.
        missing = http.post(f"{APPROVALS}/{call_id}", json={"decision": "approve"})
        assert "content" in assert_problem(missing, 400, "invalid_content")["detail"]
        wrong = http.post(
            f"{APPROVALS}/{call_id}", json={"decision": "approve", "content": {"integer": 500, "check": "yes"}}
        )
        detail = assert_problem(wrong, 400, "invalid_content")["detail"]
        for field in ("name", "integer", "check"):
            assert field in detail, detail
        assert "500" not in detail, "the rule is named, never the value"
        replaced = http.post(
            f"{APPROVALS}/{call_id}", json={"decision": "approve", "modified_args": {}, "content": {"name": "X"}}
        )
        assert_problem(replaced, 400, "invalid_modified_args")
        unchanged = _call(hub, call_id)
        assert (unchanged["status"], unchanged["upstream_runs"], unchanged["approval"]) == (
            "awaiting_approval",
            1,
            None,
        )

        answer = {"name": "Ada Lovelace", "integer": 7, "check": True}
        answered = http.post(f"{APPROVALS}/{call_id}", json={"decision": "approve", "content": answer})
        assert answered.status_code == 200, answered.text
        assert answered.json()["approval"]["answered_input"] is True
        again = http.post(f"{APPROVALS}/{call_id}", json={"decision": "approve", "content": answer})
        assert_problem(again, 409, "already_resolved")

    done = _settled(hub, call_id)
    assert done["status"] == "completed", done
    text = "\n".join(block.get("text", "") for block in done["result"]["content"])
    assert "- Name: Ada Lovelace" in text
    assert "- Favorite Integer: 7" in text
    assert done["upstream_runs"] == 2, "once up to the question, once with the answer"
    assert "Ada Lovelace" not in hub.process.output(), "the answer is never logged"


def _asking_call(hub: Hub) -> str:
    """An agent call of the tool, once it waits on the question."""
    with hub.http() as http:
        described = http.get("/api/v1/agent/tools/describe", params={"service_id": hub.service_id, "tool_name": TOOL})
        made = http.post(CALLS, json={"tool_ref": described.json()["tool_ref"], "arguments": {}})
    assert made.status_code in (200, 202), made.text
    call_id: str = made.json()["pending_id"]
    hub.process.wait_for(lambda: _call(hub, call_id)["status"] == "awaiting_approval", "the question")
    return call_id


def test_a_rejected_question_ends_the_call_without_running_it_again(hub: Hub) -> None:
    call_id = _asking_call(hub)
    with hub.http() as http:
        rejected = http.post(f"{APPROVALS}/{call_id}", json={"decision": "reject", "reason": "not sharing that"})
        assert rejected.status_code == 200, rejected.text
    ended = _settled(hub, call_id)
    assert ended["status"] == "rejected"
    assert ended["error"]["message"] == "not sharing that"
    assert ended["upstream_runs"] == 1


# ------------------------------------------------------------------------------------------ gateway calls: MCP client


def _endpoint(hub: Hub) -> dict[str, Any]:
    with hub.http() as http:
        created = http.post(
            ENDPOINTS, json={"name": "relay", "services": [{"service_id": hub.service_id, "tools": [TOOL]}]}
        )
    assert created.status_code == 201, created.text
    body: dict[str, Any] = created.json()
    return body


async def _modern(endpoint: dict[str, Any], work: Any, **client: Any) -> Any:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {endpoint['token']}"}, timeout=30)
    async with (
        http,
        Client(streamable_http_client(endpoint["url"], http_client=http), mode="2026-07-28", **client) as mcp,
    ):
        return await work(mcp)


async def _tool_name(mcp: Any) -> str:
    (tool,) = [tool for tool in (await mcp.list_tools()).tools if tool.name.startswith("mcp_everything_trigger_")]
    return str(tool.name)


def test_the_sdk_client_answers_the_upstreams_form_and_gets_the_result_computed_from_its_answer(hub: Hub) -> None:
    endpoint = _endpoint(hub)
    asked: list[Any] = []

    async def answer(context: Any, params: Any) -> ElicitResult:
        asked.append(params)
        return ElicitResult(action="accept", content={"name": "Grace Hopper", "integer": 12})

    async def call(mcp: Any) -> Any:
        return await mcp.call_tool(await _tool_name(mcp), {})

    # Rounds: state-only polls (0.25 s apart) while the workflow runs the tool again on a busy machine.
    done = asyncio.run(_modern(endpoint, call, elicitation_callback=answer, input_required_max_rounds=2000))
    (question,) = asked
    assert question.mode == "form"
    assert question.message == QUESTION
    assert question.requested_schema["properties"]["name"]["type"] == "string"
    assert done.is_error is False, _text(done)
    assert "- Name: Grace Hopper" in _text(done)
    assert "- Favorite Integer: 12" in _text(done)
    assert "Grace Hopper" not in hub.process.output()


def test_a_client_answer_that_fails_the_schema_is_an_error_and_nothing_runs(hub: Hub) -> None:
    endpoint = _endpoint(hub)

    async def rounds(mcp: Any) -> tuple[Any, Any, Any]:
        name = await _tool_name(mcp)
        first = await mcp.session.call_tool(name, {}, allow_input_required=True)
        (key,) = first.input_requests
        bad = {key: ElicitResult(action="accept", content={"integer": "many"})}
        refused = await mcp.session.call_tool(
            name, {}, input_responses=bad, request_state=first.request_state, allow_input_required=True
        )
        declined = {key: ElicitResult(action="decline")}
        ended = await mcp.session.call_tool(
            name, {}, input_responses=declined, request_state=first.request_state, allow_input_required=True
        )
        return first, refused, ended

    async def unused(context: Any, params: Any) -> ElicitResult:  # declares elicitation; the test answers itself
        raise AssertionError("the rounds are driven by hand")

    first, refused, ended = asyncio.run(_modern(endpoint, rounds, elicitation_callback=unused))
    assert first.result_type == "input_required"
    (request,) = first.input_requests.values()
    assert request.method == "elicitation/create"
    assert request.params.message == QUESTION
    assert refused.is_error is True
    assert refused.structured_content["error"]["code"] == "invalid_content"
    assert "name" in _text(refused)
    assert "integer" in _text(refused)
    # The refused answer changed nothing: the call still waited, and the decline then ended it.
    assert ended.is_error is True
    assert ended.structured_content["status"] == "rejected"
    assert "decline" in ended.structured_content["reason"]
    assert _call(hub, ended.structured_content["call_id"])["upstream_runs"] == 1


def test_a_task_asks_the_upstreams_question_and_tasks_update_answers_it(hub: Hub) -> None:
    endpoint = _endpoint(hub)
    tools = _rpc(endpoint, "tools/list", {})["result"]["tools"]
    (name,) = [tool["name"] for tool in tools if tool["name"].startswith("mcp_everything_trigger_")]

    created = _rpc(endpoint, "tools/call", {"name": name, "arguments": {}})["result"]
    assert created["resultType"] == "task", created
    task_id = created["taskId"]

    def task() -> dict[str, Any]:
        got: dict[str, Any] = _rpc(endpoint, "tasks/get", {"taskId": task_id})["result"]
        return got

    hub.process.wait_for(lambda: task()["status"] == "input_required", "the task to ask")
    (key, request), *_ = task()["inputRequests"].items()
    assert request["params"]["mode"] == "form"
    assert request["params"]["requestedSchema"]["required"] == ["name"]

    bad = _rpc(endpoint, "tasks/update", {"taskId": task_id, "inputResponses": {key: {"action": "accept"}}})
    assert bad["error"]["code"] == -32602, bad
    assert task()["status"] == "input_required", "a refused answer changes nothing"

    answer = {key: {"action": "accept", "content": {"name": "Katherine Johnson"}}}
    updated = _rpc(endpoint, "tasks/update", {"taskId": task_id, "inputResponses": answer})
    assert updated["result"]["resultType"] == "complete", updated
    hub.process.wait_for(lambda: task()["status"] == "completed", "the task to complete")
    result = task()["result"]
    assert result["isError"] is False
    assert "- Name: Katherine Johnson" in "\n".join(block.get("text", "") for block in result["content"])


def _rpc(endpoint: dict[str, Any], method: str, params: dict[str, Any]) -> dict[str, Any]:
    body, headers = modern_request(method, params, endpoint["token"], {"extensions": {TASKS: {}}})
    answer: dict[str, Any] = httpx.post(endpoint["url"], json=body, headers=headers, timeout=30).json()
    return answer


def test_a_client_of_form_elicitation_only_is_asked_the_question_and_told_of_an_approval(hub: Hub) -> None:
    """A 2026-07-28 client declaring form-mode elicitation alone: the upstream's form question comes as an
    ``InputRequiredResult`` it can answer; a wait for an approval (a URL-mode page) comes as the waiting notice."""
    with hub.http() as http:
        approval = http.put(f"{SERVICES}/{hub.service_id}/tool-approvals/echo", json={"require_approval": True})
        assert approval.status_code == 200, approval.text
        created = http.post(
            ENDPOINTS,
            json={"name": "form only", "services": [{"service_id": hub.service_id, "tools": [TOOL, "echo"]}]},
        )
    assert created.status_code == 201, created.text
    endpoint = created.json()
    form_only = {"elicitation": {"form": {}}}

    def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
        body, headers = modern_request(method, params, endpoint["token"], form_only)
        answer: dict[str, Any] = httpx.post(endpoint["url"], json=body, headers=headers, timeout=30).json()
        return answer

    listed = [tool["name"] for tool in rpc("tools/list", {})["result"]["tools"]]
    names = {name.split("_")[2]: name for name in listed if name.startswith("mcp_everything_")}
    asked = rpc("tools/call", {"name": names["trigger"], "arguments": {}})["result"]
    assert asked["resultType"] == "input_required", asked
    ((key, request),) = asked["inputRequests"].items()
    assert key.startswith("input_")
    assert request["params"]["mode"] == "form"
    assert request["params"]["message"] == QUESTION
    waiting = rpc("tools/call", {"name": names["echo"], "arguments": {"message": "hi"}})["result"]
    assert "resultType" not in waiting or waiting["resultType"] != "input_required", waiting
    assert waiting["isError"] is False
    assert waiting["structuredContent"]["status"] == "awaiting_approval"
    assert waiting["structuredContent"]["approval_url"].endswith(waiting["structuredContent"]["call_id"])


def test_an_earlier_client_gets_the_question_in_a_notice_and_answers_it_with_answer_call(hub: Hub) -> None:
    endpoint = _endpoint(hub)

    async def legacy(work: Any) -> Any:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {endpoint['token']}"}, timeout=30)
        async with http, Client(streamable_http_client(endpoint["url"], http_client=http), mode="legacy") as mcp:
            return await work(mcp)

    async def ask(mcp: Any) -> tuple[Any, Any, Any]:
        first = await mcp.call_tool(await _tool_name(mcp), {})
        call_id = first.structured_content["call_id"]
        wrong = await mcp.call_tool("answer_call", {"call_id": call_id, "content": {"name": 42}})
        right = await mcp.call_tool("answer_call", {"call_id": call_id, "content": {"name": "Mary Jackson"}})
        return first, wrong, right

    first, wrong, right = asyncio.run(legacy(ask))
    assert first.is_error is False
    notice = first.structured_content
    assert notice["status"] == "awaiting_approval"
    assert notice["input_request"]["message"] == QUESTION
    assert "answer_call" in _text(first)
    assert wrong.is_error is True
    assert wrong.structured_content["error"]["code"] == "invalid_content"
    assert right.is_error is False
    assert right.structured_content["status"] in WAITING

    async def check(mcp: Any) -> Any:
        return await mcp.call_tool("check_call", {"call_id": notice["call_id"]})

    seen: list[Any] = []

    def settled() -> bool:
        seen.append(asyncio.run(legacy(check)))
        return (seen[-1].structured_content or {}).get("status") not in WAITING

    hub.process.wait_for(settled, "the answered call to run")
    assert "- Name: Mary Jackson" in _text(seen[-1])


@pytest.mark.skipif(BROWSER is None, reason="no Chromium on this machine (Debian: apt-get install chromium)")
def test_a_person_answers_the_question_on_the_calls_page(hub: Hub, tmp_path: Any) -> None:
    """The console's page of the call (headless Chromium) shows the service's question and a field for the answer,
    prefilled with the schema's defaults and checked against it before anything is sent."""
    from tests.functional.test_console_browser import card, js, page_tab, press, replace_text, sign_in, text, until

    call_id = _asking_call(hub)
    with chromium(tmp_path / "profile") as browser:
        tab = page_tab(browser)
        sign_in(tab, hub, hub.admin_key, page=f"/console/approvals/{call_id}")  # type: ignore[arg-type]
        until(tab, browser, f"!!document.querySelector('{card(call_id)} button[data-action=modify]')", "the form")
        shown = text(tab, card(call_id))
        assert QUESTION in shown
        assert js(tab, f"document.querySelector('{card(call_id)} button[data-action=approve]').hidden") is True
        press(tab, f'{card(call_id)} button[data-action="modify"]')
        field = f"#args-{call_id}"
        until(tab, browser, f"!document.querySelector('{card(call_id)} form.modify').hidden", "the answer's field")
        assert "It was a dark and stormy night." in js(tab, f"document.querySelector('{field}').value")

        replace_text(tab, field, '{"integer": 500}')
        press(tab, f"{card(call_id)} form.modify button[type=submit]")
        until(tab, browser, f"!!document.querySelector('#args-error-{call_id} li')", "the field's errors")
        errors = text(tab, f"#args-error-{call_id}")
        assert "name: is required" in errors
        assert "integer: must be at most 100" in errors
        assert _call(hub, call_id)["status"] == "awaiting_approval"

        replace_text(tab, field, '{"name": "Dorothy Vaughan"}')
        press(tab, f"{card(call_id)} form.modify button[type=submit]")
        # The page follows the call once answered (its card is replaced by the call's details).
        ran = "document.getElementById('status').innerText.includes('completed')"
        refused = f"!!document.querySelector('#args-error-{call_id}')?.innerText"
        until(tab, browser, f"{ran} || {refused}", "the call to run with the answer")
        page = text(tab, "#call")
        assert "answered the service's question by" in page, page
        assert "Dorothy Vaughan" in page  # the result the service computed from the answer
    done = _settled(hub, call_id)
    assert done["status"] == "completed", done
    assert any("- Name: Dorothy Vaughan" in block.get("text", "") for block in done["result"]["content"])
