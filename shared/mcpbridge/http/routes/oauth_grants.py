"""The grants people gave OAuth clients on published endpoints, and what a user reaches through them.

    GET    /api/v1/users/{user_id}/oauth-grants                 a user's grants (filters: endpoint_id, client_id)
    DELETE /api/v1/users/{user_id}/oauth-grants                 revoke a user's grants (all, or per endpoint/client)
    DELETE /api/v1/users/{user_id}/oauth-grants/{grant_id}      revoke one grant
    GET    /api/v1/mcp-endpoints/{endpoint_id}/oauth-grants     every user's grants on one endpoint
    GET    /api/v1/me/oauth-grants                              the caller's own grants
    DELETE /api/v1/me/oauth-grants/{grant_id}                   revoke one of them
    GET    /api/v1/users/{user_id}/access                       the user's e-mail address and access
    PUT    /api/v1/users/{user_id}/access                       set them

Other users' grants and access need an admin key with ``manage_users``; a grant is seen and revoked only on an
endpoint within the caller's key's scope, another user's revoked only by a key at least as broad as theirs, and a
user or endpoint of another workspace is not found (:mod:`mcpbridge.authserver.grant_reviews`). A revoked grant's
tokens are refused from the next request on, and approving the client again makes a new grant (the old tokens stay
dead).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from mcpbridge.authserver.grant_reviews import GrantReviews
from mcpbridge.authserver.grants import Grant
from mcpbridge.domain.identity import User
from mcpbridge.http.auth import CurrentPrincipal, container_of
from mcpbridge.http.fields import EndpointId, UserId
from mcpbridge.http.openapi import problems
from mcpbridge.http.views import Timestamp
from mcpbridge.identity.users import Users

router = APIRouter(prefix="/api/v1", tags=["oauth-grants"])

MAX_PAGE = 200


def _grants(request: Request) -> GrantReviews:
    return container_of(request).oauth_grant_reviews


def _users(request: Request) -> Users:
    return container_of(request).users


GrantsDep = Annotated[GrantReviews, Depends(_grants)]
GrantId = Annotated[str, Path(description="The grant's id (`oag_...`), as the grant lists give it.")]
UsersDep = Annotated[Users, Depends(_users)]


class GrantOut(BaseModel):
    id: str = Field(description="The grant's id.", examples=["oag_01jd8x2k7m0000000000000000"])
    user_id: str
    endpoint_id: str
    client_id: str = Field(description="The client: an id it registered, or the URL of its metadata document.")
    client_name: str = Field(description="The name shown when it was approved (with its host for a document).")
    scopes: list[str] = Field(description="What was approved: read, ask, wiki, write.")
    signed_in_with: str = Field(description="oidc (the operator's identity provider) or api_key.")
    created_at: Timestamp
    updated_at: Timestamp = Field(description="The last approval.")

    @classmethod
    def of(cls, grant: Grant) -> GrantOut:
        return cls(
            id=grant.id,
            user_id=grant.user_id,
            endpoint_id=grant.endpoint_id,
            client_id=grant.client_id,
            client_name=grant.client_name,
            scopes=list(grant.scopes),
            signed_in_with=grant.signed_in_with,
            created_at=grant.created_at,
            updated_at=grant.updated_at,
        )


class GrantPage(BaseModel):
    items: list[GrantOut]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last one.")


class RevokedGrants(BaseModel):
    items: list[GrantOut] = Field(description="The grants revoked.")


class UserAccess(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [{"email": "ada@example.com", "capabilities": ["read", "ask"], "knowledge_base_ids": None}]
        },
    )

    email: str | None = Field(
        default=None,
        max_length=320,
        description="The address a sign-in with the identity provider finds the user by (unique in the workspace).",
    )
    capabilities: list[str] | None = Field(
        default=None, description="Tool groups the user may use through OAuth clients (read ask wiki write); null: all"
    )
    knowledge_base_ids: list[str] | None = Field(
        default=None, description="Knowledge bases the user may reach through OAuth clients; null: all."
    )

    @classmethod
    def of(cls, user: User) -> UserAccess:
        access = user.access
        return cls(
            email=user.email,
            capabilities=None if access.capabilities is None else sorted(access.capabilities),
            knowledge_base_ids=None if access.knowledge_base_ids is None else sorted(access.knowledge_base_ids),
        )


def _page(grants: list[Grant], limit: int, cursor: str | None) -> GrantPage:
    ordered = sorted(grants, key=lambda g: g.id)
    if cursor:
        ordered = [g for g in ordered if g.id > cursor]
    items = ordered[:limit]
    more = len(ordered) > limit
    return GrantPage(items=[GrantOut.of(g) for g in items], next_cursor=items[-1].id if more and items else None)


_LIMIT = Query(default=50, ge=1, le=MAX_PAGE, description="Items per page (1 to 200).")
_CURSOR = Query(default=None, max_length=64, description="The `next_cursor` of the previous page.")
_ENDPOINT = Query(default=None, max_length=64, description="Only the grants on this endpoint.")
_CLIENT = Query(default=None, max_length=2000, description="Only the grants of this client.")


@router.get(
    "/users/{user_id}/oauth-grants",
    operation_id="listUserOAuthGrants",
    summary="List a user's OAuth grants",
    responses=problems(400),
)
def list_user_grants(
    user_id: UserId,
    principal: CurrentPrincipal,
    grants: GrantsDep,
    endpoint_id: str | None = _ENDPOINT,
    client_id: str | None = _CLIENT,
    limit: int = _LIMIT,
    cursor: str | None = _CURSOR,
) -> GrantPage:
    """The clients the user approved on published endpoints, per endpoint and client. Another user's need an admin
    key with `manage_users`."""
    found = grants.list(principal, user_id, endpoint_id=endpoint_id, client_id=client_id)
    return _page(found, limit, cursor)


@router.delete(
    "/users/{user_id}/oauth-grants",
    operation_id="revokeUserOAuthGrants",
    summary="Revoke a user's OAuth grants",
    responses=problems(400),
)
def revoke_user_grants(
    user_id: UserId,
    principal: CurrentPrincipal,
    grants: GrantsDep,
    endpoint_id: str | None = _ENDPOINT,
    client_id: str | None = _CLIENT,
) -> RevokedGrants:
    """Revokes every grant of the user, or those on one endpoint and/or of one client: their tokens are refused from
    the next request on."""
    revoked = grants.revoke(principal, user_id, endpoint_id=endpoint_id, client_id=client_id)
    return RevokedGrants(items=[GrantOut.of(g) for g in revoked])


@router.delete(
    "/users/{user_id}/oauth-grants/{grant_id}",
    operation_id="revokeUserOAuthGrant",
    summary="Revoke one OAuth grant",
    status_code=204,
)
def revoke_user_grant(user_id: UserId, grant_id: GrantId, principal: CurrentPrincipal, grants: GrantsDep) -> Response:
    """Revokes one grant (one endpoint, one client): its tokens are refused from the next request on."""
    grants.revoke(principal, user_id, grant_id=grant_id)
    return Response(status_code=204)


@router.get(
    "/mcp-endpoints/{endpoint_id}/oauth-grants",
    operation_id="listEndpointOAuthGrants",
    summary="List the OAuth grants on an endpoint",
    responses=problems(400),
)
def list_endpoint_grants(
    endpoint_id: EndpointId,
    principal: CurrentPrincipal,
    grants: GrantsDep,
    limit: int = _LIMIT,
    cursor: str | None = _CURSOR,
) -> GrantPage:
    """Who approved which client on this endpoint. Needs an admin key with `manage_users`."""
    return _page(grants.of_endpoint(principal, endpoint_id), limit, cursor)


@router.get(
    "/me/oauth-grants", operation_id="listMyOAuthGrants", summary="List my OAuth grants", responses=problems(400)
)
def list_my_grants(
    principal: CurrentPrincipal, grants: GrantsDep, limit: int = _LIMIT, cursor: str | None = _CURSOR
) -> GrantPage:
    """The clients the caller approved on published endpoints."""
    return _page(grants.list(principal, principal.user_id), limit, cursor)


@router.delete(
    "/me/oauth-grants/{grant_id}", operation_id="revokeMyOAuthGrant", summary="Revoke my OAuth grant", status_code=204
)
def revoke_my_grant(grant_id: GrantId, principal: CurrentPrincipal, grants: GrantsDep) -> Response:
    """Revokes one of the caller's grants."""
    grants.revoke(principal, principal.user_id, grant_id=grant_id)
    return Response(status_code=204)


@router.get("/users/{user_id}/access", operation_id="getUserAccess", summary="Get a user's OAuth access")
def get_user_access(user_id: UserId, principal: CurrentPrincipal, users: UsersDep) -> UserAccess:
    """The user's e-mail address and what they reach through OAuth clients. Needs `manage_users`."""
    return UserAccess.of(users.get(principal, user_id))


@router.put(
    "/users/{user_id}/access",
    operation_id="setUserAccess",
    summary="Set a user's OAuth access",
    responses=problems(400, 409),
)
def set_user_access(user_id: UserId, body: UserAccess, principal: CurrentPrincipal, users: UsersDep) -> UserAccess:
    """Sets the user's e-mail address (409 when another user has it) and access: a call through an OAuth client runs
    with the endpoint's tools and knowledge bases within these. Never broader than the caller's own key."""
    updated = users.update(principal, user_id, email=body.email, access=(body.capabilities, body.knowledge_base_ids))
    return UserAccess.of(updated)
