"""Synchronous routes answer within the request's budget (``MCPBRIDGE_REQUEST_BUDGET_SECONDS``, 20 s behind API
Gateway, which gives up at 29 s) with a clear answer, never a gateway timeout:

* an agent tool call to a service that may take longer than the budget runs in the workflow (Step Functions,
  executed by moto, its tasks running the real steps) and is answered 202 with a status to poll;
* a call run at once, a catalog pull, end by the budget however slow the upstream;
* an answer whose language model fails or is too slow is an extractive one that says so;
* the clients of the models wait no longer than the budget allows, without retries that would outlast it.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from fastapi.testclient import TestClient
from moto import mock_aws

from mcpbridge.agent.lambda_steps import make_steps_handler
from mcpbridge.bootstrap import Container
from mcpbridge.domain.knowledge import KnowledgeAccess
from mcpbridge.errors import UpstreamError
from mcpbridge.http.apps import create_combined_app
from mcpbridge.outbound.policy import EgressPolicy
from mcpbridge.settings import Settings
from tests.functional.test_agent_calls import Upstream
from tests.support.aws import create_aws_resources, set_fake_aws_env
from tests.support.everything import serve
from tests.support.moto_atomic import atomic_dynamodb
from tests.support.stepfunctions import (
    MOTO_WORKFLOW_CONFIG,
    route_lambda_invocations,
    stop_executions,
    wait_until,
)

REGION = "eu-west-1"
SERVICES = "/api/v1/mcp-services"
CALLS = "/api/v1/agent/tool-calls"


def register(client: TestClient, url: str, **advanced: float) -> str:
    body: dict[str, Any] = {"name": f"svc-{uuid.uuid4().hex[:8]}", "url": url}
    if advanced:
        body["advanced_config"] = advanced
    created = client.post(SERVICES, json=body)
    assert created.status_code == 201, created.text
    service = str(created.json()["id"])
    assert client.post(f"{SERVICES}/{service}/metadata/refresh").status_code == 200
    return service


def tool_ref(client: TestClient, service_id: str, tool: str) -> str:
    described = client.get("/api/v1/agent/tools/describe", params={"service_id": service_id, "tool_name": tool})
    assert described.status_code == 200, described.text
    return str(described.json()["tool_ref"])


@pytest.fixture
def aws_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Container, TestClient]]:
    set_fake_aws_env(monkeypatch)
    with mock_aws(config=MOTO_WORKFLOW_CONFIG), atomic_dynamodb():
        resources = create_aws_resources(table_name="mcpbridge-budget", tool_call_workflow=True)
        settings = Settings(
            backend="aws",
            table_name=resources.table_name,
            kms_key_id=resources.kms_key_id,
            bucket_name=resources.bucket_name,
            aws_region=REGION,
            state_machine_arn=resources.state_machine_arn,
            index_cache_dir=tmp_path / "index-cache",
            request_budget_seconds=20,
        )
        container = Container(settings, egress=EgressPolicy(["127.0.0.1"]))
        routes = {resources.tool_calls_function: make_steps_handler(lambda: container.tool_call_steps)}
        try:
            with (
                route_lambda_invocations(routes),
                TestClient(create_combined_app(container), raise_server_exceptions=False) as client,
            ):
                client.headers["Authorization"] = f"Bearer {container.identity.initialize().api_key}"
                yield container, client
                stop_executions(REGION)
        finally:
            container.close()


def test_a_call_that_may_outlast_the_request_runs_in_the_workflow_with_a_status_to_poll(
    aws_world: tuple[Container, TestClient],
) -> None:
    container, client = aws_world
    upstream = Upstream()
    with serve(upstream, lifespan="off") as base:
        slow = register(client, f"{base}/mcp")  # the default timeout, 30 s: more than the 20 s budget
        answered = client.post(CALLS, json={"tool_ref": tool_ref(client, slow, "echo"), "arguments": {"text": "hi"}})
        assert answered.status_code == 202, answered.text
        body = answered.json()
        assert body["status"] == "ready"
        assert "runs in the background" in body["notice"]
        call_id = body["pending_id"]

        def ended() -> dict[str, Any] | None:
            polled: dict[str, Any] = client.get(f"{CALLS}/{call_id}").json()
            return polled if polled["status"] not in ("ready", "running") else None

        done = wait_until(ended, what="the background call")
        assert done["status"] == "completed", done
        assert done["result"]["structuredContent"] == {"echoed": "hi"}
        execution = container.workflow.execution_arn(call_id)  # type: ignore[attr-defined]
        sfn = boto3.client("stepfunctions", region_name=REGION)
        assert sfn.describe_execution(executionArn=execution)["status"] in ("RUNNING", "SUCCEEDED")

        # A service answering within the budget is still called at once.
        quick = register(client, f"{base}/mcp", timeout=10)
        at_once = client.post(CALLS, json={"tool_ref": tool_ref(client, quick, "echo"), "arguments": {"text": "yo"}})
        assert at_once.status_code == 200, at_once.text
        assert at_once.json()["status"] == "completed"
    assert [name for name, _ in upstream.ran] == ["echo", "echo"]


def waited(message: str) -> float:
    """The deadline a timeout message says was applied ("... did not answer within 0.95 s ...")."""
    found = re.search(r"within ([0-9.]+) s", message)
    assert found is not None, message
    return float(found.group(1))


class Stalling:
    """An MCP server that lists its tools, then never answers a tool call (or, ``stall_listing``, a listing)."""

    def __init__(self, *, stall_listing: bool = False) -> None:
        self.upstream = Upstream()
        self.stall_listing = stall_listing

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            body = b""
            while True:
                message = await receive()
                body += message.get("body", b"")
                if not message.get("more_body", False):
                    break
            stalls = b'"tools/call"' in body or (self.stall_listing and b'"tools/list"' in body)
            if stalls:
                await asyncio.sleep(6)  # longer than the budget, shorter than the test server's shutdown
                return
            replayed = [{"type": "http.request", "body": body, "more_body": False}]

            async def again() -> Any:
                return replayed.pop(0) if replayed else await receive()

            await self.upstream(scope, again, send)
            return
        await self.upstream(scope, receive, send)


@pytest.fixture
def budgeted(tmp_path: Path) -> Iterator[tuple[Container, TestClient]]:
    settings = Settings(data_dir=tmp_path / "data", request_budget_seconds=1)
    container = Container(settings, egress=EgressPolicy(["127.0.0.1"]), embedder=None)
    try:
        with TestClient(create_combined_app(container), raise_server_exceptions=False) as client:
            client.headers["Authorization"] = f"Bearer {container.identity.initialize().api_key}"
            yield container, client
    finally:
        container.workflow.close()  # type: ignore[attr-defined]
        container.close()


def test_a_call_run_at_once_ends_by_the_budget_and_says_what_happened(budgeted: tuple[Container, TestClient]) -> None:
    _, client = budgeted
    with serve(Stalling(), lifespan="off") as base:
        service = register(client, f"{base}/mcp", timeout=5)  # longer than the 1 s budget
        answered = client.post(CALLS, json={"tool_ref": tool_ref(client, service, "echo"), "arguments": {"text": "hi"}})
    assert answered.status_code == 200, answered.text
    body = answered.json()
    # It may have run upstream: reported as uncertain (never replayed), within the request's budget.
    assert body["status"] == "uncertain"
    assert body["error"]["code"] == "outcome_unknown"
    assert waited(body["error"]["message"]) <= 1  # the budget's end, not the service's 5 s


def test_a_catalog_pull_ends_by_the_budget(budgeted: tuple[Container, TestClient]) -> None:
    _, client = budgeted
    with serve(Stalling(stall_listing=True), lifespan="off") as base:
        created = client.post(SERVICES, json={"name": "stalling", "url": f"{base}/mcp"})
        refreshed = client.post(f"{SERVICES}/{created.json()['id']}/metadata/refresh")  # its own timeout is 30 s
    assert refreshed.status_code == 502, refreshed.text
    assert refreshed.json()["code"] in ("upstream_timeout", "outcome_unknown")
    assert waited(refreshed.json()["detail"]) <= 1  # not the service's 30 s


class FailingLlm:
    name = "test:slow"

    def complete(self, system: str, messages: Any, *, max_tokens: int = 1024) -> str:
        raise UpstreamError("the model did not answer within 15 s", code="provider_timeout")


def test_an_answer_whose_model_is_too_slow_is_extractive_and_says_so(tmp_path: Path) -> None:
    container = Container(Settings(data_dir=tmp_path / "data", jobs="inline"), embedder=None, llm=FailingLlm())
    try:
        access = KnowledgeAccess("ws_ask")
        kb = container.knowledge_bases.create(access, name="Zoo")
        container.documents.create_from_text(access, kb.id, title="walruses", content="Walruses haul out on ice.")
        answer = container.answers.ask(access, "Where do walruses haul out?", owner="usr_1", credential="key_1")
    finally:
        container.close()
    assert answer.mode == "extractive"
    assert any("did not answer (provider_timeout)" in notice for notice in answer.notices)
    assert answer.references


def test_the_model_clients_wait_no_longer_than_the_budget_allows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_fake_aws_env(monkeypatch)
    settings = Settings(
        data_dir=tmp_path / "data",
        llm_provider="bedrock",
        embedding_provider="bedrock",
        request_budget_seconds=20,
    )
    container = Container(settings)
    llm_config = container.llm._client.meta.config  # type: ignore[union-attr]
    assert (llm_config.read_timeout, llm_config.retries["total_max_attempts"]) == (15, 1)  # one try, 15 s
    embedder_config = container.embedder._client.meta.config  # type: ignore[union-attr]
    assert embedder_config.read_timeout * embedder_config.retries["total_max_attempts"] <= 10
    unbounded = Container(Settings(data_dir=tmp_path / "data", llm_provider="bedrock"))
    assert unbounded.llm._client.meta.config.read_timeout == 60  # type: ignore[union-attr]
