"""Running the real ``mcpbridge`` command in subprocesses, and the admin flow every backend must pass through it."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.support.readiness import START_CPU_SECONDS, Worker, run_to_end, wait_until

PROBLEM_JSON = "application/problem+json"
SERVE_TEST_TIMEOUT = 600
"""pytest-timeout for a test that starts serve: a last resort against a hang, far above a start at load 20."""
PROBE_TIMEOUT = 10.0
"""One /healthz probe (refused at once while nothing listens; a busy machine may be slow to answer)."""
_KEY_LINE = re.compile(r"^\s+(sk_\S+)\s*$", re.MULTILINE)


# ---------------------------------------------------------------------------------------------- helpers


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def cli_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without any MCPBRIDGE_* / AWS endpoint setting, plus ``extra``."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("MCPBRIDGE_") and name not in {"AWS_ENDPOINT_URL", "AWS_PROFILE"}
    }
    # Never route 127.0.0.1 traffic (moto server, serve) through a proxy the machine may configure.
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def run_cli(args: list[str], *, cwd: Path, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """``mcpbridge args...`` to its end, for as long as it works (no fixed timeout: see tests.support.readiness)."""
    return run_to_end(
        [sys.executable, "-m", "mcpbridge.cli", *args], what=" ".join(["mcpbridge", *args[:1]]), cwd=cwd, env=env
    )


def run_init(args: list[str], *, cwd: Path, env: Mapping[str, str]) -> dict[str, Any]:
    done = run_cli(["init", "--json", *args], cwd=cwd, env=env)
    assert done.returncode == 0, f"init failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, f"init --json printed more than one line:\n{done.stdout}"
    result: dict[str, Any] = json.loads(lines[0])
    assert set(result) == {"workspace_id", "api_key", "created"}
    return result


def http_client(base_url: str) -> httpx.Client:
    # trust_env=False: no proxy and no netrc from the machine; every call stays on 127.0.0.1.
    return httpx.Client(base_url=base_url, timeout=10.0, trust_env=False)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def assert_problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON), response.headers
    body: dict[str, Any] = response.json()
    assert body["code"] == code, body
    assert body["status"] == status
    return body


@dataclass
class ServeProcess:
    """``mcpbridge serve`` in a subprocess, its output in files (a full pipe could never block it)."""

    process: subprocess.Popen[bytes]
    port: int
    stdout_path: Path
    stderr_path: Path

    @classmethod
    def start(cls, *, cwd: Path, env: Mapping[str, str], args: list[str], log_dir: Path, tag: str) -> ServeProcess:
        port = free_port()
        stdout_path, stderr_path = log_dir / f"{tag}.stdout", log_dir / f"{tag}.stderr"
        with stdout_path.open("wb") as out, stderr_path.open("wb") as err:
            process = subprocess.Popen(
                [sys.executable, "-m", "mcpbridge.cli", "serve", "--host", "127.0.0.1", "--port", str(port), *args],
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )
        return cls(process, port, stdout_path, stderr_path)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def output(self) -> str:
        return f"--- stdout\n{self.stdout()}\n--- stderr\n{self.stderr_path.read_text(errors='replace')}"

    def worker(self) -> Worker:
        return Worker.process("serve", self.process, self.output)

    def wait_for(self, ready: Callable[[], bool], what: str, cpu_budget: float = START_CPU_SECONDS) -> None:
        """Until ``ready()``, for as long as serve is alive and working (see tests.support.readiness)."""
        wait_until(ready, self.worker(), what=what, cpu_budget=cpu_budget)

    def wait_ready(self) -> None:
        with http_client(self.base_url) as client:

            def healthy() -> bool:
                try:
                    return client.get("/healthz", timeout=PROBE_TIMEOUT).status_code == 200
                except httpx.TransportError:
                    return False

            self.wait_for(healthy, "answering /healthz")

    def printed_keys(self) -> list[str]:
        return _KEY_LINE.findall(self.stdout())

    def interrupt(self) -> int:
        """SIGINT (Ctrl-C) and wait while it works at stopping; the exit code."""
        self.process.send_signal(signal.SIGINT)
        try:
            self.wait_for(lambda: self.process.poll() is not None, "stopping after SIGINT")
        finally:
            self.kill()
        return self.process.returncode

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


def list_keys(client: httpx.Client, key: str) -> list[dict[str, Any]]:
    response = client.get("/api/v1/api-keys", headers=bearer(key))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    items: list[dict[str, Any]] = response.json()["items"]
    return items


@dataclass(frozen=True)
class ViewerKey:
    id: str
    key: str


def check_admin_flow(base_url: str, admin_key: str) -> ViewerKey:
    """The first-run admin flow against a running server; returns the viewer key it created."""
    with http_client(base_url) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        ready = client.get("/readyz")
        assert ready.status_code == 200, ready.text
        assert ready.json()["checks"] == {"store": "ok", "secrets": "ok"}

        keys = list_keys(client, admin_key)
        assert len(keys) == 1
        assert keys[0]["role"] == "admin"
        assert "key" not in keys[0]
        assert "sha256" not in keys[0]

        anonymous = client.get("/api/v1/api-keys")
        assert_problem(anonymous, 401, "unauthenticated")
        assert anonymous.headers["www-authenticate"].startswith('Bearer realm="mcpbridge"')
        assert_problem(client.get("/api/v1/api-keys", headers=bearer("sk_" + "x" * 43)), 401, "invalid_api_key")

        created = client.post("/api/v1/api-keys", headers=bearer(admin_key), json={"name": "viewer", "role": "viewer"})
        assert created.status_code == 201, created.text
        assert created.headers.get("cache-control") == "no-store"
        viewer = ViewerKey(id=created.json()["id"], key=created.json()["key"])
        assert viewer.key.startswith("sk_")
        assert viewer.key != admin_key
        assert len(list_keys(client, admin_key)) == 2

        assert_problem(client.get("/api/v1/api-keys", headers=bearer(viewer.key)), 403, "admin_required")
        me = client.get("/api/v1/me", headers=bearer(viewer.key))
        assert me.status_code == 200, me.text
        assert me.json()["role"] == "viewer"

        malformed = client.post(
            "/api/v1/api-keys",
            headers={**bearer(admin_key), "Content-Type": "application/json"},
            content=b'{"name": "broken", ',
        )
        assert_problem(malformed, 400, "malformed_json")
        assert len(list_keys(client, admin_key)) == 2

        wrong_type = client.post("/api/v1/api-keys", headers=bearer(admin_key), json={"name": 123, "role": "viewer"})
        body = assert_problem(wrong_type, 422, "validation_failed")
        assert any(error["loc"][-1] == "name" for error in body["errors"]), body
        assert "123" not in json.dumps(body["errors"]), "the submitted value is echoed back"
        assert len(list_keys(client, admin_key)) == 2

        escalation = client.post("/api/v1/api-keys", headers=bearer(viewer.key), json={"name": "x", "role": "admin"})
        assert_problem(escalation, 403, "admin_required")
        assert len(list_keys(client, admin_key)) == 2
    return viewer


def check_after_restart(base_url: str, admin_key: str, viewer: ViewerKey) -> None:
    with http_client(base_url) as client:
        keys = list_keys(client, admin_key)
        assert {k["id"] for k in keys} >= {viewer.id}
        assert len(keys) == 2
        me = client.get("/api/v1/me", headers=bearer(viewer.key))
        assert me.status_code == 200, me.text
        assert_problem(client.get("/api/v1/api-keys"), 401, "unauthenticated")


# ---------------------------------------------------------------------------------------------- tests
