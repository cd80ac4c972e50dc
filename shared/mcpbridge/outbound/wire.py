"""TCP (and TLS) connections on the running asyncio loop's own transports, behind httpcore2's network-backend seam.

httpcore2's ``AnyIOBackend`` reads and writes through anyio's socket streams, which enter cancel scopes and probe
the socket on every call; on the outbound hot path (an agent's tool call, one request and its answer on a pooled
connection) that was a sixth of the client's CPU. :class:`AsyncioBackend` opens connections with
``loop.create_connection`` and :class:`WireStream` reads from the protocol's own buffer: a read that finds data
returns at once, one that waits does so on a future, its timeout a timer on the loop (no task cancellation).
httpcore2's connection pool (``network_backend=``) runs HTTP/1.1 over it. Writes are held until the stream is read
(or :data:`COALESCE_BYTES` are held): httpcore2 writes a request's head, its body and its end one by one, and each
write to a socket was a system call and a segment of its own (a third of the time of a tool call's exchange with a
local server went to them); an HTTP/1.1 client reads the answer after sending, so the request leaves whole.

The same contract as httpcore2's streams: ``read`` returns ``b""`` at the end of the stream and raises
``ReadTimeout`` / ``ReadError``; ``write`` raises ``WriteTimeout`` / ``WriteError``; ``connect_tcp`` raises
``ConnectTimeout`` / ``ConnectError``; ``get_extra_info("is_readable")`` is true for an idle connection the server
closed or sent something on unasked, which the pool then closes instead of reusing. Connections go only where they
are told: :class:`~mcpbridge.outbound.http.PinnedAsyncBackend` hands this backend the addresses its policy approved.
"""

from __future__ import annotations

import asyncio
import select
import ssl
from collections.abc import Iterable
from typing import Any, cast

import httpcore2

__all__ = ["AsyncioBackend", "WireStream"]

_PAUSE_READING_BYTES = 1024 * 1024
"""Stop reading from the socket while this much is buffered and unread (the kernel's buffers push back)."""


COALESCE_BYTES = 64 * 1024
"""Writes are held until a read, or until this much is held (a large body is sent as it comes)."""

CLOSE_WAIT = 0.5
"""How long closing a connection waits for its socket to close (a TLS peer's reply) before aborting it."""


class _Expired(Exception):
    """A wait's timer went off."""


class _Wire(asyncio.Protocol):
    """What the peer sent and has not been read yet, and who waits for more (or for room to write)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.held = bytearray()  # written, not sent yet (see the module docstring)
        self.eof = False
        self.lost: Exception | None = None
        self.closed = False
        self.reading_paused = False
        self.writing_paused = False
        self._waiter: asyncio.Future[None] | None = None

    # -- asyncio's callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports implement it, not as subclasses

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) >= _PAUSE_READING_BYTES and self.transport is not None and not self.reading_paused:
            self.transport.pause_reading()
            self.reading_paused = True
        self._wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        self.closed = True
        self.lost = exc
        self._wake()

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        self._wake()

    # -- waiting

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, timeout: float | None) -> None:
        """Until something happens on the connection (data, its end, room to write); ``_Expired`` after
        ``timeout`` seconds."""
        waiter = self.loop.create_future()
        self._waiter = waiter
        timer = None if timeout is None else self.loop.call_later(max(timeout, 0.0), _expire, waiter)
        try:
            await waiter
        finally:
            if timer is not None:
                timer.cancel()
            if self._waiter is waiter:
                self._waiter = None


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(_Expired())


class WireStream(httpcore2.AsyncNetworkStream):
    """One connection (plain TCP, or TLS once :meth:`start_tls` has wrapped it)."""

    def __init__(self, wire: _Wire) -> None:
        self._wire = wire

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        wire = self._wire
        if wire.held:
            await self._send(timeout)
        while not wire.buffer:
            if wire.eof:
                if wire.lost is not None:
                    raise httpcore2.ReadError(str(wire.lost) or type(wire.lost).__name__)
                return b""
            try:
                await wire.wait(timeout)
            except _Expired:
                raise httpcore2.ReadTimeout("the server sent nothing within the read timeout") from None
        data = bytes(wire.buffer[:max_bytes])
        del wire.buffer[:max_bytes]
        if wire.reading_paused and len(wire.buffer) < _PAUSE_READING_BYTES // 2 and wire.transport is not None:
            wire.reading_paused = False
            wire.transport.resume_reading()
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        wire = self._wire
        if wire.transport is None or wire.transport.is_closing() or wire.lost is not None:
            raise httpcore2.WriteError("the connection is closed")
        wire.held += buffer
        if len(wire.held) >= COALESCE_BYTES:
            await self._send(timeout)

    async def _send(self, timeout: float | None) -> None:
        """Hand what is held to the socket, then wait while the transport's buffer is full."""
        wire = self._wire
        transport = wire.transport
        if transport is None or transport.is_closing() or wire.lost is not None:
            raise httpcore2.WriteError("the connection is closed")
        held, wire.held = wire.held, bytearray()
        transport.write(held)
        while wire.writing_paused:
            if wire.lost is not None or transport.is_closing():
                raise httpcore2.WriteError("the connection was closed while writing")
            try:
                await wire.wait(timeout)
            except _Expired:
                raise httpcore2.WriteTimeout("the server took nothing within the write timeout") from None

    async def aclose(self) -> None:
        """Close, and wait (at most :data:`CLOSE_WAIT` seconds) until the socket is: a TLS close waits for the
        peer's reply, and a loop that ends first would leave the socket open. A peer that stopped reading, or one
        that does not reply in time, gets the connection aborted."""
        wire = self._wire
        transport = wire.transport
        if transport is None:
            return
        if transport.get_write_buffer_size():  # a peer that stopped reading would hold a graceful close open
            transport.abort()
        else:
            transport.close()
        ends = wire.loop.time() + CLOSE_WAIT
        try:
            while not wire.closed and (left := ends - wire.loop.time()) > 0:
                await wire.wait(left)
        except _Expired:
            pass
        finally:
            if not wire.closed:
                transport.abort()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        wire = self._wire
        assert wire.transport is not None
        if wire.held:  # a proxy's CONNECT is answered before this: nothing is held here but to be sure
            await self._send(timeout)
        try:
            async with asyncio.timeout(timeout):
                transport = await wire.loop.start_tls(
                    wire.transport, wire, ssl_context, server_hostname=server_hostname, ssl_handshake_timeout=timeout
                )
        except TimeoutError:
            wire.transport.close()
            raise httpcore2.ConnectTimeout("the TLS handshake did not end within the connect timeout") from None
        except (OSError, ssl.SSLError) as exc:
            wire.transport.close()
            raise httpcore2.ConnectError(str(exc)) from exc
        if transport is None:  # the connection ended during the handshake
            raise httpcore2.ConnectError("the connection closed during the TLS handshake")
        wire.transport = transport
        return self

    def get_extra_info(self, info: str) -> Any:
        wire = self._wire
        if info == "is_readable":  # an idle connection the server closed, or that it sent something unasked
            return bool(wire.buffer) or wire.eof or _socket_readable(wire.transport)
        if wire.transport is None:
            return None
        name = {"client_addr": "sockname", "server_addr": "peername"}.get(info, info)
        if name in ("ssl_object", "socket", "sockname", "peername"):
            return wire.transport.get_extra_info(name)
        return None


def _socket_readable(transport: asyncio.Transport | None) -> bool:
    """Whether the kernel holds bytes (or the end) of the connection that the loop has not handed on yet: a server
    that closed an idle connection a moment ago, before the loop's next turn, must not be sent a request."""
    sock = None if transport is None else transport.get_extra_info("socket")
    if sock is None:
        return False
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):  # closed under us
        return True
    return bool(readable)


class AsyncioBackend(httpcore2.AsyncNetworkBackend):
    """TCP connections on the running loop (asyncio's or uvloop's), as :class:`WireStream`; no unix sockets (the
    base class refuses them)."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                transport, wire = await loop.create_connection(
                    lambda: _Wire(loop), host, port, local_addr=(local_address, 0) if local_address else None
                )
        except TimeoutError:
            raise httpcore2.ConnectTimeout(f"no connection to {host}:{port} within the connect timeout") from None
        except OSError as exc:
            raise httpcore2.ConnectError(str(exc)) from exc
        sock = transport.get_extra_info("socket")
        for option in socket_options or ():
            sock.setsockopt(*option)
        return WireStream(wire)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
