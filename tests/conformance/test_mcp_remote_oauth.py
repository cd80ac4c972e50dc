"""``mcp-remote`` (npm, a stdio-to-HTTP bridge many desktop clients run) against an OAuth-only endpoint, with no
header and no token given: it gets the 401, discovers the metadata, registers itself (RFC 7591), starts its callback
server on 127.0.0.1 and opens "the browser" with the authorization URL. The browser here is ``$BROWSER`` (which the
``open`` package's ``xdg-open`` honours with no desktop present): a script that does what the person does on the
consent page (form posts: sign in with an API key, Allow) and follows the redirect to mcp-remote's callback. Then
mcp-remote exchanges the code (PKCE) and bridges tools/list and tools/call; its tokens land in its config directory.
"""

from __future__ import annotations

import json
import socket
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conformance.node import node_env, npx_to_node, spawn_node
from tests.conformance.test_real_clients import StdioPeer
from tests.support.aws import REPO_ROOT
from tests.support.oauth_flow import Hub, close_clients, hub_on, mcp_post

CONSENT_SCRIPT = """
import os, re, sys
from pathlib import Path
from urllib.parse import urlsplit
import httpx

url, key, log, repo, timeout = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])
sys.path.insert(0, repo)
from tests.support.readiness import Worker, wait_until


def opener() -> int:
    # The mcp-remote that opened this browser (through xdg-open): the nearest parent process running it.
    pid = os.getppid()
    while pid > 1:
        if b"mcp-remote" in Path(f"/proc/{pid}/cmdline").read_bytes():
            return pid
        stat = Path(f"/proc/{pid}/stat").read_text()
        pid = int(stat[stat.rindex(")") + 2 :].split()[1])
    raise SystemExit("no mcp-remote among the browser's parent processes")


with open(log, "a") as out, httpx.Client(timeout=timeout, follow_redirects=False) as http:
    page = http.get(url)
    out.write(f"page {page.status_code}\\n")
    fields = dict(re.findall(r'<input type="hidden" name="(consent|csrf)" value="([^"]*)"', page.text))
    action = re.search(r'<form method="post" action="([^"]+)"', page.text).group(1).replace("&amp;", "&")
    origin = "{0.scheme}://{0.netloc}".format(urlsplit(action))
    answer = http.post(action, data={**fields, "decision": "approve", "api_key": key},
                       headers={"origin": origin, "sec-fetch-site": "same-origin"})
    out.write(f"answer {answer.status_code}\\n")
    # mcp-remote opens the browser before its callback server listens (a person takes seconds to get here): wait
    # for as long as mcp-remote is alive and working.
    reached = []

    def callback() -> bool:
        try:
            reached.append(http.get(answer.headers["location"]))
        except httpx.ConnectError:
            return False
        return True

    wait_until(callback, Worker.pid("mcp-remote", opener()), what="its callback server listening")
    out.write(f"callback {reached[0].status_code}\\n")
"""
BROWSER_TIMEOUT = 60.0
"""The browser's requests: a last resort against a hang, inside the test's own timeout."""


@dataclass(frozen=True)
class Served:
    hub: Hub
    endpoint: dict[str, object]
    key: str
    user_id: str


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with (
        pytest.MonkeyPatch.context() as monkeypatch,
        hub_on("local", tmp_path_factory.mktemp("hub"), monkeypatch) as hub,
    ):
        endpoint = hub.publish(auth_mode="oauth")
        user_id, key = hub.user_with_key("Ada")
        yield Served(hub, endpoint, key, user_id)
    close_clients()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def browser_script(directory: Path, key: str) -> tuple[Path, Path]:
    """An executable ``$BROWSER`` that consents with ``key``, and the file it logs its steps to."""
    consent, log = directory / "consent.py", directory / "browser.log"
    consent.write_text(CONSENT_SCRIPT)
    browser = directory / "browser"
    arguments = f'"$1" "{key}" "{log}" "{REPO_ROOT}" {BROWSER_TIMEOUT}'
    browser.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{consent}" {arguments} 2>>"{log}.err"\n')
    browser.chmod(browser.stat().st_mode | stat.S_IXUSR)
    return browser, log


def test_mcp_remote_signs_in_to_an_oauth_only_endpoint(served: Served, tmp_path: Path) -> None:
    url = str(served.endpoint["url"])
    assert mcp_post(url, str(served.endpoint["token"])).status_code == 401, "OAuth only: the static token is refused"
    browser, browser_log = browser_script(tmp_path, served.key)
    config_dir = tmp_path / "mcp-auth"
    script, args = npx_to_node("npx", ["-y", "mcp-remote", url, str(free_port()), "--host", "127.0.0.1"])
    env = node_env(
        {"BROWSER": str(browser), "MCP_REMOTE_CONFIG_DIR": str(config_dir), "DISPLAY": "", "WAYLAND_DISPLAY": ""},
        home=tmp_path / "home",
    )
    stderr_path = tmp_path / "mcp-remote.stderr"
    peer = StdioPeer(spawn_node(script, args, env=env, stderr_path=stderr_path, cwd=tmp_path))
    try:
        init = peer.request(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "mcpbridge-tests", "version": "1"},
            },
        )
        assert "error" not in init, (init, stderr_path.read_text(errors="replace")[-3000:])
        peer.notify("notifications/initialized")
        listed = peer.request("tools/list")
        names = [tool["name"] for tool in listed["result"]["tools"]]
        assert "list_knowledge_bases" in names
        called = peer.request("tools/call", {"name": "list_knowledge_bases", "arguments": {}})
        assert not called["result"].get("isError"), called
    finally:
        peer.close()

    log = stderr_path.read_text(errors="replace")
    # mcp-remote may open the browser a second time while its first attempt is still under way (seen under load):
    # every opening consents (page 200, answer 303) and one of them reaches its callback.
    steps = browser_log.read_text().split()
    pairs = list(zip(steps[::2], steps[1::2], strict=True))
    errors = browser_log.with_name(f"{browser_log.name}.err")
    assert ("callback", "200") in pairs, (log[-3000:], errors.read_text() if errors.exists() else "")
    assert {pair for pair in pairs if pair[0] != "callback"} <= {("page", "200"), ("answer", "303")}, pairs
    with served.hub.api() as api:
        grants = api.get(f"/api/v1/users/{served.user_id}/oauth-grants").json()["items"]
    assert {grant["endpoint_id"] for grant in grants} == {served.endpoint["id"]}
    stored = [json.loads(path.read_text()) for path in config_dir.rglob("*_tokens.json")]
    assert len(stored) == 1, list(config_dir.rglob("*"))
    assert stored[0]["token_type"].lower() == "bearer"
    assert mcp_post(url, stored[0]["access_token"]).status_code == 200
    assert served.key not in log, "the key typed on the page never reaches the client"
