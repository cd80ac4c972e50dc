"""Connections to external MCP servers (SSE and Streamable HTTP) through the SSRF guard.

* :class:`ConnectionSpec` — where and how to connect (URL, transport, already-layered headers, timeouts).
* :func:`open_session` — one connected SDK :class:`mcp.Client` (``mode="auto"``: ``server/discover`` at 2026-07-28
  first, the ``initialize`` handshake as fallback), its HTTP going through :mod:`mcpbridge.outbound.http` (every
  answer bounded by the policy's ``max_answer_bytes``).
* :class:`Connection` — a long-lived session for one service: paged listings with limits, tool calls (sent on a
  Streamable HTTP session by :mod:`mcpbridge.client.streamable_call`, by the SDK over legacy SSE), one reconnect
  and one retry when the upstream session was rejected, never a replay when the outcome of a call is unknown, and
  the service's ``retry_count`` / ``retry_delay`` applied to establishing the connection (see
  :meth:`Connection._connect`), never to a request that was sent. Every operation (establishing the connection, a
  whole listing, a call) has one deadline, optionally shortened to an overall end (a synchronous request's budget).
* :class:`HttpFacts` — what the HTTP answers to one operation's own requests said (401/403, a rejected session, the
  server's own JSON-RPC errors), kept per operation so operations sharing a session never mix them up.
* :func:`probe` — the connection test: connect, list tools and resources, and detect RFC 9728 OAuth servers.

Errors are :mod:`mcpbridge.errors` classes: policy refusals stay :class:`~mcpbridge.errors.InvalidInput`
(``url_*``), upstream failures are :class:`~mcpbridge.errors.UpstreamError` with codes ``upstream_unreachable``,
``upstream_unauthorized``, ``upstream_forbidden``, ``upstream_timeout``, ``upstream_session_lost``,
``upstream_protocol_error``, ``upstream_error`` (a JSON-RPC error the server answered: ``details["jsonrpc_code"]``),
``upstream_http_error`` (``details["status"]``), ``upstream_limit_exceeded``, ``answer_too_large``
(``details["max_bytes"]``: an answer larger than the policy allows, refused as it arrived) and :class:`OutcomeUnknown`
(``outcome_unknown``). Messages name the host, never the URL's path or query (either may carry a secret), and never
a header value; a server's own error text is passed on only with those values taken out.
"""

# Over 400 lines: connecting, the per-operation facts and error translation are one protocol state machine.

from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import math
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import unquote, unquote_plus, urlsplit

import anyio
import anyio.to_thread
import httpx2
from mcp import Client
from mcp.client.auth.utils import build_protected_resource_metadata_discovery_urls
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import (
    CONNECTION_CLOSED,
    INVALID_REQUEST,
    CallToolResult,
    ElicitRequestParams,
    ElicitResult,
    ErrorData,
    GetPromptResult,
    Implementation,
    Prompt,
    ReadResourceResult,
    Resource,
    ServerCapabilities,
    Tool,
)

from mcpbridge.client import input_relay
from mcpbridge.client.streamable_call import StreamableEndpoint
from mcpbridge.client.tripwire import Tripwire
from mcpbridge.domain.external_services import Transport
from mcpbridge.domain.www_authenticate import auth_param
from mcpbridge.errors import InvalidInput, MCPBridgeError, UpstreamError
from mcpbridge.outbound.http import AnswerTooLarge, guarded_async_client
from mcpbridge.outbound.policy import EgressPolicy

__all__ = [
    "INITIALIZE_TIMEOUT_CAP",
    "MAX_CONNECT_RETRIES",
    "MAX_PAGES",
    "MAX_RETRY_DELAY",
    "MAX_TOOLS",
    "Connection",
    "ConnectionSpec",
    "HttpFacts",
    "OutcomeUnknown",
    "ProbeResult",
    "Transport",
    "note_refusal",
    "open_session",
    "probe",
]

TRANSPORTS: tuple[str, ...] = ("sse", "http-streamable")
STDIO_DISABLED = "stdio transport is disabled for security reasons"
INITIALIZE_TIMEOUT_CAP = 60.0
DEFAULT_TIMEOUT = 30.0
# Bounds of the connect retries (the same as a registered service's ``advanced_config``).
MAX_CONNECT_RETRIES = 10
MAX_RETRY_DELAY = 60.0
# HTTP answers to the handshake that say "not now" (a gateway or a starting server): the handshake may be retried.
RETRYABLE_HANDSHAKE_STATUSES = frozenset({502, 503, 504})
MAX_PAGES = 100
MAX_TOOLS = 2000
MAX_RESOURCES = 10_000
# How long an SSE stream may stay silent before the HTTP layer gives up on it (operations have their own timeout).
SSE_READ_TIMEOUT = 300.0
CLIENT_INFO = Implementation(name="mcpbridge", version="0.1.0")
# How long a closing session may take (a timed-out attempt, a dropped session; twice that on leaving the block).
CLOSE_GRACE = 5.0

T = TypeVar("T")


class OutcomeUnknown(UpstreamError):
    """The request reached (or may have reached) the server but its answer was lost: it may have run.

    Never retried automatically; the caller decides (and tells the user).
    """

    default_code = "outcome_unknown"
    retryable = False


# --------------------------------------------------------------------------------------------------------------------
# The spec


@dataclass(frozen=True)
class ConnectionSpec:
    """How to reach one external MCP server.

    ``headers`` are sent on every request, already layered by the caller (auth strategy header, then custom
    headers); they are left out of ``repr`` (they carry secrets). ``auth``, for OAuth services, adds the principal's
    bearer to each request and refreshes it once on a 401 (:class:`~mcpbridge.client.bearer_auth.BearerAuth`).
    ``timeout`` is the one deadline of each operation
    (establishing the connection with all its attempts, a whole listing, a call); ``initialize_timeout`` bounds one
    connect + handshake attempt and is capped at 60 s.

    ``retry_count`` (an int, 0 to 10) is how many extra connect attempts :class:`Connection` makes when establishing
    the connection fails in a way that ran nothing upstream, waiting ``retry_delay`` seconds (finite, 0 to 60)
    between attempts; see :meth:`Connection._connect`. The defaults (0, 0.0) try once; a registered service passes
    its own ``advanced_config`` values (see :func:`mcpbridge.client.specs.connection_spec`). Out-of-range values
    raise :class:`~mcpbridge.errors.InvalidInput`.
    """

    url: str
    transport: Transport
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    timeout: float = DEFAULT_TIMEOUT
    initialize_timeout: float = INITIALIZE_TIMEOUT_CAP
    retry_count: int = 0
    retry_delay: float = 0.0
    auth: httpx2.Auth | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.transport not in TRANSPORTS:
            if str(self.transport).lower() == "stdio":
                raise InvalidInput(STDIO_DISABLED, code="transport_not_allowed")
            raise InvalidInput(
                f"unsupported transport {str(self.transport)[:40]!r} (expected 'sse' or 'http-streamable')",
                code="transport_invalid",
            )
        if not self.timeout > 0:
            raise InvalidInput("timeout must be positive", code="invalid_input")
        if not self.initialize_timeout > 0:
            raise InvalidInput("initialize_timeout must be positive", code="invalid_input")
        count = self.retry_count
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_CONNECT_RETRIES:
            raise InvalidInput(f"retry_count must be an integer from 0 to {MAX_CONNECT_RETRIES}", code="invalid_input")
        delay = self.retry_delay
        if (
            isinstance(delay, bool)
            or not isinstance(delay, int | float)
            or not math.isfinite(delay)
            or not 0 <= delay <= MAX_RETRY_DELAY
        ):
            raise InvalidInput(
                f"retry_delay must be a number of seconds from 0 to {MAX_RETRY_DELAY:g}", code="invalid_input"
            )
        object.__setattr__(self, "retry_delay", float(delay))
        object.__setattr__(self, "headers", dict(self.headers))
        object.__setattr__(self, "initialize_timeout", min(float(self.initialize_timeout), INITIALIZE_TIMEOUT_CAP))

    @property
    def host(self) -> str:
        """The URL's host, for messages (never the path or query)."""
        return urlsplit(self.url).hostname or "?"


async def _check_target(spec: ConnectionSpec, policy: EgressPolicy) -> None:
    """Refuse a forbidden URL or address before any connection (the transport's pin re-checks every connection)."""
    target = policy.check_url(spec.url)
    if target.address is None:
        with anyio.fail_after(spec.initialize_timeout):
            await anyio.to_thread.run_sync(policy.resolve, target, abandon_on_cancel=True)


def _timeouts(spec: ConnectionSpec) -> httpx2.Timeout:
    return httpx2.Timeout(spec.timeout, read=max(spec.timeout, SSE_READ_TIMEOUT))


# --------------------------------------------------------------------------------------------------------------------
# What the HTTP layer saw, per operation

# Set in the task that runs one operation (and in the one that connects). The SDK transports send each message in a
# task that runs in the sender's context, so the response hook records what it sees for the operation that sent the
# request, never for another operation sharing the session.
_FACTS: contextvars.ContextVar[HttpFacts | None] = contextvars.ContextVar("mcpbridge_http_facts", default=None)
# Server error answers are small; larger bodies and events are not inspected.
_MAX_INSPECTED = 64 * 1024


@dataclass
class HttpFacts:
    """What the HTTP answers to one operation's own requests said that the SDK does not pass on (its errors drop the
    status). One per operation (a connect + handshake, a listing page, a tool call), so operations sharing a session
    never see, or erase, each other's answers.

    * ``auth_status``: 401 or 403 when one of its requests was refused (``refused`` is set then as well).
    * ``post_status``: the status of the latest answer to one of its POSTs. The Streamable HTTP client turns a
      non-2xx answer into a JSON-RPC error without the status; during the handshake this is how a 502/503/504 is
      told apart from a real protocol failure (and retried, see :meth:`Connection._connect`).
    * ``server_errors``: the JSON-RPC error codes the server itself sent in answer to its POSTs (a JSON body or an
      event of an event-stream answer). The SDK makes up ``-32000`` when a connection or an answer stream ends
      without the answer; a ``-32000`` the server was seen sending is the server's own error.
    * ``refusal``: why no credentials could be sent or renewed (the bearer auth notes it rather than raising inside the
      HTTP layer, see :func:`note_refusal`); a 401 then is that refusal (``OAuthRequired`` most often).
    * ``too_large``: an answer to one of its requests was larger than the policy allows (the SDK reports it as a
      bare JSON-RPC error, or as a stream that ended).
    * ``session_rejected``: set when the server refused a request's MCP session, so nothing ran: HTTP 404 on a
      request carrying ``Mcp-Session-Id`` (the spec's signal), or a 400/404 whose body says the session is unknown
      (stateful TypeScript servers answer ``400 No valid session ID``; legacy SSE servers ``404 Session not found``).
    """

    auth_status: int | None = None
    post_status: int | None = None
    server_errors: set[int] = field(default_factory=set)
    refusal: MCPBridgeError | None = None
    too_large: AnswerTooLarge | None = None
    session_rejected: Tripwire = field(default_factory=Tripwire)
    refused: Tripwire = field(default_factory=Tripwire)

    @contextlib.contextmanager
    def recording(self) -> Iterator[HttpFacts]:
        """Attribute the HTTP answers to requests sent from this task (and the tasks it starts) to these facts."""
        token = _FACTS.set(self)
        try:
            yield self
        finally:
            _FACTS.reset(token)


def note_refusal(refusal: MCPBridgeError) -> None:
    """For the HTTP layer's auth: the operation whose request this is could not get (or renew) its credentials."""
    facts = _FACTS.get()
    if facts is not None:
        facts.refusal = refusal


def _note_too_large(error: AnswerTooLarge) -> None:
    """For the transport: the operation whose answer this is got one larger than the policy allows."""
    facts = _FACTS.get()
    if facts is not None:
        facts.too_large = error


async def _on_response(response: httpx2.Response) -> None:
    facts = _FACTS.get()
    if facts is None:
        return
    request = response.request
    status = response.status_code
    if request.method == "POST":
        facts.post_status = status
    if status in (401, 403):
        facts.auth_status = status
        facts.refused.set()
        return
    if request.method != "POST":
        return
    if status in (400, 404):
        query = request.url.query.decode(errors="replace").lower()
        if "mcp-session-id" in request.headers or "session" in query:
            body = (await response.aread())[:4096].decode(errors="replace")
            if status == 404 or _SESSION_LOST.search(body):
                facts.session_rejected.set()
                return
    content_type = response.headers.get("content-type", "").lower()
    if content_type.startswith("application/json"):
        length = response.headers.get("content-length", "")
        if length.isdigit() and int(length) <= _MAX_INSPECTED:
            _note_server_error(facts, await response.aread())
    elif content_type.startswith("text/event-stream"):
        response.stream = _ErrorSpotter(response.stream, facts)


def _note_server_error(facts: HttpFacts, data: bytes) -> None:
    if len(data) > _MAX_INSPECTED or b'"error"' not in data:
        return
    try:
        message = json.loads(data)
    except ValueError:
        return
    error = message.get("error") if isinstance(message, dict) and "result" not in message else None
    code = error.get("code") if isinstance(error, dict) else None
    if isinstance(code, int) and not isinstance(code, bool):
        facts.server_errors.add(code)


class _ErrorSpotter(httpx2.AsyncByteStream):
    """An event-stream answer passed on unchanged, noting the JSON-RPC errors among its (small) events."""

    def __init__(self, inner: Any, facts: HttpFacts) -> None:
        self._inner = inner
        self._facts = facts
        self._line = bytearray()
        self._long_line = False  # the current line is too long to be part of an error event: skipped
        self._data: list[bytes] = []
        self._size = 0
        self._oversized = False  # the current event is too large to be an error event

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            self._scan(chunk)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()

    def _scan(self, chunk: bytes) -> None:
        *complete, rest = chunk.split(b"\n")
        for part in complete:
            self._take(part)
            self._end_line()
        self._take(rest)

    def _take(self, part: bytes) -> None:
        if self._long_line:
            return
        if len(self._line) + len(part) > _MAX_INSPECTED:
            self._long_line = self._oversized = True
            self._line.clear()
            return
        self._line += part

    def _end_line(self) -> None:
        line = bytes(self._line).removesuffix(b"\r")
        self._line.clear()
        if self._long_line:
            self._long_line = False
        elif not line:  # a blank line ends the event
            if self._data and not self._oversized:
                _note_server_error(self._facts, b"\n".join(self._data))
            self._data, self._size, self._oversized = [], 0, False
        elif line.startswith(b"data:") and not self._oversized:
            value = line[5:].removeprefix(b" ")
            self._size += len(value)
            if self._size > _MAX_INSPECTED:
                self._oversized = True
                self._data = []
            else:
                self._data.append(value)


@contextlib.asynccontextmanager
async def open_session(
    spec: ConnectionSpec,
    policy: EgressPolicy,
    *,
    facts: HttpFacts | None = None,
    endpoint: StreamableEndpoint | None = None,
) -> AsyncIterator[Client]:
    """A connected SDK :class:`~mcp.Client` for ``spec``; the session is closed when the block ends.

    The handshake uses ``mode="auto"`` (``server/discover`` at 2026-07-28, falling back to ``initialize`` for
    handshake-era servers); ``facts`` (see :class:`HttpFacts`) records the HTTP answers to it; later requests are
    recorded in the facts their operation sets (see :meth:`HttpFacts.recording`). The SDK's own
    read timeout is the larger of ``spec.timeout`` and ``spec.initialize_timeout``: :class:`Connection` bounds the
    handshake and every operation itself, with one deadline each. ``endpoint``, for a Streamable HTTP session, is
    given the session's HTTP client and what the handshake negotiated, so tool calls can be sent on it directly
    (:mod:`mcpbridge.client.streamable_call`).
    Raises InvalidInput for a refused URL and :class:`~mcpbridge.errors.UpstreamError` when the server cannot be
    reached or the handshake fails.
    """
    with _translated(spec, sent=False):
        await _check_target(spec, policy)
    facts = facts or HttpFacts()
    hooks: dict[str, list[Callable[..., Any]]] = {"response": [_on_response]}
    async with contextlib.AsyncExitStack() as stack:
        transport: Any
        if spec.transport == "http-streamable":
            if endpoint is not None:
                hooks["response"].append(endpoint.capture_session)
            http = guarded_async_client(
                policy,
                timeout=_timeouts(spec),
                headers=spec.headers,
                auth=spec.auth,
                event_hooks=hooks,
                on_too_large=_note_too_large,
            )
            await stack.enter_async_context(http)
            transport = streamable_http_client(spec.url, http_client=http, max_sse_event_size=policy.max_answer_bytes)
            if endpoint is not None:
                endpoint.http = http
        else:
            transport = _sse_transport(spec, policy, hooks)
        client = Client(
            transport,
            mode="auto",
            # Connection bounds the handshake and each operation itself (a listing page passes no timeout of its own).
            read_timeout_seconds=max(spec.timeout, spec.initialize_timeout),
            client_info=CLIENT_INFO,
            cache=None,
            elicitation_callback=_relayed_elicitation,
        )
        with _translated(spec, sent=False, facts=facts), facts.recording():
            await stack.enter_async_context(client)
        if endpoint is not None and endpoint.http is not None:
            endpoint.opened(client)
        yield client


async def _relayed_elicitation(context: Any, params: ElicitRequestParams) -> ElicitResult | ErrorData:
    """An upstream's request for input that reached the SDK's client: answered by the relay of the call it came
    with, when it runs on that call's task (:mod:`mcpbridge.client.input_relay`), declined otherwise."""
    answer = input_relay.answer_for(params.model_dump(mode="json", by_alias=True, exclude_none=True))
    if answer is None:
        return ErrorData(code=INVALID_REQUEST, message=input_relay.NOT_SUPPORTED)
    return ElicitResult.model_validate(answer)


def _sse_transport(spec: ConnectionSpec, policy: EgressPolicy, hooks: dict[str, list[Callable[..., Any]]]) -> Any:
    """The SDK's legacy HTTP+SSE transport for ``spec``, its HTTP clients through the SSRF guard with ``hooks``."""

    def factory(
        headers: dict[str, str] | None = None,
        timeout: httpx2.Timeout | None = None,
        auth: httpx2.Auth | None = None,
    ) -> httpx2.AsyncClient:
        return guarded_async_client(
            policy,
            timeout=timeout or _timeouts(spec),
            headers=headers,
            auth=auth,
            event_hooks=hooks,
            on_too_large=_note_too_large,
        )

    return sse_client(
        spec.url,
        headers=spec.headers,
        timeout=spec.timeout,
        sse_read_timeout=max(spec.timeout, SSE_READ_TIMEOUT),
        httpx_client_factory=factory,
        auth=spec.auth,
    )


# --------------------------------------------------------------------------------------------------------------------
# Error translation

_SESSION_LOST = re.compile(
    r"session (terminated|not found|expired|invalid|unknown)|(invalid|unknown|expired|no valid) session",
    re.IGNORECASE,
)


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        found: list[BaseException] = []
        for inner in exc.exceptions:
            found.extend(_leaves(inner))
        return found
    return [exc]


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc``, its group members and their causes/contexts (bounded)."""
    seen: list[BaseException] = []
    pending = _leaves(exc)
    while pending and len(seen) < 50:
        current = pending.pop(0)
        if any(current is known for known in seen):
            continue
        seen.append(current)
        for nxt in (current.__cause__, current.__context__):
            if nxt is not None:
                pending.extend(_leaves(nxt))
    return seen


def _status_of(exc: BaseException) -> int | None:
    for item in _chain(exc):
        if isinstance(item, httpx2.HTTPStatusError):
            return item.response.status_code
    return None


def _is_session_lost(exc: BaseException) -> bool:
    return any(isinstance(item, MCPError) and _SESSION_LOST.search(item.message) for item in _chain(exc))


def _dispatcher_closed(client: Client) -> bool:
    """Whether the SDK session already knows its connection is gone (an SSE stream that ended, say).

    Such a session refuses every request without sending it, so reconnecting first is safe. The SDK has no public
    flag for it; the private one is read defensively (absent means "open").
    """
    dispatcher = getattr(client.session, "_dispatcher", None)
    return bool(getattr(dispatcher, "_closed", False))


class _SessionLost(Exception):
    """Internal: the upstream rejected our session before running the request (safe to reconnect and retry)."""


def _connect_retryable(exc: MCPBridgeError) -> bool:
    """Whether a failed connect + handshake attempt may be repeated (see :meth:`Connection._connect`)."""
    if not isinstance(exc, UpstreamError) or isinstance(exc, OutcomeUnknown):
        return False
    if exc.code in ("upstream_unreachable", "upstream_timeout"):
        return True
    return exc.code == "upstream_http_error" and exc.details.get("status") in RETRYABLE_HANDSHAKE_STATUSES


def _chained(error: BaseException, cause: BaseException | None) -> BaseException:
    """``error`` as raised ``from cause`` (set here, since it is raised by the caller)."""
    error.__cause__ = cause
    return error


def _translate(
    spec: ConnectionSpec,
    exc: BaseException,
    *,
    sent: bool,
    facts: HttpFacts | None = None,
    timeout: float | None = None,
    session_open: bool = False,
) -> MCPBridgeError:
    """``exc`` as an error of the tree. ``facts`` are the operation's own HTTP answers, ``timeout`` the deadline the
    operation had (for the message), ``session_open`` whether its session still stood afterwards."""
    host = spec.host
    chain = _chain(exc)
    for item in chain:
        if isinstance(item, MCPBridgeError):
            return item
    too_large = next((item for item in chain if isinstance(item, AnswerTooLarge)), facts.too_large if facts else None)
    if too_large is not None:
        return answer_too_large(host, too_large.limit)
    status = _operation_status(exc, facts, sent=sent)
    refusal = _auth_refusal(host, status, facts)
    if refusal is not None:
        return refusal
    if any(isinstance(item, httpx2.ConnectError | httpx2.ConnectTimeout | ConnectionRefusedError) for item in chain):
        # The connection was never opened: nothing was sent, so trying again is safe.
        return UpstreamError(f"could not connect to {host}", code="upstream_unreachable")
    if any(isinstance(item, TimeoutError | httpx2.TimeoutException) for item in chain):
        if sent:
            return _no_answer(spec, spec.timeout if timeout is None else timeout)
        waited = spec.initialize_timeout if timeout is None else timeout
        return UpstreamError(
            f"{host} did not answer within {waited:g} s", code="upstream_timeout", details={"timeout_seconds": waited}
        )
    if status is not None:
        return UpstreamError(f"{host} answered HTTP {status}", code="upstream_http_error", details={"status": status})
    mcp_errors = [item for item in chain if isinstance(item, MCPError)]
    connection_dropped = any(
        isinstance(item, httpx2.TransportError | anyio.ClosedResourceError | anyio.BrokenResourceError | OSError)
        for item in chain
    ) or any(_lost_connection(spec, item, facts, session_open) for item in mcp_errors)
    if connection_dropped and sent:
        return OutcomeUnknown(f"the connection to {host} broke before the answer arrived; the request may have run")
    if connection_dropped:
        return UpstreamError(f"the connection to {host} broke", code="upstream_unreachable")
    if mcp_errors:
        error = mcp_errors[0]
        return UpstreamError(
            f"{host} answered with JSON-RPC error {error.code}: {_server_text(spec, error.message)}",
            code="upstream_error",
            details={"jsonrpc_code": error.code},
        )
    return UpstreamError(
        f"talking to {host} failed ({type(exc).__name__})",
        code="upstream_protocol_error",
        details={"error": type(exc).__name__},
    )


def _operation_status(exc: BaseException, facts: HttpFacts | None, *, sent: bool) -> int | None:
    """The HTTP status that explains ``exc``: its own, else the operation's auth or handshake answer."""
    status = _status_of(exc)
    if status is None and facts is not None:
        status = facts.auth_status
    if status is None and facts is not None and not sent and facts.post_status in RETRYABLE_HANDSHAKE_STATUSES:
        # The handshake's POST was answered 502/503/504 (the SDK reports it as a bare JSON-RPC error).
        status = facts.post_status
    return status


def _auth_refusal(host: str, status: int | None, facts: HttpFacts | None) -> MCPBridgeError | None:
    if status in (401, 403) and facts is not None and facts.refusal is not None:
        return facts.refusal  # no credentials could be sent, renewed or widened: that is the reason, not the status
    if status == 401:
        return UpstreamError(
            f"{host} refused the credentials (HTTP 401)", code="upstream_unauthorized", details={"status": 401}
        )
    if status == 403:
        return UpstreamError(f"{host} denied access (HTTP 403)", code="upstream_forbidden", details={"status": 403})
    return None


def answer_too_large(host: str, limit: int) -> UpstreamError:
    """An answer refused for its size (it may have run upstream: the answer came, and was not read)."""
    return UpstreamError(
        f"the answer from {host} is larger than {_size(limit)}, the limit set by MCPBRIDGE_UPSTREAM_MAX_ANSWER_BYTES; "
        "it was not read",
        code="answer_too_large",
        details={"max_bytes": limit},
    )


def _size(count: int) -> str:
    for unit, scale in (("MiB", 1024 * 1024), ("KiB", 1024)):
        if count >= scale and count % scale == 0:
            return f"{count // scale} {unit}"
    return f"{count} bytes"


def _no_answer(spec: ConnectionSpec, timeout: float) -> OutcomeUnknown:
    return OutcomeUnknown(
        f"{spec.host} did not answer within {timeout:g} s; the request may have run",
        details={"timeout_seconds": timeout},
    )


def _lost_connection(spec: ConnectionSpec, error: MCPError, facts: HttpFacts | None, session_open: bool) -> bool:
    """Whether ``error`` is the SDK's word for a lost connection (its ``-32000``), not an error the server sent.

    A ``-32000`` the server was seen sending (see :class:`HttpFacts`) is the server's. Over legacy SSE every answer
    comes on the session's stream, and the SDK makes one up only once that stream is gone: while the session still
    stands, a ``-32000`` is the server's too. Otherwise (an answer stream that ended, say) the connection broke."""
    if error.code != CONNECTION_CLOSED or _SESSION_LOST.search(error.message):
        return False
    if facts is not None and error.code in facts.server_errors:
        return False
    return not (spec.transport == "sse" and session_open)


_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
_MIN_REDACTED = 6
MAX_SERVER_TEXT = 300


def _server_text(spec: ConnectionSpec, text: str) -> str:
    """A server's error message fit for ours: without any value we sent it that may be a secret (header values, the
    URL's path, query and user info), control characters folded, at most 300 characters."""
    for value in sorted(_sent_values(spec), key=len, reverse=True):
        text = text.replace(value, "[redacted]")
    text = _CONTROL.sub(" ", text).strip()
    return text if len(text) <= MAX_SERVER_TEXT else text[: MAX_SERVER_TEXT - 1] + "…"


def _sent_values(spec: ConnectionSpec) -> set[str]:
    parts = urlsplit(spec.url)
    values = [parts.path, parts.query, unquote(parts.query), parts.username or "", parts.password or ""]
    values += parts.path.split("/")
    for pair in parts.query.split("&"):
        value = pair.partition("=")[2]
        values += [value, unquote_plus(value)]
    for header in spec.headers.values():
        values.append(header)
        values += header.split()
    return {value for value in values if len(value) >= _MIN_REDACTED}


@contextlib.contextmanager
def _translated(spec: ConnectionSpec, *, sent: bool, facts: HttpFacts | None = None) -> Iterator[None]:
    try:
        yield
    except MCPBridgeError:
        raise
    except Exception as exc:
        raise _translate(spec, exc, sent=sent, facts=facts) from exc


# --------------------------------------------------------------------------------------------------------------------
# The long-lived connection


@dataclass(frozen=True)
class _Deadline:
    """One operation's single deadline: ``seconds`` (as applied, the figure its messages give), ending at ``end`` on
    anyio's clock."""

    seconds: float
    end: float

    @classmethod
    def after(cls, seconds: float) -> _Deadline:
        return cls(seconds, anyio.current_time() + seconds)

    def left(self) -> float:
        return max(0.0, self.end - anyio.current_time())


class Connection:
    """A session with one external MCP server, used as ``async with Connection(spec, policy) as conn: ...``.

    The SDK session lives in a task of its own, so a transport failure ends that task (and is reported to the
    operation waiting for it) instead of cancelling the caller. Recovery rules:

    * the upstream rejected the session (HTTP 404 / "session not found"): one reconnect, one retry;
    * the connection broke after a request was sent, or no answer came in time: :class:`OutcomeUnknown`, never
      replayed (the next operation reconnects);
    * the connection could not be opened: ``UpstreamError(code="upstream_unreachable")`` (retryable);
    * establishing a connection (on entry and on every reconnect) is retried up to ``spec.retry_count`` times,
      ``spec.retry_delay`` seconds apart, when nothing can have run upstream (see :meth:`_connect`). Operations
      themselves are never retried by that rule.

    Deadlines: every operation has one, ``spec.timeout`` from its start, covering everything it does (every page of
    a listing, a reconnect, the one retry after a rejected session); establishing the connection is an operation of
    its own with the same rule (see :meth:`_connect`). ``until`` (on anyio's clock, e.g. a synchronous request's
    budget) is an overall end for the whole connection: every deadline is shortened to end by then. Messages give
    the deadline that was applied.
    """

    def __init__(
        self, spec: ConnectionSpec, policy: EgressPolicy, *, until: float | None = None, direct_calls: bool = True
    ) -> None:
        """``direct_calls``: tool calls on a Streamable HTTP session are sent by
        :mod:`~mcpbridge.client.streamable_call` (False: by the SDK's session, as every other request)."""
        self.spec = spec
        self._policy = policy
        self._until = until
        self._direct_calls = direct_calls
        self._task_group: anyio.abc.TaskGroup | None = None
        self._client: Client | None = None
        self._endpoint: tuple[Client, StreamableEndpoint] | None = None
        """The live Streamable HTTP session's SDK client and what a direct tool call needs of it."""
        self._stop: anyio.Event | None = None
        self._dead: Tripwire | None = None
        self._lock = anyio.Lock()
        self._death_cause: BaseException | None = None
        self._connected_once = False
        self.reconnects = 0
        """How many times a new session replaced an earlier one (session rejected, or the old one died)."""

    async def __aenter__(self) -> Connection:
        self._task_group = anyio.create_task_group()
        await self._task_group.__aenter__()
        try:
            await self._connect()
        except BaseException:
            self._task_group.cancel_scope.cancel()
            await self._task_group.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        assert self._task_group is not None
        if self._stop is not None:
            self._stop.set()
        with anyio.CancelScope(shield=True), anyio.move_on_after(self._grace(2 * CLOSE_GRACE)):
            if self._dead is not None:
                await self._dead.wait()
        self._task_group.cancel_scope.cancel()
        # The group's own tasks report their failures to the operations; the block's exception (if any) must reach
        # the caller as itself, not wrapped in an ExceptionGroup, so it is not handed to the group.
        await self._task_group.__aexit__(None, None, None)
        self._client = None

    # -- deadlines -----------------------------------------------------------------------------------------------

    def _deadline(self, seconds: float, within: _Deadline | None = None) -> _Deadline:
        """A deadline of ``seconds`` from now, shortened to end with ``within`` and with the connection's ``until``
        (to whole hundredths of a second, so that the figure in messages is exactly the deadline applied)."""
        now = anyio.current_time()
        ends = [end for end in (self._until, within.end if within else None) if end is not None]
        if ends:
            seconds = min(seconds, max(0.0, round(min(ends) - now, 2)))
        return _Deadline(seconds, now + seconds)

    def _grace(self, seconds: float) -> float:
        """How long to wait for a session to close: ``seconds``, or what is left before ``until`` (at least 1 s)."""
        if self._until is None:
            return seconds
        return min(seconds, max(1.0, self._until - anyio.current_time()))

    # -- session ownership ---------------------------------------------------------------------------------------

    async def _connect(self, within: _Deadline | None = None) -> Client:
        """Establish the session (connect + handshake) within one deadline, retrying failures that ran nothing
        upstream.

        The deadline is ``spec.timeout`` (shortened to end with ``within``, the operation that reconnects, and with
        ``until``); the attempts and the waits between them all fit in it. One attempt is :meth:`_connect_once`,
        bounded by ``spec.initialize_timeout`` (at most 60 s) or by what is left of the deadline. A failed attempt is
        retried, up to ``spec.retry_count`` extra times and after sleeping ``spec.retry_delay`` seconds, while the
        deadline leaves time for another attempt after that sleep, and only when it failed with:

        * ``upstream_unreachable``: the connection was refused, or broke while connecting or handshaking;
        * ``upstream_timeout``: the address lookup, the connection or the handshake took longer than the attempt's
          bound (a bound shorter than what was left: ``initialize_timeout``);
        * ``upstream_http_error`` with HTTP status 502, 503 or 504 answered to the handshake.

        Everything else is raised at once: 401/403 (``upstream_unauthorized`` / ``upstream_forbidden``), policy
        refusals (:class:`~mcpbridge.errors.InvalidInput`), protocol and JSON-RPC errors, other HTTP statuses. Only
        the handshake (``server/discover`` / ``initialize``, which change nothing upstream) is ever repeated: once
        the session exists, no request (tool call, listing) goes through this loop, so :class:`OutcomeUnknown` is
        never replayed, and the one-reconnect-on-session-loss rule of :meth:`_run` counts one reconnect however
        many attempts that reconnect took.

        So establishing a connection takes at most the deadline (plus up to :data:`CLOSE_GRACE` to tear down a
        timed-out attempt): ``spec.timeout`` (30 s for a service's defaults), however large ``retry_count``. A timeout
        message gives the bound that expired: the deadline when the attempt had all that was left of it, else
        ``initialize_timeout``. The error raised is the last attempt's.
        """
        deadline = self._deadline(self.spec.timeout, within)
        attempts = self.spec.retry_count + 1
        for attempt in range(1, attempts + 1):
            capped = self.spec.initialize_timeout < deadline.left()
            bound = _Deadline.after(self.spec.initialize_timeout) if capped else deadline
            try:
                return await self._connect_once(bound)
            except MCPBridgeError as exc:
                if attempt >= attempts or not _connect_retryable(exc) or deadline.left() <= self.spec.retry_delay:
                    raise
            await anyio.sleep(self.spec.retry_delay)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _connect_once(self, bound: _Deadline) -> Client:
        """One connect + handshake attempt, bounded by ``bound``; raises MCPBridgeError."""
        assert self._task_group is not None, "use Connection as an async context manager"
        ready = anyio.Event()
        stop = anyio.Event()
        dead = Tripwire()
        outcome: dict[str, Any] = {}

        owner_scope = anyio.CancelScope()
        facts = HttpFacts()
        endpoint = None
        if self.spec.transport == "http-streamable":
            endpoint = StreamableEndpoint(self.spec.url, CLIENT_INFO, self._policy.max_answer_bytes)

        async def own() -> None:
            try:
                with owner_scope:
                    async with open_session(self.spec, self._policy, facts=facts, endpoint=endpoint) as client:
                        outcome["client"] = client
                        ready.set()
                        await stop.wait()
            except Exception as exc:
                outcome.setdefault("error", exc)
                self._death_cause = exc
            finally:
                dead.set()
                ready.set()

        self._death_cause = None
        self._task_group.start_soon(own)
        with anyio.move_on_after(bound.left()):
            await ready.wait()
        timed_out = UpstreamError(
            f"{self.spec.host} did not complete the connection within {bound.seconds:g} s",
            code="upstream_timeout",
            details={"timeout_seconds": bound.seconds},
        )
        if not ready.is_set():
            owner_scope.cancel()
            with anyio.move_on_after(self._grace(CLOSE_GRACE)):
                await dead.wait()
            raise timed_out
        if "client" not in outcome:
            error = outcome.get("error")
            if isinstance(error, MCPBridgeError):
                raise timed_out if error.code == "upstream_timeout" else error
            raise _translate(self.spec, error or RuntimeError("no session"), sent=False, facts=facts) from error
        client: Client = outcome["client"]
        self._adopt(client, stop, dead, endpoint)
        return client

    def _adopt(self, client: Client, stop: anyio.Event, dead: Tripwire, endpoint: StreamableEndpoint | None) -> None:
        """Make a session just opened the live one."""
        if self._connected_once:
            self.reconnects += 1
        self._connected_once = True
        self._client, self._stop, self._dead = client, stop, dead
        self._endpoint = None if endpoint is None else (client, endpoint)

    async def _drop(self) -> None:
        if self._stop is not None:
            self._stop.set()
        if self._dead is not None:
            with anyio.move_on_after(self._grace(CLOSE_GRACE)):
                await self._dead.wait()
        self._client = self._stop = self._dead = None

    async def _live_client(self, deadline: _Deadline) -> Client:
        async with self._lock:
            if (
                self._client is None
                or (self._dead is not None and self._dead.is_set())
                or _dispatcher_closed(self._client)
            ):
                await self._drop()
                await self._connect(deadline)
            assert self._client is not None
            return self._client

    async def _run(
        self,
        operation: Callable[[Client], Awaitable[T]],
        *,
        deadline: _Deadline | None = None,
        retry_on_session_loss: bool = True,
    ) -> T:
        """Run ``operation`` on the live session with the recovery rules above, all within ``deadline`` (by default
        ``spec.timeout`` from now)."""
        deadline = deadline or self._deadline(self.spec.timeout)
        for attempt in range(2):
            client = await self._live_client(deadline)
            dead = self._dead
            try:
                return await self._attempt(client, dead, operation, deadline)
            except _SessionLost:
                await self._drop()
                if attempt == 0 and retry_on_session_loss:
                    continue
                raise UpstreamError(
                    f"{self.spec.host} rejected the session again after a reconnect", code="upstream_session_lost"
                ) from None
            except MCPBridgeError as exc:
                if exc.code in ("outcome_unknown", "upstream_unreachable", "upstream_timeout") or (
                    self.spec.transport == "sse" and exc.code in ("upstream_unauthorized", "upstream_forbidden")
                ):  # (a refused POST ends a legacy SSE session's sender: the next operation reconnects)
                    await self._drop()
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def _attempt(
        self,
        client: Client,
        dead: Tripwire | None,
        operation: Callable[[Client], Awaitable[T]],
        deadline: _Deadline,
    ) -> T:
        """``operation`` in this task, cancelled when the deadline passes, the session dies, the server rejects the
        session, or (legacy SSE, where a refused POST ends the SDK's sender without an answer to wait for) a request
        is refused; what it raised, or why it was cancelled, becomes the error of :meth:`_failed`."""
        failure: BaseException | None = None
        facts = HttpFacts()  # this operation's own: other operations on the session have theirs
        with contextlib.ExitStack() as trips:
            scope = trips.enter_context(anyio.CancelScope(deadline=anyio.current_time() + deadline.left()))
            trips.enter_context(facts.session_rejected.cancels(scope))
            if dead is not None:
                trips.enter_context(dead.cancels(scope))
            if self.spec.transport == "sse":
                trips.enter_context(facts.refused.cancels(scope))
            try:
                with facts.recording():
                    return await operation(client)
            except Exception as exc:
                failure = exc
        session_died = dead is not None and dead.is_set()
        timed_out = not session_died and anyio.current_time() >= scope.deadline  # (a failure goes first)
        raise self._failed(client, facts, failure, session_died, timed_out, deadline)

    def _failed(
        self,
        client: Client,
        facts: HttpFacts,
        failure: BaseException | None,
        session_died: bool,
        timed_out: bool,
        deadline: _Deadline,
    ) -> BaseException:
        """What an attempt that got no result raises: a lost session (to reconnect and retry), a refusal, a
        translated failure, or an unknown outcome."""
        if facts.session_rejected.is_set():
            return _chained(_SessionLost(), failure)
        if facts.refused.is_set():  # 401/403: refused before it ran, whatever became of the session afterwards
            refusal = failure or RuntimeError("refused")
            return _chained(_translate(self.spec, refusal, sent=True, facts=facts), refusal)
        session_open = not session_died and not _dispatcher_closed(client)
        if failure is not None:
            if _is_session_lost(failure):
                return _chained(_SessionLost(), failure)
            translated = _translate(
                self.spec, failure, sent=True, facts=facts, timeout=deadline.seconds, session_open=session_open
            )
            return _chained(translated, failure)
        if timed_out:
            return _no_answer(self.spec, deadline.seconds)
        cause = self._death_cause
        if cause is not None:
            if _is_session_lost(cause):
                return _chained(_SessionLost(), cause)
            return _chained(_translate(self.spec, cause, sent=True, facts=facts, timeout=deadline.seconds), cause)
        return OutcomeUnknown(f"the connection to {self.spec.host} broke before the answer arrived; it may have run")

    # -- facts from the handshake --------------------------------------------------------------------------------

    @property
    def client(self) -> Client:
        if self._client is None:
            raise RuntimeError("not connected")
        return self._client

    @property
    def server_info(self) -> Implementation | None:
        return self.client.server_info

    @property
    def instructions(self) -> str | None:
        return self.client.instructions

    @property
    def capabilities(self) -> ServerCapabilities:
        return self.client.server_capabilities

    @property
    def protocol_version(self) -> str:
        return self.client.protocol_version

    def _endpoint_of(self, client: Client) -> StreamableEndpoint | None:
        """The Streamable HTTP endpoint of ``client``'s session (None: legacy SSE, or a session since replaced)."""
        if self._endpoint is None or self._endpoint[0] is not client:
            return None
        return self._endpoint[1]

    # -- operations ----------------------------------------------------------------------------------------------

    async def list_tools(self) -> list[Tool]:
        """Every tool, following cursors (at most 100 pages and 2000 tools; a repeated cursor is an error), all
        within one deadline."""

        async def page(client: Client, cursor: str | None) -> tuple[list[Tool], str | None]:
            listed = await client.list_tools(cursor=cursor, cache_mode="bypass")
            endpoint = self._endpoint_of(client)
            if endpoint is not None:
                endpoint.absorb(list(listed.tools))
            return list(listed.tools), listed.next_cursor

        return await self._all_pages("tools", page, MAX_TOOLS)

    async def list_resources(self, *, until: float | None = None) -> list[Resource]:
        """Every resource, following cursors (same page limit; at most 10 000 resources). ``until``: as for
        :meth:`call_tool`."""

        async def page(client: Client, cursor: str | None) -> tuple[list[Resource], str | None]:
            listed = await client.list_resources(cursor=cursor, cache_mode="bypass")
            return list(listed.resources), listed.next_cursor

        return await self._all_pages("resources", page, MAX_RESOURCES, until=until)

    async def list_prompts(self, *, until: float | None = None) -> list[Prompt]:
        """Every prompt, following cursors (same page and count limits as resources)."""

        async def page(client: Client, cursor: str | None) -> tuple[list[Prompt], str | None]:
            listed = await client.list_prompts(cursor=cursor, cache_mode="bypass")
            return list(listed.prompts), listed.next_cursor

        return await self._all_pages("prompts", page, MAX_RESOURCES, until=until)

    async def read_resource(self, uri: str, *, until: float | None = None) -> ReadResourceResult:
        """One resource's contents as the server sent them (a read: retried once on a new session if rejected)."""

        async def read(client: Client) -> ReadResourceResult:
            return await client.read_resource(uri)

        return await self._run(read, deadline=self._bounded(until))

    async def get_prompt(
        self, name: str, arguments: Mapping[str, str], *, until: float | None = None
    ) -> GetPromptResult:
        """A prompt's messages for ``arguments`` as the server sent them."""

        async def get(client: Client) -> GetPromptResult:
            return await client.get_prompt(name, dict(arguments))

        return await self._run(get, deadline=self._bounded(until))

    def _bounded(self, until: float | None) -> _Deadline | None:
        """The operation's deadline: ``spec.timeout``, shortened to end by ``until`` (anyio's clock) when given."""
        if until is None:
            return None
        return self._deadline(self.spec.timeout, _Deadline(max(0.0, until - anyio.current_time()), until))

    async def _all_pages(
        self,
        what: str,
        page: Callable[[Client, str | None], Awaitable[tuple[list[T], str | None]]],
        limit: int,
        *,
        until: float | None = None,
    ) -> list[T]:
        items: list[T] = []
        seen: set[str] = set()
        cursor: str | None = None
        # one for the whole listing, however many pages
        deadline = self._bounded(until) or self._deadline(self.spec.timeout)
        for _ in range(MAX_PAGES):
            batch, cursor = await self._run(functools.partial(_page_at, page, cursor), deadline=deadline)
            items.extend(batch)
            if len(items) > limit:
                raise UpstreamError(
                    f"{self.spec.host} lists more than {limit} {what}",
                    code="upstream_limit_exceeded",
                    details={"limit": limit},
                )
            if not cursor:
                return items
            if cursor in seen:
                raise UpstreamError(f"{self.spec.host} repeated a {what} page cursor", code="upstream_protocol_error")
            seen.add(cursor)
        raise UpstreamError(
            f"{self.spec.host} lists {what} over more than {MAX_PAGES} pages",
            code="upstream_limit_exceeded",
            details={"max_pages": MAX_PAGES},
        )

    async def call_tool(
        self, name: str, arguments: Mapping[str, Any] | None = None, *, until: float | None = None
    ) -> CallToolResult:
        """Call ``name``; the result as the server sent it (``structuredContent`` and ``isError`` kept).

        A call the upstream rejected for its session is retried once on a new session (within the same deadline);
        any other failure after sending raises :class:`OutcomeUnknown` and is never replayed. A JSON-RPC error the
        server answered is ``upstream_error`` with ``details["jsonrpc_code"]``. ``until`` (on anyio's clock, a
        synchronous request's end) shortens the call's deadline to end by then.
        """
        args = dict(arguments or {})
        deadline = None
        if until is not None:
            deadline = self._deadline(self.spec.timeout, _Deadline(max(0.0, until - anyio.current_time()), until))
        wait = self.spec.timeout if deadline is None else max(0.01, deadline.seconds)

        async def call(client: Client) -> CallToolResult:
            endpoint = self._endpoint_of(client)
            if endpoint is None or not self._direct_calls:
                return await client.call_tool(name, args, read_timeout_seconds=wait)
            return await endpoint.call_tool(client, name, args)

        return await self._run(call, deadline=deadline)


async def _page_at(
    page: Callable[[Client, str | None], Awaitable[tuple[list[T], str | None]]], cursor: str | None, client: Client
) -> tuple[list[T], str | None]:
    return await page(client, cursor)


# --------------------------------------------------------------------------------------------------------------------
# The connection test


@dataclass(frozen=True)
class ProbeResult:
    """What :func:`probe` found. ``ok`` is true when the handshake and the tool listing succeeded."""

    ok: bool
    server_info: Implementation | None = None
    protocol_version: str | None = None
    instructions: str | None = None
    capabilities: ServerCapabilities | None = None
    tools: list[Tool] = field(default_factory=list)
    resources: list[Resource] = field(default_factory=list)
    oauth_required: bool = False
    resource_metadata_url: str | None = None
    error: MCPBridgeError | None = None
    resources_error: MCPBridgeError | None = None


async def probe(
    spec: ConnectionSpec, policy: EgressPolicy, *, until: float | None = None, detect_oauth: bool = True
) -> ProbeResult:
    """Connect, list tools and resources; report (not raise) upstream failures.

    Connecting follows :meth:`Connection._connect`: ``spec.retry_count`` / ``spec.retry_delay`` apply to it. Each step
    has its own deadline (``spec.timeout``); with ``until`` (on anyio's clock) every step also ends by then, so the
    whole test does (a synchronous request's budget), teardown included but for a second at most.

    A resources failure counts only when the server declared the resources capability. With ``detect_oauth``, a 401
    carrying RFC 9728 protected-resource metadata (``WWW-Authenticate: ... resource_metadata=...`` or a reachable
    ``/.well-known/oauth-protected-resource[/path]`` document) sets ``oauth_required``; a bare 401 is an ordinary
    ``upstream_unauthorized`` failure. Policy refusals (InvalidInput) are raised, not reported.
    """
    try:
        async with Connection(spec, policy, until=until) as connection:
            tools = await connection.list_tools()
            resources: list[Resource] = []
            resources_error: MCPBridgeError | None = None
            if connection.capabilities.resources is not None:
                try:
                    resources = await connection.list_resources()
                except UpstreamError as exc:
                    resources_error = exc
            return ProbeResult(
                ok=resources_error is None,
                server_info=connection.server_info,
                protocol_version=connection.protocol_version,
                instructions=connection.instructions,
                capabilities=connection.capabilities,
                tools=tools,
                resources=resources,
                resources_error=resources_error,
                error=resources_error,
            )
    except InvalidInput:
        raise
    except UpstreamError as exc:
        if exc.code == "upstream_unauthorized" and detect_oauth:
            metadata_url = await _oauth_metadata(spec, policy, until)
            if metadata_url is not None:
                return ProbeResult(
                    ok=False,
                    oauth_required=True,
                    resource_metadata_url=metadata_url,
                    error=UpstreamError(
                        f"{spec.host} requires OAuth authorization", code="oauth_required", details={"status": 401}
                    ),
                )
        return ProbeResult(ok=False, error=exc)


_PROBE_BYTES = 256 * 1024  # a 401's body and a metadata document are small


async def _oauth_metadata(spec: ConnectionSpec, policy: EgressPolicy, until: float | None) -> str | None:
    """The RFC 9728 metadata URL when ``spec.url`` answers 401 and advertises protected-resource metadata."""
    timeout = spec.timeout if until is None else max(0.0, min(spec.timeout, until - anyio.current_time()))
    http = guarded_async_client(policy, timeout=spec.timeout, headers=spec.headers, max_answer_bytes=_PROBE_BYTES)
    async with http:
        try:
            with anyio.fail_after(timeout):
                answer = await http.post(
                    spec.url,
                    json={"jsonrpc": "2.0", "id": 0, "method": "ping"},
                    headers={"accept": "application/json, text/event-stream"},
                )
                if answer.status_code != 401:
                    return None
                hint = auth_param(answer.headers.get("www-authenticate", ""), "resource_metadata")
                if hint:
                    return hint
                for candidate in build_protected_resource_metadata_discovery_urls(None, spec.url):
                    try:
                        document = await http.get(candidate, headers={"accept": "application/json"})
                    except (httpx2.HTTPError, AnswerTooLarge, MCPBridgeError):
                        continue
                    if document.status_code == 200 and _is_metadata(document):
                        return candidate
        except (httpx2.HTTPError, AnswerTooLarge, MCPBridgeError, TimeoutError):
            return None
    return None


def _is_metadata(response: httpx2.Response) -> bool:
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and isinstance(body.get("resource"), str)
