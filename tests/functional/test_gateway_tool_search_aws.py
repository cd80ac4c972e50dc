"""An endpoint's search mode on the AWS backend, in moto: the admin API's app and the MCP endpoint function's app
(``functions/mcp_endpoint``: ``create_mcp_function_app``), DynamoDB, S3 and KMS in moto, the tool index on the S3
index files, the tool-call state machine's steps routed into this process, and the real npm
``@modelcontextprotocol/server-everything`` upstream, driven by the official MCP SDK client.

``tools/list`` offers ``search_tools`` and ``call_tool`` in place of the external tools; a search finds a published
tool and never one outside the allowlist; ``call_tool`` runs the found tool through the broker."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from fastapi.testclient import TestClient
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from moto import mock_aws

from mcpbridge.agent.lambda_steps import make_steps_handler
from mcpbridge.bootstrap import Container
from mcpbridge.http.apps import create_app
from mcpbridge.http.mcp.app import create_mcp_function_app
from mcpbridge.settings import Settings
from tests.support.aws import create_aws_resources, set_fake_aws_env
from tests.support.everything import Everything
from tests.support.live_server import live_server
from tests.support.moto_atomic import atomic_dynamodb
from tests.support.stepfunctions import MOTO_WORKFLOW_CONFIG, route_lambda_invocations, stop_executions

pytestmark = [pytest.mark.slow]

REGION = "eu-west-1"
SERVICES = "/api/v1/mcp-services"


@pytest.fixture(scope="module")
def everything(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Everything]:
    server = Everything("streamableHttp", tmp_path_factory.mktemp("everything"))
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def aws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Container, TestClient]]:
    set_fake_aws_env(monkeypatch)
    with mock_aws(config=MOTO_WORKFLOW_CONFIG), atomic_dynamodb():
        resources = create_aws_resources(table_name="mcpbridge-search", tool_call_workflow=True)
        container = Container(
            Settings(
                backend="aws",
                table_name=resources.table_name,
                kms_key_id=resources.kms_key_id,
                bucket_name=resources.bucket_name,
                aws_region=REGION,
                state_machine_arn=resources.state_machine_arn,
                index_cache_dir=tmp_path / "index-cache",
                ssrf_allowlist=["127.0.0.1"],
                embedding_provider="none",
            )
        )
        routes = {resources.tool_calls_function: make_steps_handler(lambda: container.tool_call_steps)}
        try:
            with (
                route_lambda_invocations(routes),
                TestClient(create_app(container, "admin_api"), raise_server_exceptions=False) as admin,
            ):
                admin.headers["Authorization"] = f"Bearer {container.identity.initialize().api_key}"
                yield container, admin
                stop_executions(REGION)
        finally:
            container.close()


def test_search_mode_answers_search_tools_and_call_tool_through_the_lambda_app(
    aws: tuple[Container, TestClient], everything: Everything
) -> None:
    container, admin = aws
    created = admin.post(SERVICES, json={"name": "everything", "url": everything.url})
    assert created.status_code == 201, created.text
    service_id = created.json()["id"]
    assert admin.post(f"{SERVICES}/{service_id}/metadata/refresh").status_code == 200
    endpoint = admin.post(
        "/api/v1/mcp-endpoints",
        json={
            "name": "search on aws",
            "services": [{"service_id": service_id, "tools": ["echo", "get-sum"]}],
            "external_tool_mode": "search",
        },
    )
    assert endpoint.status_code == 201, endpoint.text
    body = endpoint.json()
    assert body["external_tool_mode"] == "search"

    async def work(base: str) -> tuple[list[str], Any, Any, Any, Any]:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {body['token']}"}, timeout=60)
        url = f"{base}/mcp/{body['id']}"
        async with http, Client(streamable_http_client(url, http_client=http), mode="legacy") as mcp:
            names = [tool.name for tool in (await mcp.list_tools()).tools]
            echo = await mcp.call_tool("search_tools", {"query": "echo a message back", "limit": 10})
            outside = await mcp.call_tool("search_tools", {"query": "environment variables get-env", "limit": 10})
            name = echo.structured_content["tools"][0]["name"]
            ran = await mcp.call_tool("call_tool", {"name": name, "arguments": {"message": "searched on aws"}})
            unknown = await mcp.call_tool("call_tool", {"name": "mcp_everything_get_env_x", "arguments": {}})
            return names, echo, outside, ran, unknown

    with live_server(create_mcp_function_app(container)) as base:
        names, echo, outside, ran, unknown = asyncio.run(work(base))

    assert {"search_tools", "call_tool"} <= set(names)
    assert not [name for name in names if name.startswith("mcp_")], "no external tool is listed in search mode"
    assert echo.is_error is False
    found = echo.structured_content["tools"]
    assert found[0]["name"].startswith("mcp_everything_echo_")
    assert found[0]["inputSchema"]["properties"]["message"]["type"] == "string"
    assert outside.is_error is False
    assert all(
        tool["name"].startswith(("mcp_everything_echo_", "mcp_everything_get_sum_"))
        for tool in outside.structured_content["tools"]
    )
    assert ran.is_error is False, ran
    assert "Echo: searched on aws" in "\n".join(block.text for block in ran.content)
    assert unknown.is_error is True
    assert "tool_not_found" in unknown.content[0].text
