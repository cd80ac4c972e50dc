"""The outbound transport (httpcore2's pool over ``outbound/wire.py``, behind the SSRF guard) answers as httpx2's own
transport does.

Every scripted answer (well-formed, odd and broken) is fetched through mcpbridge's guarded transport and through
httpx2's own transport (httpcore2 on anyio's sockets), on asyncio and on uvloop: the same status, reason, version,
headers and body, or the same kind of error; the server receives the same bytes and sees as many connections. Then
what the network backend decides with the pool: reuse, idle expiry, a server that closed an idle connection or sent
bytes on it unasked, timeouts, a cancelled answer, TLS with hostname verification, a server that stops reading.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpcore2
import httpx2
import pytest

from mcpbridge.outbound.http import GuardedAsyncTransport
from mcpbridge.outbound.policy import EgressPolicy
from tests.support.tls import write_certificates

LOOPS = [pytest.param(False, id="asyncio"), pytest.param(True, id="uvloop")]


@dataclass
class Answer:
    data: bytes
    close: bool = False  # close the connection after sending
    delay: float = 0.0  # before sending
    after: bytes = b""  # sent unasked a moment after the answer


@dataclass
class ScriptedServer:
    """A raw HTTP/1.1 server on 127.0.0.1: the n-th request gets ``answers[n % len(answers)]``; records every
    request's bytes and counts connections."""

    answers: list[Answer]
    tls: ssl.SSLContext | None = None
    requests: list[bytes] = field(default_factory=list)
    connections: int = 0

    def __post_init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()
        self._lock = threading.Lock()

    def _accept(self) -> None:
        self._listener.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError, ssl.SSLError), contextlib.ExitStack() as stack:
            stack.enter_context(contextlib.closing(conn))
            if self.tls is not None:
                conn = stack.enter_context(contextlib.closing(self.tls.wrap_socket(conn, server_side=True)))
            conn.settimeout(10)
            buffer = b""
            while not self._stop.is_set():
                request, buffer = _read_request(conn, buffer)
                if request is None:
                    return
                with self._lock:
                    answer = self.answers[len(self.requests) % len(self.answers)]
                    self.requests.append(request)
                time.sleep(answer.delay)
                conn.sendall(answer.data)
                if answer.after:
                    time.sleep(0.05)
                    conn.sendall(answer.after)
                if answer.close:
                    conn.shutdown(socket.SHUT_RDWR)
                    return

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        for thread in self._threads:
            thread.join(timeout=5)

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"


def _read_request(conn: socket.socket, buffer: bytes) -> tuple[bytes | None, bytes]:
    while b"\r\n\r\n" not in buffer:
        data = conn.recv(65536)
        if not data:
            return None, b""
        buffer += data
    head, _, rest = buffer.partition(b"\r\n\r\n")
    lower = head.lower()
    if b"transfer-encoding: chunked" in lower:
        while not rest.endswith(b"0\r\n\r\n"):
            data = conn.recv(65536)
            if not data:
                return None, b""
            rest += data
        return head + b"\r\n\r\n" + rest, b""
    length = 0
    for line in lower.split(b"\r\n")[1:]:
        if line.startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    while len(rest) < length:
        data = conn.recv(65536)
        if not data:
            return None, b""
        rest += data
    return head + b"\r\n\r\n" + rest[:length], rest[length:]


def received(server: ScriptedServer) -> list[bytes]:
    """The requests a server received, its port left out (each client has a server of its own)."""
    return [request.replace(b":%d" % server.port, b":PORT") for request in server.requests]


@contextlib.contextmanager
def scripted(*answers: Answer, tls: ssl.SSLContext | None = None) -> Iterator[ScriptedServer]:
    server = ScriptedServer(list(answers), tls)
    try:
        yield server
    finally:
        server.close()


def ours(**kwargs: Any) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=GuardedAsyncTransport(EgressPolicy(["127.0.0.1"]), **kwargs), timeout=5)


def reference() -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=httpx2.AsyncHTTPTransport(), timeout=5)


def run(uvloop: bool, fn: Callable[[], Awaitable[Any]]) -> Any:
    return anyio.run(fn, backend="asyncio", backend_options={"use_uvloop": uvloop})


async def outcome(client: httpx2.AsyncClient, method: str, url: str, **kwargs: Any) -> tuple[Any, ...]:
    try:
        response = await client.request(method, url, **kwargs)
    except httpx2.HTTPError as exc:
        return ("error", type(exc).__name__)
    return (
        response.status_code,
        response.reason_phrase,
        response.http_version,
        list(response.headers.raw),
        response.content,
    )


def both(uvloop: bool, answers: list[Answer], method: str = "GET", times: int = 2, **kwargs: Any) -> Any:
    """The outcomes of ``times`` requests through each client, and what each server saw (requests, connections)."""
    seen = {}
    for name, make in (("ours", ours), ("reference", reference)):
        with scripted(*answers) as server:

            async def calls(make: Callable[[], httpx2.AsyncClient] = make, server: ScriptedServer = server) -> Any:
                async with make() as client:
                    return [await outcome(client, method, server.url + "/p?q=1", **kwargs) for _ in range(times)]

            results = run(uvloop, calls)
            seen[name] = (results, received(server), server.connections)
    return seen["ours"], seen["reference"]


def ok(body: bytes, *headers: bytes, status: bytes = b"200 OK", version: bytes = b"HTTP/1.1") -> bytes:
    head = b"\r\n".join([version + b" " + status, *headers, b"Content-Length: %d" % len(body)])
    return head + b"\r\n\r\n" + body


CHUNKED = (
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n"
)

SCENARIOS: dict[str, list[Answer]] = {
    "content-length": [Answer(ok(b"hello", b"X-A: 1", b"x-b:  spaced value  "))],
    "chunked with extensions and trailers": [Answer(CHUNKED)],
    "read to the connection's end": [Answer(b"HTTP/1.1 200 OK\r\nX-A: 1\r\n\r\nall of it", close=True)],
    "204 then reuse": [Answer(b"HTTP/1.1 204 No Content\r\n\r\n")],
    "304 with a length": [Answer(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n")],
    "100 continue first": [Answer(b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"after"))],
    "103 early hints first": [Answer(b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + ok(b"after"))],
    "bare line feeds": [Answer(b"HTTP/1.1 200 OK\nX-A: 1\nContent-Length: 2\n\nok")],
    "obsolete line folding": [Answer(b"HTTP/1.1 200 OK\r\nX-A: one\r\n  two\r\nContent-Length: 2\r\n\r\nok")],
    "no reason phrase": [Answer(b"HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nok")],
    "HTTP/1.0 answer": [Answer(ok(b"old", version=b"HTTP/1.0"), close=True)],
    "connection close": [Answer(ok(b"bye", b"Connection: close"), close=True)],
    "chunked beats a length": [Answer(CHUNKED.replace(b"chunked\r\n", b"chunked\r\nContent-Length: 3\r\n"))],
    "equal repeated lengths": [Answer(b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\nContent-Length: 2\r\n\r\nok")],
    "upper-case chunked": [Answer(CHUNKED.replace(b"chunked", b"Chunked"))],
    "one MiB, with a length": [Answer(ok(b"x" * (1 << 20)))],
    "one MiB, chunked": [
        Answer(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"10000\r\n" + b"y" * 65536 + b"\r\n" * 1)
    ],
    "error status with a body": [Answer(ok(b'{"error":"no"}', status=b"503 Service Unavailable"))],
    # broken answers
    "illegal status line": [Answer(b"HTTP/1.1 2000 OK\r\n\r\n", close=True)],
    "not HTTP at all": [Answer(b"SSH-2.0-OpenSSH\r\n\r\n", close=True)],
    "header line without a colon": [Answer(b"HTTP/1.1 200 OK\r\nbroken\r\nContent-Length: 0\r\n\r\n", close=True)],
    "header name with a space": [Answer(b"HTTP/1.1 200 OK\r\nBad Name: x\r\nContent-Length: 0\r\n\r\n", close=True)],
    "conflicting lengths": [Answer(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok", close=True)],
    "length not a number": [Answer(b"HTTP/1.1 200 OK\r\nContent-Length: 1e3\r\n\r\nok", close=True)],
    "negative length": [Answer(b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\nok", close=True)],
    "gzip transfer encoding": [Answer(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nok", close=True)],
    "head of 90 KiB": [Answer(b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * (90 * 1024) + b"\r\nContent-Length: 0\r\n\r\n")],
    "head of 300 KiB": [Answer(b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * (300 * 1024) + b"\r\n\r\n", close=True)],
    "body shorter than its length": [Answer(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", close=True)],
    "chunked cut short": [Answer(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", close=True)],
    "chunk size not hex": [Answer(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n", close=True)],
    "chunk longer than its size": [
        Answer(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhello\r\n0\r\n\r\n", close=True)
    ],
    "closed without an answer": [Answer(b"", close=True)],
    "closed in the middle of the head": [Answer(b"HTTP/1.1 200 OK\r\nContent-Le", close=True)],
    "switching protocols": [Answer(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n", close=True)],
    "continuation line first": [Answer(b"HTTP/1.1 200 OK\r\n  folded\r\nContent-Length: 0\r\n\r\n", close=True)],
    # What a hand-written parser might take otherwise than h11 does: h11's answer is the reference.
    "a length and chunked": [Answer(CHUNKED.replace(b"\r\n\r\n5;", b"\r\nContent-Length: 5\r\n\r\n5;"))],
    "HTTP/1.0 with chunked": [Answer(CHUNKED.replace(b"HTTP/1.1", b"HTTP/1.0"), close=True)],
    "an HTTP/2.0 status line": [Answer(ok(b"two", version=b"HTTP/2.0"))],
    "status 999": [Answer(ok(b"odd", status=b"999 Odd"))],
}
SCENARIOS["one MiB, chunked"] = [
    Answer(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"".join(b"10000\r\n" + bytes([65 + i]) * 65536 + b"\r\n" for i in range(16))
        + b"0\r\n\r\n"
    )
]


@pytest.mark.parametrize("uvloop", LOOPS)
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_answers_as_httpcore2_does(name: str, uvloop: bool) -> None:
    mine, theirs = both(uvloop, SCENARIOS[name])
    assert mine[0] == theirs[0]  # outcomes
    assert mine[1] == theirs[1]  # the bytes each server received
    assert mine[2] == theirs[2]  # connections: reused, or not, alike


@pytest.mark.parametrize("uvloop", LOOPS)
@pytest.mark.parametrize("method", ["HEAD", "POST", "PUT", "DELETE", "OPTIONS"])
def test_requests_leave_as_httpcore2_sends_them(method: str, uvloop: bool) -> None:
    head = b"HTTP/1.1 200 OK\r\nX-A: 1\r\nContent-Length: 4\r\n\r\n"
    answers = [Answer(head + (b"" if method == "HEAD" else b"body"))]  # a length, and no body after a HEAD
    kwargs: dict[str, Any] = {"headers": {"X-Custom": "v a l", "Accept": "*/*"}}
    if method in ("POST", "PUT"):
        kwargs["content"] = b'{"k": "v"}' * 1000
    mine, theirs = both(uvloop, answers, method, **kwargs)
    assert mine == theirs
    if method == "HEAD":
        assert mine[0][0][4] == b""  # no body read after a HEAD, although the answer has a length


@pytest.mark.parametrize("uvloop", LOOPS)
def test_a_streamed_request_body_goes_chunked(uvloop: bool) -> None:
    async def body() -> AsyncIterator[bytes]:
        for part in (b"one", b"", b"two" * 30000, b"three"):
            yield part

    seen = []
    for make in (ours, reference):
        with scripted(Answer(ok(b"got it"))) as server:

            async def call(make: Callable[[], httpx2.AsyncClient] = make, server: ScriptedServer = server) -> Any:
                async with make() as client:
                    return await outcome(client, "POST", server.url, content=body())

            seen.append((run(uvloop, call), received(server)))
    assert seen[0] == seen[1]
    assert b"transfer-encoding: chunked" in seen[0][1][0].lower()


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Injected": "a\r\nX-Admin: yes"},
        {"X-Injected": "a\nb"},
        {"X-Nul": "a\x00b"},
        {"Bad Name": "v"},
        {"X-Colon:": "v"},
    ],
    ids=["crlf", "lf", "nul", "space in name", "colon in name"],
)
def test_a_header_that_could_smuggle_another_is_refused_before_anything_is_sent(headers: dict[str, str]) -> None:
    for make in (ours, reference):
        with scripted(Answer(ok(b"never"))) as server:

            async def call(make: Callable[[], httpx2.AsyncClient] = make, server: ScriptedServer = server) -> Any:
                async with make() as client:
                    return await outcome(client, "GET", server.url, headers=headers)

            assert run(False, call) == ("error", "LocalProtocolError")
            assert server.requests == []


# ---------------------------------------------------------------------------------------------------- the pool


async def fetch(
    client: httpx2.AsyncClient, url: str, *, timeout: float = 5, pool_timeout: float = 5
) -> tuple[int, bytes]:
    answer = await client.get(url, timeout=httpx2.Timeout(timeout, pool=pool_timeout))
    return answer.status_code, answer.content


def pooled(**limits: Any) -> httpx2.AsyncClient:
    transport = GuardedAsyncTransport(EgressPolicy(["127.0.0.1"]))
    if limits:  # the transport's own pool with other limits, still dialled by the pinned backend
        core = transport._pool
        transport._pool = httpcore2.AsyncConnectionPool(network_backend=core._network_backend, **limits)
    return httpx2.AsyncClient(transport=transport, timeout=5)


@pytest.mark.parametrize("uvloop", LOOPS)
def test_kept_alive_connections_are_reused_and_expire(uvloop: bool) -> None:
    with scripted(Answer(ok(b"a"))) as server:

        async def calls() -> None:
            async with pooled(keepalive_expiry=0.3) as client:
                for _ in range(5):
                    assert await fetch(client, server.url) == (200, b"a")
                assert server.connections == 1
                await anyio.sleep(0.5)  # idle longer than the expiry: a new connection
                assert await fetch(client, server.url) == (200, b"a")
                assert server.connections == 2

        run(uvloop, calls)


@pytest.mark.parametrize("uvloop", LOOPS)
def test_an_idle_connection_the_server_closed_is_not_used(uvloop: bool) -> None:
    # The server closes each connection right after its answer, without saying so in the headers.
    with scripted(Answer(ok(b"a"), close=True)) as server:

        async def calls() -> None:
            async with ours() as client:
                for _ in range(3):
                    assert await fetch(client, server.url) == (200, b"a")
                    await anyio.sleep(0.1)  # the close reaches the client while the connection is idle
                assert server.connections == 3

        run(uvloop, calls)


@pytest.mark.parametrize("uvloop", LOOPS)
def test_bytes_sent_unasked_on_an_idle_connection_are_never_taken_for_the_next_answer(uvloop: bool) -> None:
    # The first answer is followed, once the client holds the connection idle, by a second answer nobody asked for.
    unsolicited = Answer(ok(b"first"), after=ok(b"LATE ANSWER NOBODY ASKED FOR"))
    with scripted(unsolicited, Answer(ok(b"second"))) as server:

        async def calls() -> None:
            async with ours() as client:
                assert await fetch(client, server.url) == (200, b"first")
                await anyio.sleep(0.2)  # the unasked bytes arrive while the connection is idle
                status, body = await fetch(client, server.url)
                assert b"LATE" not in body
                assert (status, body) == (200, b"second")
                assert server.connections == 2  # the connection that carried them was closed, not reused

        run(uvloop, calls)


@pytest.mark.parametrize("uvloop", LOOPS)
def test_a_read_timeout_closes_the_connection(uvloop: bool) -> None:
    with scripted(Answer(ok(b"late"), delay=0.5), Answer(ok(b"on time"))) as server:

        async def calls() -> None:
            async with ours() as client:
                with pytest.raises(httpx2.ReadTimeout):
                    await fetch(client, server.url, timeout=0.1)
                assert await fetch(client, server.url) == (200, b"on time")
                assert server.connections == 2  # the timed-out connection was not reused

        run(uvloop, calls)


@pytest.mark.parametrize("uvloop", LOOPS)
def test_an_answer_abandoned_half_read_closes_its_connection(uvloop: bool) -> None:
    big = b"z" * (1 << 20)
    with scripted(Answer(ok(big)), *[Answer(ok(b"next"))] * 5) as server:

        async def calls() -> None:
            async with ours() as client:
                async with client.stream("GET", server.url) as answer:
                    async for _chunk in answer.aiter_raw():
                        break  # stop after the first chunk
                with anyio.move_on_after(0.01):  # cancelled or not, a request leaves no connection in use
                    await fetch(client, server.url)
                assert await fetch(client, server.url) == (200, b"next")
                assert server.connections >= 2

        run(uvloop, calls)


@pytest.mark.parametrize("uvloop", LOOPS)
def test_connect_errors_are_httpx2s(uvloop: bool) -> None:
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()

    async def calls() -> None:
        async with ours() as client:
            with pytest.raises(httpx2.ConnectError):
                await fetch(client, f"http://127.0.0.1:{port}/")

    run(uvloop, calls)


@pytest.mark.parametrize("uvloop", LOOPS)
def test_tls_verifies_the_certificate_and_the_hostname(uvloop: bool, tmp_path: Path) -> None:
    ca_file, cert_file, key_file = write_certificates(tmp_path, "127.0.0.1")
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert_file, key_file)
    trusted = ssl.create_default_context(cafile=str(ca_file))
    with scripted(Answer(ok(b"secret")), tls=server_context) as server:

        async def calls() -> None:
            async with ours(ssl_context=trusted) as client:
                for _ in range(3):
                    answer = await client.get(server.url + "/")
                    assert (answer.status_code, answer.content) == (200, b"secret")
            assert server.connections == 1
            async with ours() as client:  # the system's trust store does not know the test CA
                with pytest.raises(httpx2.ConnectError, match="certificate"):
                    await client.get(server.url + "/")

        run(uvloop, calls)
    (tmp_path / "other").mkdir()
    other_ca, other_cert, other_key = write_certificates(tmp_path / "other", "other.test")
    wrong_name = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    wrong_name.load_cert_chain(other_cert, other_key)
    with scripted(Answer(ok(b"secret")), tls=wrong_name) as server:

        async def wrong() -> None:
            async with ours(ssl_context=ssl.create_default_context(cafile=str(other_ca))) as client:
                with pytest.raises(httpx2.ConnectError, match=r"certificate|hostname|match"):
                    await client.get(server.url + "/")

        run(uvloop, wrong)


@pytest.mark.parametrize("uvloop", LOOPS)
def test_a_server_that_stops_reading_gives_a_write_timeout(uvloop: bool) -> None:
    listener = socket.create_server(("127.0.0.1", 0))  # accepted by the kernel, never read
    port = listener.getsockname()[1]
    body = b"x" * (64 << 20)  # more than the socket buffers on both sides hold

    async def calls() -> list[Any]:
        outcomes = []
        for make in (ours, reference):
            async with make() as client:
                timeout = httpx2.Timeout(5, write=0.3)
                outcomes.append(
                    await outcome(client, "POST", f"http://127.0.0.1:{port}/", content=body, timeout=timeout)
                )
        return outcomes

    try:
        assert run(uvloop, calls) == [("error", "WriteTimeout")] * 2
    finally:
        listener.close()
