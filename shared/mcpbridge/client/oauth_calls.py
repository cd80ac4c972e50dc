"""Operations on OAuth services for one principal. The spec (:func:`~mcpbridge.client.specs.oauth_connection_spec`)
carries a :class:`~mcpbridge.client.bearer_auth.BearerAuth`, which adds the principal's token to every request and
on a 401 makes exactly one forced refresh and one resend; nothing else is retried here, and no caller handles a
token.

A 401 means the server refused the credentials before running anything, so sending the request again with a new
token cannot run it twice. Any other failure (``outcome_unknown`` above all) is passed on untouched. A second 401
after the refresh is passed on as well: the fresh token is refused too, so repeating would not help.

Works with any ``async (ConnectionSpec) -> T`` operation, e.g.::

    async def tools(spec: ConnectionSpec) -> list[Tool]:
        async with Connection(spec, policy) as connection:
            return await connection.list_tools()

    listed = await call_with_oauth(container.oauth, service, "ws_...", "user", "usr_...", tools)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from mcpbridge.client.bearer_auth import BearerSource
from mcpbridge.client.connection import ConnectionSpec
from mcpbridge.client.specs import oauth_connection_spec
from mcpbridge.domain.external_services import ExternalService
from mcpbridge.errors import UpstreamError

T = TypeVar("T")


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

    The principal's token is looked up first, so a principal without one is told so (``OAuthRequired``) before any
    connection. With ``until`` (on anyio's clock, a synchronous request's budget), getting or refreshing a token ends
    by then (else ``UpstreamError`` ``oauth_refresh_failed``, retryable; ``operation`` keeps to the same end by
    itself, see :func:`mcpbridge.client.connection.probe`)."""
    await _by(until, service, tokens.bearer_for(workspace_id, service, principal_type, principal_id))
    return await operation(
        oauth_connection_spec(service, tokens, workspace_id, principal_type, principal_id, until=until)
    )


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
