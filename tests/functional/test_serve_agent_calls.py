"""Embedded mode end to end: a tool call paused for approval in ``mcpbridge serve`` survives a restart of the
process and completes after approval (the pause lives in SQLite; the new process resumes the execution), whether an
agent made it through REST or an MCP client through a published endpoint."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import ElicitResult

from tests.functional.test_agent_calls import Upstream
from tests.support.everything import serve
from tests.support.serve import SERVE_TEST_TIMEOUT, ServeProcess, bearer, cli_env, http_client

# Each test starts `serve` (a few CPU seconds each time): at load 20 on two cores that can take minutes, which the
# readiness waits allow (tests.support.readiness); this is only the last resort against a hang.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(SERVE_TEST_TIMEOUT)]


def test_a_paused_call_survives_a_restart(tmp_path: Path) -> None:
    upstream = Upstream()
    env = cli_env({"MCPBRIDGE_SSRF_ALLOWLIST": "127.0.0.1"})
    args = ["--data-dir", str(tmp_path / "data")]
    with serve(upstream, lifespan="off") as upstream_base:
        first = ServeProcess.start(cwd=tmp_path, env=env, args=args, log_dir=tmp_path, tag="serve1")
        try:
            first.wait_ready()
            (key,) = first.printed_keys()
            with http_client(first.base_url) as http:
                http.headers.update(bearer(key))
                call_id = _pause_a_call(http, upstream_base, 5)
            assert first.interrupt() == 0, first.output()
        finally:
            first.kill()
        assert upstream.ran == []

        second = ServeProcess.start(cwd=tmp_path, env=env, args=args, log_dir=tmp_path, tag="serve2")
        try:
            second.wait_ready()
            assert "Resumed the agent tool calls left unfinished." in second.stdout()
            with http_client(second.base_url) as http:
                http.headers.update(bearer(key))
                assert [p["pending_id"] for p in http.get("/api/v1/agent/pending").json()["items"]] == [call_id]
                approved = http.post(f"/api/v1/agent/tool-approvals/{call_id}", json={"decision": "approve"})
                assert approved.status_code == 200, approved.text
                _wait_status(second, http, call_id, "completed")
            assert second.interrupt() == 0, second.output()
        finally:
            second.kill()
    assert upstream.ran == [("delete_page", {"id": 5})]
    assert "Traceback" not in first.output() + second.output()


def test_serve_from_two_processes_shares_the_data_and_stops_them_all(tmp_path: Path) -> None:
    """``serve --workers 2``: both processes answer on the one port, on one store (what one wrote, every request
    reads), a call paused through one and approved through either runs, and SIGINT stops every process."""
    upstream = Upstream()
    env = cli_env({"MCPBRIDGE_SSRF_ALLOWLIST": "127.0.0.1"})
    args = ["--data-dir", str(tmp_path / "data"), "--workers", "2"]
    with serve(upstream, lifespan="off") as upstream_base:
        server = ServeProcess.start(cwd=tmp_path, env=env, args=args, log_dir=tmp_path, tag="serve")
        try:
            server.wait_ready()
            workers = _children(server.process.pid)
            assert len(workers) == 2, workers
            (key,) = server.printed_keys()
            with http_client(server.base_url) as http:
                http.headers.update(bearer(key))
                call_id = _pause_a_call(http, upstream_base, 7)
                for _ in range(20):  # new connections, spread over both processes by the kernel
                    with http_client(server.base_url) as fresh:
                        pending = fresh.get("/api/v1/agent/pending", headers=http.headers).json()["items"]
                        assert [p["pending_id"] for p in pending] == [call_id]
            with http_client(server.base_url) as other:
                other.headers.update(bearer(key))
                approved = other.post(f"/api/v1/agent/tool-approvals/{call_id}", json={"decision": "approve"})
                assert approved.status_code == 200, approved.text
                _wait_status(server, other, call_id, "completed")
            assert server.interrupt() == 0, server.output()
            assert not [pid for pid in workers if Path(f"/proc/{pid}").exists()], "a worker outlived serve"
        finally:
            server.kill()
    assert upstream.ran == [("delete_page", {"id": 7})]
    assert "Traceback" not in server.output()


def _pause_a_call(http: Any, upstream_base: str, page_id: int, *, service_only: bool = False) -> str:
    """Register the upstream, require approval for its delete_page, call it: the paused call's id (with
    ``service_only``, the service's id, nothing called)."""
    service = http.post("/api/v1/mcp-services", json={"name": "pages", "url": f"{upstream_base}/mcp"})
    assert service.status_code == 201, service.text
    service_id = service.json()["id"]
    assert http.post(f"/api/v1/mcp-services/{service_id}/metadata/refresh").status_code == 200
    policy = {"require_approval": True}
    assert http.put(f"/api/v1/mcp-services/{service_id}/tool-approvals/delete_page", json=policy)
    if service_only:
        return str(service_id)
    described = http.get("/api/v1/agent/tools/describe", params={"service_id": service_id, "tool_name": "delete_page"})
    paused = http.post(
        "/api/v1/agent/tool-calls", json={"tool_ref": described.json()["tool_ref"], "arguments": {"id": page_id}}
    )
    assert paused.status_code == 202, paused.text
    call_id: str = paused.json()["pending_id"]
    return call_id


def _children(pid: int) -> list[int]:
    """The processes ``pid`` started that serve requests (not multiprocessing's resource tracker)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if parent == pid and b"spawn_main" in command:
            found.append(int(entry.name))
    return found


def _wait_status(server: ServeProcess, http: Any, call_id: str, wanted: str) -> None:
    server.wait_for(
        lambda: http.get(f"/api/v1/agent/tool-calls/{call_id}").json()["status"] == wanted, f"the call being {wanted}"
    )


def test_a_gateway_call_paused_across_a_restart_completes_once_for_the_clients_retry(tmp_path: Path) -> None:
    """An MCP client's call of a published tool pauses (InputRequiredResult); serve stops and starts again; the
    approval comes through the new process; the client's retry with the state it kept gets the result, and the
    upstream ran the tool exactly once."""
    upstream = Upstream()
    env = cli_env({"MCPBRIDGE_SSRF_ALLOWLIST": "127.0.0.1"})
    args = ["--data-dir", str(tmp_path / "data")]
    with serve(upstream, lifespan="off") as upstream_base:
        first = ServeProcess.start(cwd=tmp_path, env=env, args=args, log_dir=tmp_path, tag="serve1")
        try:
            first.wait_ready()
            (key,) = first.printed_keys()
            with http_client(first.base_url) as http:
                http.headers.update(bearer(key))
                service_id = _pause_a_call(http, upstream_base, 1, service_only=True)
                created = http.post(
                    "/api/v1/mcp-endpoints",
                    json={"name": "pages", "services": [{"service_id": service_id, "tools": ["delete_page"]}]},
                )
                assert created.status_code == 201, created.text
                endpoint = created.json()
            paused = asyncio.run(_mcp(first.base_url, endpoint, _call_delete(None)))
            assert paused.result_type == "input_required"
            call_id = paused.input_requests["approval"].params.url.rsplit("/", 1)[-1]
            assert first.interrupt() == 0, first.output()
        finally:
            first.kill()
        assert upstream.ran == []

        second = ServeProcess.start(cwd=tmp_path, env=env, args=args, log_dir=tmp_path, tag="serve2")
        try:
            second.wait_ready()
            with http_client(second.base_url) as http:
                http.headers.update(bearer(key))
                approved = http.post(f"/api/v1/agent/tool-approvals/{call_id}", json={"decision": "approve"})
                assert approved.status_code == 200, approved.text
                _wait_status(second, http, call_id, "completed")
            retry = _call_delete(paused.request_state)
            retries = [asyncio.run(_mcp(second.base_url, endpoint, retry)) for _ in "ab"]
            assert second.interrupt() == 0, second.output()
        finally:
            second.kill()
    for done in retries:
        assert getattr(done, "result_type", "complete") == "complete"
        assert done.is_error is False, done
    assert upstream.ran == [("delete_page", {"id": 1})], "once, whatever the restarts and retries"
    assert "Traceback" not in first.output() + second.output()


def _call_delete(state: str | None) -> Any:
    async def work(mcp: Any) -> Any:
        (tool,) = [tool for tool in (await mcp.list_tools()).tools if tool.name.startswith("mcp_pages_delete_page")]
        return await mcp.session.call_tool(tool.name, {"id": 1}, request_state=state, allow_input_required=True)

    return work


async def _mcp(base_url: str, endpoint: dict[str, Any], work: Any) -> Any:
    """A 2026-07-28 MCP session of a client that takes URL-mode elicitations, on ``endpoint`` of ``base_url``."""

    async def accept(context: Any, params: Any) -> ElicitResult:
        return ElicitResult(action="accept")

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {endpoint['token']}"}, timeout=30)
    transport = streamable_http_client(f"{base_url}/mcp/{endpoint['id']}", http_client=http)
    async with http, Client(transport, mode="2026-07-28", elicitation_callback=accept) as mcp:
        return await work(mcp)
