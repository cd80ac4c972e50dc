"""The command line's two HTTP transports held to the same answers: the standard library's (the default) and httpx2's
(the library it stands in for), against a real HTTP server on 127.0.0.1 that echoes what it received. Then what
only a bound shows: a server that never answers, an answer over the cap, a refused connection, a kept-alive
connection the server closed."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from mcpbridge.cli import transport
from mcpbridge.cli.transport import (
    AnswerTooLarge,
    HttpxTransport,
    Request,
    StdlibTransport,
    Transport,
    Unreachable,
    absolute,
    chosen,
)

SECONDS = 20.0
"""The deadline a request is given here: far above what an answer from 127.0.0.1 takes, even on a busy machine."""


class _Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    served: list[str]
    connections: set[tuple[str, int]]

    def log_message(self, *_args: Any) -> None:
        pass

    def _answer(self) -> None:
        type(self).connections.add(self.client_address)  # one client port per connection
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        parts = urlsplit(self.path)
        type(self).served.append(f"{self.command} {parts.path}")
        if parts.path == "/silent":
            threading.Event().wait(30)  # longer than any deadline the tests give: the client must leave first
            return
        if parts.path == "/big":
            self._send(200, b"x" * 4096, chunked=True)
            return
        if parts.path == "/close":
            self._send(200, b'{"closing": true}', close=True)
            return
        status = int(parts.path.rsplit("/", 1)[1]) if parts.path.startswith("/status/") else 200
        echoed = {
            "method": self.command,
            "path": parts.path,
            "query": parse_qsl(parts.query, keep_blank_values=True),
            "content_type": self.headers.get("Content-Type"),
            "authorization": self.headers.get("Authorization"),
            "body": json.loads(body) if body and "json" in (self.headers.get("Content-Type") or "") else body.decode(),
        }
        self._send(status, json.dumps(echoed, ensure_ascii=False).encode(), chunked=parts.path == "/chunked")

    def _send(self, status: int, content: bytes, *, chunked: bool = False, close: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for start in range(0, len(content), 1000):
                piece = content[start : start + 1000]
                self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
            return
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)

    do_GET = do_POST = do_PUT = do_DELETE = _answer


@pytest.fixture
def echo() -> Iterator[tuple[str, type[_Echo]]]:
    handler = type("Echo", (_Echo,), {"served": [], "connections": set()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


def _both() -> list[Transport]:
    return [StdlibTransport(), HttpxTransport(insecure_scheme=True)]


TRANSPORTS = [StdlibTransport, lambda: HttpxTransport(insecure_scheme=True)]
HEADERS = {"Authorization": "Bearer sk_test", "User-Agent": "mcpbridge-cli"}
REQUESTS = [
    ("GET", "/api/v1/knowledge-bases", {}),
    ("GET", "/api/v1/items", {"params": {"limit": 5, "cursor": "a b/c+d", "tag": ["x", "y"], "gone": None}}),
    ("GET", "/api/v1/items", {"params": {"flag": True, "other": False}}),
    ("POST", "/api/v1/knowledge-bases", {"json": {"name": "手册", "description": "é \u2028", "n": [1, 2.5, None]}}),
    ("PUT", "/api/v1/things/1", {"json": {"enabled": False}}),
    ("POST", "/api/v1/things/1/rotate", {}),
    ("DELETE", "/api/v1/things/1", {}),
    ("GET", "/status/404", {}),
    ("POST", "/status/422", {"json": {"bad": True}}),
    ("GET", "/chunked", {"params": {"q": "分块"}}),
]


@pytest.mark.parametrize(("method", "path", "options"), REQUESTS, ids=[f"{m} {p}" for m, p, _ in REQUESTS])
def test_both_transports_send_and_read_the_same(
    echo: tuple[str, type[_Echo]], method: str, path: str, options: dict[str, Any]
) -> None:
    base, _ = echo
    answers = []
    for sent in _both():
        try:
            answer = sent.send(
                Request(method, absolute(base, path), HEADERS, **options), seconds=SECONDS, connect_seconds=SECONDS
            )
        finally:
            sent.close()
        answers.append((answer.status, json.loads(answer.content)))
    stdlib, httpx = answers
    assert stdlib == httpx
    assert stdlib[1]["authorization"] == "Bearer sk_test"
    assert stdlib[1]["method"] == method


def test_a_form_goes_through_httpx2(echo: tuple[str, type[_Echo]]) -> None:
    base, _ = echo
    form = Request(
        "POST", f"{base}/upload", HEADERS, data={"title": "t"}, files={"file": ("a.txt", b"hi", "text/plain")}
    )
    with pytest.raises(ValueError, match="HttpxTransport"):
        StdlibTransport().send(form, seconds=SECONDS, connect_seconds=SECONDS)
    sent = HttpxTransport(insecure_scheme=True)
    answer = sent.send(form, seconds=SECONDS, connect_seconds=SECONDS)
    sent.close()
    echoed = json.loads(answer.content)
    assert echoed["content_type"].startswith("multipart/form-data")
    assert 'name="file"; filename="a.txt"' in echoed["body"]


def test_one_connection_serves_a_command_and_a_closed_one_is_replaced(echo: tuple[str, type[_Echo]]) -> None:
    base, handler = echo
    sent = StdlibTransport()
    for _ in range(3):
        assert sent.send(Request("GET", f"{base}/a", HEADERS), seconds=SECONDS, connect_seconds=SECONDS).status == 200
    assert len(handler.connections) == 1
    closing = sent.send(Request("GET", f"{base}/close", HEADERS), seconds=SECONDS, connect_seconds=SECONDS)
    assert json.loads(closing.content) == {"closing": True}
    assert sent.send(Request("POST", f"{base}/b", HEADERS), seconds=SECONDS, connect_seconds=SECONDS).status == 200
    assert len(handler.connections) == 2
    sent.close()


@pytest.mark.parametrize(
    "make", [StdlibTransport, lambda: HttpxTransport(insecure_scheme=True)], ids=["stdlib", "httpx2"]
)
def test_a_server_that_never_answers_is_left_at_the_deadline(echo: tuple[str, type[_Echo]], make: Any) -> None:
    base, _ = echo
    sent = make()
    with pytest.raises(TimeoutError):
        sent.send(Request("GET", f"{base}/silent", HEADERS), seconds=0.5, connect_seconds=0.5)
    sent.close()


@pytest.mark.parametrize(
    "make", [StdlibTransport, lambda: HttpxTransport(insecure_scheme=True)], ids=["stdlib", "httpx2"]
)
def test_an_answer_over_the_cap_stops_there(
    echo: tuple[str, type[_Echo]], make: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, _ = echo
    monkeypatch.setattr(transport, "MAX_ANSWER_BYTES", 2048)
    sent = make()
    with pytest.raises(AnswerTooLarge):
        sent.send(Request("GET", f"{base}/big", HEADERS), seconds=SECONDS, connect_seconds=SECONDS)
    sent.close()


@pytest.mark.parametrize(
    "make", [StdlibTransport, lambda: HttpxTransport(insecure_scheme=True)], ids=["stdlib", "httpx2"]
)
def test_a_refused_connection_is_said(make: Any) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connecting is refused
        sent = make()
        with pytest.raises(Unreachable) as caught:
            sent.send(Request("GET", f"http://127.0.0.1:{port}/x", HEADERS), seconds=SECONDS, connect_seconds=SECONDS)
    assert caught.value.reason == "connection refused"


def test_the_transport_is_chosen_by_its_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(transport.TRANSPORT_ENV, raising=False)
    assert isinstance(chosen(True), StdlibTransport)
    monkeypatch.setenv(transport.TRANSPORT_ENV, "httpx2")
    assert isinstance(chosen(True), HttpxTransport)
    monkeypatch.setenv(transport.TRANSPORT_ENV, "curl")
    with pytest.raises(Exception, match="stdlib or httpx2"):
        chosen(True)


def test_routes_join_the_base_url_with_its_stage() -> None:
    assert absolute("https://x.example/prod", "/api/v1/me") == "https://x.example/prod/api/v1/me"
    assert absolute("http://127.0.0.1:8080", "/api/v1/me") == "http://127.0.0.1:8080/api/v1/me"
    assert absolute("http://127.0.0.1:8080/", "https://s3.example/b") == "https://s3.example/b"
