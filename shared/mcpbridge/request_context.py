"""The request id: one per HTTP request, on every log line written while it is served, in the ``X-Request-Id``
response header and in problem bodies, so an answer a user quotes leads to its log lines.

On Lambda behind API Gateway the id is API Gateway's own (``requestContext.requestId``, also in its access log);
elsewhere it is made here. A client's ``X-Request-Id`` is not taken: an id a caller chose could pass for another's.
Work outside HTTP requests (the indexer's jobs, the tool-call steps) carries the Lambda invocation's id, or ``-``.

Logs are also kept quiet at INFO: libraries that log every request at INFO (``httpx``/``httpx2`` for each outbound
call, including the expected 400/405 of a Streamable HTTP probe before the SSE fallback; the MCP SDK's session
manager, started and stopped for every stateless request) speak from WARNING up unless the level is DEBUG.
"""

from __future__ import annotations

import contextvars
import logging
import re
import uuid
from typing import Any

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = "X-Request-Id"
NO_REQUEST = "-"

_current: contextvars.ContextVar[str | None] = contextvars.ContextVar("mcpbridge_request_id", default=None)
# API Gateway's ids are short base64-like strings; anything else in the event is not trusted as one.
_GATEWAY_ID = re.compile(r"^[A-Za-z0-9=+/_.:-]{1,128}$")

# Loggers that say something at INFO for every request or outbound call.
CHATTY_LOGGERS = (
    "httpx",
    "httpx2",
    "httpcore",
    "httpcore2",
    "mcp.server.streamable_http_manager",
    "mcp.server.streamable_http",
    "mcp.client.streamable_http",
)


def current() -> str | None:
    """The id of the request being served in this context, or None."""
    return _current.get()


def bind(request_id: str | None) -> None:
    """Make ``request_id`` the current one in this context (a Lambda invocation binds its own id at its start)."""
    _current.set(request_id)


def new_request_id() -> str:
    return str(uuid.uuid4())


def gateway_request_id(scope: Scope) -> str | None:
    """API Gateway's request id, from the event Mangum puts in the ASGI scope, or None outside Lambda."""
    event = scope.get("aws.event")
    if not isinstance(event, dict):
        return None
    context = event.get("requestContext")
    request_id = context.get("requestId") if isinstance(context, dict) else None
    return request_id if isinstance(request_id, str) and _GATEWAY_ID.match(request_id) else None


class RequestIdMiddleware:
    """The outermost ASGI layer: binds the request id around everything the app does (its error handlers too) and
    adds ``X-Request-Id`` to the response."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        request_id = gateway_request_id(scope) or new_request_id()

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[HEADER] = request_id
            await send(message)

        token = _current.set(request_id)
        await self._app(scope, receive, send_with_id)
        # Reset only after a normal end: a failure propagating out is reported by the server next, in this same
        # request's task (uvicorn and Mangum run each request in one), and that line carries the id too.
        _current.reset(token)


# ---------------------------------------------------------------------------------------------------- log records


def install_request_id_logging() -> None:
    """Give every log record a ``request_id`` attribute (the current one, or ``-``), whoever logs it (idempotent).

    Powertools' JSON formatter writes it as a key of its own; plain-text formats use ``%(request_id)s``."""
    previous = logging.getLogRecordFactory()
    if getattr(previous, "adds_request_id", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        record.request_id = _current.get() or NO_REQUEST
        return record

    factory.adds_request_id = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)


def quiet_chatty_loggers(level: str) -> None:
    """Per-request chatter only at DEBUG: the loggers above speak from WARNING up at any other level."""
    quiet = logging.getLevelName(level.upper()) != logging.DEBUG
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING if quiet else logging.NOTSET)
