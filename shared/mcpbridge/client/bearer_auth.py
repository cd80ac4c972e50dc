"""The OAuth bearer of one principal at one external service, as an ``httpx2.Auth`` on the connection (the way the MCP
SDK's ``OAuthClientProvider`` works): every request gets the principal's current token (refreshed first when due); a
request answered 401 gets exactly one forced refresh and is sent once more with the new token; a second 401 is the
answer. A 403 ``insufficient_scope`` (SEP-835 step-up) is noted as ``OAuthRequired`` with the scopes the server asks
for: a wider token needs the user's consent again. A 401 means the server refused the credentials before running
anything, so sending the request again cannot run it twice.

Several requests refused at once each ask for a refresh with the token they sent (``rejected``): one refreshes under
the lease, the others get the token it stored. The connection and the callers above it never see a token.

An auth flow must not raise (the SDK's transport would lose the session), so when no usable token can be had the
request goes out without one and the refusal is noted on the operation's :class:`~mcpbridge.client.connection.
HttpFacts`; the connection then raises that refusal (``OAuthRequired`` most often) instead of a bare 401.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable
from typing import Protocol

import anyio
import httpx2

from mcpbridge.client.connection import note_refusal
from mcpbridge.domain.external_services import ExternalService
from mcpbridge.domain.oauth_scope import valid_scope
from mcpbridge.domain.www_authenticate import auth_param
from mcpbridge.errors import MCPBridgeError, OAuthRequired, UpstreamError


class BearerSource(Protocol):
    """Where bearer tokens come from (the OAuth service of ``oauth/``)."""

    async def bearer_for(
        self, workspace_id: str, service: ExternalService, principal_type: str, principal_id: str
    ) -> str: ...

    async def force_refresh(
        self,
        workspace_id: str,
        service: ExternalService,
        principal_type: str,
        principal_id: str,
        *,
        rejected: str | None = None,
    ) -> str: ...


class BearerAuth(httpx2.Auth):
    """The bearer of ``principal_type:principal_id`` for ``service`` in ``workspace_id``.

    ``until`` (anyio's clock): getting or refreshing a token ends by then (a synchronous request's budget); past it
    the refusal is ``oauth_refresh_failed`` (retryable)."""

    def __init__(
        self,
        tokens: BearerSource,
        workspace_id: str,
        service: ExternalService,
        principal_type: str,
        principal_id: str,
        *,
        until: float | None = None,
    ) -> None:
        self._tokens = tokens
        self._workspace_id = workspace_id
        self._service = service
        self._principal = (principal_type, principal_id)
        self._until = until

    async def async_auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        if "authorization" in request.headers:
            yield request  # an Authorization custom header wins, as it does over the other auth strategies
            return
        bearer = await self._token(self._tokens.bearer_for(self._workspace_id, self._service, *self._principal))
        if bearer is None:
            yield request  # without a token: the server's 401 stands, with the refusal noted
            return
        request.headers["Authorization"] = f"Bearer {bearer}"
        response = yield request
        if response.status_code == 403:
            self._note_insufficient_scope(response)
            return
        if response.status_code != 401:
            return
        renewed = await self._token(
            self._tokens.force_refresh(self._workspace_id, self._service, *self._principal, rejected=bearer)
        )
        if renewed is None:
            return
        request.headers["Authorization"] = f"Bearer {renewed}"
        yield request

    def _note_insufficient_scope(self, response: httpx2.Response) -> None:
        """A 403 ``insufficient_scope`` (SEP-835): the token is good but too narrow. Renewing it cannot widen it, so the
        user must authorize again with the scopes the challenge names (``details["scope"]``), like a missing token."""
        challenge = response.headers.get("www-authenticate", "")
        if (auth_param(challenge, "error") or "").lower() != "insufficient_scope":
            return
        details = {"service_id": self._service.id, "reason": "insufficient_scope"}
        scope = auth_param(challenge, "scope")
        if scope and valid_scope(scope):
            details["scope"] = scope
        message = f"the MCP service {self._service.name} needs an OAuth authorization by this user with more scopes"
        note_refusal(OAuthRequired(message, details=details))

    async def _token(self, getting: Awaitable[str]) -> str | None:
        """The token, or None with the reason noted for the operation (never raised inside the HTTP layer)."""
        try:
            if self._until is None:
                return await getting
            left = max(0.0, round(self._until - anyio.current_time(), 2))
            try:
                with anyio.fail_after(left):
                    return await getting
            except TimeoutError:
                raise UpstreamError(
                    f"getting the OAuth token of {self._service.name} did not finish within {left:g} s; try again",
                    code="oauth_refresh_failed",
                    details={"timeout_seconds": left},
                ) from None
        except MCPBridgeError as refusal:
            note_refusal(refusal)
            return None
