"""``mcpbridge services list`` and ``mcpbridge services authorize`` against a real authorization server and the MCP
server it protects (``tests/support/oauth_server.py``, on 127.0.0.1; it approves every authorization at once).

The browser is played by ``http.client`` (``approve``): it opens the authorization URL the command printed and
captures the redirect to mcpbridge's callback without following it; the test then hands that URL to the command on
stdin or with ``--redirected-url``, or (``--listen``) follows it to the command's own listener. The command runs
in-process (``main``) on the embedded backend and on DynamoDB/KMS in moto, and as a real subprocess for the
interactive modes.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx
import pytest
from fastapi.testclient import TestClient
from moto import mock_aws

from mcpbridge.bootstrap import Container
from mcpbridge.cli import main
from mcpbridge.client.connection import Connection, ConnectionSpec
from mcpbridge.client.oauth_calls import call_with_oauth
from mcpbridge.domain import credentials
from mcpbridge.domain.identity import Principal, Scope
from mcpbridge.http.apps import create_app, create_combined_app
from mcpbridge.identity.accounts import _api_key_item
from mcpbridge.oauth.rows import token_key
from mcpbridge.settings import Settings
from tests.functional.test_oauth_flow import approve, query_of
from tests.support.aws import create_aws_resources, set_fake_aws_env
from tests.support.live_server import live_server
from tests.support.moto_atomic import atomic_dynamodb
from tests.support.oauth_server import OAuthTestServer, oauth_server
from tests.support.readiness import Worker, run_to_end, wait_until
from tests.support.serve import cli_env, free_port

REDIRECT_URI = "http://127.0.0.1:8080/api/v1/mcp-oauth/callback"
"""The CLI's default redirect URI: mcpbridge's callback at ``mcpbridge serve``'s default address."""


# ---------------------------------------------------------------------------------------------------- fixtures


@dataclass
class Install:
    """An initialised mcpbridge (embedded or in moto) with an OAuth service, a plain one and the test server."""

    settings: Settings
    server: OAuthTestServer
    workspace_id: str
    admin_user: str
    oauth_service: str
    plain_service: str
    env: dict[str, str]
    """The MCPBRIDGE_* environment the command reads (besides --data-dir)."""
    admin_key: str = ""

    @property
    def data_args(self) -> list[str]:
        return ["--data-dir", str(self.settings.data_dir)] if self.settings.backend == "local" else []

    @contextlib.contextmanager
    def container(self) -> Iterator[Container]:
        built = Container(self.settings)
        try:
            yield built
        finally:
            built.close()

    def token(self, service_id: str, user_id: str | None = None) -> dict[str, Any] | None:
        with self.container() as container:
            return container.store.get(token_key(self.workspace_id, service_id, "user", user_id or self.admin_user))

    def attempts(self) -> list[dict[str, Any]]:
        with self.container() as container:
            return container.store.query(f"WS#{self.workspace_id}", sk_prefix="OAUTHATTEMPT#").items

    def whoami(self, service_id: str) -> str:
        """The protected server's tool, called with the stored token through call_with_oauth and a Connection."""

        async def run() -> str:
            with self.container() as container:
                service = container.services.find(self.workspace_id, service_id)

                async def call(spec: ConnectionSpec) -> str:
                    async with Connection(spec, container.egress) as connection:
                        result = await connection.call_tool("whoami", {})
                    text = result.content[0]
                    assert text.type == "text"
                    return text.text

                return await call_with_oauth(container.oauth, service, self.workspace_id, "user", self.admin_user, call)

        return anyio.run(run)


def _install(settings: Settings, server: OAuthTestServer, env: dict[str, str]) -> Install:
    container = Container(settings)
    try:
        key = container.identity.initialize().api_key
        assert key is not None
        admin = container.identity.authenticate(key)
        oauth = container.services.create(
            admin, name="Protected", url=server.mcp_url, auth_config={"auth_type": "oauth"}
        ).service
        plain = container.services.create(admin, name="plain", url=server.mcp_url).service
        return Install(settings, server, admin.workspace_id, admin.user_id, oauth.id, plain.id, env, key)
    finally:
        container.close()


@pytest.fixture
def server() -> Iterator[OAuthTestServer]:
    with oauth_server() as built:
        yield built


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in list(os.environ):
        if name.startswith("MCPBRIDGE_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("MCPBRIDGE_SSRF_ALLOWLIST", "127.0.0.1")
    return monkeypatch


@pytest.fixture
def local(tmp_path: Path, server: OAuthTestServer, clean_env: pytest.MonkeyPatch) -> Install:
    settings = Settings(data_dir=tmp_path / "data", ssrf_allowlist=["127.0.0.1"])
    return _install(settings, server, {"MCPBRIDGE_SSRF_ALLOWLIST": "127.0.0.1"})


@pytest.fixture(params=["local", "aws"])
def installed(
    request: pytest.FixtureRequest, tmp_path: Path, server: OAuthTestServer, clean_env: pytest.MonkeyPatch
) -> Iterator[Install]:
    if request.param == "local":
        settings = Settings(data_dir=tmp_path / "data", ssrf_allowlist=["127.0.0.1"])
        yield _install(settings, server, {"MCPBRIDGE_SSRF_ALLOWLIST": "127.0.0.1"})
        return
    set_fake_aws_env(clean_env)
    with mock_aws(), atomic_dynamodb():
        resources = create_aws_resources(table_name=f"mcpbridge-{uuid.uuid4().hex[:8]}")
        env = {
            "MCPBRIDGE_BACKEND": "aws",
            "MCPBRIDGE_TABLE_NAME": resources.table_name,
            "MCPBRIDGE_KMS_KEY_ID": resources.kms_key_id,
            "MCPBRIDGE_BUCKET_NAME": resources.bucket_name,
            "MCPBRIDGE_AWS_REGION": "eu-west-1",
            "MCPBRIDGE_INDEX_CACHE_DIR": str(tmp_path / "index-cache"),
            "MCPBRIDGE_SSRF_ALLOWLIST": "127.0.0.1",
        }
        for name, value in env.items():
            clean_env.setenv(name, value)
        yield _install(Settings(), server, env)


@dataclass
class Run:
    code: int
    out: str
    err: str

    @property
    def authorization_url(self) -> str:
        urls = [line.strip() for line in self.out.splitlines() if line.startswith("  http")]
        assert len(urls) == 1, self.out
        return urls[0]


def cli(
    args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *, stdin: str = ""
) -> Run:
    """``mcpbridge <args>`` in this process, with ``stdin`` as its input."""
    capsys.readouterr()
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code = main(args)
    captured = capsys.readouterr()
    return Run(code, captured.out, captured.err)


def started(install: Install, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    """Start an authorization of the OAuth service without finishing it (no input): its authorization URL."""
    run = cli(["services", "authorize", "Protected", *install.data_args], capsys, monkeypatch)
    assert run.code == 1, run
    assert "no URL was given" in run.err
    assert "--redirected-url" in run.err, "the command says how to finish later"
    return run.authorization_url


def assert_nothing_secret(install: Install, output: str, location: str) -> None:
    """Neither the code, nor any token the server issued, nor the state (outside the printed authorization URL)."""
    params = query_of(location)
    assert params["code"] not in output
    for issued in install.server.issued:
        assert issued not in output
    assert output.count(params["state"]) <= 1, "the state appears only inside the authorization URL"


# ---------------------------------------------------------------------------------------------------- list


def test_list_shows_the_services(
    installed: Install, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with installed.container() as container, live_server(create_app(container, "admin_api")) as url:
        monkeypatch.setenv("MCPBRIDGE_URL", url)
        monkeypatch.setenv("MCPBRIDGE_API_KEY", installed.admin_key)
        table = cli(["services", "list"], capsys, monkeypatch)
        listed = cli(["services", "list", "--json"], capsys, monkeypatch)
    assert table.code == 0, table
    lines = table.out.splitlines()
    assert lines[0].split() == ["ID", "NAME", "TRANSPORT", "AUTH", "ENABLED"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    assert rows == {
        installed.oauth_service: ["Protected", "http-streamable", "oauth", "yes"],
        installed.plain_service: ["plain", "http-streamable", "none", "yes"],
    }

    assert listed.code == 0
    shown = json.loads(listed.out)
    assert shown["next_cursor"] is None, "the REST API's list body, every page in one"
    assert {(row["id"], row["auth_config"]["auth_type"]) for row in shown["items"]} == {
        (installed.oauth_service, "oauth"),
        (installed.plain_service, "none"),
    }


# ---------------------------------------------------------------------------------------------------- authorize


def test_authorize_then_finish_with_the_redirected_url(
    installed: Install, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = started(installed, capsys, monkeypatch)
    params = query_of(url)
    assert url.startswith(f"{installed.server.issuer}/authorize?")
    assert params["redirect_uri"] == REDIRECT_URI
    assert params["code_challenge_method"] == "S256"
    assert params["resource"] == installed.server.mcp_url
    assert installed.token(installed.oauth_service) is None, "nothing is stored before the callback"

    location = approve(url)
    assert location.startswith(REDIRECT_URI + "?")
    done = cli(
        ["services", "authorize", installed.oauth_service, "--redirected-url", location, *installed.data_args],
        capsys,
        monkeypatch,
    )
    assert done.code == 0, done
    assert done.out.startswith(
        f"Authorized Protected ({installed.oauth_service}) for user {installed.admin_user}: authorized"
    ), done.out
    assert "refreshable" in done.out
    assert_nothing_secret(installed, done.out + done.err, location)
    assert installed.token(installed.oauth_service) is not None
    assert [attempt["status"] for attempt in installed.attempts()] == ["completed"]
    assert installed.server.token_requests["authorization_code"] == 1
    assert installed.whoami(installed.oauth_service) == "hello alice"

    again = cli(
        ["services", "authorize", "protected", "--redirected-url", location, *installed.data_args],
        capsys,
        monkeypatch,
    )
    assert again.code == 1
    assert "unknown, used or expired authorization state" in again.err
    assert installed.server.token_requests["authorization_code"] == 1, "a used URL never reaches the server"


def test_authorize_with_json_keeps_stdout_for_the_status(
    installed: Install, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With --json, what a person reads goes to stderr; stdout holds only the REST API's OAuth status."""
    start = cli(["services", "authorize", "Protected", "--json", *installed.data_args], capsys, monkeypatch)
    assert (start.code, start.out) == (1, "")
    lines = start.err.splitlines()
    assert json.loads(lines[-1])["code"] == "authorization_pending", "the failure as problem+json"
    url = next(line.strip() for line in lines if line.startswith("  http"))

    location = approve(url)
    args = ["services", "authorize", "Protected", "--redirected-url", location, "--json", *installed.data_args]
    done = cli(args, capsys, monkeypatch)
    assert (done.code, done.err) == (0, ""), done
    status = json.loads(done.out)
    assert (status["status"], status["refreshable"]) == ("authorized", True)
    assert_nothing_secret(installed, done.out, location)
    assert installed.token(installed.oauth_service) is not None


def paste(install: Install, cwd: Path, before: Any = None) -> tuple[int, str, str, str]:
    """The real command in a subprocess: it prints the URL, the browser approves, the user pastes where it landed
    (after ``before(location)``). Returns the exit status, stdout, stderr and the pasted URL."""
    command = [sys.executable, "-m", "mcpbridge.cli", "services", "authorize", "protected", *install.data_args]
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=cli_env(install.env),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdin is not None
        printed = _read_until(process, lambda line: line.startswith("  http"))
        location = approve(printed[-1].strip())
        printed += _read_until(process, lambda line: "paste" in line)
        if before is not None:
            before(location)
        process.stdin.write(location + "\n")
        process.stdin.flush()
        out, err = _communicate(process)
    finally:
        _stop(process)
    return process.returncode, "".join(printed) + out, err, location


@pytest.mark.slow  # a subprocess
def test_authorize_by_pasting_the_redirected_url(local: Install, tmp_path: Path) -> None:
    code, out, err, location = paste(local, tmp_path)
    assert code == 0, f"{out}\n{err}"
    assert f"Authorized Protected ({local.oauth_service}) for user {local.admin_user}: authorized" in out
    assert_nothing_secret(local, out + err, location)
    assert local.whoami(local.oauth_service) == "hello alice"


@pytest.mark.slow  # a subprocess
def test_pasting_after_the_server_took_the_callback_reports_success(local: Install, tmp_path: Path) -> None:
    """``mcpbridge serve`` at the redirect URI completes the flow itself; the URL pasted afterwards is used up."""

    def served_callback(location: str) -> None:
        parts = urlsplit(location)
        with local.container() as container, TestClient(create_combined_app(container)) as server:
            landed = server.get(f"{parts.path}?{parts.query}", follow_redirects=False)
        assert landed.status_code == 200, landed.text
        assert "Authorization complete" in landed.text

    code, out, err, location = paste(local, tmp_path, served_callback)
    assert_nothing_secret(local, out + err, location)
    assert code == 0, f"{out}\n{err}"
    assert "for user" in out
    assert "the callback at the redirect URI completed it" in out
    assert local.server.token_requests["authorization_code"] == 1, "the code was exchanged once, by the server"
    assert local.whoami(local.oauth_service) == "hello alice"


@pytest.mark.slow  # a subprocess
def test_authorize_with_listen(local: Install, tmp_path: Path) -> None:
    """--listen: the browser comes back to the command itself, on 127.0.0.1 at the redirect URI's port."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "mcpbridge.cli",
        "services",
        "authorize",
        local.oauth_service,
        "--listen",
        "--port",
        str(port),
        "--timeout",
        "60",
        *local.data_args,
    ]
    process = subprocess.Popen(
        command, cwd=tmp_path, env=cli_env(local.env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        printed = _read_until(process, lambda line: line.startswith("  http"))
        url = printed[-1].strip()
        assert query_of(url)["redirect_uri"] == f"http://127.0.0.1:{port}/api/v1/mcp-oauth/callback"
        printed += _read_until(process, lambda line: line.startswith("Waiting"))
        location = approve(url)
        with httpx.Client(timeout=30, trust_env=False) as browser:
            forged = location.replace("state=", "state=x")
            stray = browser.get(forged)
            assert stray.status_code == 400, "a request that is not this attempt's answer is refused..."
            assert "not the authorization this command started" in stray.text
            assert process.poll() is None, "...and the command keeps waiting"
            landed = browser.get(location)
        assert landed.status_code == 200, landed.text
        assert "Authorization complete" in landed.text
        assert landed.headers["cache-control"] == "no-store"
        out, err = _communicate(process)
    finally:
        _stop(process)
    output = "".join(printed) + out
    assert process.returncode == 0, f"{output}\n{err}"
    assert f"Authorized Protected ({local.oauth_service})" in output
    assert_nothing_secret(local, output + err, location)
    assert local.whoami(local.oauth_service) == "hello alice"


@pytest.mark.slow  # a subprocess
def test_listen_gives_up_after_the_timeout(local: Install, tmp_path: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "mcpbridge.cli",
        "services",
        "authorize",
        "protected",
        "--listen",
        "--port",
        str(free_port()),
        "--timeout",
        "1",
        *local.data_args,
    ]
    done = run_to_end(command, what="mcpbridge services authorize", cwd=tmp_path, env=cli_env(local.env))
    assert done.returncode == 1, done
    assert "did not come back in time" in done.stderr
    assert "--redirected-url" in done.stderr
    assert local.token(local.oauth_service) is None


# ---------------------------------------------------------------------------------------------------- bad input


def test_unknown_service_is_refused(
    local: Install, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for reference in ("nope", "svc_0000000000000000000000"):
        run = cli(["services", "authorize", reference, *local.data_args], capsys, monkeypatch)
        assert run.code == 1
        assert run.out == ""
        assert f"mcpbridge: no MCP service with the id or name {reference!r}" in run.err
    assert local.attempts() == [], "nothing was started"
    assert local.server.authorizations == []


def test_a_service_without_oauth_is_refused(
    local: Install, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    run = cli(["services", "authorize", "plain", *local.data_args], capsys, monkeypatch)
    assert run.code == 1
    assert "mcpbridge: the MCP service plain does not use OAuth" in run.err
    assert local.attempts() == []


def test_unknown_user_and_uninitialised_data_dir_are_refused(
    local: Install, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    run = cli(["services", "authorize", "protected", "--user", "usr_nobody", *local.data_args], capsys, monkeypatch)
    assert run.code == 1
    assert "mcpbridge: no user with the id or name 'usr_nobody' in workspace" in run.err
    empty = cli(["services", "authorize", "protected", "--data-dir", str(tmp_path / "empty")], capsys, monkeypatch)
    assert empty.code == 1
    assert "run `mcpbridge init` first" in empty.err
    assert local.attempts() == []


def test_a_tampered_state_is_refused_and_uses_nothing(
    local: Install, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    location = approve(started(local, capsys, monkeypatch))
    state = query_of(location)["state"]
    tampered = location.replace(f"state={state}", f"state={state[:-2]}AA")
    refused = cli(
        ["services", "authorize", "protected", "--redirected-url", tampered, *local.data_args], capsys, monkeypatch
    )
    assert refused.code == 1
    assert "unknown, used or expired authorization state" in refused.err
    assert state not in refused.err
    assert local.server.token_requests["authorization_code"] == 0
    assert [attempt["status"] for attempt in local.attempts()] == ["pending"]

    # The genuine URL still works: nothing was used up.
    done = cli(
        ["services", "authorize", "protected", "--redirected-url", location, *local.data_args], capsys, monkeypatch
    )
    assert done.code == 0, done


def test_a_tampered_code_fails_the_attempt_and_stores_nothing(
    local: Install, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    location = approve(started(local, capsys, monkeypatch))
    code = query_of(location)["code"]
    tampered = location.replace(f"code={code}", f"code={code[:-2]}AA")
    failed = cli(
        ["services", "authorize", "protected", "--redirected-url", tampered, *local.data_args], capsys, monkeypatch
    )
    assert failed.code == 1
    assert "mcpbridge: the authorization of Protected failed: authorization_failed" in failed.err
    assert code not in failed.out + failed.err
    assert local.token(local.oauth_service) is None
    assert [attempt["status"] for attempt in local.attempts()] == ["failed"]
    # The state was single use: the genuine URL is refused now, and never reaches the token endpoint.
    again = cli(
        ["services", "authorize", "protected", "--redirected-url", location, *local.data_args], capsys, monkeypatch
    )
    assert again.code == 1
    assert "unknown, used or expired" in again.err
    assert local.server.token_requests["authorization_code"] == 1


def test_a_tampered_issuer_fails_the_attempt(
    local: Install, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    location = approve(started(local, capsys, monkeypatch))
    tampered = location.replace("iss=http", "iss=https")
    failed = cli(
        ["services", "authorize", "protected", "--redirected-url", tampered, *local.data_args], capsys, monkeypatch
    )
    assert failed.code == 1
    assert "failed: issuer_mismatch" in failed.err
    assert local.server.token_requests["authorization_code"] == 0, "RFC 9207: checked before the code is exchanged"
    assert local.token(local.oauth_service) is None


def test_a_refusal_by_the_user_is_reported(
    local: Install, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    location = approve(started(local, capsys, monkeypatch))
    code = query_of(location)["code"]
    denied = location.replace(f"code={code}", "error=access_denied")
    failed = cli(
        ["services", "authorize", "protected", "--redirected-url", denied, *local.data_args], capsys, monkeypatch
    )
    assert failed.code == 1
    assert "mcpbridge: the authorization of Protected failed: access_denied" in failed.err
    assert [attempt["status"] for attempt in local.attempts()] == ["failed"]
    assert local.server.token_requests["authorization_code"] == 0
    assert local.token(local.oauth_service) is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda url: url.replace("127.0.0.1:8080", "evil.example"), "not at the authorization's redirect URI"),
        (lambda url: url.replace("/mcp-oauth/callback", "/elsewhere"), "not at the authorization's redirect URI"),
        (lambda url: url + "&state=again", "repeats a parameter"),
        (lambda url: url.split("?")[0], "not the URL the browser was sent back to"),
    ],
    ids=["other-host", "other-path", "repeated-state", "no-query"],
)
def test_a_url_that_is_not_the_callback_is_refused_and_uses_nothing(
    local: Install, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, change: Any, message: str
) -> None:
    location = approve(started(local, capsys, monkeypatch))
    refused = cli(
        ["services", "authorize", "protected", "--redirected-url", change(location), *local.data_args],
        capsys,
        monkeypatch,
    )
    assert refused.code == 1
    assert message in refused.err
    assert [attempt["status"] for attempt in local.attempts()] == ["pending"]
    assert local.server.token_requests["authorization_code"] == 0


def test_the_authorization_url_pasted_back_is_refused(
    local: Install, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A common slip: pasting the URL that was printed (it has a state but no code) uses nothing up."""
    url = started(local, capsys, monkeypatch)
    refused = cli(
        ["services", "authorize", "protected", "--redirected-url", url, *local.data_args], capsys, monkeypatch
    )
    assert refused.code == 1
    assert "not the URL the browser was sent back to" in refused.err
    assert [attempt["status"] for attempt in local.attempts()] == ["pending"]


def test_a_url_of_another_service_or_user_is_refused_and_uses_nothing(
    local: Install, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with local.container() as container:
        other = container.services.create(
            _admin(local), name="Second", url=local.server.mcp_url, auth_config={"auth_type": "oauth"}
        ).service
        bob = _add_user(container, local, "usr_bob")
    location = approve(started(local, capsys, monkeypatch))

    wrong_service = cli(
        ["services", "authorize", other.id, "--redirected-url", location, *local.data_args], capsys, monkeypatch
    )
    assert wrong_service.code == 1
    assert "answers an authorization of another MCP service, not Second" in wrong_service.err
    wrong_user = cli(
        ["services", "authorize", "protected", "--user", bob, "--redirected-url", location, *local.data_args],
        capsys,
        monkeypatch,
    )
    assert wrong_user.code == 1
    assert "answers another authorization attempt (another user" in wrong_user.err
    assert [attempt["status"] for attempt in local.attempts()] == ["pending"]
    assert local.server.token_requests["authorization_code"] == 0

    done = cli(
        ["services", "authorize", "protected", "--redirected-url", location, *local.data_args], capsys, monkeypatch
    )
    assert done.code == 0, done
    assert local.token(local.oauth_service, bob) is None, "the token is the admin's, who started the attempt"


def test_authorize_for_another_user(
    local: Install, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with local.container() as container:
        bob = _add_user(container, local, "usr_bob")
    run = cli(["services", "authorize", "protected", "--user", bob, *local.data_args], capsys, monkeypatch)
    assert run.code == 1
    assert f"for user {bob}." in run.out
    location = approve(run.authorization_url)
    done = cli(
        ["services", "authorize", "protected", "--user", bob, "--redirected-url", location, *local.data_args],
        capsys,
        monkeypatch,
    )
    assert done.code == 0, done
    assert f"for user {bob}: authorized" in done.out
    assert local.token(local.oauth_service, bob) is not None
    assert local.token(local.oauth_service) is None, "not the admin's"


def test_bad_options_are_refused(
    local: Install, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    timeout = cli(["services", "authorize", "protected", "--timeout", "0", *local.data_args], capsys, monkeypatch)
    assert timeout.code == 1
    assert "--timeout must be" in timeout.err
    monkeypatch.setenv("MCPBRIDGE_PUBLIC_BASE_URL", "https://mcpbridge.example")
    listen = cli(["services", "authorize", "protected", "--listen", *local.data_args], capsys, monkeypatch)
    assert listen.code == 1
    assert "--listen needs the redirect URI on this machine" in listen.err
    port = cli(["services", "authorize", "protected", "--port", "9000", *local.data_args], capsys, monkeypatch)
    assert port.code == 1
    assert "--port applies only without MCPBRIDGE_PUBLIC_BASE_URL" in port.err
    with pytest.raises(SystemExit):
        main(["services", "authorize", "protected", "--listen", "--redirected-url", "http://x"])
    assert local.attempts() == []


# ---------------------------------------------------------------------------------------------------- helpers


def _admin(install: Install) -> Principal:
    return Principal(install.workspace_id, install.admin_user, "", "admin", Scope())


def _add_user(container: Container, install: Install, user_id: str) -> str:
    """Another user of the workspace: one with an API key (as in test_oauth_flow)."""
    issued = credentials.issue(credentials.API_KEY_PREFIX)
    item = _api_key_item(
        install.workspace_id, f"key_{user_id}", user_id, user_id, "viewer", Scope(), issued, "2027-01-01T00:00:00Z"
    )
    container.store.put(item)
    return user_id


def _read_until(process: subprocess.Popen[str], done: Any) -> list[str]:
    """Lines of a subprocess's output up to the first one ``done`` accepts, waited for while the process works."""
    assert process.stdout is not None
    stream = process.stdout
    lines: list[str] = []
    finished = threading.Event()

    def read() -> None:
        for line in stream:
            lines.append(line)
            if done(line):
                break
        finished.set()

    threading.Thread(target=read, daemon=True).start()
    command = Worker.process("mcpbridge services authorize", process, lambda: "".join(lines))
    wait_until(finished.is_set, command, what="printing the line awaited")
    assert lines, "the command printed nothing"
    assert done(lines[-1]), f"the output ended first:\n{''.join(lines)}"
    return lines


def _communicate(process: subprocess.Popen[str]) -> tuple[str, str]:
    """The rest of the command's output once it has ended, waited for while it works (its output is small)."""
    command = Worker.process("mcpbridge services authorize", process, lambda: "")
    wait_until(lambda: process.poll() is not None, command, what="ending")
    out, err = process.communicate()
    return out, err


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.communicate(timeout=10)
