"""How a registered service becomes a connection: exactly one auth strategy, custom headers layered on top."""

from __future__ import annotations

from collections.abc import Mapping

from mcpbridge.client.connection import ConnectionSpec
from mcpbridge.client.registry import ExternalService


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
    # Custom headers go last so an admin can override the strategy's header on purpose.
    headers = {**auth_headers(service, secrets), **service.headers}
    return ConnectionSpec(
        url=service.url, transport=service.transport, headers=headers, timeout=service.advanced.timeout
    )
