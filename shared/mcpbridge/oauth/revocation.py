"""RFC 7009: a user disconnects a service. The stored token goes at once (the call is idempotent), then the
authorization server is asked to revoke the refresh and access tokens, best effort (a failure there is logged)."""

from __future__ import annotations

import logging

from anyio import to_thread

from mcpbridge.client.registry import ServiceRegistry
from mcpbridge.domain.external_services import ExternalService
from mcpbridge.domain.identity import Principal
from mcpbridge.errors import MCPBridgeError
from mcpbridge.oauth.registration import ClientIdentities
from mcpbridge.oauth.rows import token_key
from mcpbridge.oauth.rules import USER, client_of
from mcpbridge.oauth.token_events import TokenEvents
from mcpbridge.oauth.tokens import StoredToken, TokenStore
from mcpbridge.outbound.json_http import post_form
from mcpbridge.outbound.policy import EgressPolicy

log = logging.getLogger("mcpbridge.oauth")

REVOCATION_TIMEOUT = 10.0


class Revocations:
    def __init__(
        self,
        *,
        registry: ServiceRegistry,
        egress: EgressPolicy,
        tokens: TokenStore,
        clients: ClientIdentities,
        events: TokenEvents,
    ) -> None:
        self._registry = registry
        self._egress = egress
        self._tokens = tokens
        self._clients = clients
        self._events = events

    async def revoke(self, principal: Principal, service_id: str) -> bool:
        """Delete the caller's token (whether it existed: the call is idempotent), then ask the authorization server
        to revoke it (RFC 7009, best effort)."""
        service = await to_thread.run_sync(self._registry.get, principal, service_id)
        return await self._revoke(principal, service)

    async def disconnect(self, principal: Principal, service_id: str) -> bool:
        """As :meth:`revoke`, for the caller's own connection whatever its key may do with services: a user may
        always disconnect themselves."""
        service = await to_thread.run_sync(self._registry.find, principal.workspace_id, service_id)
        return await self._revoke(principal, service)

    async def _revoke(self, principal: Principal, service: ExternalService) -> bool:
        key = token_key(principal.workspace_id, service.id, USER, principal.user_id)
        token = await to_thread.run_sync(self._tokens.get, key)
        deleted = await to_thread.run_sync(self._tokens.delete, key)
        if deleted is None:
            return False
        log.info("deleted the OAuth token of a user for MCP service %s", service.id)
        await self._events.removed(principal.workspace_id, service.id, USER, principal.user_id)
        if token is not None and token.revocation_endpoint:
            await self._revoke_upstream(service, token)
        return True

    async def _revoke_upstream(self, service: ExternalService, token: StoredToken) -> None:
        endpoint = token.revocation_endpoint
        assert endpoint is not None
        try:
            client = await client_of(self._clients, token, service)
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
