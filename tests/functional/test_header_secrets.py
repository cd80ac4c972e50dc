"""Custom header values of external services, and URL query values, are credentials: sealed at rest on both
backends, never shown, and still sent upstream (created, imported from ``mcpServers``, updated, and items written
before sealing existed)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mcp import types
from mcp.server.lowlevel import Server
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from mcpbridge.bootstrap import Container
from mcpbridge.client.service_items import service_key
from mcpbridge.outbound.policy import EgressPolicy
from tests.support.admin_api import admin_client
from tests.support.clock import FakeClock
from tests.support.containers import container_on
from tests.support.everything import handle_stateless, serve

BASE = "/api/v1/mcp-services"
CREATED = "hdr-created-6f1d2c9a8b7e"
IMPORTED = "hdr-imported-3a9c4e5f7d21"
UPDATED = "hdr-updated-9e8d7c6b5a43"
LEGACY = "hdr-legacy-1b2c3d4e5f60"
IN_QUERY = "qry-secret-5d6e7f8a9b0c"
ALL = (CREATED, IMPORTED, UPDATED, LEGACY, IN_QUERY)


class Upstream:
    """A stateless MCP server that records the headers and query of every request."""

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []
        self.queries: list[str] = []

        async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            return types.ListToolsResult(tools=[types.Tool(name="echo", input_schema={"type": "object"})])

        self.server: Server[Any] = Server("upstream", on_list_tools=list_tools)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        self.seen.append({k.lower(): v for k, v in request.headers.items()})
        self.queries.append(request.url.query)
        await handle_stateless(self.server, scope, receive, send)


@pytest.fixture(params=["local", "aws"])
def container(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Container]:
    with container_on(
        request.param, tmp_path, monkeypatch, clock=FakeClock(), egress=EgressPolicy(["127.0.0.1"])
    ) as built:
        yield built


@pytest.fixture
def client(container: Container) -> Iterator[TestClient]:
    with admin_client(container) as test_client:
        yield test_client


@pytest.fixture
def upstream() -> Iterator[tuple[Upstream, str]]:
    app = Upstream()
    with serve(app, lifespan="off") as base:
        yield app, f"{base}/mcp"


def everything_at_rest(container: Container) -> str:
    """Every byte the store holds, as text: the SQLite files themselves, or a scan of the DynamoDB table."""
    if container.settings.backend == "local":
        path = container.settings.sqlite_path
        with sqlite3.connect(path) as db:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the WAL keeps old frames until it is reset
        files = [p for p in path.parent.iterdir() if p.name.startswith(path.name)]
        return "".join(p.read_bytes().decode("latin-1") for p in files)
    client = container._aws_client("dynamodb")
    pages = client.get_paginator("scan").paginate(TableName=container.settings.table_name)
    return "".join(str(item) for page in pages for item in page["Items"])


def test_header_values_are_sealed_at_rest_never_shown_and_still_sent(
    client: TestClient, container: Container, upstream: tuple[Upstream, str]
) -> None:
    server, url = upstream
    created = client.post(
        BASE,
        json={"name": "made", "transport": "http-streamable", "url": url, "headers": {"X-Tenant-Token": CREATED}},
    )
    assert created.status_code == 201, created.text
    imported = client.post(
        f"{BASE}/import",
        json={
            "mcpServers": {"pasted": {"type": "http", "url": url, "headers": {"Authorization": f"Bearer {IMPORTED}"}}}
        },
    )
    assert imported.status_code == 200, imported.text
    made_id = created.json()["id"]
    pasted_id = next(s["id"] for s in client.get(BASE).json()["items"] if s["name"] == "pasted")
    changed = client.put(f"{BASE}/{made_id}", json={"headers": {"X-Tenant-Token": UPDATED, "X-Other": "plain"}})
    assert changed.status_code == 200, changed.text

    responses = [created, imported, changed, client.get(BASE), client.get(f"{BASE}/{made_id}")]
    for response in responses:
        for secret in ALL:
            assert secret not in response.text
    assert client.get(f"{BASE}/{made_id}").json()["header_names"] == ["X-Other", "X-Tenant-Token"]
    assert client.get(f"{BASE}/{pasted_id}").json()["header_names"] == ["Authorization"]

    at_rest = everything_at_rest(container)
    assert made_id in at_rest, "the scan sees the service items"
    for secret in ALL:
        assert secret not in at_rest

    for service_id, expected in ((made_id, ("x-tenant-token", UPDATED)), (pasted_id, ("authorization", IMPORTED))):
        server.seen.clear()
        tested = client.post(f"{BASE}/{service_id}/test")
        assert tested.status_code == 200, tested.text
        assert tested.json()["success"] is True, tested.text
        name, value = expected
        assert server.seen, "the upstream was reached"
        assert all(seen.get(name, "").endswith(value) for seen in server.seen)

    # Clearing the headers removes the sealed value too.
    assert client.put(f"{BASE}/{made_id}", json={"headers": {}}).status_code == 200
    stored = container.store.get(service_key(container.identity.installed_workspace_id(), made_id))
    assert stored is not None
    assert "secret_headers" not in stored
    assert stored["header_names"] == []


def test_headers_stored_in_plaintext_before_sealing_are_sealed_when_read(
    client: TestClient, container: Container, upstream: tuple[Upstream, str]
) -> None:
    server, url = upstream
    created = client.post(BASE, json={"name": "old", "transport": "http-streamable", "url": url})
    assert created.status_code == 201, created.text
    service_id = created.json()["id"]
    key = service_key(container.identity.installed_workspace_id(), service_id)
    item = container.store.get(key)
    assert item is not None
    # The item as an earlier release wrote it: a plaintext headers map, no sealed value.
    item.pop("header_names", None)
    container.store.put({**item, "headers": {"X-Legacy": LEGACY}})
    assert LEGACY in everything_at_rest(container)

    shown = client.get(f"{BASE}/{service_id}")
    assert shown.json()["header_names"] == ["X-Legacy"]
    assert LEGACY not in shown.text
    assert LEGACY not in everything_at_rest(container)
    resealed = container.store.get(key)
    assert resealed is not None
    assert resealed["version"] == item["version"], "sealing in place changes nothing configured"

    tested = client.post(f"{BASE}/{service_id}/test")
    assert tested.json()["success"] is True, tested.text
    assert server.seen[-1]["x-legacy"] == LEGACY


def test_a_secret_in_a_service_url_query_is_sealed_and_still_used(
    client: TestClient, container: Container, upstream: tuple[Upstream, str]
) -> None:
    server, url = upstream
    created = client.post(BASE, json={"name": "keyed", "transport": "http-streamable", "url": f"{url}?key={IN_QUERY}"})
    assert created.status_code == 201, created.text
    service_id = created.json()["id"]
    assert created.json()["url"] == f"{url}?key=***"
    assert IN_QUERY not in everything_at_rest(container)
    tested = client.post(f"{BASE}/{service_id}/test")
    assert tested.json()["success"] is True, tested.text
    assert server.queries[-1] == f"key={IN_QUERY}"
    # Moved to a URL without a query: nothing sealed is left behind.
    assert client.put(f"{BASE}/{service_id}", json={"url": url}).status_code == 200
    stored = container.store.get(service_key(container.identity.installed_workspace_id(), service_id))
    assert stored is not None
    assert "secret_url" not in stored
    assert stored["url"] == url
