"""Outbound HTTP on ``httpx2`` (the MCP SDK's HTTP library): one stack, one SSRF guard, bounded answers.

Checking a hostname and then letting the HTTP library resolve it again is a DNS-rebinding hole (the second answer
may be 127.0.0.1). Here the check *is* the resolution: a network backend under httpcore2's connection pool resolves
the host through the :class:`~mcpbridge.outbound.policy.EgressPolicy` when it opens a connection and connects to one
of exactly those addresses. The pool still keys on the hostname, so the Host header, TLS SNI and certificate
verification all use the hostname, not the IP.

Layers, bottom up:

* ``PinnedBackend`` / ``PinnedAsyncBackend`` — httpcore2 network backends: resolve via the policy, connect to the
  approved address, refuse unix sockets. The async one dials through :class:`~mcpbridge.outbound.wire.AsyncioBackend`
  (the running loop's own transports); the sync one through httpcore2's sockets, every operation also bounded by the
  current :func:`fetch`'s overall deadline.
* ``GuardedTransport`` / ``GuardedAsyncTransport`` — httpx2 transports over httpcore2's pool with a pinned backend;
  they run :meth:`EgressPolicy.check_url` on every request and bound every answer (see *Answers* below).
  With no policy, the sync transport bounds answers without the guard, for addresses the operator configured (a
  model API: :func:`bounded_client`).
* ``guarded_client`` / ``guarded_async_client`` — httpx2 clients that never follow redirects and ignore proxy
  environment variables (a proxy would resolve the name itself and bypass the pin).
* ``fetch`` / ``fetch_async`` — GET with manual redirects (each hop re-checked), a size cap and one overall deadline.

Answers: a body is counted as it arrives and never buffered past ``max_answer_bytes``; an event stream
(``text/event-stream``, which may rightly run for hours) is bounded per event instead. A body that declares a larger
``Content-Length`` is refused before a byte of it is read. Past the cap, reading raises :class:`AnswerTooLarge` and
the connection is closed (an answer not read to its end is never reused). :class:`AnswerTooLarge` is an
``httpx2.StreamError``: the MCP SDK turns one into a failed request (its session goes on), and ``on_too_large`` lets
the caller note it where the SDK does not pass the exception on.
"""

# Over 400 lines: the pinned backends, the bounded transports, redirects and fetches: one path for every outbound
# request.

from __future__ import annotations

import contextlib
import contextvars
import ssl
import threading
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import httpcore2
import httpx2

from mcpbridge.errors import InvalidInput, PayloadTooLarge, UpstreamError
from mcpbridge.outbound.pinning import connect_first, is_ip_literal, resolve_async
from mcpbridge.outbound.policy import DEFAULT_MAX_ANSWER_BYTES, EgressPolicy, IPAddress, Target
from mcpbridge.outbound.wire import AsyncioBackend

MAX_REDIRECTS = 5
KEEPALIVE_SECONDS = 4.0
"""How long an idle connection is kept: under the 5 s after which Node's and uvicorn's servers close theirs by
default, so a request never goes out on a connection the server is closing at that moment (a tool call sent then
would fail with its outcome unknown)."""

DRAIN_BYTES = 64 * 1024
DRAIN_SECONDS = 0.5

_LIMITS = httpx2.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=KEEPALIVE_SECONDS)

# The end of the current fetch() (time.monotonic()), read by the sync network streams so that one deadline bounds
# the whole exchange: httpx2's own timeouts restart with every read, so a server trickling a byte a second never
# trips them. Sync httpcore2 does all I/O in the calling thread, so a context variable reaches it.
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("mcpbridge_outbound_deadline", default=None)


class AnswerTooLarge(httpx2.StreamError):
    """An answer (or one event of an event stream) larger than the cap its transport applies."""

    def __init__(self, host: str, limit: int, *, event: bool = False) -> None:
        what = "an event of the answer" if event else "the answer"
        super().__init__(f"{what} from {host} is larger than {limit} bytes")
        self.host = host
        self.limit = limit


OnTooLarge = Callable[[AnswerTooLarge], None]


def _bounded(timeout: float | None, error: type[httpcore2.TimeoutException]) -> float | None:
    """``timeout`` shortened to what is left of the current deadline; raises ``error`` once it has passed."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return timeout
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise error("the overall deadline has passed")
    return remaining if timeout is None else min(timeout, remaining)


@contextlib.contextmanager
def overall_deadline(seconds: float) -> Iterator[None]:
    """Bound every sync network operation of the guarded and bounded transports in this block to one deadline."""
    token = _DEADLINE.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


# --------------------------------------------------------------------------------------------------------------------
# Network backends: the pin


class _DeadlineStream(httpcore2.NetworkStream):
    """A sync network stream whose every operation also respects the current overall deadline."""

    def __init__(self, inner: httpcore2.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _bounded(timeout, httpcore2.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _bounded(timeout, httpcore2.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore2.NetworkStream:
        return _DeadlineStream(
            self._inner.start_tls(ssl_context, server_hostname, _bounded(timeout, httpcore2.ConnectTimeout))
        )

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class DeadlineBackend(httpcore2.NetworkBackend):
    """httpcore2's sync sockets, every operation bounded by the current overall deadline (see
    :func:`overall_deadline`); no unix sockets."""

    def __init__(self, inner: httpcore2.NetworkBackend | None = None) -> None:
        self._inner = inner or httpcore2.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.NetworkStream:
        stream = self._inner.connect_tcp(
            host, port, _bounded(timeout, httpcore2.ConnectTimeout), local_address, socket_options
        )
        return _DeadlineStream(stream)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.NetworkStream:
        raise httpcore2.UnsupportedProtocol("unix sockets cannot be reached through the outbound guard")

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


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
        raise httpcore2.ConnectTimeout(f"resolving the host took longer than {timeout:.1f} s")
    result = outcome[0]
    if isinstance(result, BaseException):
        raise result
    return result


class PinnedBackend(DeadlineBackend):
    """Opens TCP connections only to addresses ``policy`` approved for the host, resolving once per connection.

    Policy refusals raise :class:`~mcpbridge.errors.InvalidInput` out of ``connect_tcp``; httpcore2 and httpx2 pass
    such exceptions through unchanged.
    """

    def __init__(self, policy: EgressPolicy, inner: httpcore2.NetworkBackend | None = None) -> None:
        super().__init__(inner)
        self._policy = policy

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.NetworkStream:
        addresses = _resolve_within(self._policy, host, port, _bounded(timeout, httpcore2.ConnectTimeout))
        failure: Exception | None = None
        # Every address was approved, so falling back to the next one (like a browser) is safe.
        for address in addresses:
            try:
                return super().connect_tcp(str(address), port, timeout, local_address, socket_options)
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None  # resolve_host never returns an empty list
        raise failure


class PinnedAsyncBackend(httpcore2.AsyncNetworkBackend):
    """The async twin of :class:`PinnedBackend` (name resolution runs in a worker thread); connections are made on
    the running loop's own transports by default."""

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


# --------------------------------------------------------------------------------------------------------------------
# Answers: counted as they arrive

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


_EVENT_ENDS = (b"\n\n", b"\r\r", b"\n\r\n", b"\r\n\r")


class _Meter:
    """Counts an answer's bytes against its cap: the whole body, or (an event stream) each event, that is the bytes
    since the last blank line."""

    def __init__(self, response: httpcore2.Response, host: str, limit: int, on_too_large: OnTooLarge | None) -> None:
        content_type = _header(response.headers, b"content-type")
        self.events = content_type.lower().startswith(b"text/event-stream")
        self.host = host
        self.limit = limit
        self.on_too_large = on_too_large
        self.size = 0
        self.tail = b""  # the last bytes of the previous chunk, where a blank line may begin
        self.tripped = False
        length = _header(response.headers, b"content-length").strip()
        self.declared_too_large = not self.events and length.isdigit() and int(length) > limit

    def count(self, chunk: bytes) -> None:
        if self.events:
            window = self.tail + chunk
            end = -1
            for mark in _EVENT_ENDS:
                at = window.rfind(mark)
                if at >= 0:
                    end = max(end, at + len(mark))
            self.size = len(window) - end if end >= 0 else self.size + len(chunk)
            self.tail = window[-3:]
        else:
            self.size += len(chunk)
        if self.size > self.limit:
            raise self.refuse()

    def refuse(self) -> AnswerTooLarge:
        self.tripped = True
        error = AnswerTooLarge(self.host, self.limit, event=self.events)
        if self.on_too_large is not None:
            self.on_too_large(error)
        return error


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes:
    for key, value in headers:
        if key.lower() == name:
            return value
    return b""


class _AsyncAnswer(httpx2.AsyncByteStream):
    """A response body counted against its cap. With ``drain`` (a POST's answer), the rest of an answer closed
    before its end is read first, so its connection is reused.

    The SDK stops reading a POST's event stream at the answer it waits for and closes the response, although the
    server ends the stream right after: a connection whose body is not read to its end cannot be reused, so every
    tool call opened a new TCP connection (and TLS session). Closing a POST's answer before its end first reads
    what is left, at most ``DRAIN_BYTES`` within ``DRAIN_SECONDS`` (after the SDK has handed the answer on, so no
    caller waits for it); a body that goes on (a stream the server keeps open) is closed then, as before."""

    def __init__(self, stream: AsyncIterable[bytes], meter: _Meter, *, drain: bool) -> None:
        self._stream = stream
        self._chunks = stream.__aiter__()  # one iterator for the reads and the drain
        self._meter = meter
        self._drain = drain
        self._ended = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._meter.declared_too_large:
            raise self._meter.refuse()
        with _httpx2_errors():
            while (chunk := await self._next()) is not None:
                self._meter.count(chunk)
                yield chunk

    async def _next(self) -> bytes | None:
        try:
            return await self._chunks.__anext__()
        except StopAsyncIteration:
            self._ended = True
            return None

    async def aclose(self) -> None:
        if self._drain and not self._ended and not self._meter.tripped and not self._meter.declared_too_large:
            read = 0
            with anyio.move_on_after(DRAIN_SECONDS), contextlib.suppress(Exception):
                while read <= DRAIN_BYTES and (chunk := await self._next()) is not None:
                    read += len(chunk)
        aclose = getattr(self._stream, "aclose", None)
        if aclose is not None:
            await aclose()


class _SyncAnswer(httpx2.SyncByteStream):
    """The sync twin of :class:`_AsyncAnswer` (without the drain)."""

    def __init__(self, stream: Iterable[bytes], meter: _Meter) -> None:
        self._stream = stream
        self._meter = meter

    def __iter__(self) -> Iterator[bytes]:
        if self._meter.declared_too_large:
            raise self._meter.refuse()
        with _httpx2_errors():
            for chunk in self._stream:
                self._meter.count(chunk)
                yield chunk

    def close(self) -> None:
        close = getattr(self._stream, "close", None)
        if close is not None:
            close()


def _core_request(request: httpx2.Request, content: Iterable[bytes] | AsyncIterable[bytes]) -> httpcore2.Request:
    return httpcore2.Request(
        method=request.method,
        url=httpcore2.URL(
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
    return ssl_context if ssl_context is not None else httpx2.create_ssl_context(trust_env=False)


def _limit(policy: EgressPolicy | None, max_answer_bytes: int | None) -> int:
    if max_answer_bytes is not None:
        return max_answer_bytes
    return policy.max_answer_bytes if policy is not None else DEFAULT_MAX_ANSWER_BYTES


class GuardedTransport(httpx2.BaseTransport):
    """A sync httpx2 transport: every request's URL is checked, every connection pinned to an approved address, every
    answer bounded by ``max_answer_bytes``. With ``policy=None``, no guard (for addresses the operator configured).

    No proxy support on purpose. ``ssl_context`` replaces the default trust store (certifi), e.g. for a private CA.
    """

    def __init__(
        self,
        policy: EgressPolicy | None,
        *,
        ssl_context: ssl.SSLContext | None = None,
        max_answer_bytes: int | None = None,
    ) -> None:
        self._policy = policy
        self._limit = _limit(policy, max_answer_bytes)
        self._pool = httpcore2.ConnectionPool(
            ssl_context=_ssl_context(ssl_context),
            max_connections=_LIMITS.max_connections,
            max_keepalive_connections=_LIMITS.max_keepalive_connections,
            keepalive_expiry=_LIMITS.keepalive_expiry,
            network_backend=DeadlineBackend() if policy is None else PinnedBackend(policy),
        )

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        """Check the URL, then send through the pinned pool (a new connection resolves and checks the host)."""
        if self._policy is not None:
            self._policy.check_url(str(request.url))
        assert isinstance(request.stream, httpx2.SyncByteStream)
        with _httpx2_errors():
            response = self._pool.handle_request(_core_request(request, request.stream))
        assert isinstance(response.stream, Iterable)
        meter = _Meter(response, request.url.host, self._limit, None)
        return httpx2.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_SyncAnswer(response.stream, meter),
            extensions=response.extensions,
        )

    def close(self) -> None:
        """Close every pooled connection."""
        self._pool.close()


class GuardedAsyncTransport(httpx2.AsyncBaseTransport):
    """The async twin of :class:`GuardedTransport`, on httpcore2's pool over the running loop's own transports; the
    rest of a POST's answer closed early is drained so that its connection is reused (see :class:`_AsyncAnswer`).
    ``on_too_large`` is told of every answer refused for its size, in the task that was reading it."""

    def __init__(
        self,
        policy: EgressPolicy,
        *,
        ssl_context: ssl.SSLContext | None = None,
        max_answer_bytes: int | None = None,
        on_too_large: OnTooLarge | None = None,
    ) -> None:
        self._policy = policy
        self._limit = _limit(policy, max_answer_bytes)
        self._on_too_large = on_too_large
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=_ssl_context(ssl_context),
            max_connections=_LIMITS.max_connections,
            max_keepalive_connections=_LIMITS.max_keepalive_connections,
            keepalive_expiry=_LIMITS.keepalive_expiry,
            network_backend=PinnedAsyncBackend(policy),
        )

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        """Check the URL, then send through the pinned pool (a new connection resolves and checks the host)."""
        self._policy.check_url(str(request.url))
        assert isinstance(request.stream, httpx2.AsyncByteStream)
        with _httpx2_errors():
            response = await self._pool.handle_async_request(_core_request(request, request.stream))
        assert isinstance(response.stream, AsyncIterable)
        meter = _Meter(response, request.url.host, self._limit, self._on_too_large)
        return httpx2.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_AsyncAnswer(response.stream, meter, drain=request.method == "POST"),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        """Close every pooled connection."""
        await self._pool.aclose()


def guarded_client(
    policy: EgressPolicy,
    *,
    timeout: float,
    ssl_context: ssl.SSLContext | None = None,
    max_answer_bytes: int | None = None,
) -> httpx2.Client:
    """An httpx2 client for URLs someone else chose: guarded transport, no redirects followed, no proxies from the
    environment. Follow redirects yourself and send each hop through this client (or use :func:`fetch`)."""
    return httpx2.Client(
        transport=GuardedTransport(policy, ssl_context=ssl_context, max_answer_bytes=max_answer_bytes),
        timeout=timeout,
        follow_redirects=False,
        trust_env=False,
    )


def bounded_client(*, timeout: float, max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES) -> httpx2.Client:
    """A sync httpx2 client for an address the operator configured (a model API, which may rightly be on the LAN):
    no SSRF guard, but the same answer caps, no redirects followed, and every network operation within the current
    :func:`overall_deadline`."""
    return httpx2.Client(
        transport=GuardedTransport(None, max_answer_bytes=max_answer_bytes),
        timeout=timeout,
        follow_redirects=False,
        trust_env=False,
    )


def guarded_async_client(
    policy: EgressPolicy,
    *,
    timeout: httpx2.Timeout | float,
    headers: Mapping[str, str] | None = None,
    auth: httpx2.Auth | None = None,
    ssl_context: ssl.SSLContext | None = None,
    event_hooks: Mapping[str, list[Callable[..., Any]]] | None = None,
    max_answer_bytes: int | None = None,
    on_too_large: OnTooLarge | None = None,
) -> httpx2.AsyncClient:
    """The async twin of :func:`guarded_client`; ``on_too_large``: see :class:`GuardedAsyncTransport`."""
    transport = GuardedAsyncTransport(
        policy, ssl_context=ssl_context, max_answer_bytes=max_answer_bytes, on_too_large=on_too_large
    )
    return httpx2.AsyncClient(
        transport=transport,
        timeout=timeout,
        headers=dict(headers or {}),
        auth=auth,
        follow_redirects=False,
        trust_env=False,
        event_hooks=dict(event_hooks or {}),
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
        # identity: a compressed body would be inflated by httpx2 before max_bytes could stop it (zip bombs).
        self.headers = httpx2.Headers({"accept-encoding": "identity"})
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

    def redirect(self, response: httpx2.Response) -> str | None:
        """The next URL when ``response`` is a redirect with a Location, else None."""
        if not response.has_redirect_location:
            return None
        if self.count >= MAX_REDIRECTS:
            raise _redirect_refused(f"more than {MAX_REDIRECTS} redirects (the last one from {self.host})")
        try:
            return str(response.url.join(response.headers["location"]))
        except httpx2.InvalidURL:
            raise _redirect_refused(f"{self.host} redirected to an invalid URL") from None

    def follow(self, url: str) -> None:
        """Move to ``url``; credentials for the old origin are not sent to a new one."""
        old, new = httpx2.URL(self.url), httpx2.URL(url)
        if (old.scheme, old.host, old.port) != (new.scheme, new.host, new.port):
            for name in _CREDENTIAL_HEADERS:
                self.headers.pop(name, None)
        self.url = url
        self.count += 1


def _redirect_refused(reason: str, *, reason_code: str | None = None) -> InvalidInput:
    details = {"reason_code": reason_code} if reason_code else {}
    return InvalidInput(f"refused a redirect: {reason}", code="url_redirect_refused", details=details)


def _failure_reason(exc: httpx2.TransportError) -> str:
    # httpcore2's pool re-raises "from None", so the SSL error hangs on __context__, not __cause__. Bounded walk.
    cause: BaseException | None = exc
    for _ in range(10):
        if cause is None:
            break
        if isinstance(cause, ssl.SSLCertVerificationError):
            return "the TLS certificate could not be verified"
        cause = cause.__cause__ or cause.__context__
    if isinstance(exc, httpx2.ConnectError):
        return "could not connect"
    if isinstance(exc, httpx2.NetworkError):
        return "the connection broke"
    if isinstance(exc, httpx2.ProtocolError):
        return "the server did not speak HTTP correctly"
    return f"transport error ({type(exc).__name__})"


@contextlib.contextmanager
def _upstream_errors(hops: _Hops, timeout: float, max_bytes: int) -> Iterator[None]:
    """httpx2 exceptions as mcpbridge errors naming the host (never the URL: its query may hold a secret)."""
    try:
        yield
    except AnswerTooLarge as exc:
        raise _too_large(hops, max_bytes) from exc
    except httpx2.TimeoutException as exc:
        raise _timed_out(hops, timeout) from exc
    except httpx2.UnsupportedProtocol as exc:
        raise InvalidInput(f"refused: {hops.host} cannot be fetched (unsupported URL)", code="url_invalid") from exc
    except httpx2.RemoteProtocolError as exc:
        # httpx2 reads a redirect's Location itself (to offer response.next_request) before we see the response: a
        # Location it cannot parse ("http://0177.0.0.1/") is a refused redirect, not a server speaking bad HTTP.
        if isinstance(exc.__context__, httpx2.InvalidURL):
            raise _redirect_refused(f"{hops.host} redirected to an invalid URL") from exc
        raise _fetch_failed(hops, exc) from exc
    except httpx2.TransportError as exc:
        raise _fetch_failed(hops, exc) from exc
    except httpx2.InvalidURL as exc:
        raise InvalidInput(f"refused: the URL for {hops.host} is not valid", code="url_invalid") from exc


def _fetch_failed(hops: _Hops, exc: httpx2.TransportError) -> UpstreamError:
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


def _check_status(response: httpx2.Response, hops: _Hops) -> None:
    if not response.is_success:
        raise UpstreamError(
            f"fetching from {hops.host} failed: HTTP {response.status_code}",
            code="url_fetch_failed",
            details={"status": response.status_code},
        )


def _fetched(response: httpx2.Response, content: bytes) -> Fetched:
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
    client = guarded_client(policy, timeout=timeout, ssl_context=ssl_context, max_answer_bytes=max_bytes)
    with overall_deadline(timeout), client:
        for _ in range(MAX_REDIRECTS + 1):
            _start_hop(policy, hops)
            with (
                hops.refusals(),
                _upstream_errors(hops, timeout, max_bytes),
                client.stream("GET", hops.url, headers=hops.headers) as response,
            ):
                location = hops.redirect(response)
                if location is None:
                    _check_status(response, hops)
                    return _fetched(response, response.read())
            hops.follow(location)
    raise AssertionError("unreachable: the last hop either returns or refuses the redirect")  # pragma: no cover


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
    """The async twin of :func:`fetch` (same limits, same errors); runs on asyncio via anyio."""
    _checked_arguments(timeout, max_bytes)
    hops = _Hops(url, headers, accept)
    # The client lives outside the deadline's cancel scope so that closing its connections is never cancelled.
    async with guarded_async_client(
        policy, timeout=timeout, ssl_context=ssl_context, max_answer_bytes=max_bytes
    ) as client:
        try:
            with anyio.fail_after(timeout):
                return await _fetch_hops_async(client, policy, hops, timeout, max_bytes)
        except TimeoutError as exc:
            raise _timed_out(hops, timeout) from exc


async def _fetch_hops_async(
    client: httpx2.AsyncClient, policy: EgressPolicy, hops: _Hops, timeout: float, max_bytes: int
) -> Fetched:
    for _ in range(MAX_REDIRECTS + 1):
        _start_hop(policy, hops)
        with hops.refusals(), _upstream_errors(hops, timeout, max_bytes):
            async with client.stream("GET", hops.url, headers=hops.headers) as response:
                location = hops.redirect(response)
                if location is None:
                    _check_status(response, hops)
                    return _fetched(response, await response.aread())
        hops.follow(location)
    raise AssertionError("unreachable: the last hop either returns or refuses the redirect")  # pragma: no cover
