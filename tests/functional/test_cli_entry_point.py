"""The real ``mcpbridge`` entry point (the console script the package installs) in subprocesses: ``--version``,
``--help`` on every command with an example, what ``--help`` loads, exit statuses, ``--json`` on both streams, and
``serve`` on a port that is taken."""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mcpbridge import __version__
from mcpbridge.cli.parser import build_parser
from tests.support.readiness import Worker, run_to_end, wait_until
from tests.support.serve import SERVE_TEST_TIMEOUT, bearer, cli_env, http_client

# Each test starts `serve` (a few CPU seconds each time): at load 20 on two cores that can take minutes, which the
# readiness waits allow (tests.support.readiness); this is only the last resort against a hang.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(SERVE_TEST_TIMEOUT)]

MCPBRIDGE = Path(sys.executable).with_name("mcpbridge")
"""The console script ``pip install`` put beside the interpreter (``.venv/bin/mcpbridge``)."""
GROUPS = ("init", "serve", "workspaces", "users", "keys", "kb", "endpoints", "services", "calls")


def mcpbridge(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_to_end([str(MCPBRIDGE), *args], what=" ".join(["mcpbridge", *args[:1]]), cwd=cwd, env=cli_env(env))


def leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], str]]:
    """Every runnable command of the parser: its words and its help."""
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not actions:
        yield path, parser.format_help()
        return
    for name, child in actions[0].choices.items():
        yield from leaves(child, (*path, name))


def test_version_and_help(tmp_path: Path) -> None:
    version = mcpbridge("--version", cwd=tmp_path)
    assert (version.returncode, version.stdout, version.stderr) == (0, f"mcpbridge {__version__}\n", "")
    shown = mcpbridge("--help", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    for group in GROUPS:
        assert re.search(rf"^    {group}\b", shown.stdout, re.MULTILINE), group
    assert "examples:" in shown.stdout
    assert "MCPBRIDGE_API_KEY" in shown.stdout, "who the command acts as"
    assert list(tmp_path.iterdir()) == [], "--help and --version touch no data"


def test_every_command_has_help_with_an_example(tmp_path: Path) -> None:
    found = list(leaves(build_parser()))
    assert len(found) >= 45
    for words, text in found:
        example = text.partition("example:\n")[2].strip().splitlines()
        assert example, f"mcpbridge {' '.join(words)} --help shows no example"
        assert example[0].startswith(f"mcpbridge {' '.join(words)}"), (words, example[0])
        assert "--json" in text, words
        assert "Exit status" in text, words
    # The same text from the real entry point, for a command of each group.
    for group in GROUPS[2:]:
        words = next(w for w, _ in found if w[0] == group)
        shown = mcpbridge(*words, "--help", cwd=tmp_path)
        assert shown.returncode == 0
        assert f"example:\n  mcpbridge {' '.join(words)}" in shown.stdout


def test_help_loads_nothing_but_the_parser(tmp_path: Path) -> None:
    """``--help`` and ``--version`` stay fast: neither the container, nor a web, AWS or validation library loads."""
    probe = (
        "import sys\n"
        "from mcpbridge.cli import main\n"
        "try:\n"
        "    main(sys.argv[1:])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('\\n'.join(sorted(sys.modules)), file=sys.stderr)\n"
    )
    for args in (["--help"], ["--version"], ["kb", "add", "--help"]):
        done = subprocess.run(
            [sys.executable, "-c", probe, *args], cwd=tmp_path, env=cli_env(), capture_output=True, text=True
        )
        loaded = set(done.stderr.split())
        heavy = {"mcpbridge.bootstrap", "mcpbridge.settings", "fastapi", "pydantic", "boto3", "anyio", "httpx"}
        assert loaded & heavy == set(), args
        assert "mcpbridge.cli.parser" in loaded


def test_exit_statuses_and_json_on_both_streams(tmp_path: Path) -> None:
    env = {"MCPBRIDGE_DATA_DIR": str(tmp_path / "data")}
    assert mcpbridge(cwd=tmp_path, env=env).returncode == 2, "no command: a usage error"
    unknown = mcpbridge("teleport", cwd=tmp_path, env=env)
    assert unknown.returncode == 2
    assert "invalid choice: 'teleport'" in unknown.stderr

    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    nowhere = mcpbridge("users", "list", cwd=tmp_path, env=env)
    assert (nowhere.returncode, nowhere.stdout) == (1, "")
    assert nowhere.stderr.startswith("mcpbridge: no server to talk to: log in with `mcpbridge login URL`")

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as closed:
        closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        url = f"http://127.0.0.1:{closed.getsockname()[1]}"
        env |= {"MCPBRIDGE_URL": url, "MCPBRIDGE_API_KEY": "sk_" + "x" * 43}
        refused = mcpbridge("users", "list", "--json", cwd=tmp_path, env=env)
        assert (refused.returncode, refused.stdout) == (1, "")
        problem = json.loads(refused.stderr)
        assert (problem["status"], problem["code"]) == (503, "server_unreachable")
        human = mcpbridge("users", "show", "usr_nope", cwd=tmp_path, env=env)
    assert human.returncode == 1
    assert human.stderr.startswith(f"mcpbridge: cannot reach {url} (connection refused; from MCPBRIDGE_URL and ")


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port another program listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


def test_serve_refuses_a_port_that_is_taken_and_changes_nothing(tmp_path: Path, held_port: int) -> None:
    data = tmp_path / "data"
    taken = mcpbridge("serve", "--port", str(held_port), "--data-dir", str(data), cwd=tmp_path)
    assert taken.returncode == 1
    assert taken.stdout == "", "nothing initialised, nothing said to listen"
    assert taken.stderr.startswith(f"mcpbridge: cannot listen on 127.0.0.1:{held_port}: Address already in use."), (
        taken.stderr
    )
    assert "--port" in taken.stderr
    assert not data.exists(), "the data directory was not created"
    out_of_range = mcpbridge("serve", "--port", "70000", "--data-dir", str(data), cwd=tmp_path)
    assert (out_of_range.returncode, out_of_range.stderr) == (
        1,
        "mcpbridge: --port must be from 0 to 65535, not 70000\n",
    )
    no_workers = mcpbridge("serve", "--workers", "0", "--data-dir", str(data), cwd=tmp_path)
    assert (no_workers.returncode, no_workers.stderr) == (1, "mcpbridge: --workers must be from 1 to 64, not 0\n")
    assert not data.exists()


def test_serve_with_json_says_where_it_listens_on_its_first_line(tmp_path: Path) -> None:
    """``--port 0`` takes a free port; the first line names it, with the admin key of the first start."""
    log = tmp_path / "serve.stdout"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(MCPBRIDGE), "serve", "--port", "0", "--json", "--data-dir", str(tmp_path / "data")],
            cwd=tmp_path,
            env=cli_env(),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.DEVNULL,
        )
    try:
        serve = Worker.process("serve", process, lambda: log.read_text(errors="replace"))
        wait_until(lambda: b"\n" in log.read_bytes(), serve, what="printing its first line")
        first = json.loads(log.read_text().splitlines()[0])
        assert set(first) == {"url", "workspace_id", "api_key", "created"}
        assert first["created"] is True
        assert first["api_key"].startswith("sk_")
        assert first["url"].startswith("http://127.0.0.1:")
        assert not first["url"].endswith(":0")
        with http_client(first["url"]) as client:
            answers: list[httpx.Response] = []

            def answered() -> bool:
                with contextlib.suppress(httpx.TransportError):
                    answers.append(client.get("/api/v1/me", headers=bearer(first["api_key"])))
                return bool(answers)

            wait_until(answered, serve, what="answering /api/v1/me")
            assert answers[0].json()["workspace_id"] == first["workspace_id"]
        process.send_signal(signal.SIGINT)
        wait_until(lambda: process.poll() is not None, serve, what="stopping after SIGINT")
        assert process.returncode == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
