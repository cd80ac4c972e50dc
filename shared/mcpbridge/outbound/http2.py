"""The SSRF guard of :mod:`mcpbridge.outbound.http` for ``httpx2``, the HTTP library of the ``mcp`` SDK.

``httpx2``/``httpcore2`` keep httpx/httpcore's network-backend seam
(``httpcore2.AsyncConnectionPool(network_backend=...)``), so the pin is the same: :class:`PinnedAsyncBackend2`
resolves every new connection's host through the :class:`~mcpbridge.outbound.policy.EgressPolicy` and connects only
to the addresses it approved (no second lookup, no DNS-rebinding window); :class:`GuardedAsyncTransport2` also runs
:meth:`EgressPolicy.check_url` on every request.
:func:`guarded_async_client2` never follows redirects and ignores proxy environment variables (a proxy would resolve
the name itself and bypass the pin). The SDK follows same-origin redirects itself; each hop goes through this
transport again, so it is re-checked.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator, Mapping
from typing import Any

import anyio
import httpcore2
import httpx2

from mcpbridge.outbound.h1 import Http1Pool
from mcpbridge.outbound.pinning import connect_first, resolve_async
from mcpbridge.outbound.policy import EgressPolicy
from mcpbridge.outbound.wire import AsyncioBackend

__all__ = ["GuardedAsyncTransport2", "PinnedAsyncBackend2", "guarded_async_client2"]


class PinnedAsyncBackend2(httpcore2.AsyncNetworkBackend):
    """Opens TCP connections only to addresses ``policy`` approved for the host, resolving once per connection.

    Policy refusals raise :class:`~mcpbridge.errors.InvalidInput` out of ``connect_tcp``; httpcore2 and httpx2 pass
    them through unchanged.
    """

    def __init__(self, policy: EgressPolicy, inner: httpcore2.AsyncNetworkBackend | None = None) -> None:
        self._policy = policy
        self._inner = inner or AsyncioBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        addresses = await resolve_async(self._policy, host, port, timeout, httpcore2.ConnectTimeout)
        return await connect_first(
            addresses,
            lambda address: self._inner.connect_tcp(address, port, timeout, local_address, socket_options),
            (httpcore2.ConnectError, httpcore2.ConnectTimeout),
        )

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        raise httpcore2.UnsupportedProtocol("unix sockets cannot be reached through the outbound guard")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


# Most specific first: httpcore2.ConnectTimeout must become httpx2.ConnectTimeout, not httpx2.TimeoutException.
_CORE_TO_HTTPX2: tuple[tuple[type[Exception], type[httpx2.TransportError]], ...] = (
    (httpcore2.ConnectTimeout, httpx2.ConnectTimeout),
    (httpcore2.ReadTimeout, httpx2.ReadTimeout),
    (httpcore2.WriteTimeout, httpx2.WriteTimeout),
    (httpcore2.PoolTimeout, httpx2.PoolTimeout),
    (httpcore2.TimeoutException, httpx2.TimeoutException),
    (httpcore2.ConnectError, httpx2.ConnectError),
    (httpcore2.ReadError, httpx2.ReadError),
    (httpcore2.WriteError, httpx2.WriteError),
    (httpcore2.NetworkError, httpx2.NetworkError),
    (httpcore2.ProxyError, httpx2.ProxyError),
    (httpcore2.UnsupportedProtocol, httpx2.UnsupportedProtocol),
    (httpcore2.LocalProtocolError, httpx2.LocalProtocolError),
    (httpcore2.RemoteProtocolError, httpx2.RemoteProtocolError),
    (httpcore2.ProtocolError, httpx2.ProtocolError),
)


@contextlib.contextmanager
def _httpx2_errors() -> Iterator[None]:
    """Re-raise httpcore2 exceptions as their httpx2 counterparts; everything else (policy refusals) unchanged."""
    try:
        yield
    except Exception as exc:
        for source, target in _CORE_TO_HTTPX2:
            if isinstance(exc, source):
                raise target(str(exc)) from exc
        raise


DRAIN_BYTES = 64 * 1024
DRAIN_SECONDS = 0.5


class _AsyncResponseStream(httpx2.AsyncByteStream):
    """A response body; the rest of a POST's answer is read before it is closed, so its connection is reused.

    The SDK stops reading a POST's event stream at the answer it waits for and closes the response, although the
    server ends the stream right after: a connection whose body is not read to its end cannot be reused, so every
    tool call opened a new TCP connection (and TLS session). Closing a POST's answer before its end first reads
    what is left, at most ``DRAIN_BYTES`` within ``DRAIN_SECONDS`` (after the SDK has handed the answer on, so no
    caller waits for it); a body that goes on (a stream the server keeps open) is closed then, as before. Other
    answers (a GET's stream) are closed at once."""

    def __init__(self, stream: AsyncIterable[bytes], *, drain: bool = False) -> None:
        self._stream = stream
        # One iterator for the reads and the drain, so the drain goes on from where the reader stopped.
        self._chunks = stream.__aiter__()
        self._drain = drain
        self._ended = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _httpx2_errors():
            while (chunk := await self._next()) is not None:
                yield chunk

    async def _next(self) -> bytes | None:
        try:
            return await self._chunks.__anext__()
        except StopAsyncIteration:
            self._ended = True
            return None

    async def aclose(self) -> None:
        if self._drain and not self._ended:
            read = 0
            with anyio.move_on_after(DRAIN_SECONDS), contextlib.suppress(Exception):
                while read <= DRAIN_BYTES and (chunk := await self._next()) is not None:
                    read += len(chunk)
        aclose = getattr(self._stream, "aclose", None)
        if aclose is not None:
            await aclose()


KEEPALIVE_SECONDS = 4.0
"""How long an idle upstream connection is kept: under the 5 s after which Node's and uvicorn's servers close theirs
by default, so a request never goes out on a connection the server is closing at that moment (a tool call sent
then would fail with its outcome unknown)."""


class GuardedAsyncTransport2(httpx2.AsyncBaseTransport):
    """An httpx2 transport over a pool of HTTP/1.1 connections (:class:`~mcpbridge.outbound.h1.Http1Pool`) on the
    running loop's own transports, dialled by the pinned backend; checks every request's URL first.

    No proxy support on purpose. ``ssl_context`` replaces the default trust store, e.g. for a private CA.
    """

    def __init__(self, policy: EgressPolicy, *, ssl_context: ssl.SSLContext | None = None) -> None:
        self._policy = policy
        self._pool = Http1Pool(
            PinnedAsyncBackend2(policy),
            # trust_env=False: SSL_CERT_FILE and friends do not change what this process trusts.
            ssl_context=ssl_context if ssl_context is not None else httpx2.create_ssl_context(trust_env=False),
            max_connections=100,
            max_keepalive_connections=20,
            keepalive_expiry=KEEPALIVE_SECONDS,
        )

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        """Check the URL, then send through the pinned pool (a new connection resolves and checks the host)."""
        self._policy.check_url(str(request.url))
        with _httpx2_errors():
            exchange = await self._pool.send(request)
        drain = request.method == "POST"
        return httpx2.Response(
            status_code=exchange.status,
            headers=exchange.headers,
            stream=_AsyncResponseStream(exchange.stream, drain=drain),
            extensions={"http_version": exchange.http_version, "reason_phrase": exchange.reason},
        )

    async def aclose(self) -> None:
        """Close every pooled connection."""
        await self._pool.aclose()


def guarded_async_client2(
    policy: EgressPolicy,
    *,
    timeout: httpx2.Timeout | float,
    headers: Mapping[str, str] | None = None,
    auth: httpx2.Auth | None = None,
    ssl_context: ssl.SSLContext | None = None,
    event_hooks: Mapping[str, list[Callable[..., Any]]] | None = None,
) -> httpx2.AsyncClient:
    """An httpx2 client for URLs someone else chose: guarded transport, no redirects, no proxies from the
    environment."""
    return httpx2.AsyncClient(
        transport=GuardedAsyncTransport2(policy, ssl_context=ssl_context),
        timeout=timeout,
        headers=dict(headers or {}),
        auth=auth,
        follow_redirects=False,
        trust_env=False,
        event_hooks=dict(event_hooks or {}),
    )
