"""Knowledge through the real ``mcpbridge serve``: documents are indexed in the background (the thread pool) and
become searchable; after a restart the documents and the index are still there."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support.serve import SERVE_TEST_TIMEOUT, ServeProcess, cli_env, http_client, run_init

# Each test starts `serve` (a few CPU seconds each time): at load 20 on two cores that can take minutes, which the
# readiness waits allow (tests.support.readiness); this is only the last resort against a hang.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(SERVE_TEST_TIMEOUT)]


def _wait_indexed(server: ServeProcess, client: httpx.Client, document_id: str) -> dict[str, Any]:
    document: dict[str, Any] = {}

    def parsed() -> bool:
        document.update(client.get(f"/api/v1/documents/{document_id}").json())
        return document["parse_status"] in ("completed", "failed")

    server.wait_for(parsed, "parsing the document")
    return document


def test_background_indexing_and_restart(tmp_path: Path) -> None:
    env = cli_env()
    data_dir = tmp_path / "data"
    key = run_init(["--json", "--data-dir", str(data_dir)], cwd=tmp_path, env=env)["api_key"]
    server = ServeProcess.start(
        cwd=tmp_path, env=env, args=["--data-dir", str(data_dir)], log_dir=tmp_path, tag="serve"
    )
    try:
        server.wait_ready()
        with http_client(server.base_url) as client:
            client.headers["Authorization"] = f"Bearer {key}"
            kb = client.post("/api/v1/knowledge-bases", json={"name": "Field notes"}).json()
            created = client.post(
                f"/api/v1/knowledge-bases/{kb['id']}/documents",
                json={"title": "Seals", "content": "# Seals\n\nHarbour seals haul out on sandbanks at low tide."},
            )
            assert created.status_code == 201
            assert created.json()["parse_status"] == "pending"
            document = _wait_indexed(server, client, created.json()["id"])
            assert document["parse_status"] == "completed", document
            hits = client.post("/api/v1/knowledge/search", json={"query": "sandbanks", "mode": "keyword"}).json()
            assert [h["document_id"] for h in hits["results"]] == [document["id"]]
        assert server.interrupt() == 0
    finally:
        server.kill()
    again = ServeProcess.start(cwd=tmp_path, env=env, args=["--data-dir", str(data_dir)], log_dir=tmp_path, tag="again")
    try:
        again.wait_ready()
        with http_client(again.base_url) as client:
            client.headers["Authorization"] = f"Bearer {key}"
            hits = client.post("/api/v1/knowledge/search", json={"query": "low tide seals", "mode": "keyword"}).json()
            assert hits["results"][0]["document_title"] == "Seals"
        assert again.interrupt() == 0
    finally:
        again.kill()


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_the_sdk_client_against_serve(tmp_path: Path, mode: str) -> None:
    env = cli_env()
    data_dir = tmp_path / "data"
    key = run_init(["--json", "--data-dir", str(data_dir)], cwd=tmp_path, env=env)["api_key"]
    server = ServeProcess.start(cwd=tmp_path, env=env, args=["--data-dir", str(data_dir)], log_dir=tmp_path, tag="sdk")
    try:
        server.wait_ready()
        with http_client(server.base_url) as client:
            client.headers["Authorization"] = f"Bearer {key}"
            kb = client.post("/api/v1/knowledge-bases", json={"name": "Shore"}).json()
            document = client.post(
                f"/api/v1/knowledge-bases/{kb['id']}/documents",
                json={"title": "Tides", "content": "Spring tides follow the full moon."},
            ).json()
            assert _wait_indexed(server, client, document["id"])["parse_status"] == "completed"
            endpoint = client.post(
                "/api/v1/mcp-endpoints", json={"name": "sdk", "knowledge_base_ids": [kb["id"]]}
            ).json()

        async def use() -> tuple[list[str], dict[str, Any]]:
            http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {endpoint['token']}"}, timeout=30)
            async with http, Client(streamable_http_client(endpoint["url"], http_client=http), mode=mode) as mcp:
                tools = [t.name for t in (await mcp.list_tools()).tools]
                found = await mcp.call_tool("search_knowledge", {"query": "full moon", "mode": "keyword"})
                return tools, found.structured_content

        tools, found = asyncio.run(use())
        assert "search_knowledge" in tools
        assert "add_document" not in tools, "write tools are off by default"
        assert found["results"][0]["document_id"] == document["id"]
        assert server.interrupt() == 0
    finally:
        server.kill()
