"""Agents reading an external server's resources and prompts, and re-pulling their own catalog, over REST on both
backends, against the real ``@modelcontextprotocol/server-everything`` (it has static text resources, dynamic text
and blob resources, and prompts with required arguments)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from mcpbridge.agent.discovery import EXTERNAL_DATA_NOTICE
from mcpbridge.agent.external_reads import REFRESHES_PER_MINUTE, ExternalReads
from mcpbridge.bootstrap import Container
from mcpbridge.client.specs import SpecSource
from mcpbridge.http.apps import create_combined_app
from mcpbridge.outbound.policy import EgressPolicy
from tests.support.clock import FakeClock
from tests.support.containers import container_on
from tests.support.everything import Everything

pytestmark = [pytest.mark.slow]

SERVICES = "/api/v1/mcp-services"
RESOURCES = "/api/v1/agent/resources"
READ = "/api/v1/agent/resources/read"
PROMPTS = "/api/v1/agent/prompts"
GET_PROMPT = "/api/v1/agent/prompts/get"
REFRESH = "/api/v1/agent/catalog/refresh"
STATIC = "demo://resource/static/document/"
BLOB = "demo://resource/dynamic/blob/7"


@pytest.fixture(scope="module", params=["streamableHttp", "sse"])
def everything(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Everything]:
    server = Everything(request.param, tmp_path_factory.mktemp("everything"))
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture(params=["local", "aws"])
def container(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Container]:
    with container_on(
        request.param, tmp_path, monkeypatch, clock=FakeClock(), egress=EgressPolicy(["127.0.0.1"])
    ) as built:
        yield built


@pytest.fixture
def client(container: Container) -> Iterator[TestClient]:
    key = container.identity.initialize().api_key
    with TestClient(create_combined_app(container), raise_server_exceptions=False) as test_client:
        test_client.headers["Authorization"] = f"Bearer {key}"
        yield test_client


@pytest.fixture
def service_id(client: TestClient, everything: Everything) -> str:
    body = {"name": "everything", "transport": everything.transport, "url": everything.url}
    created = client.post(SERVICES, json=body)
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


def ok(response: Any) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def problem(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["code"] == code, body
    return body


def test_resources_listed_paged_and_read(client: TestClient, service_id: str) -> None:
    first = ok(client.get(RESOURCES, params={"service_id": service_id, "limit": 3}))
    assert first["notice"] == EXTERNAL_DATA_NOTICE
    assert len(first["items"]) == 3
    assert first["next_cursor"]
    seen = [item["uri"] for item in first["items"]]
    cursor = first["next_cursor"]
    while cursor:
        page = ok(client.get(RESOURCES, params={"service_id": service_id, "limit": 3, "cursor": cursor}))
        seen += [item["uri"] for item in page["items"]]
        cursor = page["next_cursor"]
    assert len(seen) == len(set(seen))
    assert seen == sorted(seen)
    statics = [uri for uri in seen if uri.startswith(STATIC)]
    assert statics
    described = [i for i in first["items"] if i["description"]]
    assert all(i["description"].startswith("[MCP Service: everything (external)] ") for i in described)

    text = ok(client.get(READ, params={"service_id": service_id, "uri": statics[0]}))
    assert text["untrusted"] is True
    assert text["notice"] == EXTERNAL_DATA_NOTICE
    assert text["contents"][0]["uri"] == statics[0]
    assert text["contents"][0]["text"]
    assert text["size_bytes"] == len(text["contents"][0]["text"].encode())
    assert text["max_bytes"] == 4 * 1024 * 1024

    blob = ok(client.get(READ, params={"service_id": service_id, "uri": BLOB}))
    assert base64.b64decode(blob["contents"][0]["blob"]).startswith(b"Resource 7:")
    assert blob["size_bytes"] == len(blob["contents"][0]["blob"])


def test_prompts_listed_and_got_with_their_arguments(client: TestClient, service_id: str) -> None:
    listed = ok(client.get(PROMPTS, params={"service_id": service_id, "limit": 50}))
    prompts = {p["name"]: p for p in listed["items"]}
    args = prompts["args-prompt"]
    assert {(a["name"], a["required"]) for a in args["arguments"]} == {("city", True), ("state", False)}
    assert args["description"].startswith("[MCP Service: everything (external)] ")

    got = ok(
        client.post(GET_PROMPT, json={"service_id": service_id, "name": "args-prompt", "arguments": {"city": "Lyon"}})
    )
    assert got["untrusted"] is True
    assert got["messages"][0]["content"]["text"] == "What's weather in Lyon?"


def test_bad_input_is_a_clear_4xx_and_changes_nothing(
    client: TestClient, service_id: str, container: Container
) -> None:
    ok(client.post(f"{SERVICES}/{service_id}/metadata/refresh"))
    before = ok(client.get(f"{SERVICES}/{service_id}/metadata"))

    problem(client.get(RESOURCES, params={"service_id": "svc_nosuchservice0000"}), 404, "service_not_found")
    problem(client.get(READ, params={"service_id": "svc_nosuchservice0000", "uri": BLOB}), 404, "service_not_found")
    problem(client.get(READ, params={"service_id": service_id, "uri": "no scheme here"}), 400, "invalid_resource_uri")
    problem(client.get(READ, params={"service_id": service_id, "uri": ""}), 400, "invalid_resource_uri")
    missing = problem(
        client.post(GET_PROMPT, json={"service_id": service_id, "name": "args-prompt", "arguments": {"state": "X"}}),
        400,
        "missing_prompt_argument",
    )
    assert missing["details"]["argument"] == "city"
    problem(
        client.post(
            GET_PROMPT, json={"service_id": service_id, "name": "args-prompt", "arguments": {"city": "a", "zip": "1"}}
        ),
        400,
        "unknown_prompt_argument",
    )
    problem(
        client.post(GET_PROMPT, json={"service_id": service_id, "name": "args-prompt", "arguments": {"city": 3}}),
        400,
        "invalid_prompt_arguments",
    )
    problem(
        client.post(GET_PROMPT, json={"service_id": service_id, "name": "no-such-prompt", "arguments": {}}),
        404,
        "prompt_not_found",
    )
    problem(client.post(REFRESH, json={"service_id": "svc_nosuchservice0000"}), 404, "service_not_found")
    misspelt = {"service_id": service_id, "name": "args-prompt", "argument": {"city": "Lyon"}}
    shape = problem(client.post(GET_PROMPT, json=misspelt), 422, "validation_failed")
    assert shape["errors"][0]["loc"] == ["body", "argument"]
    problem(client.get(READ, params={"service_id": service_id}), 422, "validation_failed")

    assert ok(client.get(f"{SERVICES}/{service_id}/metadata")) == before
    # The refused refresh used none of the caller's budget.
    for _ in range(REFRESHES_PER_MINUTE):
        ok(client.post(REFRESH, json={"service_id": service_id}))


def test_only_selected_enabled_services_are_reached(client: TestClient, service_id: str) -> None:
    created = client.post("/api/v1/agents", json={"name": "narrow", "mcp_selection_mode": "none"})
    assert created.status_code == 201, created.text
    narrow = created.json()["id"]
    problem(client.get(RESOURCES, params={"service_id": service_id, "agent_id": narrow}), 403, "service_not_selected")
    problem(
        client.get(READ, params={"service_id": service_id, "uri": BLOB, "agent_id": narrow}),
        403,
        "service_not_selected",
    )
    assert client.put(f"{SERVICES}/{service_id}", json={"enabled": False}).status_code == 200
    problem(client.get(PROMPTS, params={"service_id": service_id}), 403, "service_disabled")


def test_refresh_is_rate_limited_per_principal(client: TestClient, service_id: str, container: Container) -> None:
    for _ in range(REFRESHES_PER_MINUTE):
        body = ok(client.post(REFRESH, json={}))
        outcome = {item["service_id"]: item for item in body["items"]}[service_id]
        assert outcome["outcome"] == "refreshed"
        assert outcome["tool_count"] > 0
    refused = client.post(REFRESH, json={"service_id": service_id})
    limited = problem(refused, 429, "refresh_rate_limited")
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert limited["details"]["limit"] == REFRESHES_PER_MINUTE
    clock = container.clock
    assert isinstance(clock, FakeClock)
    clock.advance(61)
    ok(client.post(REFRESH, json={"service_id": service_id}))


def test_a_read_over_the_cap_is_refused_naming_it(client: TestClient, service_id: str, container: Container) -> None:
    container.__dict__["external_reads"] = ExternalReads(
        container.services,
        container.catalog,
        container.connections,
        SpecSource(container.services, lambda: container.oauth),
        container.rate_limiter,
        max_content_bytes=32,
    )
    refused = problem(client.get(READ, params={"service_id": service_id, "uri": BLOB}), 502, "resource_too_large")
    assert refused["details"]["limit_bytes"] == 32
    assert "32 bytes cap" in refused["detail"]
