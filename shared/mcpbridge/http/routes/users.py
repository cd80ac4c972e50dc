"""``/api/v1/users``: the users of the caller's workspace (an admin key with ``manage_users``).

    GET    /                      list (paged)
    POST   /                      {name}: a new user, without keys yet
    GET    /{id}
    POST   /{id}/disable          its keys are refused from the next request on
    POST   /{id}/enable
    DELETE /{id}                  the user, its keys, OAuth tokens, sessions; its paused calls cancelled
    POST   /{id}/api-keys         a key for the user (shown once), never broader than the caller's

A key never acts on its own user or on a user holding a broader key (403); the last active user holding an
unrestricted admin key cannot be disabled or deleted (409 ``last_admin_key``).
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Response
from pydantic import BaseModel, ConfigDict, Field

from mcpbridge.domain.identity import User
from mcpbridge.http.auth import CurrentPrincipal
from mcpbridge.http.deps import AccountsDep, UserRemovalDep, UsersDep
from mcpbridge.http.fields import UserId
from mcpbridge.http.openapi import problems
from mcpbridge.http.paging import cursor_query, limit_query, next_cursor_field
from mcpbridge.http.routes.api_keys import CreateApiKey, CreatedApiKey
from mcpbridge.http.views import Timestamp

router = APIRouter(prefix="/api/v1/users", tags=["users"])


class UserIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"examples": [{"name": "Alice"}]})

    name: str = Field(min_length=1, max_length=255, description="1 to 255 bytes once trimmed.")


class UserOut(BaseModel):
    id: str
    name: str
    status: Literal["active", "disabled", "deleting"]
    created_at: Timestamp
    updated_at: Timestamp

    @classmethod
    def of(cls, user: User) -> UserOut:
        return cls(
            id=user.id, name=user.name, status=user.status, created_at=user.created_at, updated_at=user.updated_at
        )


class UserPage(BaseModel):
    items: list[UserOut]
    next_cursor: str | None = next_cursor_field()


@router.get("", operation_id="listUsers", summary="List users", responses=problems(400))
def list_users(
    principal: CurrentPrincipal,
    users: UsersDep,
    limit: int = limit_query(),
    cursor: str | None = cursor_query(),
) -> UserPage:
    """The users of the caller's workspace, oldest first. Needs an admin key with `manage_users`."""
    found, next_cursor = users.list(principal, limit=limit, cursor=cursor)
    return UserPage(items=[UserOut.of(u) for u in found], next_cursor=next_cursor)


@router.post("", operation_id="createUser", summary="Create a user", status_code=201)
def create_user(body: UserIn, principal: CurrentPrincipal, users: UsersDep) -> UserOut:
    """A new user of the workspace, without keys yet (mint one with `POST /api/v1/users/{user_id}/api-keys`)."""
    return UserOut.of(users.create(principal, name=body.name))


@router.get("/{user_id}", operation_id="getUser", summary="Get a user")
def get_user(user_id: UserId, principal: CurrentPrincipal, users: UsersDep) -> UserOut:
    """One user of the workspace, by id."""
    return UserOut.of(users.get(principal, user_id))


@router.post("/{user_id}/disable", operation_id="disableUser", summary="Disable a user", responses=problems(409))
def disable_user(user_id: UserId, principal: CurrentPrincipal, users: UsersDep) -> UserOut:
    """The user's keys are refused from the very next request (403 `user_inactive`), and calls can no longer act for
    them. The last active holder of an unrestricted admin key cannot be disabled (409 `last_admin_key`)."""
    return UserOut.of(users.disable(principal, user_id))


@router.post("/{user_id}/enable", operation_id="enableUser", summary="Enable a user", responses=problems(409))
def enable_user(user_id: UserId, principal: CurrentPrincipal, users: UsersDep) -> UserOut:
    """A disabled user's keys work again from the next request."""
    return UserOut.of(users.enable(principal, user_id))


@router.delete(
    "/{user_id}", operation_id="deleteUser", summary="Delete a user", status_code=204, responses=problems(409)
)
def delete_user(user_id: UserId, principal: CurrentPrincipal, removal: UserRemovalDep) -> Response:
    """Removes the user, its keys, OAuth tokens, own catalog snapshots and sessions, and cancels its paused calls;
    its finished calls stay as the workspace's record."""
    removal.delete(principal, user_id)
    return Response(status_code=204)


@router.post(
    "/{user_id}/api-keys",
    operation_id="createUserApiKey",
    summary="Create an API key for a user",
    status_code=201,
    responses=problems(409),
)
def create_user_api_key(
    user_id: UserId, body: CreateApiKey, principal: CurrentPrincipal, accounts: AccountsDep, response: Response
) -> CreatedApiKey:
    """A key for another user of the workspace, never broader than the caller's own; shown in this response only."""
    created = accounts.create_api_key(
        principal,
        name=body.name,
        role=body.role,
        capabilities=body.capabilities,
        knowledge_base_ids=body.knowledge_base_ids,
        user_id=user_id,
    )
    response.headers["Cache-Control"] = "no-store"
    return CreatedApiKey.of_new(created)
