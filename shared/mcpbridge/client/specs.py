"""How a registered service becomes a connection: exactly one auth strategy, custom headers layered on top."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from anyio import to_thread

from mcpbridge.client.connection import ConnectionSpec
from mcpbridge.client.registry import ServiceRegistry
from mcpbridge.domain.external_services import ExternalService
from mcpbridge.domain.identity import Principal
from mcpbridge.errors import OAuthRequired

if TYPE_CHECKING:
    from mcpbridge.client.oauth_calls import BearerSource


def auth_headers(service: ExternalService, secrets: Mapping[str, str]) -> dict[str, str]:
    """The header of the service's one auth strategy (none when its secret is not configured).

    OAuth services get their bearer token from the OAuth flow, not from here.
    """
    auth = service.auth
    if auth.auth_type == "api_key" and secrets.get("api_key"):
        return {auth.api_key_header: secrets["api_key"]}
    if auth.auth_type == "bearer" and secrets.get("token"):
        return {"Authorization": f"Bearer {secrets['token']}"}
    return {}


def connection_spec(service: ExternalService, secrets: Mapping[str, str]) -> ConnectionSpec:
    """The :class:`ConnectionSpec` of a registered service.

    Headers: the auth strategy's header, then the custom headers (which go last so an admin can override the
    strategy's header on purpose). From ``advanced_config``: ``timeout`` bounds each operation, ``retry_count`` /
    ``retry_delay`` are how often and how far apart establishing the connection is retried when nothing can have
    run upstream (see :meth:`mcpbridge.client.connection.Connection._connect`); a sent request is never retried.
    """
    headers = {**auth_headers(service, secrets), **service.headers}
    advanced = service.advanced
    return ConnectionSpec(
        url=service.url,
        transport=service.transport,
        headers=headers,
        timeout=advanced.timeout,
        retry_count=advanced.retry_count,
        retry_delay=advanced.retry_delay,
    )


class SpecSource:
    """Connection specs of services as a principal sees them: the service's stored secrets opened (a blocking
    SecretBox call, run off the event loop), or for an OAuth service the principal's own token (refreshed when
    due; :class:`~mcpbridge.errors.OAuthRequired` when the principal has none)."""

    def __init__(self, registry: ServiceRegistry, oauth: Callable[[], BearerSource] | None = None) -> None:
        self._registry = registry
        self._oauth = oauth

    async def __call__(self, service: ExternalService, principal: Principal) -> ConnectionSpec:
        if service.auth.auth_type == "oauth":
            if self._oauth is None:
                raise OAuthRequired(f"{service.name} uses OAuth, which is not configured here", code="oauth_required")
            from mcpbridge.client.oauth_calls import oauth_connection_spec

            bearer = await self._oauth().bearer_for(principal.workspace_id, service, "user", principal.user_id)
            return oauth_connection_spec(service, bearer)
        secrets = await to_thread.run_sync(self._registry.connection_secrets, service)
        return connection_spec(service, secrets)
