"""The numbers an operator watches and the spans around slow calls: tool calls by outcome, upstream latency,
rate-limited calls, catalog and OAuth refresh failures, pending approvals and the indexing backlog. In Lambda they are
Powertools metrics (EMF lines on stdout, namespace and ``service`` dimension from the environment) and X-Ray
subsegments; locally the container records nothing at all."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from moto import mock_aws

from mcpbridge.bootstrap import Container
from mcpbridge.domain.ids import new_id
from mcpbridge.domain.knowledge import KnowledgeAccess
from mcpbridge.http.apps import create_combined_app
from mcpbridge.lambda_entry import make_recovery_handler
from mcpbridge.observability import LambdaTelemetry, NoTelemetry
from mcpbridge.outbound.policy import EgressPolicy
from mcpbridge.settings import Settings
from tests.functional.test_agent_calls import Upstream
from tests.support.aws import REPO_ROOT, create_aws_resources, set_fake_aws_env
from tests.support.everything import serve
from tests.support.serve import free_port
from tests.support.stepfunctions import FakeLambdaContext

CONTEXT = FakeLambdaContext("arn:aws:lambda:eu-west-1:123456789012:function:f:live", "f", 60)


class RecordingTelemetry:
    def __init__(self) -> None:
        self.counts: list[tuple[str, float, str, dict[str, str]]] = []
        self.spans: list[tuple[str, dict[str, str]]] = []

    def count(self, name: str, value: float = 1, *, unit: str = "Count", **dimensions: str) -> None:
        self.counts.append((name, value, unit, dimensions))

    def span(self, name: str, **annotations: str) -> contextlib.AbstractContextManager[None]:
        self.spans.append((name, annotations))
        return contextlib.nullcontext()

    def named(self, name: str) -> list[tuple[float, str, dict[str, str]]]:
        return [(value, unit, dims) for n, value, unit, dims in self.counts if n == name]


@pytest.fixture
def restore_logging() -> Iterator[None]:
    import logging

    logger = logging.getLogger("mcpbridge")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    try:
        yield
    finally:
        logger.handlers[:], logger.level, logger.propagate = saved


@pytest.fixture
def recorded(tmp_path: Path) -> Iterator[tuple[Container, RecordingTelemetry]]:
    telemetry = RecordingTelemetry()
    container = Container(
        Settings(data_dir=tmp_path / "data"), telemetry=telemetry, egress=EgressPolicy(["127.0.0.1"]), embedder=None
    )
    try:
        yield container, telemetry
    finally:
        container.workflow.close()  # type: ignore[attr-defined]
        container.close()


def emf_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in text.splitlines() if raw.startswith('{"_aws"')]


def test_locally_the_container_records_nothing(tmp_path: Path) -> None:
    container = Container(Settings(data_dir=tmp_path / "data"))
    try:
        assert isinstance(container.telemetry, NoTelemetry)
    finally:
        container.close()


def test_lambda_telemetry_writes_emf_with_the_service_dimension(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "mcpbridge-prod")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "mcpbridge")
    telemetry = LambdaTelemetry()
    telemetry.flush()  # nothing recorded: nothing written (and no warning)
    assert emf_lines(capsys.readouterr().out) == []

    telemetry.count("IndexingBacklog", 3)
    telemetry.count("ToolCalls", outcome="completed")
    with telemetry.span("upstream.call_tool", service_id="svc_1"):  # outside Lambda the tracer is off
        pass
    telemetry.flush()
    lines = emf_lines(capsys.readouterr().out)
    by_metric = {line["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Name"]: line for line in lines}
    backlog = by_metric["IndexingBacklog"]
    assert backlog["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "mcpbridge"
    assert backlog["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["service"]]  # what the alarm reads
    assert (backlog["service"], backlog["IndexingBacklog"]) == ("mcpbridge-prod", [3.0])
    calls = by_metric["ToolCalls"]
    assert calls["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["service", "outcome"]]
    assert (calls["service"], calls["outcome"]) == ("mcpbridge-prod", "completed")


def test_a_tool_call_is_counted_by_outcome_its_upstream_call_timed_and_spanned(
    recorded: tuple[Container, RecordingTelemetry],
) -> None:
    container, telemetry = recorded
    upstream = Upstream()
    with (
        serve(upstream, lifespan="off") as base,
        TestClient(create_combined_app(container), raise_server_exceptions=False) as client,
    ):
        client.headers["Authorization"] = f"Bearer {container.identity.initialize().api_key}"
        service = client.post("/api/v1/mcp-services", json={"name": "pages", "url": f"{base}/mcp"}).json()["id"]
        assert client.post(f"/api/v1/mcp-services/{service}/metadata/refresh").status_code == 200
        ref = client.get("/api/v1/agent/tools/describe", params={"service_id": service, "tool_name": "echo"})
        answered = client.post(
            "/api/v1/agent/tool-calls", json={"tool_ref": ref.json()["tool_ref"], "arguments": {"text": "hi"}}
        )
        assert answered.json()["status"] == "completed", answered.text

    assert telemetry.named("ToolCalls") == [(1, "Count", {"outcome": "completed"})]
    ((latency, unit, dimensions),) = telemetry.named("UpstreamLatency")
    assert (unit, dimensions) == ("Milliseconds", {})
    assert latency > 0
    assert ("upstream.call_tool", {"service_id": service, "tool": "echo"}) in telemetry.spans
    assert ("upstream.refresh_catalog", {"service_id": service}) in telemetry.spans


def test_a_failed_catalog_refresh_is_counted(recorded: tuple[Container, RecordingTelemetry]) -> None:
    container, telemetry = recorded
    with TestClient(create_combined_app(container), raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {container.identity.initialize().api_key}"
        closed = f"http://127.0.0.1:{free_port()}/mcp"  # nothing listens there
        service = client.post("/api/v1/mcp-services", json={"name": "gone", "url": closed}).json()["id"]
        assert client.post(f"/api/v1/mcp-services/{service}/metadata/refresh").status_code == 502
    assert telemetry.named("CatalogRefreshFailures") == [(1, "Count", {})]


def test_rate_limited_calls_are_counted(recorded: tuple[Container, RecordingTelemetry]) -> None:
    container, telemetry = recorded
    limiter = container.rate_limiter
    assert limiter.hit("ep_1", 1).allowed
    assert not limiter.hit("ep_1", 1).allowed
    assert not limiter.hit("ep_1", 1).allowed
    assert telemetry.named("RateLimitedCalls") == [(1, "Count", {})] * 2


def test_the_sweep_reports_the_backlog_and_the_pending_approvals(
    recorded: tuple[Container, RecordingTelemetry], restore_logging: None
) -> None:
    container, telemetry = recorded
    container.__dict__["jobs"] = HeldJobs()
    access = KnowledgeAccess("ws_metrics")
    kb = container.knowledge_bases.create(access, name="Metrics")
    for i in range(3):
        container.documents.create_from_text(access, kb.id, title=f"t{i}", content="Narwhals.")
    for status in ("awaiting_approval", "awaiting_approval", "awaiting_oauth"):
        container.tool_call_records.create(
            {
                "id": new_id("call"),
                "workspace_id": "ws_metrics",
                "owner_user_id": "usr_1",
                "service_id": "svc_1",
                "tool_name": "echo",
                "tool_ref": "ref_1",
                "arguments": {},
                "status": status,
            }
        )
    make_recovery_handler(container)({"task": "sweep"}, CONTEXT)
    assert telemetry.named("IndexingBacklog") == [(3, "Count", {})]
    assert telemetry.named("PendingApprovals") == [(2, "Count", {})]


class HeldJobs:
    def __init__(self) -> None:
        self.submitted: list[tuple[str, dict[str, str]]] = []

    def submit(self, kind: str, payload: dict[str, str]) -> None:
        self.submitted.append((kind, dict(payload)))


def load_handler(function: str) -> Callable[[dict[str, Any], Any], dict[str, Any]]:
    path = REPO_ROOT / "functions" / function / "handler.py"
    spec = importlib.util.spec_from_file_location(f"mcpbridge_lambda_{function}_{uuid.uuid4().hex}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    handler: Callable[[dict[str, Any], Any], dict[str, Any]] = module.handler
    return handler


def test_the_indexer_reports_the_backlog_after_each_job(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path, restore_logging: None
) -> None:
    set_fake_aws_env(monkeypatch)
    with mock_aws():
        resources = create_aws_resources(table_name="mcpbridge-metrics")
        env = {
            **resources.settings_env(),
            "MCPBRIDGE_EMBEDDING_PROVIDER": "none",
            "MCPBRIDGE_INDEX_CACHE_DIR": str(tmp_path / "cache"),
            "POWERTOOLS_SERVICE_NAME": "mcpbridge-metrics",
            "POWERTOOLS_METRICS_NAMESPACE": "mcpbridge",
        }
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        jobs = HeldJobs()
        writer = Container(Settings(), jobs=jobs, embedder=None)
        access = KnowledgeAccess("ws_metrics")
        kb = writer.knowledge_bases.create(access, name="Metrics")
        for i in range(3):
            writer.documents.create_from_text(access, kb.id, title=f"t{i}", content=f"Walruses {i}.")
        indexer = load_handler("indexer")
        capsys.readouterr()

        kind, payload = jobs.submitted[0]
        assert indexer({"kind": kind, "payload": payload}, CONTEXT) == {"status": "done"}

        lines = [line for line in emf_lines(capsys.readouterr().out) if "IndexingBacklog" in line]
        assert [(line["service"], line["IndexingBacklog"]) for line in lines] == [("mcpbridge-metrics", [2.0])]
        writer.close()
