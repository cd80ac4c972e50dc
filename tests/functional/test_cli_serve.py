"""The real ``mcpbridge`` command in subprocesses: ``init`` (once only) and ``serve`` (first start, admin flow,
clean SIGINT shutdown, restart on the same data directory)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcpbridge.bootstrap import Container
from mcpbridge.settings import Settings
from tests.support.serve import (
    SERVE_TEST_TIMEOUT,
    ServeProcess,
    check_admin_flow,
    check_after_restart,
    cli_env,
    http_client,
    list_keys,
    run_init,
)

# Each test starts `serve` (a few CPU seconds each time): at load 20 on two cores that can take minutes, which the
# readiness waits allow (tests.support.readiness); this is only the last resort against a hang.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(SERVE_TEST_TIMEOUT)]


def test_init_creates_once_and_only_once(tmp_path: Path) -> None:
    env = cli_env()
    data_dir = tmp_path / "data"

    first = run_init(["--data-dir", str(data_dir)], cwd=tmp_path, env=env)
    assert first["created"] is True
    assert first["workspace_id"].startswith("ws_")
    assert isinstance(first["api_key"], str)
    assert first["api_key"].startswith("sk_")
    files_after_first = sorted(p.name for p in data_dir.iterdir())

    second = run_init(["--data-dir", str(data_dir)], cwd=tmp_path, env=env)
    assert second == {"workspace_id": first["workspace_id"], "api_key": None, "created": False}
    assert sorted(p.name for p in data_dir.iterdir()) == files_after_first
    # Nothing was written to the working directory (the data dir came from --data-dir).
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]

    container = Container(Settings(backend="local", data_dir=data_dir))
    try:
        admin = container.identity.authenticate(first["api_key"])
        assert admin.role == "admin"
        assert admin.workspace_id == first["workspace_id"]
        keys, cursor = container.identity.list_api_keys(admin)
        assert len(keys) == 1
        assert cursor is None
    finally:
        container.close()


def test_init_without_data_dir_uses_working_directory(tmp_path: Path) -> None:
    result = run_init([], cwd=tmp_path, env=cli_env())
    assert result["created"] is True
    assert (tmp_path / ".mcpbridge").is_dir()
    again = run_init([], cwd=tmp_path, env=cli_env({"MCPBRIDGE_DATA_DIR": str(tmp_path / ".mcpbridge")}))
    assert again["created"] is False
    assert again["workspace_id"] == result["workspace_id"]


def test_serve_first_start_admin_flow_sigint_and_restart(tmp_path: Path) -> None:
    env = cli_env()
    data_dir = tmp_path / "data"
    args = ["--data-dir", str(data_dir)]

    first = ServeProcess.start(cwd=tmp_path, env=env, args=args, log_dir=tmp_path, tag="serve1")
    try:
        first.wait_ready()
        printed = first.printed_keys()
        assert len(printed) == 1, first.output()
        admin_key = printed[0]
        assert first.stdout().count(admin_key) == 1, "the admin key is printed more than once"
        assert "Initialised mcpbridge" in first.stdout()
        assert admin_key not in first.stderr_path.read_text(errors="replace"), "the admin key is logged"
        viewer = check_admin_flow(first.base_url, admin_key)
        code = first.interrupt()
        assert code == 0, f"serve exited with {code} on SIGINT:\n{first.output()}"
    finally:
        first.kill()
    assert "Traceback" not in first.output()

    second = ServeProcess.start(cwd=tmp_path, env=env, args=args, log_dir=tmp_path, tag="serve2")
    try:
        second.wait_ready()
        assert second.printed_keys() == [], second.output()
        assert "sk_" not in second.stdout()
        assert "Already initialised" in second.stdout()
        check_after_restart(second.base_url, admin_key, viewer)
        code = second.interrupt()
        assert code == 0, f"serve exited with {code} on SIGINT:\n{second.output()}"
    finally:
        second.kill()
    assert "Traceback" not in second.output()


def test_init_then_serve_shares_the_install(tmp_path: Path) -> None:
    env = cli_env()
    data_dir = tmp_path / "data"
    admin_key = run_init(["--data-dir", str(data_dir)], cwd=tmp_path, env=env)["api_key"]

    server = ServeProcess.start(
        cwd=tmp_path, env=env, args=["--data-dir", str(data_dir)], log_dir=tmp_path, tag="serve"
    )
    try:
        server.wait_ready()
        assert server.printed_keys() == [], server.output()
        with http_client(server.base_url) as client:
            assert len(list_keys(client, admin_key)) == 1
    finally:
        server.kill()
