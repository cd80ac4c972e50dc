"""Embedded mode end to end: a tool call paused for approval in ``mcpbridge serve`` survives a restart of the
process and completes after approval (the pause lives in SQLite; the new process resumes the execution)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.functional.test_agent_calls import Upstream
from tests.support.everything import serve
from tests.support.serve import ServeProcess, bearer, cli_env, http_client

pytestmark = [pytest.mark.slow]


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
                service = http.post("/api/v1/mcp-services", json={"name": "pages", "url": f"{upstream_base}/mcp"})
                assert service.status_code == 201, service.text
                service_id = service.json()["id"]
                assert http.post(f"/api/v1/mcp-services/{service_id}/metadata/refresh").status_code == 200
                policy = {"require_approval": True}
                assert http.put(f"/api/v1/mcp-services/{service_id}/tool-approvals/delete_page", json=policy)
                described = http.get(
                    "/api/v1/agent/tools/describe", params={"service_id": service_id, "tool_name": "delete_page"}
                )
                paused = http.post(
                    "/api/v1/agent/tool-calls", json={"tool_ref": described.json()["tool_ref"], "arguments": {"id": 5}}
                )
                assert paused.status_code == 202, paused.text
                call_id = paused.json()["pending_id"]
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
                deadline = time.monotonic() + 20
                status = ""
                while time.monotonic() < deadline:
                    status = http.get(f"/api/v1/agent/tool-calls/{call_id}").json()["status"]
                    if status == "completed":
                        break
                    time.sleep(0.1)
                assert status == "completed"
            assert second.interrupt() == 0, second.output()
        finally:
            second.kill()
    assert upstream.ran == [("delete_page", {"id": 5})]
    assert "Traceback" not in first.output() + second.output()
