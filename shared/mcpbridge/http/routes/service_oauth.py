"""OAuth of an external MCP service for the calling user, under ``/api/v1/mcp-services/{id}/oauth``.

Each user authorizes for themselves (tokens are per workspace, user and service), so reading the service is enough:
any role, API keys need ``manage_services``.

    POST   /authorize-url   {frontend_redirect?, redirect_uri?}
                            -> {authorization_url, authorization_attempt, expires_at}
    GET    /status          ?authorization_attempt=<id>: status authorized | refreshable | reauth_required
    DELETE /token           the caller's token (204 whether or not there was one); revoked upstream when possible
    POST   /assertion       {assertion, scopes?}: RFC 7523 JWT-bearer grant, for callers without a browser

``authorization_url`` carries the state of the attempt: it is meant for the caller's browser only (``no-store``).
No response carries a token, a code or a verifier.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from mcpbridge.domain.identity import timestamp
from mcpbridge.http.auth import CurrentPrincipal
from mcpbridge.http.deps import OAuthDep
from mcpbridge.http.fields import ServiceId
from mcpbridge.http.openapi import problems
from mcpbridge.http.views import Timestamp

if TYPE_CHECKING:
    from mcpbridge.oauth.authorization import OAuthStatus

router = APIRouter(prefix="/api/v1/mcp-services", tags=["mcp-services"])

NO_STORE = {"Cache-Control": "no-store"}


class AuthorizeUrlIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid", strict=True, json_schema_extra={"examples": [{"frontend_redirect": "/settings/connections"}]}
    )

    frontend_redirect: str | None = Field(
        default=None,
        max_length=2048,
        description="Where the browser returns after the callback: an app-relative path or a URL on one of the "
        "configured front-end origins (MCPBRIDGE_FRONTEND_URLS). Default: the first front-end URL, else a result "
        "page of mcpbridge.",
    )
    redirect_uri: str | None = Field(
        default=None, max_length=2048, description="Optional; when given it must be mcpbridge's callback URL."
    )
    scope: str | None = Field(
        default=None,
        max_length=1024,
        description="More OAuth scopes to ask for, space-separated, beyond the discovered ones: the `scope` of an "
        "`oauth_required` refusal whose reason is `insufficient_scope` (the service asked for more, SEP-835).",
    )


class AuthorizeUrlOut(BaseModel):
    authorization_url: str = Field(description="Open it in the user's browser; it carries the attempt's state.")
    authorization_attempt: str = Field(description="Poll GET /oauth/status?authorization_attempt=<this>.")
    expires_at: Timestamp = Field(description="The attempt's state is refused after this time (10 minutes).")


class AttemptOut(BaseModel):
    id: str
    status: Literal["pending", "completed", "failed", "expired"]
    error: str | None = Field(description="Why it failed (e.g. access_denied, issuer_mismatch).")


class OAuthStatusOut(BaseModel):
    status: Literal["authorized", "refreshable", "reauth_required"]
    expires_at: Timestamp | None = Field(description="When the access token expires (none: the server gave no expiry).")
    scope: str | None
    refreshable: bool = Field(description="A refresh token is held.")
    authorization_attempt: AttemptOut | None = Field(
        description="With ?authorization_attempt: that attempt; the status then counts only a completed attempt."
    )


class AssertionIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={"examples": [{"assertion": "eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJ...", "scopes": ["read"]}]},
    )

    assertion: str = Field(min_length=1, max_length=16_384, description="A JWT the authorization server accepts.")
    scopes: list[str] | None = Field(default=None, max_length=50)


def _status_out(status: OAuthStatus) -> OAuthStatusOut:
    attempt = status.attempt
    return OAuthStatusOut(
        status=status.status,
        expires_at=timestamp(status.expires_at) if status.expires_at is not None else None,
        scope=status.scope,
        refreshable=status.refreshable,
        authorization_attempt=None
        if attempt is None
        else AttemptOut(id=attempt.id, status=attempt.status, error=attempt.error),
    )


@router.post(
    "/{service_id}/oauth/authorize-url",
    operation_id="startServiceAuthorization",
    summary="Start an OAuth authorization",
    responses=problems(400, 409, 502),
)
async def authorize_url(
    service_id: ServiceId,
    request: Request,
    response: Response,
    principal: CurrentPrincipal,
    oauth: OAuthDep,
    body: AuthorizeUrlIn | None = None,
) -> AuthorizeUrlOut:
    """An authorization URL for the caller's browser (it carries the attempt's state: `no-store`) and the attempt id
    to poll. The callback stores the caller's own token."""
    given = body or AuthorizeUrlIn()
    started = await oauth.start_authorization(
        principal,
        service_id,
        given.frontend_redirect,
        base_url=str(request.base_url),
        redirect_uri=given.redirect_uri,
        scope=given.scope,
    )
    response.headers.update(NO_STORE)
    return AuthorizeUrlOut(
        authorization_url=started.authorization_url,
        authorization_attempt=started.attempt_id,
        expires_at=timestamp(started.expires_at),
    )


@router.get(
    "/{service_id}/oauth/status", operation_id="getServiceOAuthStatus", summary="OAuth status", responses=problems(502)
)
async def oauth_status(
    service_id: ServiceId,
    principal: CurrentPrincipal,
    oauth: OAuthDep,
    authorization_attempt: str | None = Query(
        default=None,
        max_length=64,
        description="An attempt id from `authorize-url`: report that attempt, and count only its success.",
    ),
) -> OAuthStatusOut:
    """Whether the caller holds a usable token for the service (authorized, refreshable, reauth_required), and with
    `authorization_attempt`, how that attempt went."""
    return _status_out(await oauth.status(principal, service_id, authorization_attempt))


@router.delete(
    "/{service_id}/oauth/token",
    operation_id="revokeServiceOAuthToken",
    summary="Forget my OAuth token",
    status_code=204,
    responses=problems(502),
)
async def revoke_token(service_id: ServiceId, principal: CurrentPrincipal, oauth: OAuthDep) -> Response:
    """Deletes the caller's token for the service (204 whether or not there was one) and revokes it upstream when
    possible."""
    await oauth.revoke(principal, service_id)
    return Response(status_code=204)


@router.post(
    "/{service_id}/oauth/assertion",
    operation_id="exchangeServiceOAuthAssertion",
    summary="Exchange a JWT assertion",
    responses=problems(400, 409, 502),
)
async def assertion_grant(
    service_id: ServiceId, body: AssertionIn, request: Request, principal: CurrentPrincipal, oauth: OAuthDep
) -> OAuthStatusOut:
    """Gets the caller's token with an RFC 7523 JWT-bearer grant, for callers without a browser."""
    status = await oauth.assertion_grant(
        principal, service_id, body.assertion, body.scopes, base_url=str(request.base_url)
    )
    return _status_out(status)
