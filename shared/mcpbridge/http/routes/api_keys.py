"""``/api/v1/api-keys`` (admin, ``manage_keys``): list, create (the plaintext key is in this one response), get,
revoke. Keys for another user of the workspace are minted under ``/api/v1/users/{id}/api-keys``; who the presented
key acts as is ``/api/v1/me``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from fastapi import APIRouter, Response
from pydantic import BaseModel, ConfigDict, Field

from mcpbridge.domain.identity import ApiKey, Scope
from mcpbridge.http.auth import CurrentPrincipal
from mcpbridge.http.deps import AccountsDep
from mcpbridge.http.fields import ApiKeyId
from mcpbridge.http.openapi import problems
from mcpbridge.http.paging import cursor_query, limit_query, next_cursor_field
from mcpbridge.http.views import Timestamp

if TYPE_CHECKING:
    from mcpbridge.identity.accounts import NewApiKey

router = APIRouter(prefix="/api/v1", tags=["api-keys"])


def scope_fields(scope: Scope) -> dict[str, list[str] | None]:
    return {
        "capabilities": None if scope.capabilities is None else sorted(scope.capabilities),
        "knowledge_base_ids": None if scope.knowledge_base_ids is None else sorted(scope.knowledge_base_ids),
    }


class CreateApiKey(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={"examples": [{"name": "reporting", "role": "viewer", "capabilities": ["read"]}]},
    )

    name: str = Field(min_length=1, max_length=255)
    role: Literal["viewer", "admin"] = "viewer"
    capabilities: list[str] | None = Field(default=None, description="Omit for every capability of the role.")
    knowledge_base_ids: list[str] | None = Field(default=None, description="Omit for every knowledge base.")


class ApiKeyOut(BaseModel):
    """An API key as listed. It has no field for the key or its hash."""

    id: str
    name: str
    role: Literal["viewer", "admin"]
    capabilities: list[str] | None
    knowledge_base_ids: list[str] | None
    hint: str
    status: Literal["active", "revoked"]
    user_id: str
    created_at: Timestamp
    last_used_at: Timestamp | None
    revoked_at: Timestamp | None

    @classmethod
    def of(cls, key: ApiKey) -> ApiKeyOut:
        return cls(
            id=key.id,
            name=key.name,
            role=key.role,
            **scope_fields(key.scope),
            hint=key.hint,
            status="active" if key.active else "revoked",
            user_id=key.user_id,
            created_at=key.created_at,
            last_used_at=key.last_used_at,
            revoked_at=key.revoked_at,
        )


class CreatedApiKey(ApiKeyOut):
    key: str = Field(description="The API key. It is shown only in this response: store it now.")

    @classmethod
    def of_new(cls, created: NewApiKey) -> CreatedApiKey:
        return cls(**ApiKeyOut.of(created.record).model_dump(), key=created.plaintext)


class ApiKeyPage(BaseModel):
    items: list[ApiKeyOut]
    next_cursor: str | None = next_cursor_field()


@router.get("/api-keys", operation_id="listApiKeys", summary="List API keys", responses=problems(400))
def list_api_keys(
    principal: CurrentPrincipal,
    accounts: AccountsDep,
    limit: int = limit_query(),
    cursor: str | None = cursor_query(),
) -> ApiKeyPage:
    """The workspace's API keys, active and revoked, oldest first. A key is shown by its hint (its last characters),
    never in full. Needs an admin key with `manage_keys`."""
    keys, next_cursor = accounts.list_api_keys(principal, limit=limit, cursor=cursor)
    return ApiKeyPage(items=[ApiKeyOut.of(k) for k in keys], next_cursor=next_cursor)


@router.post(
    "/api-keys", operation_id="createApiKey", summary="Create an API key", status_code=201, responses=problems(409)
)
def create_api_key(
    body: CreateApiKey, principal: CurrentPrincipal, accounts: AccountsDep, response: Response
) -> CreatedApiKey:
    """A new key for the caller's own user, never broader than the caller's (role, capabilities, knowledge bases).
    The key itself is in this response only (`Cache-Control: no-store`): store it now."""
    created = accounts.create_api_key(
        principal,
        name=body.name,
        role=body.role,
        capabilities=body.capabilities,
        knowledge_base_ids=body.knowledge_base_ids,
    )
    response.headers["Cache-Control"] = "no-store"
    return CreatedApiKey.of_new(created)


@router.get("/api-keys/{key_id}", operation_id="getApiKey", summary="Get an API key")
def get_api_key(key_id: ApiKeyId, principal: CurrentPrincipal, accounts: AccountsDep) -> ApiKeyOut:
    """One key of the workspace, by id, as listed (no secret)."""
    return ApiKeyOut.of(accounts.get_api_key(principal, key_id))


@router.delete(
    "/api-keys/{key_id}",
    operation_id="revokeApiKey",
    summary="Revoke an API key",
    status_code=204,
    responses=problems(409),
)
def revoke_api_key(key_id: ApiKeyId, principal: CurrentPrincipal, accounts: AccountsDep) -> Response:
    """The key is refused from the very next request. A key broader than the caller's cannot be revoked by it (403),
    nor the workspace's last usable unrestricted admin key (409 `last_admin_key`). Revoking a revoked key changes
    nothing."""
    accounts.revoke_api_key(principal, key_id)
    return Response(status_code=204)
