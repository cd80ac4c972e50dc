"""The per-operation rule for OAuth services: get the bearer (refreshed first when due), connect with it, run the
operation; on ``upstream_unauthorized`` exactly one forced refresh and one retry; nothing else is retried here.

A 401 means the server refused the credentials before running anything, so repeating the operation with a new
token cannot run it twice. Any other failure (``outcome_unknown`` above all) is passed on untouched. A second 401
after the refresh is passed on as well: the fresh token is refused too, so repeating would not help.

Works with any ``async (ConnectionSpec) -> T`` operation, e.g.::

    async def tools(spec: ConnectionSpec) -> list[Tool]:
        async with Connection(spec, policy) as connection:
            return await connection.list_tools()

    listed = await call_with_oauth(container.oauth, service, "ws_...", "user", "usr_...", tools)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from mcpbridge.client.connection import ConnectionSpec
from mcpbridge.client.registry import ExternalService
from mcpbridge.client.specs import connection_spec
from mcpbridge.errors import UpstreamError

T = TypeVar("T")


class BearerSource(Protocol):
    """Where bearer tokens come from (:class:`mcpbridge.oauth.manager.OAuthManager`)."""

    async def bearer_for(
        self, workspace_id: str, service: ExternalService, principal_type: str, principal_id: str
    ) -> str: ...

    async def force_refresh(
        self,
        workspace_id: str,
        service: ExternalService,
        principal_type: str,
        principal_id: str,
        *,
        rejected: str | None = None,
    ) -> str: ...


def oauth_connection_spec(service: ExternalService, bearer: str) -> ConnectionSpec:
    """The service's connection spec with ``Authorization: Bearer``; custom headers still layered on top (as
    :func:`~mcpbridge.client.specs.connection_spec` does for the other strategies)."""
    base = connection_spec(service, {})
    return dataclasses.replace(base, headers={"Authorization": f"Bearer {bearer}", **service.headers})


async def call_with_oauth(
    tokens: BearerSource,
    service: ExternalService,
    workspace_id: str,
    principal_type: str,
    principal_id: str,
    operation: Callable[[ConnectionSpec], Awaitable[T]],
) -> T:
    """Run ``operation`` against an OAuth service for one principal (see the module docstring).

    Raises :class:`~mcpbridge.errors.OAuthRequired` when the principal has no usable token (before any connection,
    or when the forced refresh is refused), and whatever ``operation`` raises otherwise."""
    bearer = await tokens.bearer_for(workspace_id, service, principal_type, principal_id)
    try:
        return await operation(oauth_connection_spec(service, bearer))
    except UpstreamError as exc:
        if exc.code != "upstream_unauthorized":
            raise
    renewed = await tokens.force_refresh(workspace_id, service, principal_type, principal_id, rejected=bearer)
    return await operation(oauth_connection_spec(service, renewed))
