"""Guarded outbound HTTP against real servers on 127.0.0.1.

An injected resolver makes ``public.test`` (allowlisted by hostname) resolve to 127.0.0.1, while 127.0.0.1 itself is
not allowlisted: so a fetch reaching the test server by name proves the happy path, and the same server reached by
address proves a refusal leak. ``socket.create_connection`` is spied on (and fenced: only 127.0.0.1 is really
dialled) to prove which address each connection went to.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import pytest

from mcpbridge.errors import InvalidInput, MCPBridgeError, PayloadTooLarge, UpstreamError
from mcpbridge.outbound.http import Fetched, fetch, fetch_async, guarded_client
from mcpbridge.outbound.policy import EgressPolicy
from tests.support.tls import write_certificates

pytestmark = [pytest.mark.slow]

SECRET = "s3cr3t-t0ken"
TIMEOUT = 5.0
MAX_BYTES = 10_000
ANSWERS = {
    "public.test": ["127.0.0.1"],
    "public2.test": ["127.0.0.1"],
    "localhost": ["127.0.0.1", "::1"],
    "internal.test": ["10.0.0.5"],
}


def resolver(host: str, port: int) -> list[str]:
    if host not in ANSWERS:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    return list(ANSWERS[host])


POLICY = EgressPolicy(["public.test", "public2.test"], resolver=resolver)


# ---------------------------------------------------------------------------------------------- test servers


@dataclass
class Seen:
    path: str
    host: str | None
    authorization: str | None


class RecordingServer(ThreadingHTTPServer):
    """An HTTP/1.0 server in a thread that records every request and answers by path (see ``Handler``)."""

    daemon_threads = True

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__((host, port), Handler)
        self.seen: list[Seen] = []
        self.stop = threading.Event()
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def port(self) -> int:
        port: int = self.server_address[1]
        return port

    def start(self) -> RecordingServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self.stop.set()  # releases handlers that trickle or hang
        self.shutdown()
        self.server_close()
        self._thread.join(timeout=5)


class Handler(BaseHTTPRequestHandler):
    server: RecordingServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.server.seen.append(Seen(self.path, self.headers.get("Host"), self.headers.get("Authorization")))
        parts = urlsplit(self.path)
        query = {name: values[0] for name, values in parse_qs(parts.query).items()}
        name, _, argument = parts.path.strip("/").partition("/")
        # The client hanging up (size limit, deadline) is expected in these tests.
        with contextlib.suppress(OSError):
            self._answer(name, argument, query)

    def _answer(self, name: str, argument: str, query: dict[str, str]) -> None:
        if name == "redirect":
            self._send(302, b"", location=query["to"])
        elif name == "chain":
            hops = int(argument)
            if hops:
                self._send(302, b"", location=f"/chain/{hops - 1}")
            else:
                self._send(200, b"end")
        elif name == "status":
            self._send(int(argument), b"nope")
        elif name == "echo-host":
            self._send(200, (self.headers.get("Host") or "").encode())
        elif name == "echo-auth":
            self._send(200, (self.headers.get("Authorization") or "none").encode())
        elif name == "big-declared":
            self._send(200, b"x" * int(query["size"]))
        elif name == "big-streamed":
            self._stream(int(query["size"]))
        elif name == "trickle":
            self._trickle()
        elif name == "hang":
            self.server.stop.wait(5)
        else:
            self._send(200, b"hello", content_type="text/plain; charset=UTF-8")

    def _send(self, status: int, body: bytes, *, location: str | None = None, content_type: str = "text/plain") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if location is not None:
            self.send_header("Location", location)
        self.end_headers()
        self.wfile.write(body)

    def _stream(self, size: int) -> None:
        # No Content-Length: HTTP/1.0, the body ends when the connection closes.
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.end_headers()
        for _ in range(size // 1000):
            self.wfile.write(b"y" * 1000)
            self.wfile.flush()

    def _trickle(self) -> None:
        # One byte every 50 ms: no single read ever times out, only an overall deadline stops it.
        self.send_response(200)
        self.send_header("Content-Length", "1000")
        self.end_headers()
        for _ in range(200):
            if self.server.stop.wait(0.05):
                return
            self.wfile.write(b"z")
            self.wfile.flush()


@pytest.fixture
def start_server() -> Iterator[Callable[..., RecordingServer]]:
    servers: list[RecordingServer] = []

    def start(host: str = "127.0.0.1", port: int = 0) -> RecordingServer:
        server = RecordingServer(host, port).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


@pytest.fixture
def server(start_server: Callable[..., RecordingServer]) -> RecordingServer:
    return start_server()


@pytest.fixture
def trap(start_server: Callable[..., RecordingServer]) -> RecordingServer:
    """A server that no test may reach."""
    return start_server()


@dataclass
class Network:
    """Every TCP connection the sync stack opens, by the address it dialled, and a fake route for public IPs."""

    connections: list[tuple[str, int]] = field(default_factory=list)
    routes: dict[tuple[str, int], int] = field(default_factory=dict)


@pytest.fixture
def network(monkeypatch: pytest.MonkeyPatch) -> Network:
    spied = Network()
    real = socket.create_connection

    def create_connection(address: tuple[str, int], *args: Any, **kwargs: Any) -> socket.socket:
        host, port = address[0], address[1]
        spied.connections.append((host, port))
        if (host, port) in spied.routes:
            return real(("127.0.0.1", spied.routes[(host, port)]), *args, **kwargs)
        if host != "127.0.0.1":
            raise ConnectionRefusedError(f"the test network only reaches 127.0.0.1, not {host}")
        return real(address, *args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", create_connection)
    return spied


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def get(url: str, **overrides: Any) -> Fetched:
    arguments: dict[str, Any] = {"policy": POLICY, "timeout": TIMEOUT, "max_bytes": MAX_BYTES, **overrides}
    return fetch(url, **arguments)


def failure(url: str, **overrides: Any) -> MCPBridgeError:
    with pytest.raises(MCPBridgeError) as caught:
        get(url, **overrides)
    error = caught.value
    assert SECRET not in error.message
    assert SECRET not in str(error.details)
    return error


# ---------------------------------------------------------------------------------------------- refusals


def test_forbidden_urls_are_refused_without_connecting(server: RecordingServer, network: Network) -> None:
    port = server.port
    cases = {
        f"http://127.0.0.1:{port}/ok?token={SECRET}": "127.0.0.1 is a loopback address",
        f"http://169.254.169.254/latest/meta-data/?token={SECRET}": "link-local address (cloud metadata)",
        f"http://[::1]:{port}/ok": "::1 is a loopback address",
        f"http://localhost:{port}/ok": "localhost resolves to 127.0.0.1, a loopback address",
        f"http://internal.test:{port}/ok": "internal.test resolves to 10.0.0.5, a private address",
        f"http://2130706433:{port}/ok": "127.0.0.1 is a loopback address",
        f"http://[::ffff:127.0.0.1]:{port}/ok": "IPv4-mapped address of 127.0.0.1",
    }
    for url, reason in cases.items():
        error = failure(url)
        assert isinstance(error, InvalidInput)
        assert error.code == "url_forbidden_address", url
        assert reason in error.message
    assert server.seen == []
    assert network.connections == []


def test_other_policy_refusals_keep_their_codes(network: Network) -> None:
    assert failure("ftp://public.test/x").code == "url_scheme_not_allowed"
    assert failure(f"http://user:{SECRET}@public.test/").code == "url_credentials_not_allowed"
    assert failure("http://nowhere.test/").code == "url_unresolvable"
    assert network.connections == []


# ---------------------------------------------------------------------------------------------- happy path


def test_allowlisted_hostname_is_fetched_by_name(server: RecordingServer, network: Network) -> None:
    fetched = get(f"http://public.test:{server.port}/echo-host?q=1", accept="text/plain")
    assert fetched.status == 200
    assert fetched.content == f"public.test:{server.port}".encode()
    assert fetched.final_url == f"http://public.test:{server.port}/echo-host?q=1"
    assert fetched.content_type == "text/plain"
    assert fetched.media_type == "text/plain"
    assert fetched.charset is None
    assert all(name == name.lower() for name in fetched.headers)
    assert fetched.headers["content-length"] == str(len(fetched.content))
    assert [seen.host for seen in server.seen] == [f"public.test:{server.port}"]
    assert network.connections == [("127.0.0.1", server.port)]


def test_media_type_and_charset(server: RecordingServer) -> None:
    fetched = get(f"http://public.test:{server.port}/ok")
    assert (fetched.content, fetched.media_type, fetched.charset) == (b"hello", "text/plain", "utf-8")
    assert fetched.content_type == fetched.headers["content-type"] == "text/plain; charset=UTF-8"


def test_environment_proxy_is_ignored(
    server: RecordingServer, trap: RecordingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A proxy resolves names itself, so honouring HTTP_PROXY would bypass the pin."""
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{trap.port}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    assert get(f"http://public.test:{server.port}/ok").content == b"hello"
    assert trap.seen == []


def test_guarded_client_refuses_and_does_not_follow_redirects(server: RecordingServer, network: Network) -> None:
    with guarded_client(POLICY, timeout=TIMEOUT) as client:
        response = client.get(f"http://public.test:{server.port}/redirect", params={"to": "/ok"})
        assert response.status_code == 302
        with pytest.raises(InvalidInput) as caught:
            client.get(f"http://127.0.0.1:{server.port}/ok")
        assert caught.value.code == "url_forbidden_address"
    assert len(server.seen) == 1
    assert network.connections == [("127.0.0.1", server.port)]


# ---------------------------------------------------------------------------------------------- redirects


def redirect_url(server: RecordingServer, to: str) -> str:
    return f"http://public.test:{server.port}/redirect?to={quote(to, safe='')}"


@pytest.mark.parametrize(
    ("to", "reason"),
    [
        ("http://127.0.0.1:{trap}/secret?token=" + SECRET, "127.0.0.1 is a loopback address"),
        ("http://169.254.169.254/latest/meta-data/?token=" + SECRET, "169.254.169.254 is a link-local address (cloud"),
        ("http://[::ffff:127.0.0.1]:{trap}/", "IPv4-mapped address of 127.0.0.1"),
        ("http://internal.test:{trap}/", "internal.test resolves to 10.0.0.5, a private address"),
        ("file:///etc/passwd", "the scheme 'file' is not allowed"),
        ("http://user:" + SECRET + "@public.test:{trap}/", "credentials"),
    ],
)
def test_redirect_to_forbidden_place_is_refused(
    server: RecordingServer, trap: RecordingServer, network: Network, to: str, reason: str
) -> None:
    error = failure(redirect_url(server, to.format(trap=trap.port)))
    assert isinstance(error, InvalidInput)
    assert error.code == "url_redirect_refused"
    assert error.message.startswith("refused a redirect: ")
    assert reason in error.message
    assert len(server.seen) == 1
    assert trap.seen == []
    assert network.connections == [("127.0.0.1", server.port)]


def test_redirects_are_followed_and_credentials_stay_with_their_origin(server: RecordingServer) -> None:
    auth = {"Authorization": "Bearer for-public-test"}
    same_origin = get(redirect_url(server, "/echo-auth"), headers=auth)
    assert same_origin.content == b"Bearer for-public-test"
    assert same_origin.final_url == f"http://public.test:{server.port}/echo-auth"
    other_origin = get(redirect_url(server, f"http://public2.test:{server.port}/echo-auth"), headers=auth)
    assert other_origin.content == b"none"


def test_at_most_five_redirects(server: RecordingServer) -> None:
    assert get(f"http://public.test:{server.port}/chain/5").content == b"end"
    assert len(server.seen) == 6
    server.seen.clear()
    error = failure(f"http://public.test:{server.port}/chain/6")
    assert error.code == "url_redirect_refused"
    assert "more than 5 redirects" in error.message
    assert len(server.seen) == 6


# ---------------------------------------------------------------------------------------------- limits and failures


@pytest.mark.parametrize("path", ["big-declared", "big-streamed"])
def test_body_larger_than_max_bytes(server: RecordingServer, path: str) -> None:
    error = failure(f"http://public.test:{server.port}/{path}?size=5000", max_bytes=1000)
    assert isinstance(error, PayloadTooLarge)
    assert (error.code, error.status) == ("url_too_large", 413)
    assert error.details == {"max_bytes": 1000}


def test_body_exactly_max_bytes_passes(server: RecordingServer) -> None:
    assert len(get(f"http://public.test:{server.port}/big-streamed?size=2000", max_bytes=2000).content) == 2000
    assert get(f"http://public.test:{server.port}/big-declared?size=2000", max_bytes=2000).content == b"x" * 2000


@pytest.mark.parametrize("path", ["trickle", "hang"])
def test_one_overall_deadline(server: RecordingServer, path: str) -> None:
    # No read waits 1 s (a byte every 50 ms, or a 5 s hang that ends in a closed connection): only the deadline of
    # the whole fetch gives url_timeout, and it names the limit applied.
    error = failure(f"http://public.test:{server.port}/{path}?token={SECRET}", timeout=1.0)
    assert isinstance(error, UpstreamError)
    assert (error.code, error.status) == ("url_timeout", 502)
    assert error.details == {"timeout_seconds": 1.0}


def test_hung_name_resolution_is_bounded_by_the_deadline() -> None:
    release = threading.Event()

    answered = threading.Event()

    def stuck(host: str, port: int) -> list[str]:
        release.wait(60)
        answered.set()
        return ["127.0.0.1"]

    try:
        error = failure("http://slow-dns.test/", policy=EgressPolicy(resolver=stuck), timeout=1.0)
        # The fetch gave up while the resolver was still stuck: the deadline, not the resolver, ended it.
        assert not answered.is_set()
    finally:
        release.set()
    assert error.code == "url_timeout"
    assert error.details == {"timeout_seconds": 1.0}


@pytest.mark.parametrize("status", [404, 500, 304])
def test_non_success_status_is_an_upstream_error(server: RecordingServer, status: int) -> None:
    error = failure(f"http://public.test:{server.port}/status/{status}")
    assert isinstance(error, UpstreamError)
    assert (error.code, error.status) == ("url_fetch_failed", 502)
    assert f"HTTP {status}" in error.message
    assert error.details == {"status": status}


def test_connection_refused_is_an_upstream_error() -> None:
    error = failure(f"http://public.test:{closed_port()}/?token={SECRET}")
    assert error.code == "url_fetch_failed"
    assert "public.test" in error.message


# ---------------------------------------------------------------------------------------------- DNS rebinding


def test_dns_rebinding_cannot_move_the_connection(
    server: RecordingServer, trap: RecordingServer, network: Network
) -> None:
    """The resolver answers a public address first and 127.0.0.1 on every later query. The connection must go to
    the public address that was checked (routed by the fake network to ``server``), never to the trap on
    127.0.0.1 — and the name is resolved exactly once, so there is no second answer to exploit."""
    public_address = "8.8.8.8"
    network.routes[(public_address, trap.port)] = server.port
    queries: list[str] = []

    def rebinding(host: str, port: int) -> list[str]:
        queries.append(host)
        return [public_address] if len(queries) == 1 else ["127.0.0.1"]

    policy = EgressPolicy(resolver=rebinding)
    url = f"http://rebind.test:{trap.port}/echo-host"
    fetched = get(url, policy=policy)
    assert fetched.content == f"rebind.test:{trap.port}".encode()
    assert queries == ["rebind.test"]
    assert network.connections == [(public_address, trap.port)]
    assert len(server.seen) == 1
    assert trap.seen == []

    # Now the name points at loopback: refused before any connection.
    assert failure(url, policy=policy).code == "url_forbidden_address"
    assert network.connections == [(public_address, trap.port)]
    assert trap.seen == []


# ---------------------------------------------------------------------------------------------- TLS


def test_tls_verifies_the_hostname_while_connecting_to_the_pinned_address(
    server: RecordingServer, tmp_path: Path, network: Network
) -> None:
    ca_file, cert_file, key_file = write_certificates(tmp_path, "public.test")
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert_file, key_file)
    server.socket = server_context.wrap_socket(server.socket, server_side=True)
    client_context = ssl.create_default_context(cafile=str(ca_file))
    policy = EgressPolicy(["public.test", "public2.test"], require_https=True, resolver=resolver)

    fetched = get(f"https://public.test:{server.port}/echo-host", policy=policy, ssl_context=client_context)
    assert fetched.content == f"public.test:{server.port}".encode()
    assert network.connections == [("127.0.0.1", server.port)]

    # Same address, other name: the certificate does not match, so the pin does not weaken verification.
    error = failure(f"https://public2.test:{server.port}/echo-host", policy=policy, ssl_context=client_context)
    assert error.code == "url_fetch_failed"
    assert "certificate" in error.message
    assert len(server.seen) == 1


# ---------------------------------------------------------------------------------------------- async


def get_async(url: str, **overrides: Any) -> Fetched:
    arguments: dict[str, Any] = {"policy": POLICY, "timeout": TIMEOUT, "max_bytes": MAX_BYTES, **overrides}
    return asyncio.run(fetch_async(url, **arguments))


def async_failure(url: str, **overrides: Any) -> MCPBridgeError:
    with pytest.raises(MCPBridgeError) as caught:
        get_async(url, **overrides)
    assert SECRET not in caught.value.message
    return caught.value


def test_async_fetch_by_name(server: RecordingServer) -> None:
    fetched = get_async(f"http://public.test:{server.port}/echo-host")
    assert fetched.content == f"public.test:{server.port}".encode()
    assert get_async(redirect_url(server, "/ok")).content == b"hello"


def test_async_refusals(server: RecordingServer, trap: RecordingServer) -> None:
    assert async_failure(f"http://127.0.0.1:{server.port}/?token={SECRET}").code == "url_forbidden_address"
    assert async_failure(f"http://localhost:{server.port}/").code == "url_forbidden_address"
    redirect = async_failure(redirect_url(server, f"http://127.0.0.1:{trap.port}/?token={SECRET}"))
    assert redirect.code == "url_redirect_refused"
    assert async_failure(f"http://public.test:{server.port}/big-streamed?size=5000", max_bytes=1000).status == 413
    assert async_failure(f"http://public.test:{server.port}/status/404").code == "url_fetch_failed"
    assert trap.seen == []
    assert len(server.seen) == 3


def test_async_deadline(server: RecordingServer) -> None:
    error = async_failure(f"http://public.test:{server.port}/trickle", timeout=1.0)
    assert (error.code, error.details) == ("url_timeout", {"timeout_seconds": 1.0})


def test_async_client_ignores_environment_proxy(
    server: RecordingServer, trap: RecordingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{trap.port}")
    assert get_async(f"http://public.test:{server.port}/ok").content == b"hello"
    assert trap.seen == []
