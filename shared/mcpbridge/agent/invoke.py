"""Calling one tool of an external service for a user: the cached connection of the right scope, the service's
credentials (or the user's OAuth token), the connection layer's recovery rules, nothing more.

Retries are the connection layer's alone (one reconnect when the upstream rejected the session; for OAuth services
one forced token refresh on 401). Anything else that fails after the request left is
:class:`~mcpbridge.client.connection.OutcomeUnknown` and is never replayed here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from anyio import to_thread

from mcpbridge.client.pool import ConnectionPools, PoolKey
from mcpbridge.client.registry import ServiceRegistry
from mcpbridge.domain.external_services import WORKSPACE_SCOPE, ExternalService

if TYPE_CHECKING:
    from mcpbridge.client.connection import ConnectionSpec

OAuthRunner = Callable[
    [ExternalService, str, str, Callable[["ConnectionSpec"], Awaitable[dict[str, Any]]]], Awaitable[dict[str, Any]]
]
"""``(service, workspace_id, user_id, operation) -> result``: runs ``operation`` with a spec carrying the user's
fresh token, refreshing once on 401 (see :mod:`mcpbridge.client.oauth_calls`)."""


class ToolInvoker:
    def __init__(self, registry: ServiceRegistry, pools: ConnectionPools, oauth: OAuthRunner | None = None) -> None:
        self._registry = registry
        self._pools = pools
        self._oauth = oauth

    async def call(
        self, service: ExternalService, workspace_id: str, user_id: str, tool_name: str, arguments: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The tool's result as sent (``CallToolResult`` as JSON: content, structuredContent, isError)."""
        from mcpbridge.client.specs import connection_spec

        async def on(spec: ConnectionSpec, scope: str) -> dict[str, Any]:
            pool = self._pools.for_running_loop()
            async with pool.session(PoolKey(service.id, scope), spec) as connection:
                result = await connection.call_tool(tool_name, arguments)
            dumped: dict[str, Any] = result.model_dump(mode="json", by_alias=True, exclude_none=True)
            return dumped

        if service.auth.auth_type == "oauth":
            if self._oauth is None:
                from mcpbridge.errors import Conflict

                raise Conflict(f"{service.name} uses OAuth, which is not configured here", code="oauth_required")

            async def with_token(spec: ConnectionSpec) -> dict[str, Any]:
                return await on(spec, f"user:{user_id}")

            return await self._oauth(service, workspace_id, user_id, with_token)
        secrets = await to_thread.run_sync(self._registry.connection_secrets, service)
        return await on(connection_spec(service, secrets), WORKSPACE_SCOPE)
