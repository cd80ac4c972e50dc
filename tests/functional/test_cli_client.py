"""The ``mcpbridge`` command as a client of a running server: ``login`` and its profiles (a 0600 config file), the
server's errors and an unreachable server said clearly, users named by name or id, and ``agents`` / ``call``
through the agent broker, paused calls included. ``mcpbridge serve`` runs in a subprocess; the command runs in this
process (``main``) with no ``MCPBRIDGE_*`` setting of the backend in its environment."""

from __future__ import annotations

import io
import json
import os
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mcpbridge.cli import main
from tests.support.everything import Everything
from tests.support.serve import ServeProcess, cli_env, free_port

pytestmark = [pytest.mark.slow]


@dataclass
class Done:
    code: int
    out: str
    err: str


class Cli:
    def __init__(self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, config: Path) -> None:
        self._capsys = capsys
        self._monkeypatch = monkeypatch
        self.config = config

    def run(self, *args: str, stdin: str = "", env: dict[str, str] | None = None) -> Done:
        self._capsys.readouterr()
        with self._monkeypatch.context() as patch:
            for name in list(os.environ):
                if name.startswith(("MCPBRIDGE_", "AWS_")):
                    patch.delenv(name)
            patch.setenv("XDG_CONFIG_HOME", str(self.config))
            for name, value in (env or {}).items():
                patch.setenv(name, value)
            patch.setattr(sys, "stdin", io.StringIO(stdin))
            code = main(list(args))
        captured = self._capsys.readouterr()
        return Done(code, captured.out, captured.err)

    def json(self, *args: str, **kwargs: Any) -> Any:
        done = self.run(*args, "--json", **kwargs)
        assert done.code == 0, done
        return json.loads(done.out)


@dataclass
class Server:
    process: ServeProcess
    admin_key: str
    everything: Everything


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    workdir = tmp_path / "everything"
    workdir.mkdir()
    everything = Everything("streamableHttp", workdir)
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
        yield Server(process, json.loads(process.stdout().splitlines()[0])["api_key"], everything)
    finally:
        process.kill()
        everything.kill()


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Cli:
    return Cli(capsys, monkeypatch, tmp_path / "config")


def test_login_checks_the_key_and_saves_a_private_profile(server: Server, cli: Cli) -> None:
    url = server.process.base_url
    assert cli.run("kb", "list").err.startswith("mcpbridge: no server to talk to: log in with `mcpbridge login URL`")
    refused = cli.run("login", url, stdin="sk_wrongwrongwrongwrongwrongwrongwrongwrongwro\n")
    assert refused.code == 1, refused
    assert f"{url} refused the key" in refused.err, refused
    path = cli.config / "mcpbridge" / "config.json"
    assert not path.exists(), "nothing saved for a refused key"

    logged = cli.run("login", url, stdin=f"{server.admin_key}\n")
    assert logged.code == 0, logged
    assert "Logged in to" in logged.out, logged
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert server.admin_key not in logged.out + logged.err, "the key is never printed"
    assert cli.json("kb", "list") == {"items": [], "next_cursor": None}

    # A second profile for another workspace's admin, used by --profile; the first one stays.
    acme = cli.json("workspaces", "create", "Acme", "--admin-name", "alice")
    assert cli.run("login", url, "--profile", "acme", stdin=acme["admin_api_key"]["key"]).code == 0
    assert cli.json("whoami", "--profile", "acme")["workspace_id"] == acme["id"]
    assert cli.json("whoami")["workspace_name"] == "Default workspace"
    saved = json.loads(path.read_text())
    assert set(saved["profiles"]) == {"default", "acme"}
    assert cli.run("whoami", "--profile", "nope").err.startswith("mcpbridge: no profile 'nope'")

    path.chmod(0o644)
    loose = cli.run("kb", "list")
    assert (loose.code, "others may read it" in loose.err, "chmod 600" in loose.err) == (1, True, True), loose

    down = f"http://127.0.0.1:{free_port()}"
    unreachable = cli.run("kb", "list", env={"MCPBRIDGE_URL": down, "MCPBRIDGE_API_KEY": server.admin_key})
    assert unreachable.code == 1, unreachable
    assert f"cannot reach {down} (connection refused" in unreachable.err
    assert "mcpbridge login URL" in unreachable.err


def test_users_are_named_by_name_or_id_everywhere(server: Server, cli: Cli) -> None:
    env = {"MCPBRIDGE_URL": server.process.base_url, "MCPBRIDGE_API_KEY": server.admin_key}
    bob = cli.json("users", "create", "bob", env=env)
    key = cli.json("keys", "create", "--user", "bob", "--capability", "call_tools", env=env)
    assert key["user_id"] == bob["id"]
    assert cli.json("users", "show", "BOB", env=env)["id"] == bob["id"], "case-insensitively"
    assert [k["id"] for k in cli.json("keys", "list", "--user", "bob", env=env)["items"]] == [key["id"]]
    assert cli.json("users", "disable", "bob", env=env)["status"] == "disabled"
    assert cli.json("users", "enable", bob["id"], env=env)["status"] == "active"
    missing = cli.run("keys", "create", "--user", "carol", env=env)
    assert missing.err == "mcpbridge: no user with the id or name 'carol' in this workspace\n"
    cli.json("users", "create", "dup", env=env)
    cli.json("users", "create", "Dup", env=env)
    ambiguous = cli.run("users", "show", "dup", env=env)
    assert ambiguous.code == 1
    assert "2 users are named 'dup': name it by id" in ambiguous.err
    acme = cli.json("workspaces", "create", "Acme", "--admin-name", "alice", env=env)
    there = cli.json("users", "create", "bob", "--workspace", "acme", env=env)
    assert cli.json("users", "show", "bob", "--workspace", acme["id"], env=env)["id"] == there["id"] != bob["id"]


def test_agents_and_call_through_the_broker(server: Server, cli: Cli) -> None:
    env = {"MCPBRIDGE_URL": server.process.base_url, "MCPBRIDGE_API_KEY": server.admin_key}
    cli.json("services", "add", "everything", server.everything.url, env=env)
    assert cli.json("services", "refresh", "everything", env=env)["data"]["tools"]
    bob = cli.json("users", "create", "bob", env=env)
    bob_env = {**env, "MCPBRIDGE_API_KEY": cli.json("keys", "create", "--user", "bob", "--capability", "call_tools",
                                                   env=env)["key"]}  # fmt: skip
    assert "echo" in {t["name"] for t in cli.json("agents", "tools", "--service", "everything", env=bob_env)["items"]}
    searched = cli.json("agents", "tools", "--query", "add two numbers", "--mode", "keyword", "--limit", "3",
                        env=bob_env)  # fmt: skip
    assert searched["items"][0]["name"] == "get-sum"
    assert len(searched["items"]) <= 3
    assert searched["notices"] == []
    hybrid = cli.json("agents", "tools", "--query", "add two numbers", env=bob_env)
    assert hybrid["items"][0]["name"] == "get-sum"
    assert [n for n in hybrid["notices"] if n.startswith("hybrid ran keyword only")]
    no_embedder = cli.run("agents", "tools", "--query", "add two numbers", "--mode", "semantic", env=bob_env)
    assert no_embedder.code == 1
    assert "semantic search is unavailable" in no_embedder.err
    described = cli.json("agents", "describe", "everything", "echo", env=bob_env)
    assert "message" in described["input_schema"]["properties"]
    assert cli.json("agents", "list", env=env) == {"items": [], "next_cursor": None}

    done = cli.json("call", "everything", "echo", "--args", '{"message": "hi there"}', env=bob_env)
    assert done["status"] == "completed"
    assert "hi there" in json.dumps(done["result"])
    bad = cli.run("call", "everything", "echo", "--args", "[1]", env=bob_env)
    assert bad.code == 1
    assert "--args must be a JSON object" in bad.err
    schema = cli.run("call", "everything", "echo", "--args", '{"nope": 1}', "--json", env=bob_env)
    assert schema.code == 1, schema
    assert json.loads(schema.err)["status"] == 400, schema

    cli.json("services", "policy", "everything", "echo", "--require-approval", env=env)
    paused = cli.run("call", "everything", "echo", "--args", '{"message": "later"}', "--wait", "0", env=bob_env)
    assert paused.code == 3, paused
    call_id = paused.out.split()[1]
    assert "waits for an approval" in paused.out
    assert f"mcpbridge calls approve {call_id}" in paused.out
    assert [c["pending_id"] for c in cli.json("calls", "pending", env=bob_env)["items"]] == [call_id]
    cli.json("calls", "approve", call_id, env=env)
    shown = cli.json("calls", "show", call_id, env=bob_env)
    assert shown["user_id"] == bob["id"]
    assert shown["status"] in ("approved", "ready", "running", "completed")
    assert shown["status"] in ("approved", "ready", "running", "completed")


def test_endpoints_publish_external_tools(server: Server, cli: Cli) -> None:
    env = {"MCPBRIDGE_URL": server.process.base_url, "MCPBRIDGE_API_KEY": server.admin_key}
    service = cli.json("services", "add", "everything", server.everything.url, env=env)
    created = cli.json("endpoints", "create", "gateway", "--service", "everything:echo", env=env)
    assert created["services"] == [{"service_id": service["id"], "tools": ["echo"]}]
    every = cli.json("endpoints", "update", "gateway", "--service", "everything", env=env)
    assert every["services"] == [{"service_id": service["id"], "tools": ["*"]}]
    assert every["external_tool_mode"] == "list"
    searching = cli.json("endpoints", "update", "gateway", "--external-tools", "search", env=env)
    assert searching["external_tool_mode"] == "search"
    assert searching["services"] == every["services"]
    shown = cli.run("endpoints", "show", "gateway", env=env)
    assert f"external: {service['id']}: *" in shown.out, shown
    assert "external tools: search_tools and call_tool" in shown.out, shown
    missing = cli.run("endpoints", "update", "gateway", "--service", "nowhere:echo", env=env)
    assert missing.code == 1, missing
    assert "nowhere" in missing.err
    assert cli.json("endpoints", "show", "gateway", env=env)["services"] == every["services"], "nothing changed"
    assert cli.json("endpoints", "update", "gateway", "--no-services", env=env)["services"] == []
    cli.json("services", "refresh", "everything", env=env)
    tool_ref = cli.json("agents", "describe", "everything", "echo", env=env)["tool_ref"]
    assert tool_ref
    cli.json("call", "everything", "echo", "--args", '{"message": "audited"}', env=env)
    trail = cli.json("calls", "list", "--tool", "echo", "--outcome", "completed", env=env)
    assert [entry["tool"] for entry in trail["items"]] == ["echo"]
    assert "audited" not in json.dumps(trail)
    shown = cli.run("calls", "list", "--service", service["id"], env=env)
    assert "echo" in shown.out, shown
    assert "completed" in shown.out, shown
