"""The README's quick start and its "MCP server on the same machine" recipe, run as written.

The command lines are read from README.md's code blocks and run by a shell at the repository's root (where the
quick start's ``README.md`` is), against a fresh ``mcpbridge serve`` on a free port: the only change to a line is
that port in place of 8080 (and the server-everything's in place of 3001). The admin key ``serve`` printed is
pasted into ``login`` on its standard input. The commands' environment holds no ``MCPBRIDGE_*`` setting but the
config file's place: they reach the server only through the profile ``login`` saved.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.everything import Everything
from tests.support.serve import ServeProcess, cli_env

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
COMMAND_SECONDS = 300.0


def block_after(heading: str) -> list[str]:
    """The command lines of the first ``sh`` block after ``heading`` in README.md (comments cut off)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index(f"\n{heading}\n")
    block = re.search(r"```sh\n(.*?)```", text[start:], re.DOTALL)
    assert block is not None, f"no sh block after {heading}"
    lines = [re.sub(r"\s+#\s.*$", "", line).strip() for line in block.group(1).splitlines()]
    return [line for line in lines if line]


def shell_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MCPBRIDGE_", "AWS_"))}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    return env


VENV_BIN = Path(sys.executable).parent
"""Where the README's ``.venv/bin/`` is on this machine (``make`` may be told another ``VENV``, as CI does)."""


def run(line: str, env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["bash", "-c", line.replace(".venv/bin/", f"{VENV_BIN}/")],
        cwd=ROOT,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=COMMAND_SECONDS,
    )
    assert done.returncode == 0, f"{line}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    return done


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[tuple[ServeProcess, str]]:
    env = cli_env(
        {
            "MCPBRIDGE_DATA_DIR": str(tmp_path / "data"),
            "MCPBRIDGE_EMBEDDING_PROVIDER": "none",
            "MCPBRIDGE_INDEX_CACHE_DIR": str(tmp_path / "index-cache"),
        }
    )
    server = ServeProcess.start(cwd=tmp_path, env=env, args=["--json"], log_dir=tmp_path, tag="serve")
    try:
        server.wait_ready()
        key = json.loads(server.stdout().splitlines()[0])["api_key"]
        yield server, key
    finally:
        server.kill()


def test_the_quick_start_reaches_a_search_and_an_mcp_client(serve: tuple[ServeProcess, str], tmp_path: Path) -> None:
    server, admin_key = serve
    assert (VENV_BIN / "mcpbridge").exists(), "the quick start runs the virtualenv's command"
    lines = block_after("### Quick start")
    assert 1 <= len(lines) <= 5, lines
    env = shell_env(tmp_path)
    outputs = []
    for line in lines:
        line = line.replace("http://127.0.0.1:8080", server.base_url)
        outputs.append(run(line, env, stdin=f"{admin_key}\n" if " login " in line else "").stdout)
    config = tmp_path / "config" / "mcpbridge" / "config.json"
    assert config.stat().st_mode & 0o777 == 0o600
    searched = next(out for line, out in zip(lines, outputs, strict=True) if " kb search " in line)
    assert "README.md" in searched, searched
    published = outputs[-1]
    assert "claude mcp add --transport http" in published, published
    token = re.search(r"\b(mcp_[A-Za-z0-9_-]{20,})", published)
    url = re.search(r"(http://127\.0\.0\.1:\d+/mcp/ep_[a-z0-9]+)", published)
    assert token is not None, published
    assert url is not None, published
    headers = {"Authorization": f"Bearer {token.group(1)}", "Accept": "application/json, text/event-stream"}
    listed = httpx.post(
        url.group(1),
        headers={**headers, "MCP-Protocol-Version": "2025-06-18"},
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        timeout=30.0,
        trust_env=False,
    )
    assert listed.status_code == 200, listed.text
    assert "search_knowledge" in {tool["name"] for tool in listed.json()["result"]["tools"]}
    assert "Traceback" not in server.output()


@pytest.mark.skipif(shutil.which("bash") is None, reason="the README's lines are shell lines")
def test_the_same_machine_recipe_registers_and_calls_a_local_server(tmp_path: Path) -> None:
    lines = block_after("### An MCP server on the same machine")
    assert lines[0].startswith("npx -y @modelcontextprotocol/server-everything streamableHttp"), lines[0]
    assert lines[1].startswith("MCPBRIDGE_SSRF_ALLOWLIST=127.0.0.1:3001 .venv/bin/mcpbridge serve"), lines[1]
    workdir = tmp_path / "everything"
    workdir.mkdir()
    everything = Everything("streamableHttp", workdir)  # the npx line: the same package, on a free port
    everything.start()
    env = shell_env(tmp_path)
    port = str(everything.port)
    serve_env = cli_env(
        {
            "MCPBRIDGE_DATA_DIR": str(tmp_path / "data"),
            "MCPBRIDGE_EMBEDDING_PROVIDER": "none",
            "MCPBRIDGE_SSRF_ALLOWLIST": lines[1].split()[0].partition("=")[2].replace("3001", port),
        }
    )
    server = ServeProcess.start(cwd=tmp_path, env=serve_env, args=["--json"], log_dir=tmp_path, tag="serve")
    try:
        server.wait_ready()
        key = json.loads(server.stdout().splitlines()[0])["api_key"]
        run(f".venv/bin/mcpbridge login {server.base_url}", env, stdin=f"{key}\n")
        outputs = [run(line.replace("3001", port), env).stdout for line in lines[2:]]
    finally:
        server.kill()
        everything.kill()
    assert "registered" in outputs[0], outputs[0]
    assert outputs[1].startswith("Catalog synced"), outputs[1]
    assert "completed" in outputs[2], outputs[2]
    assert "hello" in outputs[2], outputs[2]
