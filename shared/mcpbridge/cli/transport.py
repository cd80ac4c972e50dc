"""How a command's REST requests travel: the standard library's ``http.client`` by default, httpx2 behind the same
seam (``MCPBRIDGE_CLI_HTTP=httpx2``), and httpx2 always for file uploads (multipart forms).

A command is a handful of JSON requests to one server, made once per process: what it costs is mostly the import of
its HTTP client. httpx2 and what it brings (httpcore2, h11, anyio, ``importlib.metadata`` for its version) take
about 0.2 s of CPU to import, half of a command's whole CPU; ``http.client`` is already a dependency of the standard
library's own modules and imports in a few milliseconds. ``tests/bench/cli_commands.py`` has the figures, and
``tests/functional/test_cli_transport.py`` holds both transports to the same answers.

Both bound a request by one deadline (connect, send, every read: the time left of it) and an answer by
``MAX_ANSWER_BYTES``; neither reads proxy settings from the environment (the server is named explicitly), and an
``http://`` URL never loads the system's trusted certificates (a third of a command's CPU in httpx2).
"""

from __future__ import annotations

import http.client
import json
import os
import time
from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol
from urllib.parse import urlencode, urljoin, urlsplit

TRANSPORT_ENV = "MCPBRIDGE_CLI_HTTP"
MAX_ANSWER_BYTES = 64 * 1024 * 1024
"""The largest answer a command reads (a listing of every page is many answers, each far below this)."""
_READ_BYTES = 64 * 1024


class Answer(NamedTuple):
    status: int
    content: bytes


class Unreachable(Exception):
    """The server could not be reached (the reason: ``connection refused``, a DNS or TLS failure...)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class AnswerTooLarge(Exception):
    """An answer longer than ``MAX_ANSWER_BYTES``: its reading stopped there."""


class Request(NamedTuple):
    method: str
    url: str
    """Absolute (the base URL joined with the route's path)."""
    headers: Mapping[str, str]
    params: Mapping[str, Any] | None = None
    json: Any = None
    data: Mapping[str, Any] | None = None
    files: Mapping[str, Any] | None = None
    """httpx2's ``files`` (a multipart form): only :class:`HttpxTransport` sends those."""

    @property
    def is_form(self) -> bool:
        return self.files is not None or self.data is not None


class Transport(Protocol):
    def send(self, request: Request, *, seconds: float, connect_seconds: float) -> Answer:
        """The answer (any status); :class:`Unreachable`, :class:`TimeoutError` past ``seconds`` or
        :class:`AnswerTooLarge`."""

    def close(self) -> None: ...


def query_string(params: Mapping[str, Any] | None) -> str:
    """``params`` as httpx2 encodes them: lists repeat the name, ``None`` is an empty value, booleans are
    ``true``/``false``."""
    if not params:
        return ""
    pairs: list[tuple[str, str]] = []
    for name, value in params.items():
        for item in value if isinstance(value, list | tuple) else [value]:
            if item is None:
                pairs.append((name, ""))
            elif isinstance(item, bool):
                pairs.append((name, "true" if item else "false"))
            else:
                pairs.append((name, str(item)))
    return urlencode(pairs)


class StdlibTransport:
    """``http.client``, one kept-alive connection per origin."""

    def __init__(self) -> None:
        self._connections: dict[tuple[str, str], Any] = {}
        self._used: dict[tuple[str, str], float] = {}

    def send(self, request: Request, *, seconds: float, connect_seconds: float) -> Answer:
        if request.is_form:
            raise ValueError("forms go through HttpxTransport")
        deadline = time.monotonic() + seconds
        parts = urlsplit(request.url)
        target = parts.path or "/"
        query = "&".join(part for part in (parts.query, query_string(request.params)) if part)
        if query:
            target = f"{target}?{query}"
        headers = {"Accept": "application/json", **request.headers}
        body = None
        if request.json is not None:
            body = json.dumps(request.json, ensure_ascii=False, separators=(",", ":")).encode()
            headers["Content-Type"] = "application/json"
        elif request.method in {"POST", "PUT", "PATCH"}:
            headers["Content-Length"] = "0"
        # A kept-alive connection the server closed while it was idle fails on first use: an idempotent request is
        # then sent once more on a new connection. A POST never is (the server may have received it): it takes a
        # new connection unless the kept one was used within the last moment.
        idempotent = request.method in {"GET", "HEAD", "PUT", "DELETE"}
        for attempt in (0, 1):
            reused = False
            try:
                connection, reused = self._connection(
                    parts.scheme, parts.netloc, min(connect_seconds, seconds), fresh_within=None if idempotent else 1.0
                )
                return self._exchange(connection, request.method, target, headers, body, deadline)
            except (ConnectionResetError, BrokenPipeError) as exc:  # RemoteDisconnected is a ConnectionResetError
                self._drop(parts.scheme, parts.netloc)
                if attempt or not reused or not idempotent:
                    raise Unreachable(type(exc).__name__) from None
            except ConnectionRefusedError:
                self._drop(parts.scheme, parts.netloc)
                raise Unreachable("connection refused") from None
            except (TimeoutError, AnswerTooLarge):
                self._drop(parts.scheme, parts.netloc)
                raise
            except (OSError, http.client.HTTPException) as exc:  # DNS, TLS, unreachable network, not HTTP...
                self._drop(parts.scheme, parts.netloc)
                raise Unreachable(type(exc).__name__) from None
        raise AssertionError("unreachable")

    def _connection(
        self, scheme: str, netloc: str, connect_seconds: float, *, fresh_within: float | None
    ) -> tuple[Any, bool]:
        key = (scheme.lower(), netloc.lower())
        existing = self._connections.pop(key, None)
        idle = time.monotonic() - self._used.get(key, 0.0)
        usable = existing is not None and existing.sock is not None  # open, and its last answer did not close it
        if usable and (fresh_within is None or idle < fresh_within):
            self._connections[key] = existing
            self._used[key] = time.monotonic()
            return existing, True
        if existing is not None:
            existing.close()
        if key[0] == "https":
            import ssl

            connection: Any = http.client.HTTPSConnection(
                netloc, timeout=connect_seconds, context=ssl.create_default_context()
            )
        elif key[0] == "http":
            connection = http.client.HTTPConnection(netloc, timeout=connect_seconds)
        else:
            raise Unreachable(f"the scheme {scheme!r} is not http or https")
        connection.connect()
        self._connections[key] = connection
        self._used[key] = time.monotonic()
        return connection, False

    @staticmethod
    def _exchange(
        connection: Any, method: str, target: str, headers: dict[str, str], body: bytes | None, deadline: float
    ) -> Answer:
        connection.sock.settimeout(_left(deadline))
        connection.request(method, target, body=body, headers=headers)
        connection.sock.settimeout(_left(deadline))
        response = connection.getresponse()
        length = response.getheader("Content-Length")
        if length is not None and length.isdigit() and int(length) > MAX_ANSWER_BYTES:
            raise AnswerTooLarge
        content = bytearray()
        while chunk := response.read(_READ_BYTES):
            content += chunk
            if len(content) > MAX_ANSWER_BYTES:
                raise AnswerTooLarge
            if connection.sock is not None:
                connection.sock.settimeout(_left(deadline))
        response.close()
        if response.will_close:
            connection.close()
        return Answer(response.status, bytes(content))

    def _drop(self, scheme: str, netloc: str) -> None:
        connection = self._connections.pop((scheme.lower(), netloc.lower()), None)
        if connection is not None:
            connection.close()

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return left


class HttpxTransport:
    """httpx2's synchronous client: the library the standard-library transport stands in for, and the one that
    sends multipart forms."""

    def __init__(self, *, insecure_scheme: bool) -> None:
        import ssl

        import httpx2

        self._httpx = httpx2
        verify: ssl.SSLContext | bool = True
        if insecure_scheme:
            # No TLS to set up: a context without any trusted certificate (loading the system's costs a third of
            # the command's CPU), which would refuse any certificate if an https URL ever came through it.
            verify = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self._client = httpx2.Client(trust_env=False, verify=verify)

    def send(self, request: Request, *, seconds: float, connect_seconds: float) -> Answer:
        httpx2 = self._httpx
        deadline = time.monotonic() + seconds
        timeout = httpx2.Timeout(seconds, connect=min(connect_seconds, seconds))
        try:
            with self._client.stream(
                request.method,
                request.url,
                headers=dict(request.headers),
                params=request.params,
                json=request.json,
                data=request.data,
                files=request.files,
                timeout=timeout,
            ) as response:
                length = response.headers.get("Content-Length")
                if length is not None and length.isdigit() and int(length) > MAX_ANSWER_BYTES:
                    raise AnswerTooLarge
                content = bytearray()
                for chunk in response.iter_raw():
                    content += chunk
                    if len(content) > MAX_ANSWER_BYTES:
                        raise AnswerTooLarge
                    _left(deadline)
                return Answer(response.status_code, bytes(content))
        except httpx2.TimeoutException:
            raise TimeoutError from None
        except httpx2.ConnectError:
            raise Unreachable("connection refused") from None
        except httpx2.TransportError as exc:
            raise Unreachable(type(exc).__name__) from None

    def close(self) -> None:
        self._client.close()


def absolute(base_url: str, path: str) -> str:
    """A route's URL: ``path`` under the server's base URL (which may have a stage prefix), or ``path`` itself when
    it is absolute."""
    if "://" in path:
        return path
    return urljoin(base_url.rstrip("/") + "/", path.lstrip("/"))


def chosen(insecure_scheme: bool) -> Transport:
    """The transport ``MCPBRIDGE_CLI_HTTP`` names (``stdlib``, the default, or ``httpx2``)."""
    name = os.environ.get(TRANSPORT_ENV, "stdlib").strip().lower()
    if name == "httpx2":
        return HttpxTransport(insecure_scheme=insecure_scheme)
    if name != "stdlib":
        from mcpbridge.errors import InvalidInput

        raise InvalidInput(f"{TRANSPORT_ENV} must be stdlib or httpx2, not {name[:40]!r}", code="invalid_transport")
    return StdlibTransport()
