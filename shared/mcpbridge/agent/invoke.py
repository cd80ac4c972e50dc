"""Calling one tool of an external service for a user: the cached connection of the right scope, the service's
credentials (or the user's OAuth bearer, as the connection's auth), the connection layer's recovery rules, nothing
more.

Retries are the connection layer's alone (one reconnect when the upstream rejected the session; for OAuth services
one forced token refresh and one resend on 401, by the connection's auth). Anything else that fails after the
request left is :class:`~mcpbridge.client.connection.OutcomeUnknown` and is never replayed here.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from anyio import to_thread

from mcpbridge.client.input_relay import InputRelay, relaying
from mcpbridge.client.pool import ConnectionPools, PoolKey
from mcpbridge.client.registry import ServiceRegistry
from mcpbridge.domain.external_services import WORKSPACE_SCOPE, ExternalService
from mcpbridge.errors import Conflict
from mcpbridge.observability import NoTelemetry
from mcpbridge.ports import Telemetry

if TYPE_CHECKING:
    from mcpbridge.client.bearer_auth import BearerSource
    from mcpbridge.client.connection import ConnectionSpec


class ToolInvoker:
    def __init__(
        self,
        registry: ServiceRegistry,
        pools: ConnectionPools,
        tokens: BearerSource | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        """``tokens``: where users' OAuth bearers come from (None: OAuth services cannot be called here);
        ``telemetry``: a span around each upstream call, and its latency (``UpstreamLatency``)."""
        self._registry = registry
        self._pools = pools
        self._tokens = tokens
        self._telemetry = telemetry or NoTelemetry()

    async def call(
        self,
        service: ExternalService,
        workspace_id: str,
        user_id: str,
        tool_name: str,
        arguments: Mapping[str, Any],
        *,
        until: float | None = None,
        secrets: Mapping[str, str] | None = None,
        relay: InputRelay | None = None,
    ) -> dict[str, Any]:
        """The tool's result as sent (``CallToolResult`` as JSON: content, structuredContent, isError). ``until`` (on
        anyio's clock): everything, connecting included, ends by then (a synchronous request's budget).
        ``secrets``: the service's opened credentials (``ServiceRegistry.connection_secrets``), when the caller
        read them already in a worker thread of its own; read here otherwise. ``relay``: what answers the upstream's
        own questions during the call (:mod:`mcpbridge.client.input_relay`; without one they are declined)."""
        from mcpbridge.client.specs import connection_spec, oauth_connection_spec

        spec: ConnectionSpec
        if service.auth.auth_type == "oauth":
            if self._tokens is None:
                raise Conflict(f"{service.name} uses OAuth, which is not configured here", code="oauth_required")
            # A user without a token is refused here, before a request could go out without one.
            await self._tokens.bearer_for(workspace_id, service, "user", user_id)
            spec, scope = oauth_connection_spec(service, self._tokens, workspace_id, "user", user_id), f"user:{user_id}"
        else:
            if secrets is None:
                secrets = await to_thread.run_sync(self._registry.connection_secrets, service)
            spec, scope = connection_spec(service, secrets), WORKSPACE_SCOPE
        pool = self._pools.for_running_loop()
        started = time.monotonic()
        with self._telemetry.span("upstream.call_tool", service_id=service.id, tool=tool_name[:100]):
            try:
                async with pool.session(PoolKey(service.id, scope), spec, until=until) as connection:
                    with relaying(relay):
                        result = await connection.call_tool(tool_name, arguments, until=until)
            finally:
                self._telemetry.count("UpstreamLatency", (time.monotonic() - started) * 1000, unit="Milliseconds")
        dumped: dict[str, Any] = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        return dumped
