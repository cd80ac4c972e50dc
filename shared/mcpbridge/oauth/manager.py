"""The facade of OAuth for external MCP services: what the HTTP routes, the connection layer and the agent call.

    OAuthManager
      start_authorization(principal, service_id, frontend_redirect=None, *, base_url=None, redirect_uri=None)
                                        -> AuthorizationStart(authorization_url, attempt_id, expires_at)
      complete_callback(state, code, iss, error)           -> CallbackOutcome(error, frontend_redirect, location)
      status(principal, service_id, attempt_id=None)       -> OAuthStatus
      revoke(principal, service_id)                        -> bool
      assertion_grant(principal, service_id, assertion, scopes=None, *, base_url=None) -> OAuthStatus
      bearer_for(workspace_id, service, principal_type, principal_id)             -> str
      force_refresh(workspace_id, service, principal_type, principal_id, *, rejected=None) -> str
      on_token_stored(callback) / on_token_removed(callback)

**Principals.** Tokens belong to a principal of a workspace, named by ``(principal_type, principal_id)``. A REST
caller is ``("user", principal.user_id)`` (:data:`USER`): every API key of that user shares the token. The connection
layer passes the pair explicitly to :meth:`bearer_for`, so an agent platform acting for an end user can use another
type later.

**Stateless instances.** Nothing lives in memory between requests: the state of an authorization, the registered
clients and the tokens are store items (see :mod:`~mcpbridge.oauth.attempts`, :mod:`~mcpbridge.oauth.registration`,
:mod:`~mcpbridge.oauth.tokens`), so the callback may land on any instance and any instance may refresh.

**Listeners.** ``on_token_stored(cb)``: ``cb(workspace_id, service_id, principal_type, principal_id)`` runs after a
token is stored (authorization, assertion, refresh); ``on_token_removed(cb)`` after one is deleted (revocation, a
refused refresh). A callback may be sync or async; its failures are logged, never raised.

Errors: :class:`~mcpbridge.errors.OAuthRequired` (403 ``oauth_required``) when no usable token exists;
``UpstreamError`` (retryable) when the authorization server cannot be reached or fails (the token is kept);
``InvalidInput`` for bad input and refused URLs; ``Conflict`` ``service_not_oauth`` / ``oauth_client_required`` /
``oauth_assertion_unsupported``. No message carries a token, a code, a state or a secret.
"""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlencode

import anyio
from anyio import to_thread

from mcpbridge.client.registry import ServiceRegistry
from mcpbridge.domain.external_services import ExternalService
from mcpbridge.domain.identity import Principal
from mcpbridge.domain.ids import is_id, new_id
from mcpbridge.errors import Conflict, InvalidInput, MCPBridgeError, NotFound, OAuthRequired, UpstreamError
from mcpbridge.oauth.attempts import Attempt, AuthorizationAttempts, PendingAuthorization
from mcpbridge.oauth.discovery import JWT_BEARER, Discovery, discover
from mcpbridge.oauth.pkce import new_pkce, new_state
from mcpbridge.oauth.redirects import allowed_origins, callback_url, validate_frontend_redirect, with_result
from mcpbridge.oauth.registration import ClientIdentities, ClientIdentity, ClientRegistrations
from mcpbridge.oauth.rows import token_key
from mcpbridge.oauth.tokens import (
    LEASE_POLL_SECONDS,
    LEASE_SECONDS,
    TOKEN_REQUEST_TIMEOUT,
    StoredToken,
    TokenOrigin,
    TokenRefused,
    TokenState,
    TokenStore,
    token_request,
)
from mcpbridge.outbound.json_http import post_form, require_https
from mcpbridge.outbound.policy import EgressPolicy
from mcpbridge.ports import Clock, SecretBox, Store

log = logging.getLogger("mcpbridge.oauth")

USER = "user"
"""The principal type of a REST caller; its id is ``Principal.user_id``."""
ATTEMPT_PREFIX = "oauth"
DISCOVERY_TIMEOUT = 15.0
CALLBACK_TIMEOUT = 25.0
"""The whole callback (token exchange and storage); below the 29 s of the Lambda function behind API Gateway."""
REVOCATION_TIMEOUT = 10.0
MAX_ASSERTION_CHARS = 16_384
MAX_PRINCIPAL_CHARS = 128
_ASSERTION = re.compile(r"[A-Za-z0-9._~+/=-]+")
_SCOPE = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]{1,200}")
_KNOWN_PROVIDER_ERRORS = frozenset({"access_denied"})

TokenListener = Callable[[str, str, str, str], Awaitable[None] | None]


@dataclass(frozen=True)
class AuthorizationStart:
    """A started authorization: send the user's browser to ``authorization_url`` (it carries the state), poll
    :meth:`OAuthManager.status` with ``attempt_id``."""

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


class OAuthManager:
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
    ) -> None:
        self._clock = clock
        self._registry = registry
        self._egress = egress
        self._public_base_url = public_base_url
        self._origins = allowed_origins([*frontend_urls, public_base_url])
        self._default_frontend = frontend_urls[0] if frontend_urls else ""
        self._tokens = TokenStore(store, clock, secrets)
        self._attempts = AuthorizationAttempts(store, clock, secrets)
        self._clients = ClientIdentities(
            ClientRegistrations(store, clock, secrets), registry, egress, client_metadata_url
        )
        self._stored_listeners: list[TokenListener] = []
        self._removed_listeners: list[TokenListener] = []

    # ------------------------------------------------------------------------------------------ listeners

    def on_token_stored(self, callback: TokenListener) -> None:
        """Call ``callback(workspace_id, service_id, principal_type, principal_id)`` after a token is stored."""
        self._stored_listeners.append(callback)

    def on_token_removed(self, callback: TokenListener) -> None:
        """Call ``callback(workspace_id, service_id, principal_type, principal_id)`` after a token is deleted."""
        self._removed_listeners.append(callback)

    async def _notify(self, listeners: list[TokenListener], *args: str) -> None:
        for callback in list(listeners):
            try:
                result = callback(*args)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("an OAuth token listener failed (service %s)", args[1])

    # ------------------------------------------------------------------------------------------ helpers

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
            _require_oauth(service)
        return service

    def _timeout(self, service: ExternalService) -> float:
        return min(service.advanced.timeout, DISCOVERY_TIMEOUT)

    # ------------------------------------------------------------------------------------------ authorization

    async def start_authorization(
        self,
        principal: Principal,
        service_id: str,
        frontend_redirect: str | None = None,
        *,
        base_url: str | None = None,
        redirect_uri: str | None = None,
    ) -> AuthorizationStart:
        """Discover, pick the client (registering once if needed), store the attempt with its PKCE verifier and
        return the authorization URL for the calling user. Input is checked before anything is stored."""
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
        timeout = self._timeout(service)
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
        params = {
            "response_type": "code",
            "client_id": client.client_id,
            "redirect_uri": expected,
            "state": state,
            "code_challenge": pkce.challenge,
            "code_challenge_method": pkce.method,
            "resource": discovery.resource,
        }
        if discovery.scope:
            params["scope"] = discovery.scope
        separator = "&" if "?" in authorization_endpoint else "?"
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
            scope=discovery.scope,
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
        return AuthorizationStart(
            authorization_url=f"{authorization_endpoint}{separator}{urlencode(params)}",
            attempt_id=attempt_id,
            expires_at=expires_at,
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
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": pending.redirect_uri,
            "code_verifier": pending.code_verifier,
            "resource": pending.resource,
        }
        try:
            issued = await token_request(self._egress, pending.token_endpoint, client, form)
        except TokenRefused as refused:
            log.warning(
                "OAuth attempt %s: the token endpoint refused the code (HTTP %s %s)",
                pending.attempt_id,
                refused.status,
                refused.error or "",
            )
            await self._drop_client_if(refused, pending.workspace_id, client)
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
        await self._notify(
            self._stored_listeners,
            pending.workspace_id,
            pending.service_id,
            pending.principal_type,
            pending.principal_id,
        )
        return None

    async def _drop_client_if(self, refused: TokenRefused, workspace_id: str, client: ClientIdentity) -> None:
        if refused.verdict == "drop_client" and client.record is not None:
            record = client.record
            await to_thread.run_sync(lambda: self._clients.registrations.drop(workspace_id, record))

    # ------------------------------------------------------------------------------------------ status, revocation

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
        if token is None or not _bound(token, service):
            return OAuthStatus(status="reauth_required", attempt=attempt)
        return OAuthStatus(
            status=token.state(self._clock.now()),
            expires_at=token.access_expires_at,
            scope=token.scope,
            refreshable=token.refresh_token is not None,
            attempt=attempt,
        )

    async def revoke(self, principal: Principal, service_id: str) -> bool:
        """Delete the caller's token (whether it existed: the call is idempotent), then ask the authorization server
        to revoke it (RFC 7009, best effort)."""
        service = await self._service(principal, service_id, oauth=False)
        key = token_key(principal.workspace_id, service.id, USER, principal.user_id)
        token = await to_thread.run_sync(self._tokens.get, key)
        deleted = await to_thread.run_sync(self._tokens.delete, key)
        if deleted is None:
            return False
        log.info("deleted the OAuth token of a user for MCP service %s", service.id)
        await self._notify(self._removed_listeners, principal.workspace_id, service.id, USER, principal.user_id)
        if token is not None and token.revocation_endpoint:
            await self._revoke_upstream(service, token)
        return True

    async def _client_of(self, token: StoredToken, service: ExternalService) -> ClientIdentity | None:
        """The client ``token`` was issued to (None when it is gone: the token can no longer be refreshed)."""
        return await self._clients.for_token(
            token.workspace_id,
            service,
            source=token.client_source,
            client_id=token.client_id,
            auth_method=token.client_auth_method,
            record=token.client_record,
        )

    async def _revoke_upstream(self, service: ExternalService, token: StoredToken) -> None:
        endpoint = token.revocation_endpoint
        assert endpoint is not None
        try:
            client = await self._client_of(token, service)
            if client is None:
                return
            values = [(token.refresh_token, "refresh_token"), (token.access_token, "access_token")]
            for value, hint in values:
                if not value:
                    continue
                body, headers = client.authenticate({"token": value, "token_type_hint": hint})
                answer = await post_form(
                    self._egress,
                    endpoint,
                    body,
                    what="revocation endpoint",
                    timeout=REVOCATION_TIMEOUT,
                    headers=headers,
                )
                if not answer.ok:
                    log.warning("the revocation endpoint of MCP service %s answered HTTP %s", service.id, answer.status)
        except MCPBridgeError as exc:
            log.warning("revoking a token of MCP service %s upstream failed: %s", service.id, exc.code)

    # ------------------------------------------------------------------------------------------ assertion grant

    async def assertion_grant(
        self,
        principal: Principal,
        service_id: str,
        assertion: str,
        scopes: Sequence[str] | None = None,
        *,
        base_url: str | None = None,
    ) -> OAuthStatus:
        """RFC 7523: exchange a JWT assertion the caller holds for a token of the service, without a browser.

        Only where the authorization server advertises the ``urn:ietf:params:oauth:grant-type:jwt-bearer`` grant
        (else 409 ``oauth_assertion_unsupported``). A refused assertion is 400 ``oauth_assertion_rejected``."""
        if (
            not isinstance(assertion, str)
            or not 0 < len(assertion) <= MAX_ASSERTION_CHARS
            or not _ASSERTION.fullmatch(assertion)
        ):
            raise InvalidInput(
                f"assertion must be a JWT of at most {MAX_ASSERTION_CHARS} characters", code="invalid_assertion"
            )
        if scopes is not None and (len(scopes) > 50 or not all(_SCOPE.fullmatch(s) for s in scopes)):
            raise InvalidInput("scopes must be at most 50 scope tokens without spaces", code="invalid_scopes")
        service = await self._service(principal, service_id)
        timeout = self._timeout(service)
        discovery = await discover(service, self._egress, timeout=timeout)
        if JWT_BEARER not in (discovery.metadata.grant_types_supported or []):
            raise Conflict(
                "the authorization server of this service does not accept JWT-bearer assertions",
                code="oauth_assertion_unsupported",
            )
        client = await self._clients.for_authorization(
            principal.workspace_id, service, discovery, self.callback_url(base_url), timeout=timeout
        )
        scope = " ".join(scopes) if scopes else discovery.scope
        form = {"grant_type": JWT_BEARER, "assertion": assertion, "resource": discovery.resource}
        if scope:
            form["scope"] = scope
        try:
            issued = await token_request(self._egress, str(discovery.metadata.token_endpoint), client, form)
        except TokenRefused as refused:
            await self._drop_client_if(refused, principal.workspace_id, client)
            if refused.status == 400:
                raise InvalidInput(
                    "the authorization server refused the assertion",
                    code="oauth_assertion_rejected",
                    details={"error": refused.error} if refused.error else None,
                ) from None
            raise UpstreamError(
                f"the authorization server failed the assertion grant (HTTP {refused.status})",
                code="oauth_assertion_failed",
                details={"status": refused.status},
            ) from None
        origin = _origin(discovery, client)
        stored = await to_thread.run_sync(
            lambda: self._tokens.save(
                principal.workspace_id, service.id, USER, principal.user_id, issued, origin, scope=scope
            )
        )
        log.info("stored an OAuth token from an assertion grant for MCP service %s", service.id)
        await self._notify(self._stored_listeners, principal.workspace_id, service.id, USER, principal.user_id)
        return OAuthStatus(
            status=stored.state(self._clock.now()),
            expires_at=stored.access_expires_at,
            scope=stored.scope,
            refreshable=stored.refresh_token is not None,
        )

    # ------------------------------------------------------------------------------------------ bearer tokens

    async def bearer_for(
        self, workspace_id: str, service: ExternalService, principal_type: str, principal_id: str
    ) -> str:
        """The access token to send to ``service`` for this principal, refreshed first when due (30 s before its
        expiry, under the refresh lease). Raises OAuthRequired when there is none to use."""
        return await self._bearer(workspace_id, service, principal_type, principal_id, force=False, rejected=None)

    async def force_refresh(
        self,
        workspace_id: str,
        service: ExternalService,
        principal_type: str,
        principal_id: str,
        *,
        rejected: str | None = None,
    ) -> str:
        """A new access token after the service refused ``rejected`` (HTTP 401). If another caller already replaced
        that token, the replacement is returned without a second refresh. A token that cannot be refreshed is
        deleted (OAuthRequired)."""
        return await self._bearer(workspace_id, service, principal_type, principal_id, force=True, rejected=rejected)

    async def _bearer(
        self,
        workspace_id: str,
        service: ExternalService,
        principal_type: str,
        principal_id: str,
        *,
        force: bool,
        rejected: str | None,
    ) -> str:
        _check_principal(principal_type, principal_id)
        _require_oauth(service)
        # A bearer only travels over https (or to an allowlisted host, e.g. in tests).
        require_https(self._egress, service.url, "MCP server")
        key = token_key(workspace_id, service.id, principal_type, principal_id)
        give_up = anyio.current_time() + LEASE_SECONDS + 10
        while True:
            token = await to_thread.run_sync(self._tokens.get, key)
            if token is None:
                raise _required(service, "not_authorized")
            if not _bound(token, service):
                await self._delete(token, reason="the service URL changed")
                raise _required(service, "service_changed")
            if force:
                if rejected is None:
                    rejected = token.access_token
                elif token.access_token != rejected:
                    return token.access_token
            elif token.usable(self._clock.now()):
                return token.access_token
            if token.refresh_token is None:
                await self._delete(token, reason="it expired or was refused and cannot be refreshed")
                raise _required(service, "expired")
            lease = await to_thread.run_sync(self._tokens.acquire_lease, token)
            if lease is not None:
                return await self._refresh(service, token, lease)
            # Another instance refreshes: wait for its result (a new generation) or for its lease to lapse.
            if anyio.current_time() > give_up:
                raise UpstreamError(
                    f"the token refresh for {service.name} by another instance did not finish",
                    code="oauth_refresh_busy",
                )
            await anyio.sleep(LEASE_POLL_SECONDS)

    async def _delete(self, token: StoredToken, *, reason: str, lease_id: str | None = None) -> None:
        deleted = await to_thread.run_sync(
            lambda: self._tokens.delete(token.key, lease_id=lease_id, generation=None if lease_id else token.generation)
        )
        if deleted is not None:
            log.info("deleted an OAuth token of MCP service %s: %s", token.service_id, reason)
            await self._notify(
                self._removed_listeners, token.workspace_id, token.service_id, token.principal_type, token.principal_id
            )

    async def _refresh(self, service: ExternalService, token: StoredToken, lease: str) -> str:
        """Refresh under the lease we hold; the lease is released whatever happens."""
        released = False
        try:
            client = await self._client_of(token, service)
            if client is None:
                released = True
                await self._delete(token, reason="its client is gone", lease_id=lease)
                raise _required(service, "client_changed")
            assert token.refresh_token is not None
            form = {"grant_type": "refresh_token", "refresh_token": token.refresh_token, "resource": token.resource}
            try:
                issued = await token_request(self._egress, token.token_endpoint, client, form)
            except TokenRefused as refused:
                verdict = refused.verdict
                log.warning(
                    "refreshing an OAuth token of MCP service %s was refused (HTTP %s %s): %s",
                    service.id,
                    refused.status,
                    refused.error or "",
                    verdict,
                )
                if verdict == "temporary":
                    raise UpstreamError(
                        f"refreshing the OAuth token of {service.name} failed (HTTP {refused.status}); try again",
                        code="oauth_refresh_failed",
                        details={"status": refused.status},
                    ) from None
                released = True
                await self._delete(token, reason="the authorization server refused its refresh", lease_id=lease)
                await self._drop_client_if(refused, token.workspace_id, client)
                raise _required(service, "refresh_refused") from None
            stored = await to_thread.run_sync(self._tokens.save_refreshed, token, lease, issued)
            released = True
            if stored is None:
                # The lease was lost (it lapsed, or the token was replaced or revoked meanwhile).
                current = await to_thread.run_sync(self._tokens.get, token.key)
                if current is None:
                    raise _required(service, "revoked")
                log.warning("a refreshed OAuth token of MCP service %s could not be stored", service.id)
                return issued.access_token
            log.info("refreshed an OAuth token of MCP service %s", service.id)
            await self._notify(
                self._stored_listeners, token.workspace_id, token.service_id, token.principal_type, token.principal_id
            )
            return stored.access_token
        finally:
            if not released:
                with anyio.CancelScope(shield=True):
                    await to_thread.run_sync(self._tokens.release_lease, token, lease)


# ---------------------------------------------------------------------------------------------------- rules


def _require_oauth(service: ExternalService) -> None:
    if service.auth.auth_type != "oauth":
        raise Conflict(f"the MCP service {service.name} does not use OAuth", code="service_not_oauth")


def _check_principal(principal_type: str, principal_id: str) -> None:
    for value in (principal_type, principal_id):
        if not isinstance(value, str) or not 0 < len(value) <= MAX_PRINCIPAL_CHARS or "#" in value:
            raise InvalidInput("invalid principal for an OAuth token", code="invalid_principal")


def _required(service: ExternalService, reason: str) -> OAuthRequired:
    return OAuthRequired(
        f"the MCP service {service.name} needs an OAuth authorization by this user",
        details={"service_id": service.id, "reason": reason},
    )


def _bound(token: StoredToken, service: ExternalService) -> bool:
    """Whether the token was issued for the service's current URL (RFC 8707): a changed URL never gets it."""
    from mcp.shared.auth_utils import check_resource_allowed, resource_url_from_server_url

    if not token.resource:
        return True
    return check_resource_allowed(
        requested_resource=resource_url_from_server_url(service.url), configured_resource=token.resource
    )


def _origin(discovery: Discovery, client: ClientIdentity) -> TokenOrigin:
    return TokenOrigin(
        issuer=discovery.issuer,
        token_endpoint=str(discovery.metadata.token_endpoint),
        revocation_endpoint=discovery.revocation_endpoint,
        resource=discovery.resource,
        client=client,
    )


__all__ = [
    "TOKEN_REQUEST_TIMEOUT",
    "USER",
    "AuthorizationStart",
    "CallbackOutcome",
    "OAuthManager",
    "OAuthStatus",
    "TokenListener",
]
