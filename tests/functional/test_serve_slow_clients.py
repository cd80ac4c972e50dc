"""``mcpbridge serve`` against slow and oversized requests, over raw sockets on 127.0.0.1: a request head that
trickles in, or never comes, is cut off at ``MCPBRIDGE_SERVE_HEAD_TIMEOUT_SECONDS`` (408 when a head had begun),
also between two requests of one connection and under ``--workers 2``; a body that trickles in is answered 408
once ``MCPBRIDGE_SERVE_BODY_TIMEOUT_SECONDS`` have passed and it comes slower than
``MCPBRIDGE_SERVE_BODY_MIN_BYTES_PER_SECOND``, and its handler does not run (nothing is created); an upload sent
faster than that is received whole however long it takes. The protocol
and the body's deadline in one uvicorn server leave an answer streamed for longer than both alone.

Deadlines are short here (2 s); a cut-off is waited for while serve is alive and working (tests.support.readiness:
however busy the machine, not for a fixed time), and its cause is checked by the deadline the answer names.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import pytest
import uvicorn
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from mcpbridge.cli.request_head import ServeConfig
from mcpbridge.cli.serving import bind
from mcpbridge.http.body_deadline import BodyDeadline
from tests.support.serve import SERVE_TEST_TIMEOUT, ServeProcess, bearer, cli_env, http_client

# Each module starts `serve`: at load 20 on two cores that can take minutes, which the readiness waits allow.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(SERVE_TEST_TIMEOUT)]

DEADLINE = 2
LAST_RESORT = SERVE_TEST_TIMEOUT / 4
"""A socket's timeout where no serve is waited for: only against a hang, inside the test's own timeout."""
TICK = 0.2
MIN_RATE = 4096
TIMEOUTS = {
    "MCPBRIDGE_SERVE_HEAD_TIMEOUT_SECONDS": str(DEADLINE),
    "MCPBRIDGE_SERVE_BODY_TIMEOUT_SECONDS": str(DEADLINE),
    "MCPBRIDGE_SERVE_BODY_MIN_BYTES_PER_SECOND": str(MIN_RATE),
}


class Served:
    def __init__(self, process: ServeProcess, admin_key: str) -> None:
        self.process = process
        self.port = process.port
        self.admin_key = admin_key


def start(tmp: Path, *args: str) -> tuple[ServeProcess, str]:
    process = ServeProcess.start(
        cwd=tmp, env=cli_env(TIMEOUTS), args=["--data-dir", str(tmp / "data"), *args], log_dir=tmp, tag="serve"
    )
    process.wait_ready()
    keys = process.printed_keys()
    assert len(keys) == 1, process.output()
    return process, keys[0]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    process, key = start(tmp_path_factory.mktemp("slow-clients"))
    try:
        yield Served(process, key)
    finally:
        process.kill()


def connect(port: int) -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", port), timeout=10)
    conn.settimeout(TICK)
    return conn


def trickle(conn: socket.socket, piece: bytes, server: ServeProcess) -> bytes:
    """Send ``piece`` every tick until the server closes the connection, for as long as serve is alive and working
    (a deadline not applied fails as serve making no progress, or at the test's timeout); what it answered."""
    received = bytearray()

    def closed() -> bool:
        try:
            chunk = conn.recv(65536)
        except TimeoutError:
            chunk = None
        except ConnectionResetError:
            return True
        if chunk == b"":
            return True
        if chunk:
            received.extend(chunk)
            return False
        try:
            if piece:
                conn.sendall(piece)
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed: what it answered is still to be read
        return False

    server.wait_for(closed, "closing the connection")
    return bytes(received)


def answer_of(received: bytes) -> tuple[int, dict[str, str], Any]:
    head, _, body = received.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split(" ")[1]), {k.lower(): v for k, v in headers.items()}, json.loads(body) if body else None


def assert_timed_out(received: bytes, part: str) -> dict[str, Any]:
    status, headers, body = answer_of(received)
    assert status == 408, received
    assert headers["content-type"] == "application/problem+json"
    assert headers["connection"] == "close"
    assert body["code"] == "request_timeout"
    assert f"request's {part}" in body["detail"], body
    assert f"within {DEADLINE} s" in body["detail"], body
    if part == "body":
        assert f"for every {MIN_RATE} bytes" in body["detail"], body
    return dict(body)


def test_a_head_trickling_in_a_byte_at_a_time_is_answered_408_and_closed(served: Served) -> None:
    with connect(served.port) as conn:
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        received = trickle(conn, b"a", served.process)
    assert_timed_out(received, "head")


def test_the_next_head_on_a_kept_alive_connection_has_the_same_deadline(served: Served) -> None:
    with connect(served.port) as conn:
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        first = b""
        while not first.endswith(b'{"status":"ok"}'):
            first += conn.recv(65536)
        assert first.startswith(b"HTTP/1.1 200 "), first
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        received = trickle(conn, b"X-Slow: a\r\n", served.process)
    assert_timed_out(received, "head")


def test_a_connection_that_never_sends_a_request_is_closed_without_an_answer(served: Served) -> None:
    with connect(served.port) as conn:
        received = trickle(conn, b"", served.process)
    assert received == b""


def test_a_body_trickling_in_is_answered_408_and_nothing_is_created(served: Served) -> None:
    body = b'{"name": "Trickled", "description": "'
    with connect(served.port) as conn:
        conn.sendall(
            b"POST /api/v1/knowledge-bases HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {served.admin_key}\r\nContent-Length: 100000\r\n\r\n".encode()
            + body
        )
        received = trickle(conn, b"a", served.process)
    problem = assert_timed_out(received, "body")
    _, headers, _ = answer_of(received)
    assert headers["x-request-id"] == problem["request_id"]
    with http_client(served.process.base_url) as client:
        listed = client.get("/api/v1/knowledge-bases", headers=bearer(served.admin_key))
    assert listed.status_code == 200, listed.text
    assert "Trickled" not in [kb["name"] for kb in listed.json()["items"]]


def test_a_body_trickling_into_an_mcp_endpoint_is_answered_408(served: Served) -> None:
    with http_client(served.process.base_url) as client:
        created = client.post("/api/v1/mcp-endpoints", headers=bearer(served.admin_key), json={"name": "slow"})
    assert created.status_code == 201, created.text
    endpoint = created.json()
    with connect(served.port) as conn:
        conn.sendall(
            f"POST /mcp/{endpoint['id']} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n".encode()
            + b"Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-06-18\r\n"
            + f"Authorization: Bearer {endpoint['token']}\r\nContent-Length: 10000\r\n\r\n".encode()
            + b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"x": "'
        )
        received = trickle(conn, b"a", served.process)
    assert_timed_out(received, "body")


def slow_head(server: ServeProcess) -> bytes:
    with connect(server.port) as conn:
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        return trickle(conn, b"a", server)


def test_under_workers_every_process_applies_the_head_deadline(tmp_path: Path) -> None:
    process, _ = start(tmp_path, "--workers", "2")
    try:
        with ThreadPoolExecutor(8) as pool:  # at once, so that both processes take some
            outcomes = list(pool.map(slow_head, [process] * 8))
    finally:
        process.kill()
    for received in outcomes:
        assert_timed_out(received, "head")


def multipart(boundary: str, fields: dict[str, str], filename: str) -> tuple[bytes, bytes]:
    """The parts of a form before the file's content, and what follows it."""
    before = b"".join(
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        for name, value in fields.items()
    )
    before += (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
        "Content-Type: text/plain\r\n\r\n"
    ).encode()
    return before, f"\r\n--{boundary}--\r\n".encode()


def test_an_upload_faster_than_the_minimum_rate_is_received_whole_past_the_grace(served: Served) -> None:
    # Pieces every tick at ten times the minimum rate, for twice the grace: cut off by a deadline on the whole
    # body, received under a minimum rate however slow the machine (it would have to be ten times slower).
    piece = b"paced line\n" * int(10 * MIN_RATE * TICK / 11)
    content = piece * int(2 * DEADLINE / TICK)
    with http_client(served.process.base_url) as client:
        kb = client.post("/api/v1/knowledge-bases", headers=bearer(served.admin_key), json={"name": "Paced"}).json()
        form = client.post(
            f"/api/v1/knowledge-bases/{kb['id']}/documents/uploads",
            headers=bearer(served.admin_key),
            json={"filename": "paced.txt", "content_type": "text/plain", "size_bytes": len(content)},
        ).json()
    before, after = multipart("paced-upload", form["fields"], "paced.txt")
    path = form["url"].split(served.process.base_url, 1)[1]
    with connect(served.port) as conn:
        conn.sendall(
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n".encode()
            + b"Content-Type: multipart/form-data; boundary=paced-upload\r\n"
            + f"Content-Length: {len(before) + len(content) + len(after)}\r\n\r\n".encode()
            + before
        )
        for start in range(0, len(content), len(piece)):
            conn.sendall(content[start : start + len(piece)])
            time.sleep(TICK)
        conn.sendall(after)
        received = trickle(conn, b"", served.process)
    assert received.startswith(b"HTTP/1.1 204 "), received
    with http_client(served.process.base_url) as client:
        completed = client.post(form["complete_url"], headers=bearer(served.admin_key))
    assert completed.status_code == 201, completed.text


async def _events(count: int) -> Any:
    for number in range(count):
        yield f"data: {number}\n\n"
        await anyio.sleep(TICK)


async def streaming(scope: Scope, receive: Receive, send: Send) -> None:
    """Reads the body, then streams an event every tick for three deadlines (listening for the client leaving,
    as Starlette does, by calling ``receive()`` meanwhile)."""
    while (await receive()).get("more_body", False):
        pass
    await StreamingResponse(_events(EVENTS), media_type="text/event-stream")(scope, receive, send)


EVENTS = int(3 * DEADLINE / TICK)


def test_an_answer_streamed_for_longer_than_both_deadlines_is_sent_whole(tmp_path: Path) -> None:
    listener = bind("127.0.0.1", 0)
    config = ServeConfig(
        BodyDeadline(streaming, DEADLINE, MIN_RATE), head_timeout=DEADLINE, lifespan="off", log_config=None
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        with socket.create_connection(listener.getsockname(), timeout=LAST_RESORT) as conn:
            conn.sendall(b"POST /stream HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}")
            received = b""
            while not received.endswith(b"0\r\n\r\n"):
                received += conn.recv(65536)
    finally:
        server.should_exit = True
        thread.join(LAST_RESORT)
    assert received.startswith(b"HTTP/1.1 200 "), received
    assert received.count(b"data: ") == EVENTS, received
