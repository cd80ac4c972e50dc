"""``ask`` and ``add_document`` as Tasks (the extension ``io.modelcontextprotocol/tasks``), through the official SDK
client over real HTTP: against the combined app served on 127.0.0.1 (what ``mcpbridge serve`` runs, its jobs on the
process's thread pool) and against the template's Lambda functions behind an emulated HTTP API on moto, the task's
run an asynchronous invocation of the indexer function. The extension is negotiated on 2026-07-28 only: a
2025-11-25 client (``legacy``) gets the synchronous answer, which is what the task completes with."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcpbridge.http.mcp.tool_tasks import owner_of
from mcpbridge.knowledge.tool_tasks import LOST, RESTARTED, RETENTION_SECONDS, RUN_DEADLINE_SECONDS, task_key
from tests.support.indexer_lambda import INDEXER_ALIAS_ARN, IndexerRuns, asynchronous_indexer
from tests.support.live_server import live_server
from tests.support.modern_rpc import TASKS, modern_request
from tests.support.oauth_flow import Browser, Hub, OAuthClient, close_clients, hub_on, lambda_hub
from tests.support.readiness import Worker
from tests.support.readiness import wait_until as wait_for
from tests.support.tasks_client import Tasks

BACKENDS = ["serve", "lambda"]
MODERN = "2026-07-28"
WALRUS = "Walruses haul out on sea ice to rest between dives for clams."
LOCAL = "127.0.0.1"
"""Where the web page ``add_document`` imports is served (a private address, allowed)."""
PRIVATE = "Walruses in the private base rest on the pier of the research station."


@dataclass
class World:
    hub: Hub
    backend: str
    kb: str
    endpoint: dict[str, Any]
    other: dict[str, Any]
    indexer: IndexerRuns | None
    oauth_token: str
    """An OAuth access token on ``endpoint`` of a user whose key reaches the first knowledge base only."""


@contextlib.contextmanager
def _hub(backend: str, tmp: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Hub, IndexerRuns | None]]:
    if backend == "serve":
        with hub_on("local", tmp, monkeypatch, jobs="threads", ssrf_allowlist=LOCAL) as hub:
            yield hub, None
    else:
        with (
            lambda_hub(
                monkeypatch, jobs="lambda", indexer_function=INDEXER_ALIAS_ARN, ssrf_allowlist="127.0.0.1"
            ) as hub,
            asynchronous_indexer() as runs,
        ):
            yield hub, runs


@pytest.fixture(scope="module", params=BACKENDS)
def world(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with (
        pytest.MonkeyPatch.context() as monkeypatch,
        _hub(request.param, tmp_path_factory.mktemp("tasks"), monkeypatch) as (hub, runs),
    ):
        kb = hub.post("/api/v1/knowledge-bases", {"name": "Field notes"})["id"]
        document = hub.post(f"/api/v1/knowledge-bases/{kb}/documents", {"title": "Walruses", "content": WALRUS})
        _wait_indexed(hub, kb, document["id"])
        private = hub.post("/api/v1/knowledge-bases", {"name": "Private"})["id"]
        secret = hub.post(f"/api/v1/knowledge-bases/{private}/documents", {"title": "Station", "content": PRIVATE})
        _wait_indexed(hub, private, secret["id"])
        tools = ["ask", "add_document", "search_knowledge", "list_documents"]
        endpoint = hub.publish(name="Tasks", tools=tools)
        other = hub.publish(name="Other", tools=tools)
        _, key = hub.user_with_key("Ann", knowledge_base_ids=[kb])
        client = OAuthClient(endpoint["url"])
        client.discover()
        assert client.register().status_code == 201
        token = str(client.tokens(Browser(), key)["access_token"])
        close_clients()
        yield World(hub, request.param, kb, endpoint, other, runs, token)


def _wait_indexed(hub: Hub, kb: str, document_id: str) -> dict[str, Any]:
    def indexed() -> dict[str, Any] | None:
        with hub.api() as api:
            found: dict[str, Any] = api.get(f"/api/v1/documents/{document_id}").json()
        return found if found["parse_status"] not in ("pending", "processing") else None

    found: dict[str, Any] = wait_until(indexed, what="the document's indexing")
    return found


def wait_until(look: Any, *, what: str) -> Any:
    """Poll ``look`` until it returns something, while this process (its job threads, the served app) works."""
    found: list[Any] = []

    def ready() -> bool:
        value = look()
        if value is None or value is False:
            return False
        found[:] = [value]
        return True

    wait_for(ready, Worker.pid("this process", os.getpid()), what=what)
    return found[0]


async def _session(url: str, token: str, mode: str, extensions: list[Any], work: Any) -> Any:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    client = Client(streamable_http_client(url, http_client=http), mode=mode, extensions=extensions)
    async with http, client:
        return await work(client)


def session(endpoint: dict[str, Any], mode: str, work: Any, *extensions: Any) -> Any:
    return asyncio.run(_session(endpoint["url"], endpoint["token"], mode, list(extensions), work))


def _rpc(endpoint: dict[str, Any], method: str, params: dict[str, Any], *, tasks: bool = True) -> dict[str, Any]:
    body, headers = modern_request(method, params, endpoint["token"], {"extensions": {TASKS: {}}} if tasks else None)
    if "taskId" in params:
        headers["mcp-name"] = str(params["taskId"])
    with httpx.Client(timeout=60) as http:
        answered: dict[str, Any] = http.post(endpoint["url"], json=body, headers=headers).json()
    return answered


def _without_session(data: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in data.items() if key != "session_id"}


def test_ask_runs_as_a_task_to_the_answer_the_synchronous_call_gives(world: World) -> None:
    question = {"question": "Where do walruses rest?"}
    tasks = Tasks(poll_seconds=0.2)

    async def work(client: Client) -> Any:
        return await client.call_tool("ask", question)

    as_task = session(world.endpoint, MODERN, work, tasks)
    synchronous = session(world.endpoint, MODERN, work)
    legacy_tasks = Tasks(poll_seconds=0.2)
    legacy = session(world.endpoint, "legacy", work, legacy_tasks)

    (created,) = tasks.created
    assert created.task_id.startswith("task_")
    assert created.status == "working"
    assert created.ttl_ms == RETENTION_SECONDS * 1000
    assert tasks.polls[-1].status == "completed"
    assert not as_task.is_error
    assert "Walruses haul out on sea ice" in as_task.structured_content["answer"]
    assert _without_session(as_task.structured_content) == _without_session(synchronous.structured_content)
    assert _without_session(legacy.structured_content) == _without_session(synchronous.structured_content)
    assert legacy_tasks.created == [], "on 2025-11-25 the extension is not negotiated: the call answers at once"
    if world.indexer is not None:  # on AWS the run was the indexer's, outside the MCP function's request
        assert created.task_id in {event["payload"]["task_id"] for event in world.indexer.of_kind("tool_task")}


def test_add_document_as_a_task_completes_once_the_document_is_indexed(world: World) -> None:
    tasks = Tasks(poll_seconds=0.2)
    arguments = {"knowledge_base_id": world.kb, "title": "Seals", "content": "Seals sleep in the water, upright."}

    async def work(client: Client) -> Any:
        return await client.call_tool("add_document", arguments)

    added = session(world.endpoint, MODERN, work, tasks)
    assert len(tasks.created) == 1
    document = added.structured_content["document"]
    assert document["title"] == "Seals"
    assert document["parse_status"] == "completed", "the task ends when the document's indexing has ended"
    with world.hub.api() as api:
        stored = api.get(f"/api/v1/documents/{document['id']}").json()
    assert stored["parse_status"] == "completed"


def test_a_refused_call_answers_at_once_and_creates_no_task(world: World) -> None:
    tasks = Tasks(poll_seconds=0.2)
    before = len(world.hub.items("TOOLTASK#")), len(world.hub.items("DOC#"))

    async def work(client: Client) -> Any:
        return (
            await client.call_tool("ask", {"question": "  "}),
            await client.call_tool("add_document", {"knowledge_base_id": world.kb, "title": "No content"}),
            await client.call_tool("add_document", {"knowledge_base_id": "kb_nope", "title": "x", "content": "y"}),
        )

    blank, empty, unknown = session(world.endpoint, MODERN, work, tasks)
    assert tasks.created == []
    assert blank.is_error
    assert blank.structured_content["error"]["code"] == "missing_argument"
    assert empty.is_error
    assert empty.structured_content["error"]["code"] == "missing_argument"
    assert unknown.is_error
    assert unknown.structured_content["error"]["code"] == "kb_not_found"
    assert (len(world.hub.items("TOOLTASK#")), len(world.hub.items("DOC#"))) == before, "nothing was recorded"


def test_only_the_caller_that_asked_reads_or_cancels_its_task(world: World) -> None:
    created = _rpc(world.endpoint, "tools/call", {"name": "ask", "arguments": {"question": "Where do walruses rest?"}})
    task_id = created["result"]["taskId"]
    assert created["result"]["resultType"] == "task"
    assert _rpc(world.other, "tasks/get", {"taskId": task_id})["error"]["code"] == -32602
    assert _rpc(world.other, "tasks/cancel", {"taskId": task_id})["error"]["code"] == -32602
    assert _rpc(world.endpoint, "tasks/get", {"taskId": task_id}, tasks=False)["error"]["code"] == -32021
    assert _rpc(world.endpoint, "tasks/get", {"taskId": "task_01jd8x2k7m0000000000000000"})["error"]["code"] == -32602

    def ended() -> dict[str, Any] | None:
        got: dict[str, Any] = _rpc(world.endpoint, "tasks/get", {"taskId": task_id})["result"]
        return got if got["status"] != "working" else None

    done = wait_until(ended, what="the task to end")
    assert done["status"] == "completed"
    assert done["result"]["structuredContent"]["references"], "the answer cites the document"
    # Cancelling an ended task is acknowledged (idempotent) and changes nothing.
    assert _rpc(world.endpoint, "tasks/cancel", {"taskId": task_id})["result"]["resultType"] == "complete"
    assert _rpc(world.endpoint, "tasks/get", {"taskId": task_id})["result"]["status"] == "completed"


def test_a_cancelled_task_never_runs(world: World) -> None:
    """A task cancelled before its job ran: the job finds it cancelled and runs nothing."""
    hub, endpoint = world.hub, world.endpoint
    access = hub.container.endpoints.find(endpoint["id"])
    assert access is not None
    task = hub.container.tool_tasks.create(
        access.knowledge_access(),
        endpoint_id=endpoint["id"],
        owner=owner_of(endpoint["id"], None),
        user_id=None,
        client_id=None,
        tool="ask",
        arguments={"question": "Where do walruses rest?"},
        base_url=hub.base_url,
        run=False,
    )
    assert _rpc(endpoint, "tasks/cancel", {"taskId": task.id})["result"]["resultType"] == "complete"
    hub.container.run_job("tool_task", {"workspace_id": task.workspace_id, "task_id": task.id})
    got = _rpc(endpoint, "tasks/get", {"taskId": task.id})["result"]
    assert got["status"] == "cancelled"
    assert "result" not in got
    assert _rpc(endpoint, "tasks/cancel", {"taskId": task.id})["result"]["resultType"] == "complete"


def test_a_task_whose_run_was_lost_is_failed_with_the_reason(world: World) -> None:
    """Under serve, a task left working by an earlier process (since restarted); on AWS, one whose run started longer
    ago than the indexer's timeout: failed when next read, saying why, and recorded so."""
    hub, endpoint = world.hub, world.endpoint
    workspace = hub.container.identity.installed_workspace_id()
    assert workspace is not None
    now = int(hub.container.clock.now())
    task_id = "task_01jd8x2k7m00000000000000ab"
    key = task_key(workspace, task_id)
    if world.backend == "serve":
        run, reason = {"runner": "process:an-earlier-one", "started_at": now}, RESTARTED
    else:
        run, reason = {"started_at": now - RUN_DEADLINE_SECONDS - 60}, LOST
    item = {
        **key.as_dict(),
        "endpoint_id": endpoint["id"],
        "owner": owner_of(endpoint["id"], None),
        "tool": "ask",
        "arguments": {"question": "Where do walruses rest?"},
        "status": "working",
        **run,
        "created_at": "2026-12-07T00:00:00Z",
        "updated_at": "2026-12-07T00:00:00Z",
        "expires_at": now + 3600,
    }
    hub.container.store.put(item)
    got = _rpc(endpoint, "tasks/get", {"taskId": task_id})["result"]
    assert (got["status"], got["statusMessage"]) == ("failed", reason)
    stored = hub.container.store.get(key)
    assert stored is not None
    assert stored["status"] == "failed"


def test_an_oauth_users_task_is_theirs_and_answers_within_their_access(world: World) -> None:
    """The user's task runs with the user's access (one knowledge base), not the endpoint's; the endpoint's own
    token and the user each see only their own tasks."""
    question = {"name": "ask", "arguments": {"question": "Where do walruses rest?"}}
    as_user = {**world.endpoint, "token": world.oauth_token}
    mine = _rpc(as_user, "tools/call", question)["result"]["taskId"]
    theirs = _rpc(world.endpoint, "tools/call", question)["result"]["taskId"]
    assert _rpc(world.endpoint, "tasks/get", {"taskId": mine})["error"]["code"] == -32602
    assert _rpc(as_user, "tasks/get", {"taskId": theirs})["error"]["code"] == -32602

    def ended(who: dict[str, Any], task_id: str) -> dict[str, Any]:
        def look() -> dict[str, Any] | None:
            got: dict[str, Any] = _rpc(who, "tasks/get", {"taskId": task_id})["result"]
            return got if got["status"] != "working" else None

        found: dict[str, Any] = wait_until(look, what="the task to end")
        return found

    user_refs = ended(as_user, mine)["result"]["structuredContent"]["references"]
    endpoint_refs = ended(world.endpoint, theirs)["result"]["structuredContent"]["references"]
    assert {ref["knowledge_base_id"] for ref in user_refs} == {world.kb}
    assert "Station" in {ref["document_title"] for ref in endpoint_refs}, "the endpoint reaches the private base"


async def _page(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """A web page of notes, which ``add_document`` imports by its URL."""
    body = b"# Narwhals\n\nNarwhals winter under the pack ice of Baffin Bay.\n"
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/markdown")]})
    await send({"type": "http.response.body", "body": body})


def test_add_document_from_a_url_is_fetched_and_indexed_by_the_tasks_run(world: World) -> None:
    tasks = Tasks(poll_seconds=0.2)
    with live_server(_page) as site:
        arguments = {"knowledge_base_id": world.kb, "title": "Narwhals", "url": f"{site}/narwhals.md"}

        async def work(client: Client) -> Any:
            return await client.call_tool("add_document", arguments)

        added = session(world.endpoint, MODERN, work, tasks)
    (created,) = tasks.created
    assert not added.is_error, added.structured_content
    document = added.structured_content["document"]
    assert (document["title"], document["parse_status"]) == ("Narwhals", "completed")

    async def search(client: Client) -> Any:
        return await client.call_tool("search_knowledge", {"query": "Baffin"})

    found = session(world.endpoint, MODERN, search)
    assert document["id"] in str(found.structured_content), "the imported page is searchable"
    if world.indexer is not None:
        assert created.task_id in {event["payload"]["task_id"] for event in world.indexer.of_kind("tool_task")}


def test_a_task_whose_tool_refuses_completes_with_the_synchronous_error_result(world: World) -> None:
    """Refused by the run (an unknown session is only found out there): the task completes with the error result
    the synchronous call answers."""
    arguments = {"question": "And what do they eat?", "session_id": "ses_01jd8x2k7m0000000000000000"}
    tasks = Tasks(poll_seconds=0.2)

    async def work(client: Client) -> Any:
        return await client.call_tool("ask", arguments)

    as_task = session(world.endpoint, MODERN, work, tasks)
    synchronous = session(world.endpoint, MODERN, work)
    assert len(tasks.created) == 1
    assert tasks.polls[-1].status == "completed"
    assert as_task.is_error
    assert as_task.structured_content == synchronous.structured_content
    assert as_task.structured_content["error"]["code"] == "session_not_found"
