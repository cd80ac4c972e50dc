"""How a registered service becomes a connection: exactly one auth strategy, custom headers layered on top. For an
OAuth service the strategy is the principal's bearer, as the connection's auth (``client/bearer_auth``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from anyio import to_thread

from mcpbridge.client.bearer_auth import BearerAuth, BearerSource
from mcpbridge.client.connection import ConnectionSpec
from mcpbridge.client.registry import ServiceRegistry
from mcpbridge.domain.external_services import ExternalService
from mcpbridge.domain.identity import Principal
from mcpbridge.errors import OAuthRequired


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


def oauth_connection_spec(
    service: ExternalService,
    tokens: BearerSource,
    workspace_id: str,
    principal_type: str,
    principal_id: str,
    *,
    until: float | None = None,
) -> ConnectionSpec:
    """The service's connection spec with the principal's bearer as the connection's auth; custom headers still
    layered on top (an ``Authorization`` custom header wins, as over the other strategies). ``until``: see
    :class:`~mcpbridge.client.bearer_auth.BearerAuth`."""
    auth = BearerAuth(tokens, workspace_id, service, principal_type, principal_id, until=until)
    return dataclasses.replace(connection_spec(service, {}), auth=auth)


class SpecSource:
    """Connection specs of services as a principal sees them: the service's stored secrets opened (a blocking
    SecretBox call, run off the event loop), or for an OAuth service the principal's own bearer as the connection's
    auth (:class:`~mcpbridge.errors.OAuthRequired` at once when the principal has no token)."""

    def __init__(self, registry: ServiceRegistry, oauth: Callable[[], BearerSource] | None = None) -> None:
        self._registry = registry
        self._oauth = oauth

    async def __call__(self, service: ExternalService, principal: Principal) -> ConnectionSpec:
        if service.auth.auth_type == "oauth":
            if self._oauth is None:
                raise OAuthRequired(f"{service.name} uses OAuth, which is not configured here", code="oauth_required")
            tokens = self._oauth()
            await tokens.bearer_for(principal.workspace_id, service, "user", principal.user_id)  # none: refused now
            return oauth_connection_spec(
                tokens=tokens,
                service=service,
                workspace_id=principal.workspace_id,
                principal_type="user",
                principal_id=principal.user_id,
            )
        secrets = await to_thread.run_sync(self._registry.connection_secrets, service)
        return connection_spec(service, secrets)
