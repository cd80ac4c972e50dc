"""What an OAuth access token opens on ``/mcp/<ep>``, decided on every request from the store (nothing cached).

The token must be one this server issued for *this* endpoint (its audience: a token of endpoint A is refused at B,
whatever workspace either is in), unexpired, of a grant that still stands on what it was made from (the API key or
identity signed in with, an active user: ``Grants.standing``), on an endpoint that accepts OAuth, is enabled, and
whose workspace is active. The call then runs as that user, with

    tools     = the endpoint's tools whose group is in: the token's scopes, the user's capabilities and (after a
                sign-in with an API key) that key's capabilities;
    knowledge = the endpoint's knowledge bases, within the user's and (likewise) the key's.

This module is on the MCP endpoint's request path: it imports no Authlib and nothing of the sign-in flow.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from mcpbridge.authserver.grants import Grant, Grants
from mcpbridge.authserver.tokens import Tokens
from mcpbridge.domain.identity import Scope
from mcpbridge.domain.knowledge import KnowledgeAccess
from mcpbridge.errors import Forbidden, Unauthenticated
from mcpbridge.identity.records import access_of
from mcpbridge.publishing.endpoints import Endpoint, EndpointService
from mcpbridge.publishing.offered_tools import BY_NAME


@dataclass(frozen=True)
class OAuthCaller:
    """Who an OAuth call runs as, and what it may reach."""

    endpoint: Endpoint
    user_id: str
    client_id: str
    grant: Grant
    tools: tuple[str, ...]
    access: KnowledgeAccess


class OAuthAccess:
    def __init__(self, endpoints: EndpointService, grants: Grants, tokens: Tokens) -> None:
        self._endpoints = endpoints
        self._grants = grants
        self._tokens = tokens

    def authenticate(self, endpoint_id: str, token: str) -> OAuthCaller:
        """Raises ``Unauthenticated`` (``invalid_token``: unknown, expired, revoked, for another endpoint, of a grant
        whose key or identity is gone; ``oauth_not_accepted``) or ``Forbidden`` (``endpoint_disabled``,
        ``workspace_inactive``, ``user_inactive``)."""
        endpoint = self._endpoints.find(endpoint_id)
        if endpoint is None:
            raise _invalid()
        if not endpoint.accepts_oauth:
            raise Unauthenticated(
                "this endpoint accepts its static token only, not OAuth access tokens", code="oauth_not_accepted"
            )
        item = self._tokens.access(endpoint.workspace_id, token)
        if item is None or not hmac.compare_digest(str(item.get("endpoint_id")).encode(), endpoint.id.encode()):
            raise _invalid()
        self._endpoints.require_open(endpoint)
        grant = self._grants.live(
            endpoint.workspace_id, item["user_id"], endpoint.id, item["client_id"], item["generation"]
        )
        if grant is None:
            raise _invalid()
        standing = self._grants.standing(grant)
        if standing.verdict == "gone":
            self._grants.revoke(grant, why=standing.why)
            raise _invalid()
        if standing.user is None:
            raise Forbidden(f"this token's grant is suspended: {standing.why}", code=standing.code)
        allowed = Scope(capabilities=frozenset(item.get("scopes") or ()))
        return authority(endpoint, grant, access_of(standing.user), allowed)


def authority(endpoint: Endpoint, grant: Grant, user_access: Scope, token_scope: Scope) -> OAuthCaller:
    """The endpoint's tools and knowledge bases within every bound: token scopes, the user's access, the key's."""
    bounds = (token_scope, user_access, grant.key_scope)
    tools = tuple(t for t in endpoint.tools if t in BY_NAME and all(b.allows(BY_NAME[t].capability) for b in bounds))
    kb_ids = frozenset(endpoint.knowledge_base_ids) if endpoint.knowledge_base_ids else None
    for bound in (user_access, grant.key_scope):
        if bound.knowledge_base_ids is not None:
            kb_ids = bound.knowledge_base_ids if kb_ids is None else kb_ids & bound.knowledge_base_ids
    return OAuthCaller(
        endpoint=endpoint,
        user_id=grant.user_id,
        client_id=grant.client_id,
        grant=grant,
        tools=tools,
        access=KnowledgeAccess(endpoint.workspace_id, kb_ids),
    )


def _invalid() -> Unauthenticated:
    return Unauthenticated("the access token is not valid for this endpoint", code="invalid_token")
