"""An admin's REST client on a container's combined app, in process (no server, no network): asynchronous
(:func:`admin_api`) or Starlette's ``TestClient`` (:func:`admin_client`)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator

import httpx
from fastapi.testclient import TestClient

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


@contextlib.contextmanager
def admin_client(container: Container, base_url: str = "http://testserver") -> Iterator[TestClient]:
    """A ``TestClient`` of the combined app (its lifespan run; a server error answered as a 500, not raised) holding
    the admin key of a freshly initialised ``container``."""
    with TestClient(create_combined_app(container), base_url=base_url, raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {container.identity.initialize().api_key}"
        yield client
