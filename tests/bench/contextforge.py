"""ContextForge (IBM's MCP gateway, pip ``mcp-contextforge-gateway``) as a comparison point for the call benches.

ContextForge is not a dependency of mcpbridge: it needs Python 3.12+ and about 200 packages of its own, so it runs
from a virtual environment of its own, named by the path of its ``mcpgateway`` command::

    python3.12 -m venv /tmp/cf && /tmp/cf/bin/pip install mcp-contextforge-gateway==1.1.0
    python tests/bench/agent_calls.py --via gateway --contextforge /tmp/cf/bin/mcpgateway

:func:`start_contextforge` runs it the way its documentation starts a single node: one uvicorn process, SQLite, its
default caches, the admin UI off, loopback allowed as an upstream (``SSRF_ALLOW_LOCALHOST``, as mcpbridge's
allowlist allows 127.0.0.1 in the same bench), its rate limits raised above the bench's rate (its default for MCP
calls is 100 a minute). The upstream is registered as a gateway and a virtual server offers
its ``echo``; clients call it at ``/servers/{id}/mcp`` (Streamable HTTP) with an admin JWT minted by its own tool.
"""

from __future__ import annotations

import secrets
import subprocess
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
from tests.bench.mcp_endpoint import free_port, process

READY_SECONDS = 300
"""Its first start creates the database and seeds roles: tens of seconds on a quiet 2-core machine."""


def start_contextforge(stack: ExitStack, workdir: Path, mcpgateway: Path, upstream: str) -> tuple[str, str, str, int]:
    """ContextForge serving the upstream's ``echo`` through a virtual server; (its MCP URL, a bearer token, the
    tool's listed name, its process id)."""
    workdir.mkdir(parents=True, exist_ok=True)
    python = mcpgateway.parent / "python"
    password = "Bench-" + secrets.token_urlsafe(12)
    signing = secrets.token_urlsafe(32)
    env = {
        "PATH": str(mcpgateway.parent) + ":/usr/bin:/bin",
        "HOME": str(workdir),
        "JWT_SECRET_KEY": signing,
        "AUTH_ENCRYPTION_SECRET": secrets.token_urlsafe(32),
        "BASIC_AUTH_PASSWORD": password,
        "PLATFORM_ADMIN_PASSWORD": password,
        "DEFAULT_USER_PASSWORD": password,
        "PLATFORM_ADMIN_EMAIL": "admin@example.com",
        "DATABASE_URL": f"sqlite:///{workdir / 'mcp.db'}",
        "MCPGATEWAY_UI_ENABLED": "false",
        "MCPGATEWAY_ADMIN_API_ENABLED": "true",
        "SSRF_ALLOW_LOCALHOST": "true",
        "LOG_LEVEL": "WARNING",
        # Its limits stay on, raised above every cell's calls in a minute, as the bench raises the endpoint's.
        "RATE_LIMIT_MEDIUM_RPM": "60000",
        "RATE_LIMIT_MEDIUM_BURST": "1000",
        "TOOL_RATE_LIMIT": "60000",
    }
    port = free_port()
    gateway = stack.enter_context(
        process([str(mcpgateway), "--host", "127.0.0.1", "--port", str(port)], env, workdir, "contextforge")
    )
    base = f"http://127.0.0.1:{port}"
    _wait_healthy(base, gateway)
    mint = [str(python), "-m", "mcpgateway.utils.create_jwt_token", "--username", "admin@example.com", "--admin"]
    minted = subprocess.run(
        [*mint, "--full-name", "Bench", "--exp", "600", "--secret", signing],
        env=env,
        cwd=workdir,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    token = minted.stdout.strip().splitlines()[0]
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=60) as api:
        registered = api.post("/gateways", json={"name": "everything", "url": upstream, "transport": "STREAMABLEHTTP"})
        registered.raise_for_status()
        listed: Any = api.get("/tools", params={"limit": 0}).json()
        tools = listed if isinstance(listed, list) else listed.get("items", [])
        echo = next(tool for tool in tools if str(tool.get("name", "")).endswith("echo"))
        server = api.post(
            "/servers", json={"server": {"name": "bench", "associated_tools": [echo["id"]]}, "visibility": "public"}
        )
        server.raise_for_status()
    return f"{base}/servers/{server.json()['id']}/mcp", token, str(echo["name"]), gateway.pid


def _wait_healthy(base: str, gateway: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + READY_SECONDS
    while time.monotonic() < deadline:
        if gateway.poll() is not None:
            raise SystemExit(f"ContextForge exited with {gateway.returncode}: see contextforge.log")
        try:
            if httpx.get(f"{base}/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"ContextForge did not answer /health within {READY_SECONDS} s")
