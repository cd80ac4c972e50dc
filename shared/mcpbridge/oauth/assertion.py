"""RFC 7523: a caller without a browser exchanges a JWT it holds for a user's token of a service, where the
authorization server advertises the ``urn:ietf:params:oauth:grant-type:jwt-bearer`` grant."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

from anyio import to_thread

from mcpbridge.client.registry import ServiceRegistry
from mcpbridge.domain.identity import Principal
from mcpbridge.errors import Conflict, InvalidInput, UpstreamError
from mcpbridge.oauth.authorization import OAuthStatus
from mcpbridge.oauth.discovery import JWT_BEARER, discover
from mcpbridge.oauth.registration import ClientIdentities
from mcpbridge.oauth.rules import USER, discovery_timeout, drop_client_if_refused, require_oauth, token_origin
from mcpbridge.oauth.token_events import TokenEvents
from mcpbridge.oauth.tokens import TokenRefused, TokenStore, token_request
from mcpbridge.outbound.policy import EgressPolicy
from mcpbridge.ports import Clock

log = logging.getLogger("mcpbridge.oauth")

MAX_ASSERTION_CHARS = 16_384
_ASSERTION = re.compile(r"[A-Za-z0-9._~+/=-]+")
_SCOPE = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]{1,200}")


class AssertionGrants:
    def __init__(
        self,
        *,
        clock: Clock,
        registry: ServiceRegistry,
        egress: EgressPolicy,
        tokens: TokenStore,
        clients: ClientIdentities,
        events: TokenEvents,
    ) -> None:
        self._clock = clock
        self._registry = registry
        self._egress = egress
        self._tokens = tokens
        self._clients = clients
        self._events = events

    async def grant(
        self,
        principal: Principal,
        service_id: str,
        assertion: str,
        scopes: Sequence[str] | None = None,
        *,
        redirect_uri: str,
    ) -> OAuthStatus:
        """RFC 7523: exchange a JWT assertion the caller holds for a token of the service, without a browser.

        Only where the authorization server advertises the ``urn:ietf:params:oauth:grant-type:jwt-bearer`` grant
        (else 409 ``oauth_assertion_unsupported``). A refused assertion is 400 ``oauth_assertion_rejected``."""
        _check_input(assertion, scopes)
        service = await to_thread.run_sync(self._registry.get, principal, service_id)
        require_oauth(service)
        timeout = discovery_timeout(service)
        discovery = await discover(service, self._egress, timeout=timeout)
        if JWT_BEARER not in (discovery.metadata.grant_types_supported or []):
            raise Conflict(
                "the authorization server of this service does not accept JWT-bearer assertions",
                code="oauth_assertion_unsupported",
            )
        client = await self._clients.for_authorization(
            principal.workspace_id, service, discovery, redirect_uri, timeout=timeout
        )
        scope = " ".join(scopes) if scopes else discovery.scope
        form = {"grant_type": JWT_BEARER, "assertion": assertion, "resource": discovery.resource}
        if scope:
            form["scope"] = scope
        try:
            issued = await token_request(self._egress, str(discovery.metadata.token_endpoint), client, form)
        except TokenRefused as refused:
            await drop_client_if_refused(self._clients, refused, principal.workspace_id, client)
            raise _refusal(refused) from None
        origin = token_origin(discovery, client)
        stored = await to_thread.run_sync(
            lambda: self._tokens.save(
                principal.workspace_id, service.id, USER, principal.user_id, issued, origin, scope=scope
            )
        )
        log.info("stored an OAuth token from an assertion grant for MCP service %s", service.id)
        await self._events.stored(principal.workspace_id, service.id, USER, principal.user_id)
        return OAuthStatus(
            status=stored.state(self._clock.now()),
            expires_at=stored.access_expires_at,
            scope=stored.scope,
            refreshable=stored.refresh_token is not None,
        )


def _check_input(assertion: str, scopes: Sequence[str] | None) -> None:
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


def _refusal(refused: TokenRefused) -> InvalidInput | UpstreamError:
    if refused.status == 400:
        return InvalidInput(
            "the authorization server refused the assertion",
            code="oauth_assertion_rejected",
            details={"error": refused.error} if refused.error else None,
        )
    return UpstreamError(
        f"the authorization server failed the assertion grant (HTTP {refused.status})",
        code="oauth_assertion_failed",
        details={"status": refused.status},
    )
