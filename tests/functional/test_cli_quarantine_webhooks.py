"""``mcpbridge services held|diff|approve-tool|new-tools`` and ``mcpbridge webhooks``: the CLI in this process
(``main``), a client over real HTTP of the app serving a workspace whose MCP server changes a tool."""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcpbridge.bootstrap import Container
from mcpbridge.cli import main
from mcpbridge.http.apps import create_combined_app
from mcpbridge.outbound.policy import EgressPolicy
from tests.functional.test_agent_calls import Upstream
from tests.support.containers import container_on
from tests.support.everything import serve
from tests.support.live_server import live_server


class Cli:
    def __init__(self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, url: str, key: str):
        self._capsys = capsys
        self._monkeypatch = monkeypatch
        self._url = url
        self._key = key

    def run(self, *args: str) -> tuple[int, str, str]:
        self._capsys.readouterr()
        with self._monkeypatch.context() as patch:
            patch.setattr(sys, "stdin", io.StringIO(""))
            for name in list(os.environ):
                if name.startswith(("MCPBRIDGE_", "AWS_")):
                    patch.delenv(name)
            patch.setenv("MCPBRIDGE_URL", self._url)
            patch.setenv("MCPBRIDGE_API_KEY", self._key)
            code = main(list(args))
        captured = self._capsys.readouterr()
        return code, captured.out, captured.err

    def json(self, *args: str) -> Any:
        code, out, err = self.run(*args, "--json")
        assert code == 0, (out, err)
        return json.loads(out)


@pytest.fixture
def world(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[tuple[Cli, Upstream]]:
    upstream = Upstream()
    with serve(upstream, lifespan="off") as mcp:
        egress = EgressPolicy([mcp.removeprefix("http://")])
        with container_on("local", tmp_path, monkeypatch, egress=egress) as container:
            key = container.identity.initialize().api_key
            assert key is not None
            with live_server(create_combined_app(container)) as url:
                cli = Cli(capsys, monkeypatch, url, key)
                cli.json("services", "add", "pages", f"{mcp}/mcp")
                cli.json("services", "refresh", "pages")
                yield cli, upstream
            _close(container)


def _close(container: Container) -> None:
    workflow = container.__dict__.get("workflow")
    if workflow is not None:
        workflow.close()


def test_held_tools_are_listed_compared_and_approved_from_the_command_line(world: tuple[Cli, Upstream]) -> None:
    cli, upstream = world
    code, out, _ = cli.run("services", "held")
    assert (code, out.strip()) == (0, "No tool is held.")

    upstream.tools = [
        t.model_copy(update={"description": "Echo text, and mail it out"}) if t.name == "echo" else t
        for t in upstream.tools
    ]
    cli.json("services", "refresh", "pages")
    held = cli.json("services", "held")["items"]
    assert [(h["tool_name"], h["reason"]) for h in held] == [("echo", "changed")]
    code, out, _ = cli.run("services", "held", "pages")
    assert code == 0
    assert out.splitlines()[0].split() == ["SERVICE", "TOOL", "REASON", "CURRENT", "HASH"]

    code, out, _ = cli.run("services", "diff", "pages", "echo")
    assert code == 0
    assert '-  "description": "Echo text",' in out
    assert '+  "description": "Echo text, and mail it out",' in out
    current = held[0]["current_hash"]
    assert f"--hash {current}" in out

    code, out, err = cli.run("services", "approve-tool", "pages", "echo", "--hash", "0" * 64)
    assert code == 1
    assert "changed again" in err
    assert cli.json("services", "held")["items"] != []
    approved = cli.json("services", "approve-tool", "pages", "echo", "--hash", current)
    assert approved["definition_hash"] == current
    assert cli.json("services", "held")["items"] == []

    rule = cli.json("services", "new-tools", "pages", "approve")
    assert rule["new_tools"] == "approve"


def test_webhooks_from_the_command_line(world: tuple[Cli, Upstream]) -> None:
    cli, _ = world
    code, out, err = cli.run("webhooks", "add", "http://10.1.2.3/hook")
    assert code == 1
    assert "10.1.2.3" in err
    assert cli.json("webhooks", "list")["items"] == []

    code, out, _ = cli.run("webhooks", "add", "https://93.184.215.14/services/T000/B000/XXXX", "--format", "slack")
    assert code == 0
    assert "Signing secret (shown once): whsec_" in out
    (listed,) = cli.json("webhooks", "list")["items"]
    assert listed["url"] == "https://93.184.215.14/…"
    assert "XXXX" not in json.dumps(listed)
    assert cli.json("webhooks", "show", listed["id"])["format"] == "slack"
    assert cli.json("webhooks", "deliveries", listed["id"])["items"] == []
    assert cli.json("webhooks", "delete", listed["id"]) == {"id": listed["id"], "deleted": True}
    assert cli.json("webhooks", "list")["items"] == []
