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

import anyio

from mcpbridge.client.connection import ConnectionSpec
from mcpbridge.client.specs import connection_spec
from mcpbridge.domain.external_services import ExternalService
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
    *,
    until: float | None = None,
) -> T:
    """Run ``operation`` against an OAuth service for one principal (see the module docstring).

    Several operations refused at once each call ``force_refresh`` with the token they sent: one refreshes under
    the lease, the others get the token it stored. With ``until`` (on anyio's clock, a synchronous request's
    budget), getting or refreshing a token ends by then (else ``UpstreamError`` ``oauth_refresh_failed``, retryable;
    ``operation`` keeps to the same end by itself, see :func:`mcpbridge.client.connection.probe`).

    Raises :class:`~mcpbridge.errors.OAuthRequired` when the principal has no usable token (before any connection,
    or when the forced refresh is refused), and whatever ``operation`` raises otherwise."""
    bearer = await _by(until, service, tokens.bearer_for(workspace_id, service, principal_type, principal_id))
    try:
        return await operation(oauth_connection_spec(service, bearer))
    except UpstreamError as exc:
        if exc.code != "upstream_unauthorized":
            raise
    renewed = await _by(
        until,
        service,
        tokens.force_refresh(workspace_id, service, principal_type, principal_id, rejected=bearer),
    )
    return await operation(oauth_connection_spec(service, renewed))


async def _by(until: float | None, service: ExternalService, getting: Awaitable[str]) -> str:
    if until is None:
        return await getting
    left = max(0.0, round(until - anyio.current_time(), 2))
    try:
        with anyio.fail_after(left):
            return await getting
    except TimeoutError:
        raise UpstreamError(
            f"getting the OAuth token of {service.name} did not finish within {left:g} s; try again",
            code="oauth_refresh_failed",
            details={"timeout_seconds": left},
        ) from None
