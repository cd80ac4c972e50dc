"""``mcpbridge serve`` with server-everything (Streamable HTTP) registered as a service and its catalog pulled: the
hub that gateway-mode tests publish external tools from."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
import pytest

from tests.support.everything import Everything
from tests.support.serve import ServeProcess, bearer, cli_env, http_client

SERVICES = "/api/v1/mcp-services"


@dataclass
class Hub:
    process: ServeProcess
    admin_key: str
    service_id: str
    """server-everything's id as a service of the hub's workspace."""

    @property
    def base(self) -> str:
        return self.process.base_url

    def http(self, key: str | None = None) -> httpx.Client:
        """A client of the hub's REST API with ``key`` (the admin key by default)."""
        client = http_client(self.process.base_url)
        client.headers.update(bearer(key or self.admin_key))
        return client


@contextmanager
def everything_hub(tmp_path_factory: pytest.TempPathFactory, tag: str) -> Iterator[Hub]:
    """A fresh ``serve`` (no embedder) and server-everything, both stopped at the end; the hub's output must hold no
    traceback."""
    tmp_path = tmp_path_factory.mktemp(tag)
    everything = Everything("streamableHttp", tmp_path_factory.mktemp("everything"))
    everything.start()
    env = cli_env(
        {
            "MCPBRIDGE_DATA_DIR": str(tmp_path / "data"),
            "MCPBRIDGE_EMBEDDING_PROVIDER": "none",
            "MCPBRIDGE_SSRF_ALLOWLIST": f"127.0.0.1:{everything.port}",
        }
    )
    process = ServeProcess.start(cwd=tmp_path, env=env, args=["--json"], log_dir=tmp_path, tag="serve")
    try:
        process.wait_ready()
        admin_key = json.loads(process.stdout().splitlines()[0])["api_key"]
        with http_client(process.base_url) as http:
            http.headers.update(bearer(admin_key))
            service = http.post(SERVICES, json={"name": "everything", "url": everything.url})
            assert service.status_code == 201, service.text
            refreshed = http.post(f"{SERVICES}/{service.json()['id']}/metadata/refresh")
            assert refreshed.status_code == 200, refreshed.text
        yield Hub(process, admin_key, service.json()["id"])
        assert "Traceback" not in process.output()
    finally:
        process.kill()
        everything.kill()
