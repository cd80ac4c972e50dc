"""The MCP endpoint function's app: ``/mcp/{endpoint_id}`` (and its server card, ``/mcp/{endpoint_id}/server-card``),
``/healthz`` and ``/readyz``, without FastAPI.

API Gateway sends this function ``/mcp/{endpoint_id}`` (and its card) alone, so it needs no router, no dependency
injection and no OpenAPI document, and importing FastAPI for them cost a fifth of its cold start. Errors render as
every function renders them (:mod:`mcpbridge.http.problems`), every answer carries its request id
(:mod:`mcpbridge.request_context`) and the health routes answer as the other functions' do
(:mod:`mcpbridge.http.readiness`). The combined app of ``mcpbridge serve`` sends ``/mcp/{endpoint_id}`` the same way
(:class:`McpFirst`), ahead of its router.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import anyio.to_thread
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from mcpbridge.http.problems import HANDLERS, UNEXPECTED, problem
from mcpbridge.http.readiness import ALIVE, readiness
from mcpbridge.request_context import RequestIdMiddleware

if TYPE_CHECKING:
    from mcpbridge.bootstrap import Container


SERVER_CARD: Final = "mcpbridge.server_card"
"""Set in the scope of a request for ``/mcp/{endpoint_id}/server-card``, which the MCP app answers too."""


def endpoint_id_of(scope: Scope) -> str | None:
    """The endpoint of a request for ``/mcp/{endpoint_id}`` or its server card (``/mcp/{endpoint_id}/server-card``,
    below the app's root path), or None for any other path, ``/mcp/{endpoint_id}/.well-known/...`` included."""
    target = _target(scope)
    return None if target is None else target[0]


def _target(scope: Scope) -> tuple[str, bool] | None:
    """The endpoint a request is for, and whether it asks for the endpoint's server card."""
    if scope["type"] != "http":
        return None
    path: str = scope["path"]
    root = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :]
    rest = path[5:] if path.startswith("/mcp/") else ""
    endpoint_id, slash, card = rest.partition("/")
    if not endpoint_id or (slash and card != "server-card"):
        return None
    return endpoint_id, bool(slash)


def with_problems(app: ASGIApp) -> ASGIApp:
    """``app`` with its errors rendered as problems (inside the request id's layer, which they then carry)."""
    return ServerErrorMiddleware(ExceptionMiddleware(app, handlers=dict(HANDLERS)), UNEXPECTED)


class McpFirst:
    """``/mcp/{endpoint_id}`` (and its server card) straight to the MCP app (every call of every agent comes this
    way); anything else, ``/mcp/{endpoint_id}/.well-known/...`` included, to ``rest``."""

    def __init__(self, mcp: ASGIApp, rest: ASGIApp) -> None:
        self._mcp = mcp
        self._rest = rest

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        target = _target(scope)
        if target is not None:
            scope["path_params"] = {"endpoint_id": target[0]}
            scope[SERVER_CARD] = target[1]
            await self._mcp(scope, receive, send)
            return
        await self._rest(scope, receive, send)


class _Health:
    """``/healthz`` and ``/readyz``; any other path is 404."""

    def __init__(self, container: Container) -> None:
        self._container = container

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"].removeprefix(scope.get("root_path", ""))
        if path not in ("/healthz", "/readyz"):
            await problem(404, "not_found", "Not Found")(scope, receive, send)
        elif scope["method"] not in ("GET", "HEAD"):
            await problem(405, "method_not_allowed", "Method Not Allowed", headers={"Allow": "GET"})(
                scope, receive, send
            )
        elif path == "/healthz":
            await JSONResponse(ALIVE)(scope, receive, send)
        else:
            container = self._container
            status, body = await anyio.to_thread.run_sync(readiness, container.store, container.secrets)
            await JSONResponse(body, status_code=status)(scope, receive, send)


def create_mcp_function_app(container: Container) -> ASGIApp:
    """The app of the MCP endpoint function."""
    from mcpbridge.http.mcp.transport import McpEndpointApp

    return RequestIdMiddleware(with_problems(McpFirst(McpEndpointApp(container), _Health(container))))
