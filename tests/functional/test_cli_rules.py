"""``mcpbridge rules`` and ``mcpbridge groups`` against a real server (the app over HTTP on 127.0.0.1): a rule set
saved from a file and read back, the mode switched, groups made and changed; a wrong rule named, nothing saved."""

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
from mcpbridge.settings import Settings
from tests.support.live_server import live_server


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, str, Container]]:
    container = Container(Settings(data_dir=tmp_path / "data"))
    key = container.identity.initialize().api_key
    assert key is not None
    try:
        with live_server(create_combined_app(container)) as base:
            yield base, key, container
    finally:
        container.close()


def run(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    server: tuple[str, str, Container],
    *args: str,
    stdin: str = "",
) -> tuple[int, str, str]:
    capsys.readouterr()
    with monkeypatch.context() as patch:
        for name in list(os.environ):
            if name.startswith(("MCPBRIDGE_", "AWS_")):
                patch.delenv(name)
        patch.setenv("XDG_CONFIG_HOME", str(Path(server[2].settings.data_dir or ".") / "config"))
        patch.setenv("MCPBRIDGE_URL", server[0])
        patch.setenv("MCPBRIDGE_API_KEY", server[1])
        patch.setattr(sys, "stdin", io.StringIO(stdin))
        code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_rules_and_groups_from_the_command_line(
    server: tuple[str, str, Container],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    container = server[2]
    workspace = container.identity.installed_workspace_id()
    assert workspace is not None
    user = container.users.create(_admin(container), name="Bea")

    code, out, err = run(monkeypatch, capsys, server, "groups", "create", "finance", "--member", user.id, "--json")
    assert code == 0, err
    assert json.loads(out)["members"] == [user.id]
    rules: dict[str, Any] = {
        "mode": "log_only",
        "default": "allow",
        "rules": [
            {
                "id": "big-refunds",
                "outcome": "ask",
                "description": "two people decide",
                "match": {"tools": ["refund"], "arguments": [{"path": "$.amount", "op": "gt", "value": 500}]},
                "approvers": {"groups": ["finance"], "required": 1},
            }
        ],
    }
    path = tmp_path / "rules.json"
    path.write_text(json.dumps(rules))
    code, out, err = run(monkeypatch, capsys, server, "rules", "set", str(path))
    assert code == 0, err
    assert "version 1, log_only, default allow" in out
    assert "big-refunds" in out
    code, out, _ = run(monkeypatch, capsys, server, "rules", "mode", "enforce", "--json")
    assert code == 0
    assert json.loads(out)["mode"] == "enforce"
    assert json.loads(out)["version"] == 1

    # A wrong rule: the field is named, exit status 1 (the server's 400), nothing saved.
    rules["rules"][0]["match"]["arguments"][0]["op"] = "bigger"
    code, out, err = run(monkeypatch, capsys, server, "rules", "set", "-", stdin=json.dumps(rules))
    assert code != 0
    assert "rules[0].match.arguments[0].op" in err
    code, out, _ = run(monkeypatch, capsys, server, "rules", "show", "--json")
    assert json.loads(out)["version"] == 1
    assert json.loads(out)["rules"][0]["match"]["arguments"][0]["op"] == "gt"
    code, out, err = run(monkeypatch, capsys, server, "rules", "set", "-", stdin="{not json")
    assert code != 0
    assert "not valid JSON" in err

    code, out, err = run(monkeypatch, capsys, server, "groups", "delete", "finance")
    assert code != 0
    assert "big-refunds" in err  # the rule that names it
    code, out, err = run(monkeypatch, capsys, server, "groups", "set", "finance", "--json")
    assert code == 0, err
    assert json.loads(out)["members"] == []
    code, out, _ = run(monkeypatch, capsys, server, "groups", "list")
    assert "finance" in out


def _admin(container: Container) -> Any:
    from mcpbridge.domain.identity import Principal, Scope

    workspace = container.identity.installed_workspace_id()
    assert workspace is not None
    return Principal(workspace, "usr_operator", "key_operator", "admin", Scope())
