"""An operator's day through the ``mcpbridge`` command and the REST API, on both backends.

From ``init`` to two workspaces, three users, keys, a knowledge base filled from a folder, an MCP endpoint used by
an MCP client request, a real MCP server (npm ``@modelcontextprotocol/server-everything``) registered, tested and
given a tool that needs approval, and approvals resolved only by the right user, through the CLI (with the platform
admin's key ``init`` printed, or with a user's own key in ``MCPBRIDGE_API_KEY``) and through REST. ``mcpbridge
serve`` runs in a subprocess (on SQLite, or on DynamoDB/KMS/S3 served by a moto server on 127.0.0.1) and holds the
paused calls; the CLI runs in this process (``main``), a client of that serve over real HTTP (``MCPBRIDGE_URL``),
with none of the backend's settings: every ``MCPBRIDGE_*`` and ``AWS_*`` variable is removed from its environment.
Every ``--json`` output is compared with the REST API's body for the same thing.
"""

from __future__ import annotations

import contextlib
import http.server
import io
import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from moto.server import ThreadedMotoServer

from mcpbridge.cli import main
from tests.support.aws import create_aws_resources
from tests.support.everything import Everything
from tests.support.moto_atomic import atomic_dynamodb
from tests.support.serve import ServeProcess, bearer, cli_env, free_port, http_client, run_init

pytestmark = [pytest.mark.slow]

REGION = "eu-west-1"
FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": REGION,
}
FINAL = ("completed", "failed", "rejected", "cancelled", "uncertain")


# ---------------------------------------------------------------------------------------------------- fixtures


@dataclass
class Run:
    code: int
    out: str
    err: str


@dataclass
class Deployment:
    """A backend's settings (the environment every process of the test reads), a running ``mcpbridge serve`` and
    the platform's admin key ``init`` printed."""

    backend: str
    env: dict[str, str]
    tmp: Path
    server: ServeProcess | None = None
    platform_key: str = ""
    keys: dict[str, str] = field(default_factory=dict)

    def rest(self) -> httpx.Client:
        assert self.server is not None
        return http_client(self.server.base_url)


@pytest.fixture
def moto_url(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A moto server on 127.0.0.1 (DynamoDB with its per-item atomicity, KMS, S3), reset afterwards."""
    for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    with atomic_dynamodb():
        server.start()
        url = f"http://127.0.0.1:{port}"
        try:
            yield url
        finally:
            try:
                httpx.post(f"{url}/moto-api/reset", timeout=10.0, trust_env=False)
            finally:
                server.stop()


def _environment(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    env = {
        "MCPBRIDGE_SSRF_ALLOWLIST": "127.0.0.1",
        "MCPBRIDGE_EMBEDDING_PROVIDER": "none",
        "MCPBRIDGE_LOG_LEVEL": "WARNING",
    }
    if request.param == "local":
        return {**env, "MCPBRIDGE_DATA_DIR": str(tmp_path / "data")}
    moto_url: str = request.getfixturevalue("moto_url")
    resources = create_aws_resources(
        table_name=f"mcpbridge-{uuid.uuid4().hex[:8]}", endpoint_url=moto_url, region=REGION
    )
    return {
        **env,
        **FAKE_CREDENTIALS,
        "AWS_ENDPOINT_URL": moto_url,
        "MCPBRIDGE_BACKEND": "aws",
        "MCPBRIDGE_TABLE_NAME": resources.table_name,
        "MCPBRIDGE_KMS_KEY_ID": resources.kms_key_id,
        "MCPBRIDGE_BUCKET_NAME": resources.bucket_name,
        "MCPBRIDGE_AWS_REGION": REGION,
    }


@pytest.fixture(params=["local", "aws"])
def installed(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Deployment:
    """A backend initialised by ``mcpbridge init`` (a subprocess), its settings in this process's environment."""
    env = _environment(request, tmp_path)
    env["MCPBRIDGE_PUBLIC_BASE_URL"] = f"http://127.0.0.1:{free_port()}"  # the URLs the API shows: serve's
    for name in list(os.environ):
        if name.startswith("MCPBRIDGE_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MCPBRIDGE_INDEX_CACHE_DIR", str(tmp_path / "cli-index-cache"))
    built = Deployment(request.param, env, tmp_path)
    built.platform_key = run_init([], cwd=tmp_path, env=cli_env(env))["api_key"]
    return built


@pytest.fixture
def deployment(installed: Deployment) -> Iterator[Deployment]:
    """The same, with ``mcpbridge serve`` running on it (at MCPBRIDGE_PUBLIC_BASE_URL's port)."""
    port = int(installed.env["MCPBRIDGE_PUBLIC_BASE_URL"].rpartition(":")[2])
    installed.server = _serve(installed.env, installed.tmp, port)
    try:
        installed.server.wait_ready()
        yield installed
    finally:
        installed.server.kill()


def _serve(env: dict[str, str], tmp_path: Path, port: int) -> ServeProcess:
    out, err = tmp_path / "serve.stdout", tmp_path / "serve.stderr"
    serve_env = cli_env({**env, "MCPBRIDGE_INDEX_CACHE_DIR": str(tmp_path / "serve-index-cache")})
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "mcpbridge.cli", "serve", "--port", str(port)],
            cwd=tmp_path,
            env=serve_env,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
        )
    return ServeProcess(process, port, out, err)


@pytest.fixture
def everything(tmp_path: Path) -> Iterator[Everything]:
    workdir = tmp_path / "everything"
    workdir.mkdir()
    server = Everything("streamableHttp", workdir)
    try:
        server.start()
        yield server
    finally:
        server.kill()


class Cli:
    """``mcpbridge`` in this process, a client of the serve at ``url``: with the platform admin's key (the
    operator's) or, with ``key``, as that key's user. The backend's settings are not in its environment."""

    def __init__(self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
        self._capsys = capsys
        self._monkeypatch = monkeypatch
        self.url = ""
        self.operator_key = ""

    def run(self, *args: str, key: str | None = None, stdin: str = "") -> Run:
        self._capsys.readouterr()
        with self._monkeypatch.context() as patch:
            patch.setattr(sys, "stdin", io.StringIO(stdin))
            for name in list(os.environ):
                if name.startswith(("MCPBRIDGE_", "AWS_")):
                    patch.delenv(name)
            patch.setenv("MCPBRIDGE_URL", self.url)
            patch.setenv("MCPBRIDGE_API_KEY", self.operator_key if key is None else key)
            code = main(list(args))
        captured = self._capsys.readouterr()
        return Run(code, captured.out, captured.err)

    def json(self, *args: str, key: str | None = None, stdin: str = "") -> Any:
        done = self.run(*args, "--json", key=key, stdin=stdin)
        assert done.code == 0, f"mcpbridge {' '.join(args)}: {done}"
        lines = done.out.splitlines()
        assert len(lines) == 1, f"--json printed {len(lines)} lines: {done.out}"
        return json.loads(lines[0])

    def fails(self, *args: str, key: str | None = None, stdin: str = "") -> Run:
        done = self.run(*args, key=key, stdin=stdin)
        assert done.code == 1, f"mcpbridge {' '.join(args)} should fail: {done}"
        assert done.err.startswith("mcpbridge: "), done
        assert "Traceback" not in done.err
        return done

    def problem(self, *args: str, key: str | None = None) -> dict[str, Any]:
        """A failure with --json: nothing on stdout, the problem+json body on stderr."""
        done = self.run(*args, "--json", key=key)
        assert done.code == 1, done
        assert done.out == ""
        body: dict[str, Any] = json.loads(done.err)
        return body


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    return Cli(capsys, monkeypatch)


def connected(cli: Cli, deployment: Deployment) -> Cli:
    assert deployment.server is not None
    cli.url, cli.operator_key = deployment.server.base_url, deployment.platform_key
    return cli


def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json() if response.content else None


def settled(deployment: Deployment, rest: httpx.Client, call_id: str, key: str) -> dict[str, Any]:
    """The call once it has ended, waited for while serve (which runs it) is alive and working."""
    assert deployment.server is not None
    body: dict[str, Any] = {}

    def ended() -> bool:
        body.update(ok(rest.get(f"/api/v1/agent/tool-calls/{call_id}", headers=bearer(key))))
        return body["status"] in FINAL

    deployment.server.wait_for(ended, f"call {call_id} ending")
    return body


# ---------------------------------------------------------------------------------------------------- the day


@dataclass
class Tenant:
    id: str
    admin_key: str
    admin_user: str
    users: dict[str, str] = field(default_factory=dict)
    """name -> user id"""
    keys: dict[str, str] = field(default_factory=dict)
    """name -> API key"""


def tenants(cli: Cli, deployment: Deployment) -> tuple[Tenant, Tenant]:
    """Two workspaces (CLI), three users in them (CLI) with keys to call tools (CLI), checked against REST."""
    made = []
    for name, admin in (("Acme", "alice"), ("Beta", "bea")):
        created = cli.json("workspaces", "create", name, "--admin-name", admin)
        assert created["status"] == "active"
        assert created["admin_api_key"]["key"].startswith("sk_")
        made.append(Tenant(created["id"], created["admin_api_key"]["key"], created["admin_user_id"]))
    acme, beta = made
    with deployment.rest() as rest:
        listed = ok(rest.get("/api/v1/workspaces", headers=bearer(deployment.platform_key)))
        assert cli.json("workspaces", "list") == listed, "--json is the REST body"
        assert {w["name"] for w in listed["items"]} == {"Default workspace", "Acme", "Beta"}
        assert cli.json("workspaces", "show", "acme") == ok(
            rest.get(f"/api/v1/workspaces/{acme.id}", headers=bearer(deployment.platform_key))
        ), "named case-insensitively"

    for tenant, workspace, name in ((acme, "Acme", "bob"), (acme, "Acme", "carol"), (beta, "Beta", "dave")):
        user = cli.json("users", "create", name, "--workspace", workspace)
        tenant.users[name] = user["id"]
        key = cli.json(  # the user named as it was just created: by its name
            "keys", "create", "--user", name, "--name", f"{name}'s agent", "--capability", "call_tools",
            "--workspace", workspace,
        )  # fmt: skip
        assert (key["user_id"], key["role"], key["capabilities"]) == (user["id"], "viewer", ["call_tools"])
        tenant.keys[name] = key["key"]
    with deployment.rest() as rest:
        users = ok(rest.get("/api/v1/users", headers=bearer(acme.admin_key)))
        assert cli.json("users", "list", "--workspace", acme.id) == users
        assert {u["name"] for u in users["items"]} == {"alice", "bob", "carol"}
        keys = ok(rest.get("/api/v1/api-keys", headers=bearer(acme.admin_key)))
        assert cli.json("keys", "list", "--workspace", "Acme") == keys
        assert cli.json("keys", "list", "--workspace", "Beta", "--user", beta.users["dave"])["items"][0]["name"] == (
            "dave's agent"
        )
    return acme, beta


def knowledge(cli: Cli, deployment: Deployment, acme: Tenant, tmp_path: Path) -> str:
    """A knowledge base filled from a folder (CLI), searched from the terminal and through REST."""
    marker = f"zq{uuid.uuid4().hex[:10]}"
    folder = tmp_path / "docs"
    (folder / "policies").mkdir(parents=True)
    (folder / "policies" / "refunds.md").write_text(f"# Refunds\n\nThe refund code is {marker}.\n")
    (folder / "faq.txt").write_text("Shipping is free above 50 euros.\n")
    (folder / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0")
    kb = cli.json("kb", "create", "handbook", "--description", "what staff need", "--workspace", "Acme")
    with page_server("# Onboarding\n\nBadges are collected at the front desk.\n") as url:
        added = cli.json("kb", "add", "handbook", str(folder), url, "--workspace", "Acme")
    assert added["errors"] == []
    assert sorted((d["title"], d["source"], d["parse_status"]) for d in added["items"]) == [
        ("faq.txt", "file", "completed"),
        ("onboarding.md", "url", "completed"),
        ("policies/refunds.md", "file", "completed"),
    ], "the folder's documents (the image left out) and the page, each indexed before the command returned"
    with deployment.rest() as rest:
        document = added["items"][0]
        assert ok(rest.get(f"/api/v1/documents/{document['id']}", headers=bearer(acme.admin_key))) == document
        found = ok(rest.post("/api/v1/knowledge/search", headers=bearer(acme.admin_key), json={"query": marker}))
        assert [hit["document_title"] for hit in found["results"]] == ["policies/refunds.md"]
        bases = ok(rest.get("/api/v1/knowledge-bases", headers=bearer(acme.admin_key)))
        assert cli.json("kb", "list", "--workspace", "Acme") == bases
    searched = cli.json("kb", "search", marker, "--workspace", "Acme")
    assert [hit["document_title"] for hit in searched["results"]] == ["policies/refunds.md"]
    table = cli.run("kb", "search", marker, "--workspace", "Acme")
    assert table.code == 0
    assert marker in table.out
    assert "policies/refunds.md" in table.out
    elsewhere = cli.problem("kb", "search", marker, "--workspace", "Beta")
    assert (elsewhere["status"], elsewhere["code"]) == (404, "kb_not_found"), "Beta sees nothing of Acme"
    return str(kb["id"])


@contextlib.contextmanager
def page_server(text: str) -> Iterator[str]:
    """A web server on 127.0.0.1 with one Markdown page; the page's URL."""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = text.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/markdown; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/guides/onboarding.md"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def publish(cli: Cli, deployment: Deployment, acme: Tenant, kb: str) -> None:
    """An endpoint (CLI) whose token an MCP client uses; rotated and disabled (CLI)."""
    created = cli.json("endpoints", "create", "Claude desk", "--kb", "handbook", "--workspace", "Acme")
    assert created["knowledge_base_ids"] == [kb]
    assert deployment.server is not None
    url = f"{deployment.server.base_url}/mcp/{created['id']}"
    assert created["url"] == url
    token = created["token"]
    assert token in created["client_configs"]["claude_code"]
    assert created["client_configs"]["cursor"]["mcpServers"]["claude-desk"]["url"] == url
    assert created["client_configs"]["vscode"]["servers"]["claude-desk"]["type"] == "http"
    human = cli.run("endpoints", "rotate", created["id"], "--workspace", "Acme")
    assert human.code == 0
    assert human.out.count("mcp_") >= 4, "the new token, in the Claude Code command and every config"
    new_token = next(line.strip() for line in human.out.splitlines() if line.strip().startswith("mcp_"))
    with deployment.rest() as rest:
        assert _mcp(rest, url, token).status_code == 401, "the old token stopped working at once"
        answered = _mcp(rest, url, new_token)
        assert answered.status_code == 200, answered.text
        assert "handbook" in answered.text
        listed = ok(rest.get("/api/v1/mcp-endpoints", headers=bearer(acme.admin_key)))
        assert cli.json("endpoints", "list", "--workspace", "Acme") == listed
        assert token not in json.dumps(listed)
        assert new_token not in json.dumps(listed)
        assert cli.json("endpoints", "disable", "claude desk", "--workspace", "Acme")["enabled"] is False
        assert _mcp(rest, url, new_token).status_code in (401, 403), "a disabled endpoint refuses its token"
        assert cli.json("endpoints", "enable", created["id"], "--workspace", "Acme")["enabled"] is True
        assert _mcp(rest, url, new_token).status_code == 200


def _mcp(rest: httpx.Client, url: str, token: str) -> httpx.Response:
    return rest.post(
        url,
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "list_knowledge_bases"}},
        headers={
            "Authorization": f"Bearer {token}",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-11-25",
        },
    )


def services(cli: Cli, deployment: Deployment, acme: Tenant, everything: Everything, tmp_path: Path) -> str:
    """server-everything registered from an mcpServers file (CLI), tested, refreshed, its echo needing approval."""
    config = tmp_path / "mcp.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "everything": {"type": "http", "url": everything.url},
                    "local-only": {"command": "npx", "args": ["some-server"]},
                }
            }
        )
    )
    imported = cli.run("services", "import", str(config), "--workspace", "Acme", "--json")
    assert imported.code == 1, "one server was refused: not a success"
    assert imported.err == "mcpbridge: 1 server(s) were not registered (see above)\n"
    body = json.loads(imported.out)
    assert [s["name"] for s in body["created"]] == ["everything"]
    assert [r["name"] for r in body["refused"]] == ["local-only"]
    service = body["created"][0]["id"]
    tested = cli.json("services", "test", "everything", "--workspace", "Acme")
    assert tested["success"] is True, tested
    assert "echo" in {tool["name"] for tool in tested["tools"]}
    assert cli.json("services", "refresh", service, "--workspace", "Acme")["data"]["tools"]
    secured = cli.json("services", "add", "secured", everything.url, "--auth", "bearer", "--workspace", "Acme")
    assert secured["credentials"]["token"] == {"configured": False}
    nothing = cli.fails("services", "credentials", "secured", "token", "--workspace", "Acme", stdin="  \n")
    assert "no token on standard input: nothing was changed" in nothing.err
    secret = f"s3cret-{uuid.uuid4().hex}"
    stored = cli.run("services", "credentials", "secured", "token", "--workspace", "Acme", stdin=f"{secret}\n")
    assert stored.code == 0, stored
    assert secret not in stored.out + stored.err
    assert cli.json("services", "show", "secured", "--workspace", "Acme")["credentials"]["token"] == {
        "configured": True
    }
    gone = cli.json("services", "delete", "secured", "--workspace", "Acme")
    assert gone == {"id": secured["id"], "deleted": True}
    policy = cli.json("services", "policy", "everything", "echo", "--require-approval", "--workspace", "Acme")
    assert (policy["tool_name"], policy["enabled"], policy["require_approval"]) == ("echo", True, True)
    with deployment.rest() as rest:
        tools = ok(rest.get(f"/api/v1/mcp-services/{service}/tools", headers=bearer(acme.admin_key)))
        assert cli.json("services", "tools", "everything", "--workspace", "Acme") == tools
        assert next(t for t in tools["items"] if t["name"] == "echo")["require_approval"] is True
        listed = ok(rest.get("/api/v1/mcp-services", headers=bearer(acme.admin_key)))
        assert cli.json("services", "list", "--workspace", "Acme") == listed
    return service


def approvals(cli: Cli, deployment: Deployment, acme: Tenant, beta: Tenant, service: str) -> None:
    """Calls paused for approval, resolved only by the right user: through the CLI (with the user's own key, and as
    the operator) and through REST; ``serve`` holds each call and runs it once resolved."""
    bob, carol = acme.keys["bob"], acme.keys["carol"]
    with deployment.rest() as rest:
        described = ok(
            rest.get(
                "/api/v1/agent/tools/describe",
                params={"service_id": service, "tool_name": "echo"},
                headers=bearer(bob),
            )
        )

        def pause(message: str) -> str:
            paused = ok(
                rest.post(
                    "/api/v1/agent/tool-calls",
                    headers=bearer(bob),
                    json={"tool_ref": described["tool_ref"], "arguments": {"message": message}},
                ),
                202,
            )
            assert paused["status"] == "awaiting_approval"
            return str(paused["pending_id"])

        first = pause("one")
        here = cli.run("calls", "pending")  # the platform's own workspace: nothing waits there, but in Acme
        assert here.code == 0, here
        assert "No tool call is waiting here." in here.out
        assert f"1 call(s) wait in workspace Acme ({acme.id}): mcpbridge calls pending --workspace {acme.id}" in (
            here.out
        )
        everywhere = cli.json("calls", "pending", "--all-workspaces")
        assert [(c["workspace_id"], c["workspace_name"], c["pending_id"]) for c in everywhere["items"]] == [
            (acme.id, "Acme", first)
        ]
        assert cli.problem("calls", "pending", "--all-workspaces", key=acme.admin_key)["code"] == (
            "platform_admin_required"
        )
        assert "1 call(s) wait" not in cli.run("calls", "pending", key=acme.admin_key).out, "only for the platform"
        pending = ok(rest.get("/api/v1/agent/pending", headers=bearer(acme.admin_key)))
        assert cli.json("calls", "pending", "--workspace", "Acme") == pending
        assert [c["pending_id"] for c in pending["items"]] == [first]
        assert cli.json("calls", "pending", key=bob)["items"][0]["pending_id"] == first, "bob's own calls"
        assert cli.json("calls", "pending", key=carol)["items"] == [], "carol sees nothing of bob's"
        assert cli.json("calls", "pending", "--workspace", "Beta")["items"] == [], "Beta sees nothing of Acme"

        refused = cli.problem("calls", "approve", first, key=carol)
        assert (refused["status"], refused["code"]) == (403, "user_mismatch")
        assert cli.problem("calls", "approve", first, "--workspace", "Beta")["status"] == 404
        bad = cli.fails("calls", "approve", first, "--args", "[1, 2]", key=bob)
        assert "--args must be a JSON object" in bad.err
        assert ok(rest.get(f"/api/v1/agent/tool-calls/{first}", headers=bearer(bob)))["status"] == "awaiting_approval"

        approved = cli.json("calls", "approve", first, "--args", '{"message": "one, by bob"}', key=bob)
        assert approved["approval"]["by"] == acme.users["bob"]
        done = settled(deployment, rest, first, bob)
        assert done["status"] == "completed", done
        assert "one, by bob" in json.dumps(done["result"])
        assert cli.json("calls", "show", first, "--workspace", "Acme") == ok(
            rest.get(f"/api/v1/agent/tool-calls/{first}", headers=bearer(acme.admin_key))
        )

        second = pause("two")
        rejected = cli.json("calls", "reject", second, "--reason", "not today", "--workspace", "Acme")
        platform_admin = ok(rest.get("/api/v1/me", headers=bearer(deployment.platform_key)))["user_id"]
        assert (rejected["status"], rejected["approval"]["by"]) == ("rejected", platform_admin)
        assert settled(deployment, rest, second, bob)["status"] == "rejected"

        third = pause("three")
        decision = {"decision": "approve"}
        wrong = rest.post(f"/api/v1/agent/tool-approvals/{third}", headers=bearer(carol), json=decision)
        assert (wrong.status_code, wrong.json()["code"]) == (403, "user_mismatch")
        ok(rest.post(f"/api/v1/agent/tool-approvals/{third}", headers=bearer(bob), json=decision))
        assert settled(deployment, rest, third, bob)["status"] == "completed"
        assert cli.fails("calls", "approve", third, "--workspace", "Acme").err.startswith(
            "mcpbridge: this call was already resolved"
        )


def lifecycle(cli: Cli, deployment: Deployment, acme: Tenant, beta: Tenant) -> None:
    """Disabling and deleting through the CLI takes effect on the very next REST request."""
    dave, carol = beta.keys["dave"], acme.keys["carol"]
    with deployment.rest() as rest:
        assert rest.get("/api/v1/agent/pending", headers=bearer(dave)).status_code == 200
        assert cli.json("workspaces", "disable", "Beta")["status"] == "disabled"
        assert rest.get("/api/v1/agent/pending", headers=bearer(dave)).json()["code"] == "workspace_inactive"
        assert cli.json("workspaces", "enable", beta.id)["status"] == "active"
        assert rest.get("/api/v1/agent/pending", headers=bearer(dave)).status_code == 200

        assert cli.json("users", "disable", acme.users["carol"], "--workspace", "Acme")["status"] == "disabled"
        assert rest.get("/api/v1/agent/pending", headers=bearer(carol)).json()["code"] == "user_inactive"
        assert cli.json("users", "delete", acme.users["carol"], "--workspace", "Acme") == {
            "id": acme.users["carol"],
            "deleted": True,
        }
        assert rest.get("/api/v1/agent/pending", headers=bearer(carol)).status_code == 401
        users = ok(rest.get("/api/v1/users", headers=bearer(acme.admin_key)))
        assert {u["name"] for u in users["items"]} == {"alice", "bob"}

        revoked = cli.json("keys", "revoke", _key_id(cli, acme.users["bob"]), "--workspace", "Acme")
        assert revoked["status"] == "revoked"
        assert rest.get("/api/v1/agent/pending", headers=bearer(acme.keys["bob"])).status_code == 401


def _key_id(cli: Cli, user_id: str) -> str:
    listed = cli.json("keys", "list", "--workspace", "Acme", "--user", user_id)
    return str(listed["items"][0]["id"])


def bad_input(cli: Cli, deployment: Deployment, acme: Tenant) -> None:
    """Bad input is named, exits 1 and changes nothing."""
    with deployment.rest() as rest:
        before = {
            path: ok(rest.get(path, headers=bearer(acme.admin_key)))
            for path in ("/api/v1/users", "/api/v1/knowledge-bases", "/api/v1/mcp-endpoints", "/api/v1/api-keys")
        }
        empty = cli.problem("users", "create", "  ", "--workspace", "Acme")
        assert (empty["status"], empty["code"]) == (400, "invalid_name")
        nope = cli.fails("kb", "add", "handbook", str(deployment.tmp / "missing.md"), "--workspace", "Acme")
        assert "missing.md: no such file or folder" in nope.err
        assert "no knowledge base with the id or name 'nothing'" in cli.fails("kb", "show", "nothing").err
        assert cli.problem("endpoints", "create", "x", "--rate-limit", "0", "--kb", "kb_nope")["status"] == 404
        assert cli.problem("keys", "create", "--user", "usr_nope", "--workspace", "Acme")["code"] == "user_not_found"
        unknown = cli.problem("keys", "create", "--user", acme.admin_user, "--capability", "fly", "--workspace", "Acme")
        assert unknown["code"] == "unknown_capability"
        assert "name the key's user with --user" in cli.fails("keys", "create", "--workspace", "Acme").err
        assert cli.fails("services", "policy", "everything", "echo", "--workspace", "Acme").err.startswith(
            "mcpbridge: say what to set"
        )
        assert "no workspace with the id or name 'Gamma'" in cli.fails("users", "list", "--workspace", "Gamma").err
        with_key = cli.fails("users", "list", "--workspace", "Acme", key=acme.admin_key)
        assert "managing workspaces needs an admin key of the platform's own workspace" in with_key.err
        by_id = cli.problem("users", "list", "--workspace", acme.id, key=acme.admin_key)
        assert (by_id["status"], by_id["code"]) == (403, "platform_admin_required"), "only the platform's key"
        assert cli.fails("workspaces", "list", key=acme.admin_key).err == (
            "mcpbridge: managing workspaces needs an admin key of the platform's own workspace with manage_workspaces\n"
        ), "with a key, the key's authority"
        after = {path: ok(rest.get(path, headers=bearer(acme.admin_key))) for path in before}
        assert _unused(after) == _unused(before)


def _unused(listings: dict[str, Any]) -> dict[str, Any]:
    """Listings without the keys' ``last_used_at``: using a key records its use (at most once a minute), which is no
    change made by the bad input, and on a busy machine the commands above span more than that minute."""
    return {
        path: {**body, "items": [{k: v for k, v in item.items() if k != "last_used_at"} for item in body["items"]]}
        for path, body in listings.items()
    }


@pytest.mark.timeout(600)  # some forty commands, each its own process; on DynamoDB in moto about 100 s unloaded
def test_an_operators_day_through_the_cli_and_rest(
    deployment: Deployment, everything: Everything, cli: Cli, tmp_path: Path
) -> None:
    connected(cli, deployment)
    acme, beta = tenants(cli, deployment)
    kb = knowledge(cli, deployment, acme, tmp_path)
    publish(cli, deployment, acme, kb)
    service = services(cli, deployment, acme, everything, tmp_path)
    approvals(cli, deployment, acme, beta, service)
    bad_input(cli, deployment, acme)
    lifecycle(cli, deployment, acme, beta)
    assert deployment.server is not None
    assert "Traceback" not in deployment.server.output()


def test_kb_add_uploads_what_a_request_cannot_carry(installed: Deployment, cli: Cli, tmp_path: Path) -> None:
    """Above the size a request may carry (the server answers 413), ``kb add`` uploads the file (the embedded
    backend's own route, or a presigned POST to S3) and completes it; smaller files go in one request."""
    port = int(installed.env["MCPBRIDGE_PUBLIC_BASE_URL"].rpartition(":")[2])
    installed.server = _serve({**installed.env, "MCPBRIDGE_MAX_REQUEST_DOCUMENT_BYTES": "2048"}, tmp_path, port)
    try:
        installed.server.wait_ready()
        _uploads(connected(cli, installed), tmp_path)
    finally:
        installed.server.kill()


def _uploads(cli: Cli, tmp_path: Path) -> None:
    marker = f"zq{uuid.uuid4().hex[:10]}"
    big = tmp_path / "big.md"
    big.write_text("# Archive\n\n" + "filler words for the archive. " * 400 + f"\n\nThe last line holds {marker}.\n")
    small = tmp_path / "small.txt"
    small.write_text("A small note.\n")
    assert big.stat().st_size > 2048 > small.stat().st_size
    cli.json("kb", "create", "archive")
    two_titles = cli.fails("kb", "add", "archive", str(big), str(small), "--title", "one")
    assert "--title names one document, and these sources are 2" in two_titles.err
    listed = cli.json("kb", "documents", "archive")
    assert listed.get("items", listed.get("documents")) == [], "nothing was added"

    added = cli.json("kb", "add", "archive", str(big), str(small))
    assert added["errors"] == []
    assert sorted((d["title"], d["size_bytes"], d["parse_status"]) for d in added["items"]) == [
        ("big.md", big.stat().st_size, "completed"),
        ("small.txt", small.stat().st_size, "completed"),
    ]
    found = cli.json("kb", "search", marker)["results"]
    assert [hit["document_title"] for hit in found] == ["big.md"], "the whole file arrived"
