"""``/api/v1/api-keys`` (admin, ``manage_keys``): list, create (the plaintext key is in this one response), get,
revoke. Keys for another user of the workspace are minted under ``/api/v1/users/{id}/api-keys``; who the presented
key acts as is ``/api/v1/me``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from mcpbridge.domain.identity import ApiKey, Scope
from mcpbridge.http.auth import CurrentPrincipal
from mcpbridge.http.deps import AccountsDep
from mcpbridge.http.openapi import problems

if TYPE_CHECKING:
    from mcpbridge.identity.accounts import NewApiKey

router = APIRouter(prefix="/api/v1", tags=["api-keys"])


def scope_fields(scope: Scope) -> dict[str, list[str] | None]:
    return {
        "capabilities": None if scope.capabilities is None else sorted(scope.capabilities),
        "knowledge_base_ids": None if scope.knowledge_base_ids is None else sorted(scope.knowledge_base_ids),
    }


class CreateApiKey(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

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
    created_at: str
    last_used_at: str | None
    revoked_at: str | None

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
    next_cursor: str | None


@router.get("/api-keys", responses=problems(400))
def list_api_keys(
    principal: CurrentPrincipal,
    accounts: AccountsDep,
    limit: int = Query(default=50, ge=1, le=200),
    cursor: str | None = None,
) -> ApiKeyPage:
    keys, next_cursor = accounts.list_api_keys(principal, limit=limit, cursor=cursor)
    return ApiKeyPage(items=[ApiKeyOut.of(k) for k in keys], next_cursor=next_cursor)


@router.post("/api-keys", status_code=201, responses=problems(409))
def create_api_key(
    body: CreateApiKey, principal: CurrentPrincipal, accounts: AccountsDep, response: Response
) -> CreatedApiKey:
    created = accounts.create_api_key(
        principal,
        name=body.name,
        role=body.role,
        capabilities=body.capabilities,
        knowledge_base_ids=body.knowledge_base_ids,
    )
    response.headers["Cache-Control"] = "no-store"
    return CreatedApiKey.of_new(created)


@router.get("/api-keys/{key_id}")
def get_api_key(key_id: str, principal: CurrentPrincipal, accounts: AccountsDep) -> ApiKeyOut:
    return ApiKeyOut.of(accounts.get_api_key(principal, key_id))


@router.delete("/api-keys/{key_id}", status_code=204, responses=problems(409))
def revoke_api_key(key_id: str, principal: CurrentPrincipal, accounts: AccountsDep) -> Response:
    accounts.revoke_api_key(principal, key_id)
    return Response(status_code=204)
