"""FastAPI app factories, one per Lambda function, plus the combined app that ``mcpbridge serve`` runs.

Each surface is a set of routers; every app gets the same problem+json handlers and health routes, so a
function answers ``/healthz`` and ``/readyz`` and renders errors the same way wherever it is deployed.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import AsyncIterator, Iterable
from typing import Literal

from fastapi import APIRouter, FastAPI
from starlette.requests import Request
from starlette.responses import RedirectResponse
from starlette.routing import Route
from starlette.types import ASGIApp

from mcpbridge import __version__
from mcpbridge.bootstrap import Container
from mcpbridge.http.body_deadline import BodyDeadline
from mcpbridge.http.docs import DOCS_PATH, install_docs
from mcpbridge.http.mcp.app import McpFirst, with_problems
from mcpbridge.http.openapi import install_problem_docs
from mcpbridge.http.problems import install_problem_handlers
from mcpbridge.http.routes import health
from mcpbridge.request_context import RequestIdMiddleware

OPENAPI_URL = "/api/v1/openapi.json"

Surface = Literal["admin_api", "oauth_callback", "resolutions", "authorization_server"]
"""The functions whose app is a FastAPI app; the MCP endpoint function's is not (:mod:`mcpbridge.http.mcp.app`)."""

# Route modules by surface, imported only by the functions that serve them: cold start is paid per import. The
# router tries routes in this order, one by one: agents' tool calls, the surface's busiest route by far, come first.
_SURFACES: dict[Surface, tuple[str, ...]] = {
    "admin_api": (
        "agent_calls",
        "calls_audit",
        "api_keys",
        "me",
        "users",
        "workspaces",
        "knowledge",
        "documents",
        "wiki",
        "endpoints",
        "services",
        "service_oauth",
        "agents",
        "agent_catalog",
        "oauth_grants",
    ),
    "oauth_callback": ("oauth_callback",),
    "resolutions": ("resolutions",),
    "authorization_server": ("oauth_server",),
}


def _routers(names: Iterable[str]) -> list[APIRouter]:
    return [importlib.import_module(f"mcpbridge.http.routes.{name}").router for name in names]


@contextlib.asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    yield
    # Close cached connections to external services (only if any were opened; Lambda runs no lifespan).
    pool = app.state.container.__dict__.get("connections")
    if pool is not None:
        await pool.aclose()


class _App(FastAPI):
    mcp_app: ASGIApp | None = None
    body_deadline: tuple[float, int] | None = None

    def build_middleware_stack(self) -> ASGIApp:
        stack = super().build_middleware_stack()
        if self.mcp_app is not None:
            # The same problem handlers as every route, without walking the routes and FastAPI's layers first.
            stack = McpFirst(with_problems(self.mcp_app), stack)
        if self.body_deadline is not None:
            stack = BodyDeadline(stack, *self.body_deadline)  # inside the request id's layer: its 408 carries the id
        # Outside Starlette's ServerErrorMiddleware, so a 500 it renders carries the request id too.
        return RequestIdMiddleware(stack)


def _app(container: Container, routers: Iterable[APIRouter], title: str, *, mcp: bool) -> _App:
    app = _App(
        title=title,
        lifespan=_lifespan,
        version=__version__,
        openapi_url=OPENAPI_URL,
        docs_url=None,  # served by install_docs, from the installed Swagger UI rather than a CDN
        redoc_url=None,
        swagger_ui_oauth2_redirect_url=None,
    )
    app.state.container = container
    install_problem_handlers(app)
    app.include_router(health.router)
    for router in routers:
        app.include_router(router)
    install_problem_docs(app)
    install_docs(app, OPENAPI_URL)
    if mcp:
        from mcpbridge.http.mcp.transport import McpEndpointApp

        # A raw ASGI app: the SDK answers the request itself, and no trailing-slash redirect gets in the way. The
        # route is what the router knows; requests reach the app ahead of the router (McpFirst).
        mcp_app = McpEndpointApp(container)
        app.router.routes.append(Route("/mcp/{endpoint_id}", endpoint=mcp_app))
        app.mcp_app = mcp_app
    return app


def create_app(container: Container, surface: Surface) -> FastAPI:
    """The app of one Lambda function."""
    title = f"mcpbridge {surface.replace('_', ' ')}"
    return _app(container, _routers(_SURFACES[surface]), title, mcp=False)


def create_combined_app(container: Container, *, body_deadline: tuple[float, int] | None = None) -> FastAPI:
    """Every surface in one app, for ``mcpbridge serve``; its root sends a browser to the API's docs. With
    ``body_deadline`` (seconds, bytes a second), a request's body must arrive within that many seconds plus one for
    every that many bytes received (:mod:`mcpbridge.http.body_deadline`; behind API Gateway, the gateway receives
    it)."""
    app = _app(container, _routers(n for names in _SURFACES.values() for n in names), "mcpbridge", mcp=True)
    app.router.routes.append(Route("/", endpoint=_to_docs, methods=["GET", "HEAD"], include_in_schema=False))
    app.body_deadline = body_deadline
    return app


async def _to_docs(request: Request) -> RedirectResponse:
    return RedirectResponse(DOCS_PATH, status_code=302)
