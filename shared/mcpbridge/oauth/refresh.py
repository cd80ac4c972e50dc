"""The bearer tokens the connection layer sends (:class:`~mcpbridge.client.bearer_auth.BearerAuth`): the stored
access token while it is usable, else a refresh under the token's lease (45 s, longer than the token request's
timeout), so a rotating refresh token is spent exactly once across instances; losers poll and reuse the new token.
Refusals are classified: ``invalid_grant`` and the like delete the token (re-authorize), ``invalid_client`` drops the
registered client too, a network failure keeps the token (``oauth_refresh_failed``, retryable)."""

from __future__ import annotations

import logging

import anyio
from anyio import to_thread

from mcpbridge.domain.external_services import ExternalService
from mcpbridge.errors import UpstreamError
from mcpbridge.oauth.registration import ClientIdentities
from mcpbridge.oauth.rows import token_key
from mcpbridge.oauth.rules import (
    bound,
    check_principal,
    client_of,
    drop_client_if_refused,
    oauth_required,
    require_oauth,
)
from mcpbridge.oauth.token_events import TokenEvents
from mcpbridge.oauth.tokens import (
    LEASE_POLL_SECONDS,
    LEASE_SECONDS,
    StoredToken,
    TokenRefused,
    TokenStore,
    token_request,
)
from mcpbridge.outbound.json_http import require_https
from mcpbridge.outbound.policy import EgressPolicy
from mcpbridge.ports import Clock, Telemetry

log = logging.getLogger("mcpbridge.oauth")


class Bearers:
    """A principal's access token for a service, refreshed when due or when the service refused it. A refresh that
    fails is counted (``OAuthRefreshFailures``, by ``outcome``: ``kept`` when the token stays for a later try,
    ``refused`` when the authorization server turned it down and the user must authorize again)."""

    def __init__(
        self,
        *,
        clock: Clock,
        egress: EgressPolicy,
        tokens: TokenStore,
        clients: ClientIdentities,
        events: TokenEvents,
        telemetry: Telemetry,
    ) -> None:
        self._telemetry = telemetry
        self._clock = clock
        self._egress = egress
        self._tokens = tokens
        self._clients = clients
        self._events = events

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
        check_principal(principal_type, principal_id)
        require_oauth(service)
        # A bearer only travels over https (or to an allowlisted host, e.g. in tests).
        require_https(self._egress, service.url, "MCP server")
        key = token_key(workspace_id, service.id, principal_type, principal_id)
        give_up = anyio.current_time() + LEASE_SECONDS + 10
        while True:
            token = await to_thread.run_sync(self._tokens.get, key)
            if token is None:
                raise oauth_required(service, "not_authorized")
            if not bound(token, service):
                await self._delete(token, reason="the service URL changed")
                raise oauth_required(service, "service_changed")
            if force:
                if rejected is None:
                    rejected = token.access_token
                elif token.access_token != rejected:
                    return token.access_token
            elif token.usable(self._clock.now()):
                return token.access_token
            if token.refresh_token is None:
                await self._delete(token, reason="it expired or was refused and cannot be refreshed")
                raise oauth_required(service, "expired")
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
            await self._events.removed(token.workspace_id, token.service_id, token.principal_type, token.principal_id)

    async def _refresh(self, service: ExternalService, token: StoredToken, lease: str) -> str:
        """Refresh under the lease we hold; the lease is released whatever happens."""
        released = False
        try:
            client = await client_of(self._clients, token, service)
            if client is None:
                released = True
                await self._delete(token, reason="its client is gone", lease_id=lease)
                raise oauth_required(service, "client_changed")
            assert token.refresh_token is not None
            form = {"grant_type": "refresh_token", "refresh_token": token.refresh_token, "resource": token.resource}
            try:
                issued = await token_request(self._egress, token.token_endpoint, client, form)
            except UpstreamError:
                # Unreachable or timed out: nothing was refused, the token stays (oauth_refresh_failed).
                self._telemetry.count("OAuthRefreshFailures", outcome="kept")
                raise
            except TokenRefused as refused:
                verdict = refused.verdict
                self._telemetry.count("OAuthRefreshFailures", outcome="kept" if verdict == "temporary" else "refused")
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
                await drop_client_if_refused(self._clients, refused, token.workspace_id, client)
                raise oauth_required(service, "refresh_refused") from None
            stored = await to_thread.run_sync(self._tokens.save_refreshed, token, lease, issued)
            released = True
            if stored is None:
                # The lease was lost (it lapsed, or the token was replaced or revoked meanwhile).
                current = await to_thread.run_sync(self._tokens.get, token.key)
                if current is None:
                    raise oauth_required(service, "revoked")
                log.warning("a refreshed OAuth token of MCP service %s could not be stored", service.id)
                return issued.access_token
            log.info("refreshed an OAuth token of MCP service %s", service.id)
            await self._events.stored(token.workspace_id, token.service_id, token.principal_type, token.principal_id)
            return stored.access_token
        finally:
            if not released:
                with anyio.CancelScope(shield=True):
                    await to_thread.run_sync(self._tokens.release_lease, token, lease)
