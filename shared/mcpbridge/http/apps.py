"""FastAPI app factories, one per Lambda function, plus the combined app that ``mcpbridge serve`` runs.

Each surface is a set of routers; every app gets the same problem+json handlers and health routes, so a
function answers ``/healthz`` and ``/readyz`` and renders errors the same way wherever it is deployed.

The admin API's app may include its routers on demand (``create_app(..., lazy=True)``, what a Lambda function does
on an on-demand cold start): a request's path names its group (``/api/v1/<segment>/...``), and only the routers
with routes under that segment are imported and included, in their place in the surface's order, before the router
sees the request. Anything that walks the routes (``app.routes``: the OpenAPI document) includes them all first.
Routers of different segments never match the same path, so the answers are those of the app built whole.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import AsyncIterator, Iterable
from typing import Literal

from fastapi import APIRouter, FastAPI
from starlette._utils import get_route_path
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from mcpbridge import __version__
from mcpbridge.bootstrap import Container
from mcpbridge.http.body_deadline import BodyDeadline
from mcpbridge.http.docs import install_docs
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
        "kb_shares",
        "endpoints",
        "services",
        "service_oauth",
        "agents",
        "agent_catalog",
        "agent_reads",
        "oauth_grants",
        "quarantine",
        "webhooks",
        "policy_rules",
        "console",
        "console_oidc",
        "resource_links",
    ),
    "oauth_callback": ("oauth_callback",),
    "resolutions": ("resolutions",),
    "authorization_server": ("oauth_server",),
}


# The path segments after /api/v1/ under which each of the admin API's routers has routes, or for routes outside
# /api/v1 their first segment with its slash (a test checks this against the routers): a request under a segment
# needs these routers only.
_SEGMENTS: dict[str, frozenset[str]] = {
    "agent_calls": frozenset({"agent"}),
    "api_keys": frozenset({"api-keys"}),
    "me": frozenset({"me"}),
    "users": frozenset({"users"}),
    "workspaces": frozenset({"workspaces"}),
    "knowledge": frozenset({"knowledge-bases", "knowledge"}),
    "documents": frozenset({"document-uploads", "documents", "knowledge-bases"}),
    "wiki": frozenset({"knowledge-bases", "wiki"}),
    "kb_shares": frozenset({"knowledge-bases", "shared-knowledge-bases"}),
    "endpoints": frozenset({"mcp-endpoints"}),
    "services": frozenset({"mcp-services"}),
    "service_oauth": frozenset({"mcp-services"}),
    "agents": frozenset({"agents"}),
    "agent_catalog": frozenset({"agent"}),
    "agent_reads": frozenset({"agent"}),
    "oauth_grants": frozenset({"mcp-endpoints", "me", "users"}),
    "calls_audit": frozenset({"calls"}),
    "quarantine": frozenset({"mcp-services", "tool-quarantine"}),
    "webhooks": frozenset({"webhooks"}),
    "policy_rules": frozenset({"policy-rules", "groups"}),
    "console": frozenset({"/console", "/"}),  # the console's pages and session, and the root that leads there
    "console_oidc": frozenset({"/console"}),  # the console's sign-in through the OpenID Connect provider
    "resource_links": frozenset({"/r"}),  # time-limited links to images in knowledge (the token is the credential)
}


def _router(name: str) -> APIRouter:
    router: APIRouter = importlib.import_module(f"mcpbridge.http.routes.{name}").router
    return router


def _routers(names: Iterable[str]) -> list[APIRouter]:
    return [_router(name) for name in names]


def _segment(path: str) -> str:
    """``/api/v1/knowledge-bases/kb_1/documents`` -> ``knowledge-bases``; outside ``/api/v1/<segment>``, the first
    segment with its slash: ``/console/calls`` -> ``/console``, ``/`` -> ``/``."""
    parts = path.split("/", 4)
    if len(parts) > 3 and parts[1:3] == ["api", "v1"]:
        return parts[3]
    return "/" + parts[1] if len(parts) > 1 else ""


class _OnDemandRouters:
    """The routers of a surface not yet included in ``app``; each goes where the whole app would have had it."""

    def __init__(self, app: FastAPI, names: Iterable[str]) -> None:
        self._app = app
        self._order = tuple(names)
        self._pending = set(self._order)
        self._included: dict[str, int] = {}  # name -> how many route entries including it added
        self._start = len(app.router.routes)  # after the health routes, before what is added after the routers

    def include_for(self, path: str) -> None:
        segment = _segment(path)
        if segment:
            for name in [n for n in self._order if n in self._pending and segment in _SEGMENTS[n]]:
                self._include(name)

    def include_all(self) -> None:
        for name in [n for n in self._order if n in self._pending]:
            self._include(name)

    def _include(self, name: str) -> None:
        router = _router(name)
        routes = self._app.router.routes
        before = len(routes)
        self._app.include_router(router)
        added = routes[before:]
        del routes[before:]
        at = self._start + sum(self._included.get(n, 0) for n in self._order[: self._order.index(name)])
        routes[at:at] = added
        self._included[name] = len(added)
        self._pending.discard(name)


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
    on_demand: _OnDemandRouters | None = None

    @property
    def routes(self) -> list[BaseRoute]:
        if self.on_demand is not None:
            self.on_demand.include_all()
        return self.router.routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.on_demand is not None and scope["type"] in ("http", "websocket"):
            self.on_demand.include_for(get_route_path(scope))
        await super().__call__(scope, receive, send)

    def build_middleware_stack(self) -> ASGIApp:
        stack = super().build_middleware_stack()
        if self.mcp_app is not None:
            # The same problem handlers as every route, without walking the routes and FastAPI's layers first.
            stack = McpFirst(with_problems(self.mcp_app), stack)
        if self.body_deadline is not None:
            stack = BodyDeadline(stack, *self.body_deadline)  # inside the request id's layer: its 408 carries the id
        # Outside Starlette's ServerErrorMiddleware, so a 500 it renders carries the request id too.
        return RequestIdMiddleware(stack)


def _app(
    container: Container, routers: Iterable[APIRouter], title: str, *, mcp: bool, on_demand: Iterable[str] = ()
) -> _App:
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
    if on_demand:
        app.on_demand = _OnDemandRouters(app, on_demand)
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


def create_app(container: Container, surface: Surface, *, lazy: bool = False) -> FastAPI:
    """The app of one Lambda function. ``lazy``: the admin API's routers are imported and included when a request
    first needs them (see the module docstring), not now; the other surfaces have one router, included now."""
    title = f"mcpbridge {surface.replace('_', ' ')}"
    names = _SURFACES[surface]
    if lazy and surface == "admin_api":
        return _app(container, (), title, mcp=False, on_demand=names)
    return _app(container, _routers(names), title, mcp=False)


def create_combined_app(container: Container, *, body_deadline: tuple[float, int] | None = None) -> FastAPI:
    """Every surface in one app, for ``mcpbridge serve``; its root sends a browser to the console. With
    ``body_deadline`` (seconds, bytes a second), a request's body must arrive within that many seconds plus one for
    every that many bytes received (:mod:`mcpbridge.http.body_deadline`; behind API Gateway, the gateway receives
    it)."""
    app = _app(container, _routers(n for names in _SURFACES.values() for n in names), "mcpbridge", mcp=True)
    app.body_deadline = body_deadline
    return app
