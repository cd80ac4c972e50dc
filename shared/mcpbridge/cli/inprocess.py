"""The REST API in this process, for ``services authorize``, which acts on the data itself as the operator.

A request to the REST routes, sent through an ASGI transport (no socket, no server): the routes'
own validation, authority checks, services and views answer them, so the command line applies exactly the API's
rules and, with ``--json``, prints exactly its bodies. As the operator, the route's principal is one with full
authority in the workspace the command acts in, as a pseudo-user ``operator`` (what it resolves or creates is
recorded as done by ``operator``); with ``MCPBRIDGE_API_KEY`` set, the key is presented as any REST client would
present it and the API authenticates it on every request.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
from collections.abc import AsyncIterator, MutableMapping
from typing import Any

import anyio
import httpx2

from mcpbridge.bootstrap import Container
from mcpbridge.cli.api import Problem
from mcpbridge.cli.context import acting_workspace, known_user
from mcpbridge.domain.identity import Principal, Scope
from mcpbridge.errors import InvalidInput
from mcpbridge.oauth.redirects import origin_of
from mcpbridge.settings import Settings

OPERATOR_USER_ID = "operator"
API_KEY_ENV = "MCPBRIDGE_API_KEY"
DEFAULT_BASE_URL = "http://127.0.0.1:8080"
"""Where ``mcpbridge serve`` listens by default: the base of the URLs the API shows when no public URL is set."""
REQUEST_SECONDS = 60.0
"""A bound on one in-process request (the routes bound their own outbound calls well inside it)."""
_RESOLUTION_PATHS = ("/api/v1/agent/tool-approvals/", "/api/v1/agent/mcp-oauth-resolutions/")


def operator_principal(workspace_id: str, user_id: str = OPERATOR_USER_ID) -> Principal:
    """Full authority in the workspace, without an API key: the operator holds the data anyway."""
    return Principal(workspace_id, user_id, "", "admin", Scope())


class Api:
    """Requests to the REST routes; an answer of 400 or more raises :class:`Problem`."""

    def __init__(self, client: httpx2.AsyncClient, principal: Principal | None, settings: Settings) -> None:
        self._client = client
        self.principal = principal
        """The operator's principal, or None when the API key of MCPBRIDGE_API_KEY is presented instead."""
        self.settings = settings

    def same_origin(self, url: str) -> bool:
        """Whether ``url`` is one of the API's own (answered in this process), not another server's."""
        origin = origin_of(url)
        return origin is not None and origin == origin_of(str(self._client.base_url))

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        with anyio.fail_after(REQUEST_SECONDS):
            response = await self._client.request(method, path, **kwargs)
        body: Any = None
        if response.content:
            try:
                body = response.json()
            except ValueError:
                body = {"detail": response.text[:500]}
        if response.status_code >= 400:
            raise Problem(response.status_code, body if isinstance(body, dict) else {})
        return body

    async def get(self, path: str, **kwargs: Any) -> Any:
        return await self.request("GET", path, **kwargs)


class _Surfaces:
    """One ASGI app over the API's and the resolutions' apps (two Lambda functions on AWS, one process here)."""

    def __init__(self, api: Any, resolutions: Any) -> None:
        self._api = api
        self._resolutions = resolutions

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        resolving = str(scope.get("path", "")).startswith(_RESOLUTION_PATHS)
        await (self._resolutions if resolving else self._api)(scope, receive, send)


@contextlib.asynccontextmanager
async def connect(
    container: Container, args: argparse.Namespace, *, user: str | None = None, operator: bool = False
) -> AsyncIterator[Api]:
    """The API as the operator in ``--workspace`` (or as ``user``, with the operator's authority), or as the key of
    MCPBRIDGE_API_KEY (unless ``operator``: commands that only an operator runs)."""
    from mcpbridge.http.apps import create_app
    from mcpbridge.http.auth import current_principal

    key = "" if operator else os.environ.get(API_KEY_ENV, "").strip()
    headers: dict[str, str] = {}
    principal: Principal | None = None
    if key:
        if getattr(args, "workspace", None) or user:
            raise InvalidInput(
                f"--workspace and --user do not apply with {API_KEY_ENV} set: the key names its workspace and user",
                code="invalid_arguments",
            )
        headers["Authorization"] = f"Bearer {key}"
    else:
        workspace_id = await anyio.to_thread.run_sync(acting_workspace, container, getattr(args, "workspace", None))
        acting = OPERATOR_USER_ID
        if user is not None:
            acting = await anyio.to_thread.run_sync(known_user, container, workspace_id, user)
        principal = operator_principal(workspace_id, acting)
    apps = [create_app(container, "admin_api"), create_app(container, "resolutions")]
    if principal is not None:
        for app in apps:
            app.dependency_overrides[current_principal] = functools.partial(_fixed, principal)
    transport = httpx2.ASGITransport(app=_Surfaces(*apps), raise_app_exceptions=False)
    base_url = container.settings.public_base_url.rstrip("/") or DEFAULT_BASE_URL
    try:
        async with httpx2.AsyncClient(transport=transport, base_url=base_url, headers=headers) as client:
            yield Api(client, principal, container.settings)
    finally:
        pool = container.__dict__.get("connections")  # connections to external services a route opened
        if pool is not None:
            await pool.aclose()


def _fixed(principal: Principal) -> Principal:
    return principal
