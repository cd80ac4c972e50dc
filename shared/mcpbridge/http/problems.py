"""Errors as ``application/problem+json`` (RFC 9457) with a stable ``code``.

Mapped by type, never by message: an ``MCPBridgeError`` carries its status and code; FastAPI's validation errors
become 400 (body is not JSON) or 422 (wrong shape); anything else is a 500 whose details stay in the log. Every body
carries the request's ``request_id`` (the ``X-Request-Id`` header's value), which its log lines carry too. Only
installing the handlers in a FastAPI app imports FastAPI: the MCP endpoint function renders problems without it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import compile_path

if TYPE_CHECKING:
    from fastapi import FastAPI

from mcpbridge.errors import MCPBridgeError, Unauthenticated
from mcpbridge.request_context import current as current_request_id

log = logging.getLogger("mcpbridge.http")

PROBLEM_JSON = "application/problem+json"
_METHODS = frozenset({"GET", "PUT", "POST", "DELETE", "OPTIONS", "HEAD", "PATCH", "TRACE"})
WWW_AUTHENTICATE = 'Bearer realm="mcpbridge"'

_STATUS_CODES = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    408: "request_timeout",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    421: "misdirected_request",
    429: "rate_limited",
}


def problem(
    status: int,
    code: str,
    detail: str,
    *,
    title: str | None = None,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    body = {
        "type": f"urn:mcpbridge:problem:{code}",
        "title": title or code.replace("_", " ").capitalize(),
        "status": status,
        "code": code,
        "detail": detail,
        **extra,
    }
    request_id = current_request_id()
    if request_id is not None:
        body["request_id"] = request_id  # the X-Request-Id header's value: what to quote when asking for help
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def problem_from_error(error: MCPBridgeError) -> JSONResponse:
    headers = {"WWW-Authenticate": WWW_AUTHENTICATE} if isinstance(error, Unauthenticated) else None
    extra: dict[str, Any] = {"retryable": error.retryable}
    if error.details:
        extra["details"] = error.details
    return problem(error.status, error.code, error.message, headers=headers, **extra)


async def _on_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, MCPBridgeError)
    if exc.status >= 500:
        log.warning("%s %s failed: %s (%s)", request.method, request.url.path, exc.code, exc.message)
    return problem_from_error(exc)


async def _on_validation(request: Request, exc: Exception) -> JSONResponse:
    from fastapi.exceptions import RequestValidationError

    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        return problem(400, "malformed_json", "the request body is not valid JSON")
    # Only where and why: the submitted values are not echoed (they may hold secrets).
    fields = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")} for e in errors]
    return problem(422, "validation_failed", "the request does not have the expected shape", errors=fields)


async def _on_http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _STATUS_CODES.get(exc.status_code, "http_error")
    detail = exc.detail if isinstance(exc.detail, str) else code
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = allowed_methods(request) or headers.get("Allow", "")
    return problem(exc.status_code, code, detail, headers=headers or None)


def allowed_methods(request: Request) -> str:
    """The methods the app documents at the request's path (RFC 9110: a 405's ``Allow``). Starlette names only those
    of the first route there, one of several where ``GET`` and ``POST`` (or ``PUT``, ``DELETE``) of a path are
    separate operations; empty where the path is not documented."""
    openapi = getattr(request.app, "openapi", None)
    paths: dict[str, dict[str, Any]] = openapi().get("paths", {}) if callable(openapi) else {}
    path = request.scope["path"]
    # The most literal templates that match: /mcp-endpoints/tools is its own path, not /mcp-endpoints/{id}'s.
    matching = [template for template in paths if compile_path(template)[0].match(path)]
    fewest = min((template.count("{") for template in matching), default=0)
    methods = {
        method.upper()
        for template in matching
        if template.count("{") == fewest
        for method in paths[template]
        if method.upper() in _METHODS
    }
    return ", ".join(sorted(methods))


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("%s %s failed unexpectedly", request.method, request.url.path)
    return problem(500, "internal_error", "an internal error occurred; retry later", retryable=True)


Handler = Callable[[Request, Exception], Awaitable[Response]]

HANDLERS: Mapping[type[Exception], Handler] = {MCPBridgeError: _on_error, StarletteHTTPException: _on_http}
"""The handlers of the errors a request may raise; what none handles is :data:`UNEXPECTED` (a 500)."""
UNEXPECTED: Handler = _on_unexpected


def install_problem_handlers(app: FastAPI) -> None:
    from fastapi.exceptions import RequestValidationError

    for kind, handler in HANDLERS.items():
        app.add_exception_handler(kind, handler)
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(Exception, UNEXPECTED)
