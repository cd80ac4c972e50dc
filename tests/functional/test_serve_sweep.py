"""``mcpbridge serve`` runs the periodic sweep while it runs: a document whose job was lost (here, submitted by
another process to a pool that dropped it) is indexed within the sweep's interval after its deadline, without a
restart of serve."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcpbridge.bootstrap import Container
from mcpbridge.domain.knowledge import KnowledgeAccess
from mcpbridge.settings import Settings
from tests.support.serve import SERVE_TEST_TIMEOUT, ServeProcess, bearer, cli_env, http_client

# Each test starts `serve` (a few CPU seconds each time): at load 20 on two cores that can take minutes, which the
# readiness waits allow (tests.support.readiness); this is only the last resort against a hang.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(SERVE_TEST_TIMEOUT)]


class DroppedJobs:
    """A pool that loses every job it is given (a process that died before running them)."""

    def __init__(self) -> None:
        self.dropped: list[tuple[str, dict[str, str]]] = []

    def submit(self, kind: str, payload: dict[str, str]) -> None:
        self.dropped.append((kind, payload))


def test_serve_re_drives_a_lost_indexing_job_while_it_runs(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = cli_env({"MCPBRIDGE_SWEEP_INTERVAL_SECONDS": "0.5", "MCPBRIDGE_INDEXING_DEADLINE_SECONDS": "1"})
    server = ServeProcess.start(cwd=tmp_path, env=env, args=["--data-dir", str(data)], log_dir=tmp_path, tag="sweep")
    try:
        server.wait_ready()
        (key,) = server.printed_keys()
        with http_client(server.base_url) as client:
            client.headers.update(bearer(key))
            kb = client.post("/api/v1/knowledge-bases", json={"name": "Shore"}).json()
            workspace = client.get("/api/v1/me").json()["workspace_id"]
            jobs = DroppedJobs()
            other = Container(Settings(data_dir=data), jobs=jobs, embedder=None)
            try:
                document = other.documents.create_from_text(
                    KnowledgeAccess(workspace), kb["id"], title="Tides", content="Spring tides follow the full moon."
                )
            finally:
                other.close()
            assert [kind for kind, _ in jobs.dropped] == ["index_document"]
            server.wait_for(
                lambda: client.get(f"/api/v1/documents/{document.id}").json()["parse_status"] == "completed",
                "indexing the document its sweep found",
            )
            hits = client.post("/api/v1/knowledge/search", json={"query": "full moon", "mode": "keyword"}).json()
            assert [h["document_id"] for h in hits["results"]] == [document.id]
        assert server.interrupt() == 0, server.output()
    finally:
        server.kill()
    assert "sweep: 1 document job(s) and 0 deletion(s) submitted again" in server.output()
