"""OAuth 2.x for external MCP services, as the HTTP routes, the connection layer and the agent use it: one object
over the operations, each in a module named for what it does.

    ServiceOAuth
      start_authorization(principal, service_id, frontend_redirect=None, *, base_url=None, redirect_uri=None)
                                        -> AuthorizationStart          (oauth/authorization)
      complete_callback(state, code, iss, error)    -> CallbackOutcome     (oauth/authorization)
      status(principal, service_id, attempt_id=None) -> OAuthStatus        (oauth/authorization)
      revoke(principal, service_id)                  -> bool               (oauth/revocation, RFC 7009)
      connections(principal) / disconnect(principal, service_id)          the caller's own tokens, every service
      assertion_grant(principal, service_id, assertion, scopes=None, *, base_url=None) -> OAuthStatus
                                                                           (oauth/assertion, RFC 7523)
      bearer_for / force_refresh(workspace_id, service, principal_type, principal_id)  (oauth/refresh)
      on_token_stored(listener) / on_token_removed(listener)               (oauth/token_events)

**Principals.** Tokens belong to a principal of a workspace, named by ``(principal_type, principal_id)``. A REST
caller is ``("user", principal.user_id)`` (:data:`~mcpbridge.oauth.rules.USER`): every API key of that user shares
the token.

**Stateless instances.** Nothing lives in memory between requests: the state of an authorization, the registered
clients and the tokens are store items (:mod:`~mcpbridge.oauth.attempts`, :mod:`~mcpbridge.oauth.registration`,
:mod:`~mcpbridge.oauth.tokens`), so the callback may land on any instance and any instance may refresh.

Errors: :class:`~mcpbridge.errors.OAuthRequired` (403 ``oauth_required``) when no usable token exists;
``UpstreamError`` (retryable) when the authorization server cannot be reached or fails (the token is kept);
``InvalidInput`` for bad input and refused URLs; ``Conflict`` ``service_not_oauth`` / ``oauth_client_required`` /
``oauth_assertion_unsupported``. No message carries a token, a code, a state or a secret.
"""

from __future__ import annotations

from collections.abc import Sequence

from mcpbridge.client.registry import ServiceRegistry
from mcpbridge.domain.external_services import ExternalService
from mcpbridge.domain.identity import Principal
from mcpbridge.oauth.assertion import AssertionGrants
from mcpbridge.oauth.attempts import AuthorizationAttempts
from mcpbridge.oauth.authorization import (
    CALLBACK_TIMEOUT,
    Authorizations,
    AuthorizationStart,
    CallbackOutcome,
    OAuthStatus,
)
from mcpbridge.oauth.connections import OAuthConnection, connections_of
from mcpbridge.oauth.refresh import Bearers
from mcpbridge.oauth.registration import ClientIdentities, ClientRegistrations
from mcpbridge.oauth.revocation import Revocations
from mcpbridge.oauth.token_events import TokenEvents, TokenListener
from mcpbridge.oauth.tokens import TokenStore
from mcpbridge.outbound.policy import EgressPolicy
from mcpbridge.ports import Clock, SecretBox, Store, Telemetry


class ServiceOAuth:
    """OAuth 2.x for external MCP services, per principal, over the store (see the module docstring)."""

    def __init__(
        self,
        *,
        store: Store,
        clock: Clock,
        secrets: SecretBox,
        registry: ServiceRegistry,
        egress: EgressPolicy,
        public_base_url: str = "",
        frontend_urls: Sequence[str] = (),
        client_metadata_url: str = "",
        telemetry: Telemetry,
    ) -> None:
        tokens = TokenStore(store, clock, secrets)
        self._tokens, self._registry, self._clock = tokens, registry, clock
        clients = ClientIdentities(ClientRegistrations(store, clock, secrets), registry, egress, client_metadata_url)
        self.events = TokenEvents()
        self.authorizations = Authorizations(
            clock=clock,
            registry=registry,
            egress=egress,
            tokens=tokens,
            attempts=AuthorizationAttempts(store, clock, secrets),
            clients=clients,
            events=self.events,
            public_base_url=public_base_url,
            frontend_urls=frontend_urls,
        )
        self.revocations = Revocations(
            registry=registry, egress=egress, tokens=tokens, clients=clients, events=self.events
        )
        self.assertions = AssertionGrants(
            clock=clock, registry=registry, egress=egress, tokens=tokens, clients=clients, events=self.events
        )
        self.bearers = Bearers(
            clock=clock, egress=egress, tokens=tokens, clients=clients, events=self.events, telemetry=telemetry
        )

    def on_token_stored(self, listener: TokenListener) -> None:
        self.events.on_token_stored(listener)

    def on_token_removed(self, listener: TokenListener) -> None:
        self.events.on_token_removed(listener)

    def callback_url(self, base_url: str | None = None) -> str:
        return self.authorizations.callback_url(base_url)

    def client_metadata_document(self, base_url: str | None = None) -> dict[str, object] | None:
        return self.authorizations.client_metadata_document(base_url)

    async def start_authorization(
        self,
        principal: Principal,
        service_id: str,
        frontend_redirect: str | None = None,
        *,
        base_url: str | None = None,
        redirect_uri: str | None = None,
        scope: str | None = None,
    ) -> AuthorizationStart:
        return await self.authorizations.start(
            principal, service_id, frontend_redirect, base_url=base_url, redirect_uri=redirect_uri, scope=scope
        )

    async def complete_callback(
        self,
        state: str | None,
        code: str | None,
        iss: str | None,
        error: str | None,
        *,
        timeout: float = CALLBACK_TIMEOUT,
    ) -> CallbackOutcome:
        return await self.authorizations.complete(state, code, iss, error, timeout=timeout)

    async def status(self, principal: Principal, service_id: str, attempt_id: str | None = None) -> OAuthStatus:
        return await self.authorizations.status(principal, service_id, attempt_id)

    async def revoke(self, principal: Principal, service_id: str) -> bool:
        return await self.revocations.revoke(principal, service_id)

    def connections(self, principal: Principal) -> list[OAuthConnection]:
        """The caller's OAuth connections: one per service it holds a token for (no token in them)."""
        return connections_of(self._tokens, self._registry, self._clock, principal)

    async def disconnect(self, principal: Principal, service_id: str) -> bool:
        """Delete the caller's own token of a service and revoke it upstream (best effort); False when none."""
        return await self.revocations.disconnect(principal, service_id)

    async def assertion_grant(
        self,
        principal: Principal,
        service_id: str,
        assertion: str,
        scopes: Sequence[str] | None = None,
        *,
        base_url: str | None = None,
    ) -> OAuthStatus:
        return await self.assertions.grant(
            principal, service_id, assertion, scopes, redirect_uri=self.callback_url(base_url)
        )

    async def bearer_for(
        self, workspace_id: str, service: ExternalService, principal_type: str, principal_id: str
    ) -> str:
        return await self.bearers.bearer_for(workspace_id, service, principal_type, principal_id)

    async def force_refresh(
        self,
        workspace_id: str,
        service: ExternalService,
        principal_type: str,
        principal_id: str,
        *,
        rejected: str | None = None,
    ) -> str:
        return await self.bearers.force_refresh(workspace_id, service, principal_type, principal_id, rejected=rejected)
