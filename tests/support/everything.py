"""Real MCP servers on 127.0.0.1 for tests of the client side.

* :class:`Everything`: npm ``@modelcontextprotocol/server-everything`` in one transport mode (``streamableHttp`` or
  ``sse``) on a fixed port, run with the wheel's node; it can be killed and restarted on the same port. Node binds
  only 127.0.0.1: a preload script (``--import``) pins ``server.listen(port)`` to the loopback address.
* :func:`serve`: any ASGI app under uvicorn in a thread, for the length of a ``with`` block.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
import uvicorn

from tests.conformance.node import node_binary, node_env, package_bin, stop
from tests.support.readiness import Worker, wait_until

EVERYTHING = "@modelcontextprotocol/server-everything"
LOOPBACK_PRELOAD = """
import net from "node:net";
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === "number" || typeof args[0] === "string") {
    const callback = args.find((arg) => typeof arg === "function");
    return listen.call(this, { port: Number(args[0]), host: "127.0.0.1" }, callback);
  }
  return listen.apply(this, args);
};
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_listening(port: int, process: subprocess.Popen[Any], log: Path | None = None) -> None:
    """Until something listens on ``port``, for as long as ``process`` is alive and working."""

    def listening() -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
        return False

    def output() -> str:
        return log.read_text(errors="replace") if log is not None and log.exists() else ""

    wait_until(listening, Worker.process(f"the server for port {port}", process, output), what="listening")


class Everything:
    """server-everything in one transport mode on a fixed 127.0.0.1 port; can be killed and restarted."""

    def __init__(self, mode: str, workdir: Path) -> None:
        self.mode = mode
        self.port = free_port()
        self.workdir = workdir
        self.preload = workdir / "loopback.mjs"
        self.preload.write_text(LOOPBACK_PRELOAD)
        self.script = package_bin(EVERYTHING, "mcp-server-everything")
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        path = "/mcp" if self.mode == "streamableHttp" else "/sse"
        return f"http://127.0.0.1:{self.port}{path}"

    @property
    def transport(self) -> str:
        return "http-streamable" if self.mode == "streamableHttp" else "sse"

    def start(self) -> None:
        assert self.process is None
        self.starts += 1
        log_path = self.workdir / f"server-{self.starts}.log"
        log = log_path.open("wb")
        try:
            self.process = subprocess.Popen(
                [str(node_binary()), "--import", str(self.preload), str(self.script), self.mode],
                cwd=self.workdir,
                env=node_env({"PORT": str(self.port)}),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log.close()
        wait_listening(self.port, self.process, log_path)

    def kill(self) -> None:
        if self.process is not None:
            stop(self.process, grace=0.1)
            self.process = None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    pass
            except OSError:
                return
            time.sleep(0.05)


@pytest.fixture(params=["streamableHttp", "sse"])
def everything(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Everything]:
    server = Everything(request.param, tmp_path)
    try:
        server.start()
        yield server
    finally:
        server.kill()


@contextlib.contextmanager
def serve(app: Any, *, lifespan: Literal["on", "off"] = "on") -> Iterator[str]:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan=lifespan))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, Worker.thread("the test server", thread), what="starting")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


async def handle_stateless(server: Any, scope: Any, receive: Any, send: Any, *, json_response: bool = True) -> None:
    """Answer one ASGI request with an SDK low-level ``server`` over stateless Streamable HTTP (JSON answers unless
    ``json_response`` is False, no DNS-rebinding check): the shape of a test upstream that needs no session between
    requests."""
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp.server.transport_security import TransportSecuritySettings

    manager = StreamableHTTPSessionManager(
        app=server,
        json_response=json_response,
        stateless=True,
        security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    async with manager.run():
        await manager.handle_request(scope, receive, send)
