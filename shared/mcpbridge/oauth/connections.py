"""A user's OAuth connections: the services they hold a token for, as they see them in their own view (``/me``).

Nothing here carries a token: only the service, the token's state (``authorized`` / ``refreshable`` /
``reauth_required``, as :meth:`~mcpbridge.oauth.tokens.StoredToken.state` judges it), its scope and its dates.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcpbridge.client.registry import ServiceRegistry
from mcpbridge.domain.identity import Principal
from mcpbridge.errors import NotFound
from mcpbridge.oauth.rules import USER
from mcpbridge.oauth.tokens import TokenState, TokenStore
from mcpbridge.ports import Clock


@dataclass(frozen=True)
class OAuthConnection:
    service_id: str
    service_name: str
    status: TokenState
    scope: str | None
    connected_at: str
    updated_at: str


def connections_of(
    tokens: TokenStore, registry: ServiceRegistry, clock: Clock, principal: Principal
) -> list[OAuthConnection]:
    found = []
    now = clock.now()
    for token in tokens.of_principal(principal.workspace_id, USER, principal.user_id):
        try:
            service = registry.find(principal.workspace_id, token.service_id)
        except NotFound:
            continue  # the service is being deleted: its tokens go with it
        found.append(
            OAuthConnection(
                service_id=service.id,
                service_name=service.name,
                status=token.state(now),
                scope=token.scope,
                connected_at=token.created_at or token.updated_at,
                updated_at=token.updated_at,
            )
        )
    return found
