"""``POST /api/v1/mcp-services/{id}/test``: a real connection to a real MCP server on 127.0.0.1 (an SDK server in
this process), with the service's auth strategy and custom headers applied, and OAuth detected from a 401."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mcp import types
from mcp.server.lowlevel import Server
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from mcpbridge.bootstrap import Container
from mcpbridge.settings import Settings
from tests.support.admin_api import admin_client
from tests.support.everything import handle_stateless
from tests.support.live_server import live_server

SECRET = "upstream-key-0123456789abcdef"


class Upstream:
    """An MCP server that demands ``X-Upstream-Key`` (401 without it) and records the headers it saw."""

    def __init__(self, *, challenge: str | None = None) -> None:
        self.seen: list[dict[str, str]] = []
        self.challenge = challenge

        async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            schema = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
            return types.ListToolsResult(tools=[types.Tool(name="echo", description="Echo text", input_schema=schema)])

        self.server: Server[Any] = Server("upstream", version="9.9", on_list_tools=list_tools)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        self.seen.append({k.lower(): v for k, v in request.headers.items()})
        if request.headers.get("x-upstream-key") != SECRET:
            headers = {"WWW-Authenticate": self.challenge} if self.challenge else {}
            await JSONResponse({"error": "unauthorized"}, status_code=401, headers=headers)(scope, receive, send)
            return
        await handle_stateless(self.server, scope, receive, send)


@pytest.fixture
def container(tmp_path: Path) -> Iterator[Container]:
    built = Container(Settings(data_dir=tmp_path / "data", ssrf_allowlist=["127.0.0.1"]))
    yield built
    built.close()


@pytest.fixture
def client(container: Container) -> Iterator[TestClient]:
    with admin_client(container) as test_client:
        yield test_client


def register(client: TestClient, url: str, **body: Any) -> str:
    created = client.post(
        "/api/v1/mcp-services",
        json={
            "name": "upstream",
            "transport": "http-streamable",
            "url": url,
            "auth_config": {"auth_type": "api_key", "api_key_header": "X-Upstream-Key"},
            **body,
        },
    )
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


def test_connects_with_the_services_credentials(client: TestClient) -> None:
    upstream = Upstream()
    with live_server(upstream) as base:
        service_id = register(client, f"{base}/mcp", headers={"X-Trace": "on"})
        refused = client.post(f"/api/v1/mcp-services/{service_id}/test").json()
        assert refused["success"] is False
        assert refused["error_code"] == "upstream_unauthorized"
        assert refused["oauth_required"] is False, "a bare 401 is an ordinary auth failure"
        client.put(f"/api/v1/mcp-services/{service_id}/credentials", json={"api_key": SECRET})
        tested = client.post(f"/api/v1/mcp-services/{service_id}/test")
    body = tested.json()
    assert tested.status_code == 200
    assert body["success"] is True, body
    assert (body["server_name"], body["server_version"]) == ("upstream", "9.9")
    assert [t["name"] for t in body["tools"]] == ["echo"]
    assert body["tools"][0]["input_schema"]["required"] == ["text"]
    assert SECRET not in tested.text
    authorised = [h for h in upstream.seen if h.get("x-upstream-key") == SECRET]
    assert authorised, "the API key reached the server in the configured header"
    assert all(h.get("x-trace") == "on" for h in authorised), "custom headers are layered on top"


def test_a_401_with_protected_resource_metadata_means_oauth(client: TestClient) -> None:
    upstream = Upstream(challenge='Bearer resource_metadata="http://127.0.0.1/.well-known/oauth-protected-resource"')
    with live_server(upstream) as base:
        service_id = register(client, f"{base}/mcp")
        body = client.post(f"/api/v1/mcp-services/{service_id}/test").json()
    assert body["success"] is False
    assert body["oauth_required"] is True
    assert any("OAuth" in w for w in body["warnings"])


def test_only_admins_test_and_unknown_services_are_404(client: TestClient, container: Container) -> None:
    viewer = client.post("/api/v1/api-keys", json={"name": "v", "role": "viewer"}).json()["key"]
    with live_server(Upstream()) as base:
        service_id = register(client, f"{base}/mcp")
        refused = client.post(f"/api/v1/mcp-services/{service_id}/test", headers={"Authorization": f"Bearer {viewer}"})
    assert refused.status_code == 403
    assert client.post("/api/v1/mcp-services/svc_missing/test").status_code == 404


def test_no_route_shows_the_api_key(client: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    """Every route of a service with an API key set, failures included: the key is in no body and no log line."""
    caplog.set_level(logging.DEBUG)
    upstream = Upstream()
    bodies: list[str] = []
    with live_server(upstream) as base:
        service_id = register(client, f"{base}/mcp")
        path = f"/api/v1/mcp-services/{service_id}"
        bodies.append(client.put(f"{path}/credentials", json={"api_key": SECRET}).text)
        for method, url, body in [
            ("GET", path, None),
            ("GET", "/api/v1/mcp-services", None),
            ("POST", f"{path}/test", None),
            ("POST", f"{path}/metadata/refresh", None),
            ("GET", f"{path}/metadata", None),
            ("GET", f"{path}/tools", None),
            ("GET", f"{path}/resources", None),
            ("PUT", f"{path}/tool-approvals/echo", {"require_approval": True}),
            ("GET", f"{path}/tool-approvals", None),
            ("PUT", path, {"auth_config": {"api_key": SECRET}}),
            ("PUT", f"{path}/credentials", {"api_key": SECRET + "\n"}),
            ("PUT", path, {"headers": {"X-Upstream-Key": SECRET + "\x00"}}),
            ("PUT", path, {"url": f"http://169.254.169.254/?k={SECRET}"}),
        ]:
            response = client.request(method, url, json=body)
            assert response.status_code < 500, (url, response.text)
            bodies.append(response.text)
        # A failing refresh (the upstream now refuses the key) records an error: still no key anywhere.
        upstream_key = SECRET
        client.put(f"{path}/credentials", json={"api_key": "wrong-key-0000"})
        failed = client.post(f"{path}/metadata/refresh")
        assert failed.status_code == 502
        bodies.extend([failed.text, client.get(f"{path}/metadata").text])
    assert any(h.get("x-upstream-key") == upstream_key for h in upstream.seen)
    assert json.loads(bodies[4])["data"]["tools"][0]["name"] == "echo"
    for text in bodies:
        assert SECRET not in text
    for record in caplog.records:
        assert SECRET not in record.getMessage()
        assert SECRET not in str(record.args)
