"""FastAPI app factories, one per Lambda function, plus the combined app that ``mcpbridge serve`` runs.

Each surface is a set of routers; every app gets the same problem+json handlers and health routes, so a
function answers ``/healthz`` and ``/readyz`` and renders errors the same way wherever it is deployed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from fastapi import APIRouter, FastAPI

from mcpbridge import __version__
from mcpbridge.bootstrap import Container
from mcpbridge.http.problems import install_problem_handlers
from mcpbridge.http.routes import api_keys, documents, health, knowledge, mcp, oauth_callback, resolutions, wiki

Surface = Literal["admin_api", "mcp_endpoint", "oauth_callback", "resolutions"]

_SURFACES: dict[Surface, tuple[APIRouter, ...]] = {
    "admin_api": (api_keys.router, knowledge.router, documents.router, wiki.router),
    "mcp_endpoint": (mcp.router,),
    "oauth_callback": (oauth_callback.router,),
    "resolutions": (resolutions.router,),
}


def _app(container: Container, routers: Iterable[APIRouter], title: str) -> FastAPI:
    app = FastAPI(
        title=title,
        version=__version__,
        openapi_url="/api/v1/openapi.json",
        docs_url="/api/v1/docs",
        redoc_url=None,
    )
    app.state.container = container
    install_problem_handlers(app)
    app.include_router(health.router)
    for router in routers:
        app.include_router(router)
    return app


def create_app(container: Container, surface: Surface) -> FastAPI:
    """The app of one Lambda function."""
    return _app(container, _SURFACES[surface], f"mcpbridge {surface.replace('_', ' ')}")


def create_combined_app(container: Container) -> FastAPI:
    """Every surface in one app, for ``mcpbridge serve``."""
    return _app(container, [r for routers in _SURFACES.values() for r in routers], "mcpbridge")
