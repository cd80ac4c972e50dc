"""What ``mcpbridge serve`` writes at INFO while it works: its own lines, each with the id of the request it belongs
to (the id the response carries in ``X-Request-Id``), and none of the per-request chatter of the libraries below it
(the MCP SDK's session manager, httpx's line per upstream request, including the expected 4xx of a first probe)."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from tests.functional.test_agent_calls import Upstream
from tests.support.everything import serve
from tests.support.serve import SERVE_TEST_TIMEOUT, ServeProcess, bearer, cli_env, http_client

# Each test starts `serve` (a few CPU seconds each time): at load 20 on two cores that can take minutes, which the
# readiness waits allow (tests.support.readiness); this is only the last resort against a hang.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(SERVE_TEST_TIMEOUT)]

LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (?P<level>[A-Z]+) (?P<logger>\S+) \[(?P<request>[^\]]+)\]: ")
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}


def _indexed(server: ServeProcess, client: httpx.Client, document_id: str) -> None:
    def completed() -> bool:
        return bool(client.get(f"/api/v1/documents/{document_id}").json()["parse_status"] == "completed")

    server.wait_for(completed, "indexing the document")


def test_serve_logs_quietly_and_every_line_names_its_request(tmp_path: Path) -> None:
    upstream = Upstream()
    env = cli_env({"MCPBRIDGE_SSRF_ALLOWLIST": "127.0.0.1", "MCPBRIDGE_LOG_LEVEL": "INFO"})
    request_ids: list[str] = []
    with serve(upstream, lifespan="off") as upstream_base:
        server = ServeProcess.start(
            cwd=tmp_path, env=env, args=["--data-dir", str(tmp_path / "data")], log_dir=tmp_path, tag="logs"
        )
        try:
            server.wait_ready()
            (key,) = server.printed_keys()
            with http_client(server.base_url) as client:
                client.headers.update(bearer(key))
                client.event_hooks["response"].append(lambda r: request_ids.append(r.headers["x-request-id"]))
                kb = client.post("/api/v1/knowledge-bases", json={"name": "Shore"}).json()
                document = client.post(
                    f"/api/v1/knowledge-bases/{kb['id']}/documents",
                    json={"title": "Tides", "content": "Spring tides follow the full moon."},
                ).json()
                _indexed(server, client, document["id"])
                endpoint = client.post(
                    "/api/v1/mcp-endpoints", json={"name": "logs", "knowledge_base_ids": [kb["id"]]}
                ).json()
                service = client.post("/api/v1/mcp-services", json={"name": "pages", "url": f"{upstream_base}/mcp"})
                service_id = service.json()["id"]
                assert client.post(f"/api/v1/mcp-services/{service_id}/metadata/refresh").status_code == 200
                ref = client.get(
                    "/api/v1/agent/tools/describe", params={"service_id": service_id, "tool_name": "delete_page"}
                ).json()["tool_ref"]
                called = client.post("/api/v1/agent/tool-calls", json={"tool_ref": ref, "arguments": {"id": 7}})
                assert called.json()["status"] == "completed", called.text
                mcp = {**MCP_HEADERS, "Authorization": f"Bearer {endpoint['token']}"}
                for message in (
                    {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                    {
                        "jsonrpc": "2.0",
                        "id": 2,
                        "method": "tools/call",
                        "params": {"name": "search_knowledge", "arguments": {"query": "full moon"}},
                    },
                ):
                    assert client.post(endpoint["url"], json=message, headers=mcp).status_code == 200
            assert server.interrupt() == 0
        finally:
            server.kill()
    assert upstream.ran == [("delete_page", {"id": 7})]

    log = server.stderr_path.read_text(errors="replace")
    lines = [line for line in log.splitlines() if line.strip()]
    assert lines, "serve logged nothing at all"
    unparsed = [line for line in lines if not LINE.match(line) and not line.startswith((" ", "\t"))]
    assert not unparsed, "every line has the format, with a request id field:\n" + "\n".join(unparsed)
    records = [m for m in map(LINE.match, lines) if m]
    chatter = [m.string for m in records if not m["logger"].startswith(("mcpbridge", "uvicorn"))]
    assert not chatter, "no library chatter at INFO:\n" + "\n".join(chatter)
    assert "Bad Request" not in log
    # What serve logs while answering belongs to a request: the access log and mcpbridge's own lines name its id.
    during = [
        m
        for m in records
        if (m["logger"] == "uvicorn.access" or m["logger"].startswith("mcpbridge.agent")) and "/healthz" not in m.string
    ]
    assert during, "the requests were logged"
    assert all(m["request"] in request_ids for m in during), "\n".join(m.string for m in during)
    assert set(request_ids) <= {m["request"] for m in records if m["logger"] == "uvicorn.access"}
