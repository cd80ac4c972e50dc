"""Real MCP clients against a published endpoint of the real combined app (in-process on 127.0.0.1):

- the MCP Inspector's CLI (npm ``@modelcontextprotocol/inspector-cli``) over Streamable HTTP with the bearer header;
- ``mcp-remote`` bridging stdio to the endpoint, started exactly as the create response's ``client_configs.mcp_remote``
  says (its ``npx -y mcp-remote ...`` becomes the wheel's node running ``node_modules/mcp-remote``), the token only in
  its environment, spoken to in MCP JSON-RPC over stdin/stdout.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.node import (
    INSPECTOR_CLI,
    NPM_CI_TIMEOUT,
    PublishedEndpoint,
    node_env,
    npx_to_node,
    package_bin,
    published_endpoint,
    run_node,
    spawn_node,
    stop,
)
from tests.support.everything import Everything
from tests.support.readiness import Worker, wait_until

# The first test may wait for `npm ci`.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(NPM_CI_TIMEOUT + 180)]

QUERY = "walruses clams"


@dataclass
class Recorder:
    """ASGI: the app, plus (method, path, status) of every HTTP request it answered."""

    app: Any
    seen: list[tuple[str, str, int]] = field(default_factory=list)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def recording_send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                self.seen.append((scope["method"], scope["path"], message["status"]))
            await send(message)

        await self.app(scope, receive, recording_send)

    def check_endpoint_traffic(self, since: int, path: str) -> None:
        """Every request a client made since ``since``: POSTs to the endpoint answered 200/202, GETs on it 405 (no SSE
        stream: the spec's answer), and no 401 anywhere (which would start a client's OAuth flow)."""
        seen = self.seen[since:]
        posts = [status for method, p, status in seen if p == path and method == "POST"]
        gets = [status for method, p, status in seen if p == path and method == "GET"]
        assert posts, seen
        assert set(posts) <= {200, 202}, seen
        assert set(gets) <= {405}, seen
        assert 401 not in {status for _, _, status in seen}, seen


@dataclass
class Served:
    endpoint: PublishedEndpoint
    recorder: Recorder
    home: Path

    @property
    def path(self) -> str:
        return f"/mcp/{self.endpoint.created['id']}"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    work = tmp_path_factory.mktemp("real-clients")
    recorder = Recorder(app=None)

    def record(app: Any, _endpoint: PublishedEndpoint) -> Recorder:
        recorder.app = app
        return recorder

    with published_endpoint(work / "data", wrap=record) as endpoint:
        yield Served(endpoint, recorder, work / "home")


def structured(result: dict[str, Any]) -> dict[str, Any]:
    """A tool result's structured content, checked against its JSON text block."""
    assert not result.get("isError"), result
    data: dict[str, Any] = result["structuredContent"]
    assert json.loads(result["content"][0]["text"]) == data
    return data


def check_search(result: dict[str, Any], served: Served) -> None:
    hits = structured(result)["results"]
    assert hits, result
    assert all(hit["knowledge_base_id"] == served.endpoint.kb_id for hit in hits)
    assert "Walruses" in json.dumps(hits[0]), hits[0]


# ---------------------------------------------------------------------------------------------------- Inspector CLI


def inspector(served: Served, *args: str) -> dict[str, Any]:
    entry = package_bin(INSPECTOR_CLI, "mcp-inspector-cli")
    done = run_node(
        entry,
        [
            "--cli",
            served.endpoint.url,
            "--transport",
            "http",
            "--header",
            f"Authorization: Bearer {served.endpoint.token}",
            *args,
        ],
        env=node_env(home=served.home),
        # inspector-cli 1.0.3 looks for its own package.json as "../package.json" from the working directory (a bug);
        # from its build folder that is the right file.
        cwd=entry.parent,
    )
    assert done.returncode == 0, (
        f"inspector exited {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    )
    output: dict[str, Any] = json.loads(done.stdout)
    return output


def test_inspector_cli_lists_tools(served: Served) -> None:
    before = len(served.recorder.seen)
    listed = inspector(served, "--method", "tools/list")
    tools = {tool["name"]: tool for tool in listed["tools"]}
    assert list(tools) == served.endpoint.tools
    assert tools["search_knowledge"]["inputSchema"]["required"] == ["query"]
    assert tools["search_knowledge"]["annotations"]["readOnlyHint"] is True
    served.recorder.check_endpoint_traffic(before, served.path)


def test_inspector_cli_calls_search_knowledge(served: Served) -> None:
    result = inspector(
        served, "--method", "tools/call", "--tool-name", "search_knowledge", "--tool-arg", f"query={QUERY}"
    )
    check_search(result, served)


def test_inspector_cli_calls_a_published_external_tool(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Gateway mode through a real client: server-everything's ``echo``, published by the endpoint beside its
    knowledge tools, listed and called by the Inspector's CLI; the call goes through mcpbridge's broker."""
    everything = Everything("streamableHttp", tmp_path_factory.mktemp("everything"))
    everything.start()
    try:
        work = tmp_path_factory.mktemp("gateway-client")
        with published_endpoint(work / "data", external=everything.url) as endpoint:
            served = Served(endpoint, Recorder(app=None), work / "home")
            listed = {tool["name"]: tool for tool in inspector(served, "--method", "tools/list")["tools"]}
            (echo,) = [name for name in listed if name.startswith("mcp_everything_echo_")]
            assert listed[echo]["description"].startswith("[MCP Service: everything (external)] ")
            assert "check_call" in listed
            called = inspector(
                served, "--method", "tools/call", "--tool-name", echo, "--tool-arg", "message=through the hub"
            )
    finally:
        everything.kill()
    assert called.get("isError") is not True, called
    assert "Echo: through the hub" in json.dumps(called)


# ---------------------------------------------------------------------------------------------------- mcp-remote


class StdioPeer:
    """JSON-RPC over a child's stdin/stdout, one JSON message a line; a thread reads stdout into a queue."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self._process = process
        self._worker = Worker.process("the stdio client", process, lambda: "")
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._next_id = 0

    def _read(self) -> None:
        stdout = self._process.stdout
        assert stdout is not None
        try:
            for line in iter(stdout.readline, b""):
                self._lines.put(line)
        except (OSError, ValueError):  # closed while reading: the test is stopping the process
            pass
        finally:
            self._lines.put(None)

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        self._send({"jsonrpc": "2.0", "method": method, **({"params": params} if params is not None else {})})

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self._next_id += 1
        request_id = self._next_id
        self._send({"jsonrpc": "2.0", "id": request_id, "method": method, **({"params": params} if params else {})})
        while True:
            # For as long as the client (with what it started: a browser) is alive and working.
            wait_until(lambda: not self._lines.empty(), self._worker, what=f"answering {method}")
            line = self._lines.get_nowait()
            if line is None:
                pytest.fail(f"mcp-remote closed its stdout before answering {method} (exit {self._process.poll()})")
            message: dict[str, Any] = json.loads(line)
            if message.get("id") == request_id and "method" not in message:
                return message
            # Anything else (a notification, a request from the server) is not what this test waits for.

    def _send(self, message: dict[str, Any]) -> None:
        stdin = self._process.stdin
        assert stdin is not None
        stdin.write(json.dumps(message).encode() + b"\n")
        stdin.flush()

    def close(self) -> None:
        stop(self._process)
        self._reader.join(timeout=10)


def test_mcp_remote_bridges_stdio_to_the_endpoint(served: Served, tmp_path: Path) -> None:
    servers = served.endpoint.created["client_configs"]["mcp_remote"]["mcpServers"]
    assert len(servers) == 1
    (config,) = servers.values()
    token = served.endpoint.token
    assert token not in json.dumps(config["args"]), "the token must not be in the process arguments"
    assert token in json.dumps(config["env"]), "the token belongs in the environment"

    script, args = npx_to_node(config["command"], config["args"])
    assert args[0] == served.endpoint.url
    stderr_path = tmp_path / "mcp-remote.stderr"
    before = len(served.recorder.seen)
    process = spawn_node(
        script, args, env=node_env(config["env"], home=served.home), stderr_path=stderr_path, cwd=tmp_path
    )
    peer = StdioPeer(process)
    try:
        init = peer.request(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "mcpbridge-tests", "version": "1.0"},
            },
        )
        assert "error" not in init, init
        assert init["result"]["protocolVersion"] == "2025-11-25"
        assert init["result"]["serverInfo"]["name"] == "mcpbridge"
        assert "tools" in init["result"]["capabilities"]
        peer.notify("notifications/initialized")

        listed = peer.request("tools/list")
        assert [tool["name"] for tool in listed["result"]["tools"]] == served.endpoint.tools

        called = peer.request("tools/call", {"name": "search_knowledge", "arguments": {"query": QUERY}})
        check_search(called["result"], served)
    finally:
        peer.close()

    log = stderr_path.read_text(errors="replace")
    assert "Authentication required" not in log, log
    assert "OAuth callback server running" not in log, log
    # mcp-remote looks for OAuth metadata at start-up whatever the server says (six GETs under /.well-known/, all 404
    # here); with the header it never gets a 401, so it starts no sign-in, no callback server and no browser.
    served.recorder.check_endpoint_traffic(before, served.path)
