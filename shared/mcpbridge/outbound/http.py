"""HTTP that can only reach what an :class:`~mcpbridge.outbound.policy.EgressPolicy` allows.

Checking a hostname and then letting the HTTP library resolve it again is a DNS-rebinding hole (the second answer
may be 127.0.0.1). Here the check *is* the resolution: a custom httpcore network backend resolves the host through the
policy when it opens a connection and connects to one of exactly those addresses. The connection pool still keys on
the hostname, so the Host header, TLS SNI and certificate verification all use the hostname, not the IP.

Layers, bottom up:

* ``PinnedBackend`` / ``PinnedAsyncBackend`` — httpcore network backends: resolve via the policy, connect to the
  approved address, refuse unix sockets.
* ``GuardedTransport`` / ``GuardedAsyncTransport`` — httpx transports mirroring httpx's own ``HTTPTransport`` over an
  httpcore pool with the pinned backend; they also run :meth:`EgressPolicy.check_url` on every request.
* ``guarded_client`` / ``guarded_async_client`` — httpx clients that never follow redirects and ignore proxy
  environment variables (a proxy would resolve the name itself and bypass the pin).
* ``fetch`` / ``fetch_async`` — GET with manual redirects (each hop re-checked), a size cap and one overall deadline.
"""

# Over 400 lines: the guarded httpx client, redirects and bounded fetches: one path for every outbound request.

from __future__ import annotations

import contextlib
import contextvars
import ssl
import threading
import time
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread
import httpcore
import httpx

from mcpbridge.errors import InvalidInput, PayloadTooLarge, UpstreamError
from mcpbridge.outbound.pinning import connect_first, is_ip_literal, resolve_async
from mcpbridge.outbound.policy import EgressPolicy, IPAddress, Target

MAX_REDIRECTS = 5

# The end of the current fetch() (time.monotonic()), read by the sync network streams so that one deadline bounds
# the whole exchange: httpx's own timeouts restart with every read, so a server trickling a byte a second never
# trips them. Sync httpcore does all I/O in the calling thread, so a context variable reaches it.
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("mcpbridge_outbound_deadline", default=None)


def _bounded(timeout: float | None, error: type[httpcore.TimeoutException]) -> float | None:
    """``timeout`` shortened to what is left of the current deadline; raises ``error`` once it has passed."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return timeout
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise error("the overall deadline has passed")
    return remaining if timeout is None else min(timeout, remaining)


# --------------------------------------------------------------------------------------------------------------------
# Network backends: the pin


class _DeadlineStream(httpcore.NetworkStream):
    """A sync network stream whose every operation also respects the current fetch deadline."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _bounded(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _bounded(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        return _DeadlineStream(
            self._inner.start_tls(ssl_context, server_hostname, _bounded(timeout, httpcore.ConnectTimeout))
        )

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


def _resolve_within(policy: EgressPolicy, host: str, port: int, timeout: float | None) -> list[IPAddress]:
    """``policy.resolve_host`` bounded by ``timeout``: getaddrinfo has no timeout of its own.

    The lookup runs in a daemon thread that is abandoned (not killed) on timeout; it ends when the resolver gives up.
    """
    if timeout is None or is_ip_literal(host):
        return policy.resolve_host(host, port)
    outcome: list[list[IPAddress] | BaseException] = []

    def run() -> None:
        try:
            outcome.append(policy.resolve_host(host, port))
        except BaseException as exc:  # handed to the caller's thread, not lost
            outcome.append(exc)

    thread = threading.Thread(target=run, name="mcpbridge-outbound-resolve", daemon=True)
    thread.start()
    thread.join(timeout)
    if not outcome:
        raise httpcore.ConnectTimeout(f"resolving the host took longer than {timeout:.1f} s")
    result = outcome[0]
    if isinstance(result, BaseException):
        raise result
    return result


class PinnedBackend(httpcore.NetworkBackend):
    """Opens TCP connections only to addresses ``policy`` approved for the host, resolving once per connection.

    Policy refusals raise :class:`~mcpbridge.errors.InvalidInput` out of ``connect_tcp``; httpcore and httpx pass
    such exceptions through unchanged.
    """

    def __init__(self, policy: EgressPolicy, inner: httpcore.NetworkBackend | None = None) -> None:
        self._policy = policy
        self._inner = inner or httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        addresses = _resolve_within(self._policy, host, port, _bounded(timeout, httpcore.ConnectTimeout))
        failure: Exception | None = None
        # Every address was approved, so falling back to the next one (like a browser) is safe.
        for address in addresses:
            try:
                stream = self._inner.connect_tcp(
                    str(address), port, _bounded(timeout, httpcore.ConnectTimeout), local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
                continue
            return _DeadlineStream(stream)
        assert failure is not None  # resolve_host never returns an empty list
        raise failure

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        raise httpcore.UnsupportedProtocol("unix sockets cannot be reached through the outbound guard")

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class PinnedAsyncBackend(httpcore.AsyncNetworkBackend):
    """The async twin of :class:`PinnedBackend` (name resolution runs in a worker thread)."""

    def __init__(self, policy: EgressPolicy, inner: httpcore.AsyncNetworkBackend | None = None) -> None:
        self._policy = policy
        self._inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await resolve_async(self._policy, host, port, timeout, httpcore.ConnectTimeout)
        return await connect_first(
            addresses,
            lambda address: self._inner.connect_tcp(address, port, timeout, local_address, socket_options),
            (httpcore.ConnectError, httpcore.ConnectTimeout),
        )

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.UnsupportedProtocol("unix sockets cannot be reached through the outbound guard")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


# --------------------------------------------------------------------------------------------------------------------
# httpx transports (mirroring httpx._transports.default.HTTPTransport)

# Most specific first: httpcore.ConnectTimeout must become httpx.ConnectTimeout, not httpx.TimeoutException.
_HTTPCORE_TO_HTTPX: tuple[tuple[type[Exception], type[httpx.TransportError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.ProxyError, httpx.ProxyError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


@contextlib.contextmanager
def _httpx_errors() -> Iterator[None]:
    """Re-raise httpcore exceptions as their httpx counterparts; everything else (policy refusals) unchanged."""
    try:
        yield
    except Exception as exc:
        for source, target in _HTTPCORE_TO_HTTPX:
            if isinstance(exc, source):
                raise target(str(exc)) from exc
        raise


def _core_request(request: httpx.Request, content: Iterable[bytes] | AsyncIterable[bytes]) -> httpcore.Request:
    return httpcore.Request(
        method=request.method,
        url=httpcore.URL(
            scheme=request.url.raw_scheme,
            host=request.url.raw_host,
            port=request.url.port,
            target=request.url.raw_path,
        ),
        headers=request.headers.raw,
        content=content,
        extensions=request.extensions,
    )


def _ssl_context(ssl_context: ssl.SSLContext | None) -> ssl.SSLContext:
    # trust_env=False: SSL_CERT_FILE and friends do not change what this process trusts behind the caller's back.
    return ssl_context if ssl_context is not None else httpx.create_ssl_context(trust_env=False)


class _ResponseStream(httpx.SyncByteStream):
    def __init__(self, stream: Iterable[bytes]) -> None:
        self._stream = stream

    def __iter__(self) -> Iterator[bytes]:
        with _httpx_errors():
            yield from self._stream

    def close(self) -> None:
        close = getattr(self._stream, "close", None)
        if close is not None:
            close()


class _AsyncResponseStream(httpx.AsyncByteStream):
    def __init__(self, stream: AsyncIterable[bytes]) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _httpx_errors():
            async for part in self._stream:
                yield part

    async def aclose(self) -> None:
        aclose = getattr(self._stream, "aclose", None)
        if aclose is not None:
            await aclose()


_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=5.0)


class GuardedTransport(httpx.BaseTransport):
    """A sync httpx transport: every request's URL is checked, every connection pinned to an approved address.

    No proxy support on purpose. ``ssl_context`` replaces the default trust store (certifi), e.g. for a private CA.
    """

    def __init__(self, policy: EgressPolicy, *, ssl_context: ssl.SSLContext | None = None) -> None:
        self._policy = policy
        self._pool = httpcore.ConnectionPool(
            ssl_context=_ssl_context(ssl_context),
            max_connections=_LIMITS.max_connections,
            max_keepalive_connections=_LIMITS.max_keepalive_connections,
            keepalive_expiry=_LIMITS.keepalive_expiry,
            network_backend=PinnedBackend(policy),
        )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Check the URL, then send through the pinned pool (a new connection resolves and checks the host)."""
        self._policy.check_url(str(request.url))
        assert isinstance(request.stream, httpx.SyncByteStream)
        with _httpx_errors():
            response = self._pool.handle_request(_core_request(request, request.stream))
        assert isinstance(response.stream, Iterable)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_ResponseStream(response.stream),
            extensions=response.extensions,
        )

    def close(self) -> None:
        """Close every pooled connection."""
        self._pool.close()


class GuardedAsyncTransport(httpx.AsyncBaseTransport):
    """The async twin of :class:`GuardedTransport`."""

    def __init__(self, policy: EgressPolicy, *, ssl_context: ssl.SSLContext | None = None) -> None:
        self._policy = policy
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=_ssl_context(ssl_context),
            max_connections=_LIMITS.max_connections,
            max_keepalive_connections=_LIMITS.max_keepalive_connections,
            keepalive_expiry=_LIMITS.keepalive_expiry,
            network_backend=PinnedAsyncBackend(policy),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Check the URL, then send through the pinned pool (a new connection resolves and checks the host)."""
        self._policy.check_url(str(request.url))
        assert isinstance(request.stream, httpx.AsyncByteStream)
        with _httpx_errors():
            response = await self._pool.handle_async_request(_core_request(request, request.stream))
        assert isinstance(response.stream, AsyncIterable)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_AsyncResponseStream(response.stream),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        """Close every pooled connection."""
        await self._pool.aclose()


def guarded_client(policy: EgressPolicy, *, timeout: float, ssl_context: ssl.SSLContext | None = None) -> httpx.Client:
    """An httpx client for URLs someone else chose: guarded transport, no redirects followed, no proxies from the
    environment. Follow redirects yourself and send each hop through this client (or use :func:`fetch`)."""
    return httpx.Client(
        transport=GuardedTransport(policy, ssl_context=ssl_context),
        timeout=timeout,
        follow_redirects=False,
        trust_env=False,
    )


def guarded_async_client(
    policy: EgressPolicy, *, timeout: float, ssl_context: ssl.SSLContext | None = None
) -> httpx.AsyncClient:
    """The async twin of :func:`guarded_client`."""
    return httpx.AsyncClient(
        transport=GuardedAsyncTransport(policy, ssl_context=ssl_context),
        timeout=timeout,
        follow_redirects=False,
        trust_env=False,
    )


# --------------------------------------------------------------------------------------------------------------------
# fetch


@dataclass(frozen=True, slots=True)
class Fetched:
    """A successful (2xx) response read in full.

    ``headers`` has lower-case names (repeated headers joined with ", "). ``content_type`` is the Content-Type header
    as sent, parameters included (``"text/html; charset=UTF-8"``), ``""`` when the server sent none; see
    :attr:`media_type` and :attr:`charset` for its parts.
    """

    final_url: str
    status: int
    headers: dict[str, str]
    content: bytes
    content_type: str

    @property
    def media_type(self) -> str | None:
        """The lower-case media type without parameters (``"text/html"``), None when there is no Content-Type."""
        return self.content_type.split(";")[0].strip().lower() or None

    @property
    def charset(self) -> str | None:
        """The ``charset`` parameter of the Content-Type header, lower-case, if any."""
        for parameter in self.content_type.split(";")[1:]:
            name, _, value = parameter.partition("=")
            if name.strip().lower() == "charset" and value.strip():
                return value.strip().strip('"').lower()
        return None


_CREDENTIAL_HEADERS = ("authorization", "proxy-authorization", "cookie")


class _Hops:
    """The redirect walk of one fetch: the current URL and headers, and how refusals on later hops are reported."""

    def __init__(self, url: str, headers: Mapping[str, str] | None, accept: str | None) -> None:
        self.url = url
        self.count = 0
        self.host = ""
        # identity: a compressed body would be inflated by httpx before max_bytes could stop it (zip bombs).
        self.headers = httpx.Headers({"accept-encoding": "identity"})
        self.headers.update(headers or {})
        if accept is not None:
            self.headers["accept"] = accept

    @contextlib.contextmanager
    def refusals(self) -> Iterator[None]:
        """Report a policy refusal met after a redirect as ``url_redirect_refused`` (the reason stays in the text)."""
        try:
            yield
        except InvalidInput as exc:
            if self.count == 0 or exc.code == "url_redirect_refused":
                raise
            raise _redirect_refused(exc.message.removeprefix("refused: "), reason_code=exc.code) from exc

    def redirect(self, response: httpx.Response) -> str | None:
        """The next URL when ``response`` is a redirect with a Location, else None."""
        if not response.has_redirect_location:
            return None
        if self.count >= MAX_REDIRECTS:
            raise _redirect_refused(f"more than {MAX_REDIRECTS} redirects (the last one from {self.host})")
        try:
            return str(response.url.join(response.headers["location"]))
        except httpx.InvalidURL:
            raise _redirect_refused(f"{self.host} redirected to an invalid URL") from None

    def follow(self, url: str) -> None:
        """Move to ``url``; credentials for the old origin are not sent to a new one."""
        old, new = httpx.URL(self.url), httpx.URL(url)
        if (old.scheme, old.host, old.port) != (new.scheme, new.host, new.port):
            for name in _CREDENTIAL_HEADERS:
                self.headers.pop(name, None)
        self.url = url
        self.count += 1


def _redirect_refused(reason: str, *, reason_code: str | None = None) -> InvalidInput:
    details = {"reason_code": reason_code} if reason_code else {}
    return InvalidInput(f"refused a redirect: {reason}", code="url_redirect_refused", details=details)


def _failure_reason(exc: httpx.TransportError) -> str:
    # httpcore's pool re-raises "from None", so the SSL error hangs on __context__, not __cause__. Bounded walk.
    cause: BaseException | None = exc
    for _ in range(10):
        if cause is None:
            break
        if isinstance(cause, ssl.SSLCertVerificationError):
            return "the TLS certificate could not be verified"
        cause = cause.__cause__ or cause.__context__
    if isinstance(exc, httpx.ConnectError):
        return "could not connect"
    if isinstance(exc, httpx.NetworkError):
        return "the connection broke"
    if isinstance(exc, httpx.ProtocolError):
        return "the server did not speak HTTP correctly"
    return f"transport error ({type(exc).__name__})"


@contextlib.contextmanager
def _upstream_errors(hops: _Hops, timeout: float) -> Iterator[None]:
    """httpx exceptions as mcpbridge errors naming the host (never the URL: its query may hold a secret)."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise _timed_out(hops, timeout) from exc
    except httpx.UnsupportedProtocol as exc:
        raise InvalidInput(f"refused: {hops.host} cannot be fetched (unsupported URL)", code="url_invalid") from exc
    except httpx.RemoteProtocolError as exc:
        # httpx reads a redirect's Location itself (to offer response.next_request) before we see the response: a
        # Location it cannot parse ("http://0177.0.0.1/") is a refused redirect, not a server speaking bad HTTP.
        if isinstance(exc.__context__, httpx.InvalidURL):
            raise _redirect_refused(f"{hops.host} redirected to an invalid URL") from exc
        raise _fetch_failed(hops, exc) from exc
    except httpx.TransportError as exc:
        raise _fetch_failed(hops, exc) from exc
    except httpx.InvalidURL as exc:
        raise InvalidInput(f"refused: the URL for {hops.host} is not valid", code="url_invalid") from exc


def _fetch_failed(hops: _Hops, exc: httpx.TransportError) -> UpstreamError:
    return UpstreamError(
        f"fetching from {hops.host} failed: {_failure_reason(exc)}",
        code="url_fetch_failed",
        details={"error": type(exc).__name__},
    )


def _timed_out(hops: _Hops, timeout: float) -> UpstreamError:
    return UpstreamError(
        f"fetching from {hops.host} timed out (limit {timeout:g} s for the whole fetch)",
        code="url_timeout",
        details={"timeout_seconds": timeout},
    )


def _too_large(hops: _Hops, max_bytes: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"the response from {hops.host} is larger than {max_bytes} bytes",
        code="url_too_large",
        details={"max_bytes": max_bytes},
    )


def _check_response(response: httpx.Response, hops: _Hops, max_bytes: int) -> None:
    """Refuse a non-2xx status, or a body that announces itself as too large before a byte of it is read."""
    if not response.is_success:
        raise UpstreamError(
            f"fetching from {hops.host} failed: HTTP {response.status_code}",
            code="url_fetch_failed",
            details={"status": response.status_code},
        )
    length = response.headers.get("content-length", "").strip()
    if length.isdigit() and int(length) > max_bytes:
        raise _too_large(hops, max_bytes)


def _fetched(response: httpx.Response, content: bytes) -> Fetched:
    return Fetched(
        final_url=str(response.url),
        status=response.status_code,
        headers=dict(response.headers.items()),
        content=content,
        content_type=response.headers.get("content-type", ""),
    )


def _checked_arguments(timeout: float, max_bytes: int) -> None:
    if timeout <= 0:
        raise ValueError("timeout must be positive")
    if max_bytes < 0:
        raise ValueError("max_bytes must not be negative")


def _start_hop(policy: EgressPolicy, hops: _Hops) -> Target:
    with hops.refusals():
        target = policy.check_url(hops.url)
    hops.host = target.host
    return target


def fetch(
    url: str,
    *,
    policy: EgressPolicy,
    timeout: float,
    max_bytes: int,
    headers: Mapping[str, str] | None = None,
    accept: str | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> Fetched:
    """GET ``url`` through the guard, following at most 5 redirects (each re-checked), within ``timeout`` seconds
    overall and ``max_bytes`` of body.

    Raises InvalidInput (``url_*`` policy codes, ``url_redirect_refused``), PayloadTooLarge (``url_too_large``),
    UpstreamError (``url_timeout``, ``url_fetch_failed`` for connection errors and non-2xx statuses).
    """
    _checked_arguments(timeout, max_bytes)
    hops = _Hops(url, headers, accept)
    token = _DEADLINE.set(time.monotonic() + timeout)
    try:
        with guarded_client(policy, timeout=timeout, ssl_context=ssl_context) as client:
            for _ in range(MAX_REDIRECTS + 1):
                _start_hop(policy, hops)
                with (
                    hops.refusals(),
                    _upstream_errors(hops, timeout),
                    client.stream("GET", hops.url, headers=hops.headers) as response,
                ):
                    location = hops.redirect(response)
                    if location is None:
                        _check_response(response, hops, max_bytes)
                        return _fetched(response, _read_body(response.iter_bytes(), hops, max_bytes))
                hops.follow(location)
    finally:
        _DEADLINE.reset(token)
    raise AssertionError("unreachable: the last hop either returns or refuses the redirect")  # pragma: no cover


def _read_body(chunks: Iterable[bytes], hops: _Hops, max_bytes: int) -> bytes:
    body = bytearray()
    for chunk in chunks:
        body += chunk
        if len(body) > max_bytes:
            raise _too_large(hops, max_bytes)
    return bytes(body)


async def fetch_async(
    url: str,
    *,
    policy: EgressPolicy,
    timeout: float,
    max_bytes: int,
    headers: Mapping[str, str] | None = None,
    accept: str | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> Fetched:
    """The async twin of :func:`fetch` (same limits, same errors); runs on asyncio or trio via anyio."""
    _checked_arguments(timeout, max_bytes)
    hops = _Hops(url, headers, accept)
    # The client lives outside the deadline's cancel scope so that closing its connections is never cancelled.
    async with guarded_async_client(policy, timeout=timeout, ssl_context=ssl_context) as client:
        try:
            with anyio.fail_after(timeout):
                return await _fetch_hops_async(client, policy, hops, timeout, max_bytes)
        except TimeoutError as exc:
            raise _timed_out(hops, timeout) from exc


async def _fetch_hops_async(
    client: httpx.AsyncClient, policy: EgressPolicy, hops: _Hops, timeout: float, max_bytes: int
) -> Fetched:
    for _ in range(MAX_REDIRECTS + 1):
        _start_hop(policy, hops)
        with hops.refusals(), _upstream_errors(hops, timeout):
            async with client.stream("GET", hops.url, headers=hops.headers) as response:
                location = hops.redirect(response)
                if location is None:
                    _check_response(response, hops, max_bytes)
                    body = bytearray()
                    async for chunk in response.aiter_bytes():
                        body += chunk
                        if len(body) > max_bytes:
                            raise _too_large(hops, max_bytes)
                    return _fetched(response, bytes(body))
        hops.follow(location)
    raise AssertionError("unreachable: the last hop either returns or refuses the redirect")  # pragma: no cover
