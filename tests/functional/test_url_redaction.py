"""A secret put in a URL's query (``?api_key=sk_...``) is used upstream but never logged and never returned.

A real upstream on 127.0.0.1 serves a document and an MCP server and records the queries it receives. mcpbridge
imports the document and registers, tests, reads and updates the service, both in this process (every log record
captured at DEBUG) and as the real ``mcpbridge serve`` (its stdout and stderr, uvicorn's access log included).
"""

from __future__ import annotations

import io
import json
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi.testclient import TestClient
from mcp import types
from mcp.server.lowlevel import Server
from starlette.responses import PlainTextResponse
from starlette.types import Receive, Scope, Send

from mcpbridge.bootstrap import Container
from mcpbridge.http.apps import create_combined_app
from mcpbridge.observability import LambdaLogging, configure_local_logging
from mcpbridge.settings import Settings
from tests.support.everything import handle_stateless
from tests.support.live_server import live_server
from tests.support.serve import SERVE_TEST_TIMEOUT, ServeProcess, bearer, cli_env, http_client

# Each test starts `serve` (a few CPU seconds each time): at load 20 on two cores that can take minutes, which the
# readiness waits allow (tests.support.readiness); this is only the last resort against a hang.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(SERVE_TEST_TIMEOUT)]

SECRET = "sk_" + "QuerySecret0123456789abcdefghijklmnopqrstuv"
OTHER = "sk_" + "SentByMistake9876543210zyxwvutsrqponmlkjihg"
DOCUMENT = "# Walruses\n\nWalruses haul out on the ice in large groups.\n"


class Upstream:
    """``/doc.md`` (Markdown) and ``/mcp`` (an SDK server, stateless) on one origin; records every query."""

    def __init__(self) -> None:
        self.queries: list[tuple[str, str]] = []

        async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            schema = {"type": "object", "properties": {"text": {"type": "string"}}}
            return types.ListToolsResult(tools=[types.Tool(name="echo", description="Echo", input_schema=schema)])

        self.server: Server[Any] = Server("upstream", version="1.0", on_list_tools=list_tools)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        self.queries.append((scope["path"], scope["query_string"].decode()))
        if scope["path"] == "/doc.md":
            await PlainTextResponse(DOCUMENT, media_type="text/markdown")(scope, receive, send)
        elif scope["path"] == "/mcp":
            await handle_stateless(self.server, scope, receive, send)
        else:
            await PlainTextResponse("not found", status_code=404)(scope, receive, send)

    def saw(self, path: str) -> list[str]:
        return [query for seen_path, query in self.queries if seen_path == path]


@pytest.fixture
def upstream() -> Iterator[tuple[Upstream, str]]:
    app = Upstream()
    with live_server(app) as base:
        yield app, base


@pytest.fixture
def record_factory() -> Iterator[None]:
    """Whatever the test installs as the log record factory is undone afterwards."""
    saved = logging.getLogRecordFactory()
    try:
        yield
    finally:
        logging.setLogRecordFactory(saved)


def assert_masked(url: str, base: str, path: str) -> None:
    assert url == f"{base}{path}?api_key=***&v=***", url


def exercise(api: httpx.Client | TestClient, base: str) -> list[str]:
    """Import a document and register, test, read and update a service, each URL carrying SECRET in its query.
    Returns every response body."""
    bodies: list[str] = []

    def call(method: str, path: str, **kwargs: Any) -> Any:
        response = api.request(method, path, **kwargs)
        bodies.append(response.text)
        assert response.status_code < 300, response.text
        return response.json() if response.content else None

    kb = call("POST", "/api/v1/knowledge-bases", json={"name": "Arctic"})
    document = call(
        "POST",
        f"/api/v1/knowledge-bases/{kb['id']}/documents",
        json={"title": "Walruses", "url": f"{base}/doc.md?api_key={SECRET}&v=2"},
    )
    assert_masked(document["url"], base, "/doc.md")
    assert_masked(call("GET", f"/api/v1/documents/{document['id']}")["url"], base, "/doc.md")
    listed = call("GET", f"/api/v1/knowledge-bases/{kb['id']}/documents")
    assert [d["url"] for d in listed["items"]] == [f"{base}/doc.md?api_key=***&v=***"]
    read = call("GET", f"/api/v1/documents/{document['id']}/read")
    assert_masked(read["document"]["url"], base, "/doc.md")

    # The MCP write tool imports from a URL too, and the read tools return documents.
    endpoint = call(
        "POST",
        "/api/v1/mcp-endpoints",
        json={"name": "writer", "knowledge_base_ids": [kb["id"]], "tools": ["add_document", "list_documents"]},
    )
    mcp_path = urlsplit(endpoint["url"]).path
    mcp_headers = {
        "Authorization": f"Bearer {endpoint['token']}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-06-18",
    }

    def tool(name: str, arguments: dict[str, Any]) -> Any:
        message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
        result = call("POST", mcp_path, json=message, headers=mcp_headers)["result"]
        assert not result["isError"], result
        return result["structuredContent"]

    added = tool(
        "add_document",
        {"knowledge_base_id": kb["id"], "title": "More walruses", "url": f"{base}/doc.md?api_key={SECRET}&v=2"},
    )
    assert_masked(added["document"]["url"], base, "/doc.md")
    documents = tool("list_documents", {"knowledge_base_id": kb["id"]})["documents"]
    assert [d["url"] for d in documents] == [f"{base}/doc.md?api_key=***&v=***"] * 2

    service = call(
        "POST",
        "/api/v1/mcp-services",
        json={
            "name": "upstream",
            "transport": "http-streamable",
            "url": f"{base}/mcp?api_key={SECRET}&v=2",
            "advanced_config": {"retry_count": 0},
        },
    )
    assert_masked(service["url"], base, "/mcp")
    path = f"/api/v1/mcp-services/{service['id']}"
    assert_masked(call("GET", path)["url"], base, "/mcp")
    assert [s["url"] for s in call("GET", "/api/v1/mcp-services")["items"]] == [f"{base}/mcp?api_key=***&v=***"]
    # A form's round trip: the masked URL sent back unchanged keeps the real one (the test below still connects).
    shown = call("GET", path)
    updated = call("PUT", path, json={"name": "upstream-renamed", "url": shown["url"]})
    assert updated["name"] == "upstream-renamed"
    assert_masked(updated["url"], base, "/mcp")
    tested = call("POST", f"{path}/test")
    assert tested["success"], tested
    assert [tool["name"] for tool in tested["tools"]] == ["echo"]
    # An API key sent by mistake in mcpbridge's own query string (the access log keeps query strings).
    call("GET", f"/api/v1/me?api_key={OTHER}")
    return bodies


def assert_used_upstream(app: Upstream) -> None:
    assert app.saw("/doc.md") == [f"api_key={SECRET}&v=2"] * 2, "both imports fetched with the real query"
    assert app.saw("/mcp"), "the service test reached the upstream"
    assert set(app.saw("/mcp")) == {f"api_key={SECRET}&v=2"}, "every MCP request carried the real query"


def test_in_process_no_log_record_and_no_response_holds_the_query_secret(
    tmp_path: Path, upstream: tuple[Upstream, str], caplog: pytest.LogCaptureFixture, record_factory: None
) -> None:
    app, base = upstream
    configure_local_logging("DEBUG")  # what `mcpbridge serve` does first
    caplog.set_level(logging.DEBUG)
    container = Container(Settings(data_dir=tmp_path / "data", ssrf_allowlist=["127.0.0.1"], jobs="inline"))
    try:
        key = container.identity.initialize().api_key
        with TestClient(create_combined_app(container), base_url="http://127.0.0.1") as client:
            client.headers["Authorization"] = f"Bearer {key}"
            bodies = exercise(client, base)
        with sqlite3.connect(container.settings.sqlite_path) as db:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        container.close()
    assert_used_upstream(app)
    for body in bodies:
        assert SECRET not in body
    # Nor at rest: the document keeps its URL as shown, the service its URL sealed.
    stored = b"".join(p.read_bytes() for p in (tmp_path / "data").rglob("*") if p.is_file())
    assert SECRET.encode() not in stored
    lines = [record.getMessage() for record in caplog.records]
    assert any(f"{base}/doc.md?api_key=***&v=***" in line for line in lines), "httpx logged the document fetch"
    assert any(f"{base}/mcp?api_key=***&v=***" in line for line in lines), "httpx2 logged the MCP requests"
    assert SECRET not in caplog.text
    assert OTHER not in caplog.text
    for record in caplog.records:
        assert SECRET not in record.getMessage()


def test_serve_logs_no_query_secret(tmp_path: Path, upstream: tuple[Upstream, str]) -> None:
    app, base = upstream
    env = cli_env({"MCPBRIDGE_SSRF_ALLOWLIST": "127.0.0.1", "MCPBRIDGE_LOG_LEVEL": "DEBUG"})
    (tmp_path / "logs").mkdir()
    server = ServeProcess.start(
        cwd=tmp_path, env=env, args=["--data-dir", str(tmp_path / "data")], log_dir=tmp_path / "logs", tag="serve"
    )
    try:
        server.wait_ready()
        (admin_key,) = server.printed_keys()
        with http_client(server.base_url) as api:
            api.headers.update(bearer(admin_key))
            bodies = exercise(api, base)
    finally:
        assert server.interrupt() == 0, server.output()
    assert_used_upstream(app)
    for body in bodies:
        assert SECRET not in body
    output = server.output()
    assert "GET /api/v1/me?api_key=*** HTTP/1.1" in output, "uvicorn's access log kept the line, masked"
    assert f"{base}/mcp?api_key=***&v=***" in output, "httpx2 logged the MCP requests, masked"
    assert SECRET not in output
    assert OTHER not in output


def test_lambda_json_logs_mask_urls_in_messages_and_tracebacks(record_factory: None) -> None:
    logger = logging.getLogger("mcpbridge")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    stream = io.StringIO()
    try:
        logging_ = LambdaLogging("INFO")
        assert isinstance(logger.handlers[0], logging.StreamHandler)
        logger.handlers[0].setStream(stream)
        log = logging.getLogger("mcpbridge.test")
        log.info("fetched %s", f"https://docs.example/a.md?api_key={SECRET}")
        try:
            raise ValueError(f"upstream refused https://docs.example/a.md?token={SECRET}")
        except ValueError:
            log.exception("import of https://docs.example/a.md?api_key=%s failed", SECRET)
        del logging_
    finally:
        logger.handlers[:], logger.level, logger.propagate = saved
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["message"] for line in lines] == [
        "fetched https://docs.example/a.md?api_key=***",
        "import of https://docs.example/a.md?api_key=*** failed",
    ]
    assert "ValueError: upstream refused https://docs.example/a.md?token=***" in lines[1]["exception"]
    assert SECRET not in stream.getvalue()
