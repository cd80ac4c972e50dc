"""``/api/v1/me``: the caller's own view, with any of its keys (whatever the key's role or capabilities).

    GET    /me                                  who the key acts as: workspace, user, key, role and scope
    GET    /me/oauth-connections                the services the user holds an OAuth token for (never a token)
    DELETE /me/oauth-connections/{service_id}   disconnect one: the token is deleted, and revoked upstream when the
                                                server allows (RFC 7009, best effort)

The user's paused calls are ``GET /api/v1/agent/pending`` and are resolved under ``/api/v1/agent/...``.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Response
from pydantic import BaseModel, Field

from mcpbridge.domain.identity import Principal
from mcpbridge.errors import NotFound
from mcpbridge.http.auth import CurrentPrincipal
from mcpbridge.http.deps import AccountsDep, OAuthDep, UsersDep
from mcpbridge.http.fields import ServiceId
from mcpbridge.http.paging import cursor_query, limit_query, next_cursor_field, page_of
from mcpbridge.http.routes.api_keys import scope_fields
from mcpbridge.http.views import Timestamp

router = APIRouter(prefix="/api/v1/me", tags=["identity"])


class Me(BaseModel):
    workspace_id: str
    workspace_name: str
    user_id: str
    user_name: str | None = Field(description="None for a user known only by its keys (from earlier releases).")
    api_key_id: str
    role: Literal["viewer", "admin"]
    capabilities: list[str] | None
    knowledge_base_ids: list[str] | None

    @classmethod
    def of(cls, principal: Principal, workspace_name: str, user_name: str | None) -> Me:
        return cls(
            workspace_id=principal.workspace_id,
            workspace_name=workspace_name,
            user_id=principal.user_id,
            user_name=user_name,
            api_key_id=principal.api_key_id,
            role=principal.role,
            **scope_fields(principal.scope),
        )


class OAuthConnectionOut(BaseModel):
    service_id: str
    service_name: str
    status: Literal["authorized", "refreshable", "reauth_required"]
    scope: str | None
    connected_at: Timestamp
    updated_at: Timestamp


class OAuthConnectionList(BaseModel):
    items: list[OAuthConnectionOut]
    next_cursor: str | None = next_cursor_field()


@router.get("", operation_id="getMe", summary="Who am I")
def whoami(principal: CurrentPrincipal, accounts: AccountsDep, users: UsersDep) -> Me:
    """What the presented key acts as: its workspace, user, key id, role and scope. Any key may call it."""
    try:
        user_name: str | None = users.find(principal.workspace_id, principal.user_id).name
    except NotFound:
        user_name = None
    return Me.of(principal, accounts.get_workspace(principal.workspace_id).name, user_name)


@router.get("/oauth-connections", operation_id="listMyOAuthConnections", summary="List my OAuth connections")
def list_oauth_connections(
    principal: CurrentPrincipal, oauth: OAuthDep, limit: int = limit_query(), cursor: str | None = cursor_query()
) -> OAuthConnectionList:
    """The external services the caller's user holds an OAuth token for, with the token's status (authorized,
    refreshable, reauth_required). Never a token."""
    found, next_cursor = page_of(
        oauth.connections(principal),
        key=lambda c: (c.service_id,),
        limit=limit,
        cursor=cursor,
        listing="me/oauth-connections",
    )
    return OAuthConnectionList(
        next_cursor=next_cursor,
        items=[
            OAuthConnectionOut(
                service_id=c.service_id,
                service_name=c.service_name,
                status=c.status,
                scope=c.scope,
                connected_at=c.connected_at,
                updated_at=c.updated_at,
            )
            for c in found
        ],
    )


@router.delete(
    "/oauth-connections/{service_id}",
    operation_id="deleteMyOAuthConnection",
    summary="Disconnect an OAuth connection",
    status_code=204,
)
async def revoke_oauth_connection(service_id: ServiceId, principal: CurrentPrincipal, oauth: OAuthDep) -> Response:
    """Deletes the caller's own token for this service and revokes it upstream when the authorization server allows
    (RFC 7009, best effort). 404 when there is none."""
    if not await oauth.disconnect(principal, service_id):
        raise NotFound("you hold no OAuth connection to this service", code="oauth_connection_not_found")
    return Response(status_code=204)
