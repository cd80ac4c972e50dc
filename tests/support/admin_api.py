"""An admin's REST client on a container's combined app, in process (no server, no network)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx

from mcpbridge.bootstrap import Container
from mcpbridge.http.apps import create_combined_app


@contextlib.asynccontextmanager
async def admin_api(container: Container) -> AsyncIterator[httpx.AsyncClient]:
    """A client holding the admin key of a freshly initialised ``container``."""
    key = container.identity.initialize().api_key
    transport = httpx.ASGITransport(app=create_combined_app(container))
    async with httpx.AsyncClient(
        transport=transport, base_url="http://mcpbridge.test", headers={"Authorization": f"Bearer {key}"}
    ) as client:
        yield client
