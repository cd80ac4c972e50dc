"""The authorization server as the edge sees it: the issuer of an endpoint, a server for it, the consent flow."""

from __future__ import annotations

from dataclasses import dataclass

from mcpbridge.authserver.clients import Clients
from mcpbridge.authserver.consent import AuthorizeError, ConsentFlow, Redirect, SignedIn, cookie_name
from mcpbridge.authserver.grants import Grants
from mcpbridge.authserver.metadata import Issuer, issuer_url
from mcpbridge.authserver.oidc import OidcSignIn
from mcpbridge.authserver.server import EndpointAuthorizationServer
from mcpbridge.authserver.throttles import Throttles
from mcpbridge.authserver.tokens import Tokens
from mcpbridge.errors import MCPBridgeError, NotFound
from mcpbridge.identity.accounts import Accounts
from mcpbridge.identity.records import user_subject_key
from mcpbridge.identity.sign_in import SignInIdentities
from mcpbridge.ports import Clock, SecretBox, Store
from mcpbridge.publishing.endpoints import EndpointService


@dataclass(frozen=True)
class Lifetimes:
    access_seconds: int = 3600
    refresh_seconds: int = 30 * 86400


class AuthorizationService:
    def __init__(
        self,
        *,
        store: Store,
        clock: Clock,
        secrets_box: SecretBox,
        endpoints: EndpointService,
        accounts: Accounts,
        clients: Clients,
        grants: Grants,
        tokens: Tokens,
        oidc: OidcSignIn | None,
        identities: SignInIdentities,
        throttles: Throttles,
    ) -> None:
        self._store = store
        self.identities = identities
        self._clock = clock
        self._endpoints = endpoints
        self.clients = clients
        self.grants = grants
        self.tokens = tokens
        self.oidc = oidc
        self.throttles = throttles
        self.consent = ConsentFlow(
            store=store,
            clock=clock,
            secrets_box=secrets_box,
            clients=clients,
            grants=grants,
            accounts=accounts,
            servers=self.server,
            throttles=throttles,
            sign_in_with="oidc" if oidc is not None else "api_key",
            provider_name=oidc.provider_name if oidc is not None else "",
        )

    def issuer(self, base_url: str, endpoint_id: str) -> Issuer:
        """The endpoint as an issuer; 404 ``endpoint_not_found`` for an unknown one or one that accepts its static
        token only (it has no authorization server)."""
        endpoint = self._endpoints.find(endpoint_id)
        if endpoint is None or not endpoint.accepts_oauth:
            raise NotFound("no MCP endpoint here signs clients in with OAuth", code="endpoint_not_found")
        return Issuer(base_url, endpoint)

    # ------------------------------------------------------------------------------------------ external sign-in

    async def start_sign_in(self, issuer: Issuer, handle: str, cookie_value: str | None, csrf: str) -> Redirect:
        """The browser to the identity provider, for the pending request it holds (CSRF checked)."""
        if self.oidc is None:
            raise AuthorizeError(400, "No identity provider", "This server signs people in with their API key.")
        request_sk = self.consent.pending_for_sign_in(issuer, handle, cookie_value, csrf)
        try:
            location = await self.oidc.start(
                workspace_id=issuer.endpoint.workspace_id,
                endpoint_id=issuer.endpoint.id,
                request_sk=request_sk,
                handle=handle,
                base_url=issuer.base_url,
            )
        except MCPBridgeError as exc:
            raise AuthorizeError(502, "Sign-in unavailable", exc.message) from None
        return Redirect(location)

    async def finish_sign_in(
        self,
        base_url: str,
        *,
        state: str,
        code: str | None,
        error: str | None,
        iss: str | None,
        cookies: dict[str, str],
    ) -> Redirect:
        """Back from the identity provider: the user found (or provisioned) is attached to the pending request of
        this browser, which is sent back to the consent page."""
        if self.oidc is None:
            raise AuthorizeError(404, "No identity provider", "This server has no external sign-in.")
        try:
            returned = await self.oidc.finish(state=state, code=code, error=error, iss=iss, base_url=base_url)
        except MCPBridgeError as exc:
            raise AuthorizeError(400, "Sign-in failed", exc.message) from None
        cookie = cookies.get(cookie_name(returned.handle))
        if not cookie or not cookie.partition(".")[0]:
            raise AuthorizeError(400, "Sign-in failed", "This browser did not start this sign-in: start again.")
        settings = self.oidc.settings
        identity = returned.identity
        try:
            user = self.identities.user_for(
                returned.workspace_id,
                issuer=identity.issuer,
                subject=identity.subject,
                email=identity.email,
                name=identity.name,
                match=settings.match,
                provision=settings.provision,
                allowed_domains=settings.allowed_domains,
            )
        except MCPBridgeError as exc:
            raise AuthorizeError(403, "Sign-in refused", exc.message) from None
        label = user.email or identity.email or user.name
        link = user_subject_key(returned.workspace_id, identity.issuer, identity.subject).sk
        try:
            self.consent.attach_user(
                returned.workspace_id, returned.request_sk, cookie, SignedIn(user.id, label, "oidc", link)
            )
        except MCPBridgeError:  # the pending request expired meanwhile
            raise AuthorizeError(400, "Sign-in failed", "This sign-in has expired: start again.") from None
        endpoint_issuer = issuer_url(base_url, returned.endpoint_id)
        return Redirect(f"{endpoint_issuer}/authorize?consent={returned.handle}")

    def server(self, issuer: Issuer) -> EndpointAuthorizationServer:
        return EndpointAuthorizationServer(
            issuer,
            store=self._store,
            clock=self._clock,
            clients=self.clients,
            grants=self.grants,
            tokens=self.tokens,
            throttles=self.throttles,
        )
