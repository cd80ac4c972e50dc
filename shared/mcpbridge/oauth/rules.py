"""Rules every OAuth operation applies: who a token belongs to, which services use OAuth, whether a stored token
still fits its service (RFC 8707), what a missing token is called, and which client a token was issued to."""

from __future__ import annotations

from anyio import to_thread

from mcpbridge.domain.external_services import ExternalService
from mcpbridge.errors import Conflict, InvalidInput, OAuthRequired
from mcpbridge.oauth.discovery import Discovery
from mcpbridge.oauth.registration import ClientIdentities, ClientIdentity
from mcpbridge.oauth.tokens import StoredToken, TokenOrigin, TokenRefused

USER = "user"
"""The principal type of a REST caller; its id is ``Principal.user_id``."""
DISCOVERY_TIMEOUT = 15.0
MAX_PRINCIPAL_CHARS = 128


def require_oauth(service: ExternalService) -> None:
    if service.auth.auth_type != "oauth":
        raise Conflict(f"the MCP service {service.name} does not use OAuth", code="service_not_oauth")


def check_principal(principal_type: str, principal_id: str) -> None:
    for value in (principal_type, principal_id):
        if not isinstance(value, str) or not 0 < len(value) <= MAX_PRINCIPAL_CHARS or "#" in value:
            raise InvalidInput("invalid principal for an OAuth token", code="invalid_principal")


def oauth_required(service: ExternalService, reason: str) -> OAuthRequired:
    return OAuthRequired(
        f"the MCP service {service.name} needs an OAuth authorization by this user",
        details={"service_id": service.id, "reason": reason},
    )


def discovery_timeout(service: ExternalService) -> float:
    return min(service.advanced.timeout, DISCOVERY_TIMEOUT)


def bound(token: StoredToken, service: ExternalService) -> bool:
    """Whether the token was issued for the service's current URL (RFC 8707): a changed URL never gets it."""
    from mcp.shared.auth_utils import check_resource_allowed, resource_url_from_server_url

    if not token.resource:
        return True
    return check_resource_allowed(
        requested_resource=resource_url_from_server_url(service.url), configured_resource=token.resource
    )


def token_origin(discovery: Discovery, client: ClientIdentity) -> TokenOrigin:
    return TokenOrigin(
        issuer=discovery.issuer,
        token_endpoint=str(discovery.metadata.token_endpoint),
        revocation_endpoint=discovery.revocation_endpoint,
        resource=discovery.resource,
        client=client,
    )


async def client_of(clients: ClientIdentities, token: StoredToken, service: ExternalService) -> ClientIdentity | None:
    """The client ``token`` was issued to (None when it is gone: the token can no longer be refreshed or revoked)."""
    return await clients.for_token(
        token.workspace_id,
        service,
        source=token.client_source,
        client_id=token.client_id,
        auth_method=token.client_auth_method,
        record=token.client_record,
    )


async def drop_client_if_refused(
    clients: ClientIdentities, refused: TokenRefused, workspace_id: str, client: ClientIdentity
) -> None:
    """``invalid_client`` and the like: the registered client is gone for good, register anew next time."""
    if refused.verdict == "drop_client" and client.record is not None:
        record = client.record
        await to_thread.run_sync(lambda: clients.registrations.drop(workspace_id, record))
