"""HTTP/1.1 for ``httpx2`` over pooled keep-alive connections: what httpcore2's connection pool does for the outbound
guard, in a third of its CPU.

An agent's tool call is one POST and its answer on a connection kept open to the upstream; under httpcore2's pool
(h11's event machinery, its request and response models, a socket probe of every idle connection) that exchange
cost about 0.75 ms of CPU on top of what the httpx2 client itself costs, more than all of mcpbridge's checks and
records of the call. :class:`Http1Pool` writes a request's head and body in one write, reads the answer's head from
the connection's buffer with one search, and hands its body on as it arrives.

What it keeps of h11 and httpcore2:

* the same checks of what goes out (a method and header names that are tokens, header values without line breaks
  or NUL, so a header can never smuggle another) and of what comes in (the status line, header lines, obsolete line
  folding joined, ``Content-Length`` and ``Transfer-Encoding: chunked`` framing as RFC 9112 says, at most
  ``MAX_HEAD_BYTES`` of head, chunk sizes of at most 20 hex digits), their failures raised as httpcore2's
  ``LocalProtocolError`` / ``RemoteProtocolError``;
* interim (1xx) answers passed over; no body for HEAD, 204 and 304; a body without framing read to the connection's
  end;
* the pool's limits (connections, kept-alive connections, idle expiry) and its timeouts, from the request's
  ``timeout`` extension (connect, read and write per operation, pool while waiting for a connection); a connection
  is reused only once its answer was read to the end, when neither side asked to close it and it is idle without
  unread bytes (a server that closed it is noticed before it is used);
* a request that fails (a timeout, a cancellation, a broken answer) closes its connection; nothing is retried here.

HTTP/1.1 only: the guard never asks for HTTP/2. Errors are httpcore2's exceptions, which
:class:`~mcpbridge.outbound.http2.GuardedAsyncTransport2` turns into httpx2's.
"""

# Over 400 lines: the request's writing, the answer's framing rules and the pool that reuses connections only when
# those rules say the answer ended are one piece, each step checked against the others.

from __future__ import annotations

import asyncio
import re
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Final

import httpcore2
import httpx2

__all__ = ["Exchange", "Http1Pool"]

MAX_HEAD_BYTES: Final = 100 * 1024
"""The most an answer's status line and headers may take (httpcore2's limit for h11)."""
READ_BYTES: Final = 64 * 1024
_FIRST_WRITE_BYTES = 64 * 1024  # a body up to this size leaves in the same write as the head

_TOKEN = re.compile(rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+")
_FIELD_VALUE = re.compile(rb"(?:[^\x00\s]+(?:[ \t]+[^\x00\s]+)*)?")  # h11's field-value, OWS stripped
_TARGET = re.compile(rb"[\x21-\x7e]+")
_STATUS_LINE = re.compile(rb"HTTP/([0-9]\.[0-9]) ([0-9]{3})(?: ((?:[ \t]|[^\x00\s])*))?")
_HEADER_LINE = re.compile(rb"([^:\s]+):[ \t]*(.*?)[ \t]*")
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,20})(?:;.*)?[ \t]*")
_LINE_END = re.compile(rb"\r?\n")
_DIGITS = re.compile(rb"[0-9]+")

_LENGTH, _CHUNKED, _TO_CLOSE = "length", "chunked", "close"


@dataclass(eq=False)  # kept in a set by identity
class _Connection:
    origin: tuple[bytes, str, int]
    stream: httpcore2.AsyncNetworkStream
    buffer: bytearray = field(default_factory=bytearray)
    idle_since: float = 0.0

    async def more(self, timeout: float | None) -> bool:
        """Read what the server sent next into the buffer; False at the end of the connection."""
        data = await self.stream.read(READ_BYTES, timeout)
        if not data:
            return False
        self.buffer += data
        return True

    def take(self, count: int) -> bytes:
        data = bytes(self.buffer[:count])
        del self.buffer[:count]
        return data

    async def line(self, timeout: float | None, limit: int, what: str) -> bytes:
        """The next line (without its line break)."""
        while True:
            end = self.buffer.find(b"\n")
            if end >= 0:
                line = self.take(end + 1)
                return line[:-2] if line.endswith(b"\r\n") else line[:-1]
            if len(self.buffer) > limit:
                raise httpcore2.RemoteProtocolError(f"{what} is too long")
            if not await self.more(timeout):
                raise httpcore2.RemoteProtocolError(f"the server closed the connection in the middle of {what}")


@dataclass(frozen=True)
class Exchange:
    """An answer's status, reason, headers (as sent) and body (read as it arrives; close it when done)."""

    status: int
    reason: bytes
    headers: list[tuple[bytes, bytes]]
    stream: _Body
    http_version: bytes


class Http1Pool:
    """Keep-alive HTTP/1.1 connections by origin, opened through ``backend`` (see the module docstring)."""

    def __init__(
        self,
        backend: httpcore2.AsyncNetworkBackend,
        *,
        ssl_context: ssl.SSLContext,
        max_connections: int = 100,
        max_keepalive_connections: int = 20,
        keepalive_expiry: float = 5.0,
    ) -> None:
        self._backend = backend
        self._ssl_context = ssl_context
        self._max_connections = max_connections
        self._max_keepalive = max_keepalive_connections
        self._keepalive_expiry = keepalive_expiry
        self._idle: dict[tuple[bytes, str, int], list[_Connection]] = {}
        self._idle_count = 0
        self._open: set[_Connection] = set()
        self._dialling = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._closed = False

    # ------------------------------------------------------------------------------------------ one exchange

    async def send(self, request: httpx2.Request) -> Exchange:
        """Send ``request`` and read its answer's head; raises httpcore2's exceptions."""
        timeouts: dict[str, float | None] = request.extensions.get("timeout", {})
        head, chunked, closes = _request_head(request)
        url = request.url
        scheme = url.raw_scheme
        if scheme not in (b"http", b"https"):
            raise httpcore2.UnsupportedProtocol(f"the URL scheme {scheme.decode(errors='replace')!r} is not supported")
        host = url.raw_host.decode("ascii")
        origin = (scheme, host, url.port or (443 if scheme == b"https" else 80))
        connection = await self._connection(origin, timeouts.get("pool"), timeouts.get("connect"))
        try:
            written = await _write_request(connection, request, head, chunked, timeouts.get("write"))
            try:
                exchange = await self._answer(connection, request.method, closes, timeouts.get("read"))
            except (httpcore2.ReadError, httpcore2.RemoteProtocolError):
                if written is not None:  # the server stopped reading and went away: the write's failure says why
                    raise written from None
                raise
        except BaseException:
            await self._discard(connection)
            raise
        return exchange

    async def _answer(self, connection: _Connection, method: str, closes: bool, timeout: float | None) -> Exchange:
        while True:
            head = await _response_head(connection, timeout)
            if head.status >= 200:
                break
            if head.status == 101:
                raise httpcore2.RemoteProtocolError("the server switched protocols, which was not asked for")
        framing, length = _framing(method, head)
        keep = (
            not closes
            and head.version == b"1.1"
            and framing != _TO_CLOSE
            and b"close" not in _values(head.headers, b"connection")
        )
        body = _Body(self, connection, framing, length, timeout, keep)
        return Exchange(head.status, head.reason, head.headers, body, b"HTTP/" + head.version)

    # ------------------------------------------------------------------------------------------ the pool

    async def _connection(
        self, origin: tuple[bytes, str, int], pool_timeout: float | None, connect_timeout: float | None
    ) -> _Connection:
        deadline = None if pool_timeout is None else time.monotonic() + pool_timeout
        while True:
            if self._closed:
                raise httpcore2.ConnectError("the connection pool is closed")
            reused = await self._idle_connection(origin)
            if reused is not None:
                return reused
            if len(self._open) + self._dialling < self._max_connections:
                return await self._dial(origin, connect_timeout)
            if self._idle_count:  # room is taken by connections idle for other origins: close the oldest
                await self._close_oldest_idle()
                continue
            await self._wait_for_room(deadline)

    async def _idle_connection(self, origin: tuple[bytes, str, int]) -> _Connection | None:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            connection = idle.pop()
            self._idle_count -= 1
            fresh = now - connection.idle_since < self._keepalive_expiry
            if fresh and not connection.buffer and not connection.stream.get_extra_info("is_readable"):
                return connection
            await self._discard(connection)
        return None

    async def _dial(self, origin: tuple[bytes, str, int], timeout: float | None) -> _Connection:
        scheme, host, port = origin
        self._dialling += 1
        try:
            stream = await self._backend.connect_tcp(host, port, timeout=timeout)
            if scheme == b"https":
                stream = await stream.start_tls(self._ssl_context, server_hostname=host, timeout=timeout)
        finally:
            self._dialling -= 1
            self._wake_one()
        connection = _Connection(origin, stream)
        self._open.add(connection)
        return connection

    async def _close_oldest_idle(self) -> None:
        oldest = min((c for group in self._idle.values() for c in group), key=lambda c: c.idle_since)
        self._idle[oldest.origin].remove(oldest)
        self._idle_count -= 1
        await self._discard(oldest)

    async def _wait_for_room(self, deadline: float | None) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            timeout = None if deadline is None else deadline - time.monotonic()
            if timeout is not None and timeout <= 0:
                raise TimeoutError
            async with asyncio.timeout(timeout):
                await waiter
        except TimeoutError:
            raise httpcore2.PoolTimeout("no connection was free within the pool timeout") from None
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def release(self, connection: _Connection, reusable: bool) -> None:
        """An answer's body is done with: keep its connection for the next request, or close it."""
        if reusable and not self._closed and not connection.buffer and self._idle_count < self._max_keepalive:
            connection.idle_since = time.monotonic()
            self._idle.setdefault(connection.origin, []).append(connection)
            self._idle_count += 1
            self._wake_one()
            return
        await self._discard(connection)

    async def _discard(self, connection: _Connection) -> None:
        self._open.discard(connection)
        self._wake_one()
        await connection.stream.aclose()

    async def aclose(self) -> None:
        """Close every connection, idle or in use."""
        self._closed = True
        connections = list(self._open)
        self._open.clear()
        self._idle.clear()
        self._idle_count = 0
        for connection in connections:
            await connection.stream.aclose()
        while self._waiters:
            self._wake_one()


# ---------------------------------------------------------------------------------------------------- requests


def _request_head(request: httpx2.Request) -> tuple[bytes, bool, bool]:
    """The request line and headers; whether the body goes chunked; whether the request asks to close."""
    method = request.method.encode("ascii", errors="replace")
    if not _TOKEN.fullmatch(method):
        raise httpcore2.LocalProtocolError("the request's method is not a token")
    target = request.url.raw_path
    if not _TARGET.fullmatch(target):
        raise httpcore2.LocalProtocolError("the request's target has characters a request line cannot carry")
    parts = [method, b" ", target, b" HTTP/1.1\r\n"]
    chunked = closes = False
    for name, value in request.headers.raw:
        if not _TOKEN.fullmatch(name):
            raise httpcore2.LocalProtocolError("a header name is not a token")
        value = value.strip(b" \t")
        if not _FIELD_VALUE.fullmatch(value):
            raise httpcore2.LocalProtocolError("a header value has a line break, a NUL or another control character")
        lower = name.lower()
        if lower == b"transfer-encoding":
            if value.lower() != b"chunked":
                raise httpcore2.LocalProtocolError("only Transfer-Encoding: chunked is supported")
            chunked = True
        elif lower == b"connection" and b"close" in value.lower():
            closes = True
        parts += (name, b": ", value, b"\r\n")
    parts.append(b"\r\n")
    return b"".join(parts), chunked, closes


async def _write_request(
    connection: _Connection, request: httpx2.Request, head: bytes, chunked: bool, timeout: float | None
) -> httpcore2.WriteError | None:
    """Write the request; a write that fails is returned (the server may have answered before it stopped reading,
    as httpcore2 lets it), not raised."""
    stream = request.stream
    assert isinstance(stream, httpx2.AsyncByteStream)
    pending = [head]
    size = len(head)
    try:
        async for chunk in stream:
            if not chunk:
                continue
            pending.append(b"%x\r\n%b\r\n" % (len(chunk), chunk) if chunked else chunk)
            size += len(chunk)
            if size >= _FIRST_WRITE_BYTES:
                await connection.stream.write(b"".join(pending), timeout)
                pending, size = [], 0
        if chunked:
            pending.append(b"0\r\n\r\n")
        await connection.stream.write(b"".join(pending), timeout)
    except httpcore2.WriteError as exc:
        return exc
    return None


# ---------------------------------------------------------------------------------------------------- answers


@dataclass(frozen=True)
class _Head:
    """An answer's status line and headers, with the framing its headers declare (checked as h11 checks them)."""

    version: bytes
    status: int
    reason: bytes
    headers: list[tuple[bytes, bytes]]
    length: int | None  # Content-Length
    chunked: bool  # Transfer-Encoding: chunked


async def _response_head(connection: _Connection, timeout: float | None) -> _Head:
    buffer = connection.buffer
    start = 0
    while True:
        end = _head_end(buffer, start)
        if end is not None:
            break
        if len(buffer) > MAX_HEAD_BYTES:  # as h11 counts: what is buffered while the head is incomplete
            raise httpcore2.RemoteProtocolError("the answer's head is larger than 100 KiB")
        start = max(0, len(buffer) - 3)
        if not await connection.more(timeout):
            if buffer:
                raise httpcore2.RemoteProtocolError("the server closed the connection in the middle of its answer")
            raise httpcore2.RemoteProtocolError("Server disconnected without sending a response.")
    lines = _LINE_END.split(connection.take(end).rstrip(b"\r\n"))
    if not lines or not lines[0]:
        raise httpcore2.RemoteProtocolError("no status line")
    status = _STATUS_LINE.fullmatch(lines[0])
    if status is None:
        raise httpcore2.RemoteProtocolError("illegal status line")
    headers, length, chunked = _header_fields(lines[1:])
    return _Head(status[1], int(status[2]), status[3] or b"", headers, length, chunked)


def _head_end(buffer: bytearray, start: int) -> int | None:
    """Where the head ends (after its empty line), or None while it is incomplete."""
    crlf = buffer.find(b"\r\n\r\n", start)
    if crlf >= 0:
        lf = buffer.find(b"\n\n", start, crlf)
        return lf + 2 if lf >= 0 else crlf + 4
    lf = buffer.find(b"\n\n", start)
    if lf >= 0:
        return lf + 2
    mixed = buffer.find(b"\n\r\n", start)
    return mixed + 3 if mixed >= 0 else None


def _header_fields(lines: list[bytes]) -> tuple[list[tuple[bytes, bytes]], int | None, bool]:
    """The header fields, the framing ones as h11 leaves them: one ``Content-Length`` (repeats of the same length
    dropped, differing ones refused), one ``Transfer-Encoding``, which must be ``chunked`` (lower-cased); and the
    length and whether the body is chunked."""
    fields = _folded_fields(lines)
    normal: list[tuple[bytes, bytes]] = []
    length: bytes | None = None
    encoded = False
    for name, value in fields:
        lower = name.lower()
        if lower == b"content-length":
            lengths = {part.strip() for part in value.split(b",")}
            if len(lengths) != 1:
                raise httpcore2.RemoteProtocolError("conflicting Content-Length headers")
            (value,) = lengths
            if not _DIGITS.fullmatch(value) or len(value) > 19:
                raise httpcore2.RemoteProtocolError("bad Content-Length")
            if length is not None:
                if length != value:
                    raise httpcore2.RemoteProtocolError("conflicting Content-Length headers")
                continue
            length = value
        elif lower == b"transfer-encoding":
            if encoded:
                raise httpcore2.RemoteProtocolError("multiple Transfer-Encoding headers")
            value = value.lower()
            if value != b"chunked":
                raise httpcore2.RemoteProtocolError("only Transfer-Encoding: chunked is supported")
            encoded = True
        normal.append((name, value))
    return normal, None if length is None else int(length), encoded


def _folded_fields(lines: list[bytes]) -> list[tuple[bytes, bytes]]:
    fields: list[tuple[bytes, bytes]] = []
    for line in lines:
        if line[:1] in (b" ", b"\t"):  # obsolete line folding: part of the previous field's value
            if not fields:
                raise httpcore2.RemoteProtocolError("a continuation line at the start of the headers")
            name, value = fields[-1]
            fields[-1] = (name, value + b" " + line.strip(b" \t"))
            continue
        match = _HEADER_LINE.fullmatch(line)
        if match is None or not _TOKEN.fullmatch(match[1]) or not _FIELD_VALUE.fullmatch(match[2]):
            raise httpcore2.RemoteProtocolError("illegal header line")
        fields.append((match[1], match[2]))
    return fields


def _values(headers: list[tuple[bytes, bytes]], name: bytes) -> list[bytes]:
    return [
        part.strip().lower()
        for key, value in headers
        if key.lower() == name
        for part in value.split(b",")
        if part.strip()
    ]


def _framing(method: str, head: _Head) -> tuple[str, int]:
    """How the body ends (RFC 9112 6.3): no body, its length, its last chunk (chunked beats a length), or the
    connection's end."""
    if head.status in (204, 304) or method == "HEAD":
        return _LENGTH, 0
    if head.chunked:
        return _CHUNKED, 0
    return (_TO_CLOSE, 0) if head.length is None else (_LENGTH, head.length)


class _Body(httpx2.AsyncByteStream):
    """An answer's body, handed on as it arrives; closing it gives the connection back (or closes it)."""

    def __init__(
        self,
        pool: Http1Pool,
        connection: _Connection,
        framing: str,
        length: int,
        timeout: float | None,
        keep: bool,
    ) -> None:
        self._pool = pool
        self._connection = connection
        self._framing = framing
        self._remaining = length
        self._timeout = timeout
        self._keep = keep
        self._complete = framing == _LENGTH and length == 0
        self._released = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._complete or self._released:
            return
        chunks = self._chunked() if self._framing == _CHUNKED else self._plain()
        async for chunk in chunks:
            yield chunk
        self._complete = True

    async def _plain(self) -> AsyncIterator[bytes]:
        connection, to_close = self._connection, self._framing == _TO_CLOSE
        while to_close or self._remaining > 0:
            if not connection.buffer and not await connection.more(self._timeout):
                if to_close:
                    return
                raise httpcore2.RemoteProtocolError(
                    f"peer closed connection without sending complete message body: {self._remaining} bytes short"
                )
            data = connection.take(len(connection.buffer) if to_close else self._remaining)
            self._remaining -= len(data)
            yield data

    async def _chunked(self) -> AsyncIterator[bytes]:
        connection, timeout = self._connection, self._timeout
        while True:
            size_line = await connection.line(timeout, 1024, "a chunk's size")
            match = _CHUNK_SIZE.fullmatch(size_line)
            if match is None:
                raise httpcore2.RemoteProtocolError("illegal chunk size")
            left = int(match[1], 16)
            if left == 0:
                break
            while left:
                if not connection.buffer and not await connection.more(timeout):
                    raise httpcore2.RemoteProtocolError("peer closed connection in the middle of a chunk")
                data = connection.take(left)
                left -= len(data)
                yield data
            if await connection.line(timeout, 2, "a chunk's end"):
                raise httpcore2.RemoteProtocolError("a chunk is longer than its size")
        while await connection.line(timeout, MAX_HEAD_BYTES, "the trailers"):  # trailers are passed over
            pass

    async def aclose(self) -> None:
        if self._released:
            return
        self._released = True
        await self._pool.release(self._connection, self._keep and self._complete)
