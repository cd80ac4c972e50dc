"""Authorization code + PKCE S256 for a user, across requests and instances: :meth:`Authorizations.start` discovers
the authorization server (RFC 9728 / RFC 8414), picks the client (registering once if needed), stores the attempt
with its verifier and returns the URL to send the browser to; :meth:`Authorizations.complete` takes the state (single
use), checks ``iss`` (RFC 9207), exchanges the code, stores the token, and only then marks the attempt completed.
:meth:`Authorizations.status` is what a front end polls.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlencode

import anyio
from anyio import to_thread

from mcpbridge.client.registry import ServiceRegistry
from mcpbridge.domain.external_services import ExternalService
from mcpbridge.domain.identity import Principal
from mcpbridge.domain.ids import is_id, new_id
from mcpbridge.domain.oauth_scope import scope_union, valid_scope
from mcpbridge.errors import InvalidInput, MCPBridgeError, NotFound
from mcpbridge.oauth.attempts import Attempt, AuthorizationAttempts, PendingAuthorization
from mcpbridge.oauth.discovery import discover
from mcpbridge.oauth.pkce import new_pkce, new_state
from mcpbridge.oauth.redirects import allowed_origins, callback_url, validate_frontend_redirect, with_result
from mcpbridge.oauth.registration import ClientIdentities, ClientIdentity
from mcpbridge.oauth.rows import token_key
from mcpbridge.oauth.rules import (
    USER,
    bound,
    discovery_timeout,
    drop_client_if_refused,
    require_oauth,
)
from mcpbridge.oauth.token_events import TokenEvents
from mcpbridge.oauth.tokens import IssuedToken, TokenOrigin, TokenRefused, TokenState, TokenStore, token_request
from mcpbridge.outbound.json_http import require_https
from mcpbridge.outbound.policy import EgressPolicy
from mcpbridge.ports import Clock

log = logging.getLogger("mcpbridge.oauth")

ATTEMPT_PREFIX = "oauth"
CALLBACK_TIMEOUT = 25.0
"""The whole callback (token exchange and storage); below the 29 s of the Lambda function behind API Gateway."""
_KNOWN_PROVIDER_ERRORS = frozenset({"access_denied"})


@dataclass(frozen=True)
class AuthorizationStart:
    """A started authorization: send the user's browser to ``authorization_url`` (it carries the state), poll
    :meth:`Authorizations.status` with ``attempt_id``."""

    authorization_url: str = field(repr=False)
    attempt_id: str
    expires_at: int
    """Epoch second after which the state is refused."""


@dataclass(frozen=True)
class CallbackOutcome:
    error: str | None
    """None on success; else ``access_denied``, ``provider_error``, ``missing_code_or_state``, ``issuer_mismatch``
    or ``authorization_failed``."""
    frontend_redirect: str
    """Empty when the attempt named no front end and none is configured (the callback shows its own page)."""

    @property
    def location(self) -> str | None:
        """Where to redirect the browser: the front end with ``#mcp_oauth_result=success`` or
        ``#mcp_oauth_error=<code>``."""
        return with_result(self.frontend_redirect, error=self.error) if self.frontend_redirect else None


@dataclass(frozen=True)
class OAuthStatus:
    """A principal's authorization of a service. With an attempt, ``status`` reflects only that attempt: until it
    completes the status is ``reauth_required`` whatever older token exists."""

    status: TokenState
    expires_at: int | None = None
    scope: str | None = None
    refreshable: bool = False
    attempt: Attempt | None = None


def _check_scope(scope: str | None) -> None:
    if scope is not None and not valid_scope(scope):
        raise InvalidInput(
            "scope must be space-separated OAuth scope tokens (printable ASCII, no quotes or backslashes)",
            code="invalid_scope",
        )


class Authorizations:
    """Browser authorizations of OAuth services by users (see the module docstring)."""

    def __init__(
        self,
        *,
        clock: Clock,
        registry: ServiceRegistry,
        egress: EgressPolicy,
        tokens: TokenStore,
        attempts: AuthorizationAttempts,
        clients: ClientIdentities,
        events: TokenEvents,
        public_base_url: str = "",
        frontend_urls: Sequence[str] = (),
    ) -> None:
        self._clock = clock
        self._registry = registry
        self._egress = egress
        self._tokens = tokens
        self._attempts = attempts
        self._clients = clients
        self._events = events
        self._public_base_url = public_base_url
        self._origins = allowed_origins([*frontend_urls, public_base_url])
        self._default_frontend = frontend_urls[0] if frontend_urls else ""

    def callback_url(self, base_url: str | None = None) -> str:
        """mcpbridge's redirect URI: under ``MCPBRIDGE_PUBLIC_BASE_URL``, else under ``base_url`` (the request's)."""
        base = self._public_base_url or base_url
        if not base:
            raise InvalidInput("set MCPBRIDGE_PUBLIC_BASE_URL to authorize services", code="public_base_url_missing")
        return callback_url(base)

    def client_metadata_document(self, base_url: str | None = None) -> dict[str, object] | None:
        """mcpbridge's client ID metadata document, when one is configured."""
        url = self._clients.metadata_document_url()
        if url is None:
            return None
        return {
            "client_id": url,
            "client_name": "mcpbridge",
            "redirect_uris": [self.callback_url(base_url)],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        }

    async def _service(self, principal: Principal, service_id: str, *, oauth: bool = True) -> ExternalService:
        service = await to_thread.run_sync(self._registry.get, principal, service_id)
        if oauth:
            require_oauth(service)
        return service

    async def start(
        self,
        principal: Principal,
        service_id: str,
        frontend_redirect: str | None = None,
        *,
        base_url: str | None = None,
        redirect_uri: str | None = None,
        scope: str | None = None,
    ) -> AuthorizationStart:
        """Discover, pick the client (registering once if needed), store the attempt with its PKCE verifier and
        return the authorization URL for the calling user. Input is checked before anything is stored.

        ``scope``: more scopes to ask for, beyond the discovered ones (SEP-835 step-up: the ``scope`` of an
        ``OAuthRequired`` whose reason is ``insufficient_scope``); the request asks for the union."""
        _check_scope(scope)
        frontend = (
            validate_frontend_redirect(frontend_redirect, self._origins)
            if frontend_redirect
            else self._default_frontend
        )
        expected = self.callback_url(base_url)
        if redirect_uri is not None and redirect_uri != expected:
            raise InvalidInput(
                "redirect_uri must be mcpbridge's OAuth callback URL (or be left out)", code="invalid_redirect_uri"
            )
        service = await self._service(principal, service_id)
        timeout = discovery_timeout(service)
        discovery = await discover(service, self._egress, timeout=timeout)
        authorization_endpoint = str(discovery.metadata.authorization_endpoint)
        require_https(self._egress, authorization_endpoint, "authorization endpoint")
        require_https(self._egress, str(discovery.metadata.token_endpoint), "token endpoint")
        client = await self._clients.for_authorization(
            principal.workspace_id, service, discovery, expected, timeout=timeout
        )
        pkce = new_pkce()
        state = new_state()
        attempt_id = new_id(ATTEMPT_PREFIX)
        pending = PendingAuthorization(
            attempt_id=attempt_id,
            workspace_id=principal.workspace_id,
            principal_type=USER,
            principal_id=principal.user_id,
            service_id=service.id,
            issuer=discovery.issuer,
            iss_required=bool(discovery.metadata.authorization_response_iss_parameter_supported),
            token_endpoint=str(discovery.metadata.token_endpoint),
            revocation_endpoint=discovery.revocation_endpoint,
            resource=discovery.resource,
            scope=scope_union(discovery.scope, scope),
            redirect_uri=expected,
            frontend_redirect=frontend,
            client_id=client.client_id,
            client_source=client.source,
            client_auth_method=client.auth_method,
            client_record=client.record,
            code_verifier=pkce.verifier,
        )
        expires_at = await to_thread.run_sync(self._attempts.begin, pending, state)
        log.info("started OAuth authorization attempt %s for MCP service %s", attempt_id, service.id)
        url = _authorization_url(authorization_endpoint, pending, state, pkce.challenge, pkce.method)
        return AuthorizationStart(authorization_url=url, attempt_id=attempt_id, expires_at=expires_at)

    async def complete(
        self,
        state: str | None,
        code: str | None,
        iss: str | None,
        error: str | None,
        *,
        timeout: float = CALLBACK_TIMEOUT,
    ) -> CallbackOutcome:
        """Take the state (single use), check ``iss`` (RFC 9207), exchange the code with the PKCE verifier, store
        the token, then mark the attempt completed and tell the listeners.

        An unknown, used or expired state raises InvalidInput (``oauth_state_missing`` / ``oauth_state_invalid``):
        there is no trusted place to send the browser. Anything that goes wrong after the state was taken is an
        outcome with an error code (the attempt is marked failed, nothing is stored)."""
        if not state:
            raise InvalidInput("the authorization server did not return a state", code="oauth_state_missing")
        pending = await to_thread.run_sync(self._attempts.take, state)
        if pending is None:
            raise InvalidInput("unknown, used or expired authorization state", code="oauth_state_invalid")
        outcome: str | None
        try:
            with anyio.fail_after(timeout):
                outcome = await self._finish(pending, code, iss, error)
        except TimeoutError:
            log.warning("OAuth attempt %s: the token exchange took longer than %g s", pending.attempt_id, timeout)
            outcome = "authorization_failed"
        except MCPBridgeError as exc:
            log.warning("OAuth attempt %s failed: %s", pending.attempt_id, exc.code)
            outcome = "authorization_failed"
        if outcome is not None:
            await to_thread.run_sync(
                lambda: self._attempts.finish(pending.workspace_id, pending.attempt_id, error=outcome)
            )
        return CallbackOutcome(error=outcome, frontend_redirect=pending.frontend_redirect)

    async def _finish(
        self, pending: PendingAuthorization, code: str | None, iss: str | None, error: str | None
    ) -> str | None:
        if error:
            log.info("OAuth attempt %s: the authorization server answered an error", pending.attempt_id)
            return error if error in _KNOWN_PROVIDER_ERRORS else "provider_error"
        if not code:
            return "missing_code_or_state"
        # RFC 9207: simple string comparison; a missing iss only where the server promised to send it.
        if (iss is not None and iss != pending.issuer) or (iss is None and pending.iss_required):
            log.warning("OAuth attempt %s: the callback's issuer is not the attempt's", pending.attempt_id)
            return "issuer_mismatch"
        service = await to_thread.run_sync(self._registry.find, pending.workspace_id, pending.service_id)
        client = await self._clients.for_token(
            pending.workspace_id,
            service,
            source=pending.client_source,
            client_id=pending.client_id,
            auth_method=pending.client_auth_method,
            record=pending.client_record,
        )
        if client is None:
            log.warning("OAuth attempt %s: the client it started with is gone", pending.attempt_id)
            return "authorization_failed"
        try:
            issued = await self._exchange(pending, code, client)
        except TokenRefused:
            return "authorization_failed"
        origin = TokenOrigin(
            issuer=pending.issuer,
            token_endpoint=pending.token_endpoint,
            revocation_endpoint=pending.revocation_endpoint,
            resource=pending.resource,
            client=client,
        )
        await to_thread.run_sync(
            lambda: self._tokens.save(
                pending.workspace_id,
                pending.service_id,
                pending.principal_type,
                pending.principal_id,
                issued,
                origin,
                scope=pending.scope,
            )
        )
        # Completed only now that the token is stored: a front end polling the attempt can use it at once.
        await to_thread.run_sync(lambda: self._attempts.finish(pending.workspace_id, pending.attempt_id, error=None))
        log.info("OAuth attempt %s completed for MCP service %s", pending.attempt_id, pending.service_id)
        await self._events.stored(
            pending.workspace_id,
            pending.service_id,
            pending.principal_type,
            pending.principal_id,
        )
        return None

    async def _exchange(self, pending: PendingAuthorization, code: str, client: ClientIdentity) -> IssuedToken:
        """The code for a token, with the PKCE verifier; a refusal is logged (and drops a dead client) and raised."""
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": pending.redirect_uri,
            "code_verifier": pending.code_verifier,
            "resource": pending.resource,
        }
        try:
            return await token_request(self._egress, pending.token_endpoint, client, form)
        except TokenRefused as refused:
            log.warning(
                "OAuth attempt %s: the token endpoint refused the code (HTTP %s %s)",
                pending.attempt_id,
                refused.status,
                refused.error or "",
            )
            await drop_client_if_refused(self._clients, refused, pending.workspace_id, client)
            raise

    async def status(self, principal: Principal, service_id: str, attempt_id: str | None = None) -> OAuthStatus:
        """The caller's authorization of the service; with ``attempt_id``, only that attempt counts."""
        service = await self._service(principal, service_id, oauth=False)
        attempt: Attempt | None = None
        if attempt_id is not None:
            found = (
                await to_thread.run_sync(self._attempts.get, principal.workspace_id, attempt_id)
                if is_id(attempt_id, ATTEMPT_PREFIX)
                else None
            )
            if (
                found is None
                or found.service_id != service.id
                or (found.principal_type, found.principal_id) != (USER, principal.user_id)
            ):
                raise NotFound("authorization attempt not found", code="oauth_attempt_not_found")
            attempt = found
            if attempt.status != "completed":
                return OAuthStatus(status="reauth_required", attempt=attempt)
        token = await to_thread.run_sync(
            self._tokens.get, token_key(principal.workspace_id, service.id, USER, principal.user_id)
        )
        if token is None or not bound(token, service):
            return OAuthStatus(status="reauth_required", attempt=attempt)
        return OAuthStatus(
            status=token.state(self._clock.now()),
            expires_at=token.access_expires_at,
            scope=token.scope,
            refreshable=token.refresh_token is not None,
            attempt=attempt,
        )


def _authorization_url(endpoint: str, pending: PendingAuthorization, state: str, challenge: str, method: str) -> str:
    params = {
        "response_type": "code",
        "client_id": pending.client_id,
        "redirect_uri": pending.redirect_uri,
        "state": state,
        "code_challenge": challenge,
        "code_challenge_method": method,
        "resource": pending.resource,
    }
    if pending.scope:
        params["scope"] = pending.scope
    separator = "&" if "?" in endpoint else "?"
    return f"{endpoint}{separator}{urlencode(params)}"
