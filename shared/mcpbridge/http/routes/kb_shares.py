"""Knowledge bases shared across workspaces: the owner's admin shares one (``PUT``), lists its shares and withdraws
one under ``/api/v1/knowledge-bases/{kb_id}/shares``; any key lists what is shared with its workspace at
``/api/v1/shared-knowledge-bases``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, cast

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from mcpbridge.http.auth import CurrentPrincipal, knowledge_access, service_of
from mcpbridge.http.deps import SemanticDep
from mcpbridge.http.fields import KnowledgeBaseId, WorkspaceId
from mcpbridge.http.openapi import problems
from mcpbridge.http.paging import cursor_query, limit_query, next_cursor_field, page_of
from mcpbridge.http.views import KnowledgeBaseOut, Timestamp

if TYPE_CHECKING:
    from mcpbridge.knowledge.shares import KnowledgeBaseShare, KnowledgeShares

router = APIRouter(prefix="/api/v1", tags=["knowledge"])


async def _shares(request: Request) -> KnowledgeShares:
    return cast("KnowledgeShares", await service_of(request, "knowledge_shares"))


if TYPE_CHECKING:
    SharesDep = Annotated[KnowledgeShares, Depends(_shares)]
else:
    SharesDep = Annotated[Any, Depends(_shares)]


class ShareIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"examples": [{"permission": "read"}]})

    permission: Literal["read", "write"] = Field(
        default="read",
        description="read: the workspace's endpoints and keys may search and read it; write: they may also add, "
        "update and delete its documents (new documents belong to the owner's workspace).",
    )


class ShareOut(BaseModel):
    knowledge_base_id: str
    workspace_id: str = Field(description="The workspace the knowledge base is shared with.")
    permission: Literal["read", "write"]
    created_at: Timestamp
    updated_at: Timestamp

    @classmethod
    def of(cls, share: KnowledgeBaseShare) -> ShareOut:
        return cls(**vars(share))


class ShareList(BaseModel):
    items: list[ShareOut]
    next_cursor: str | None = next_cursor_field()


class SharedKnowledgeBaseOut(KnowledgeBaseOut):
    owner_workspace_id: str = Field(description="The workspace that owns and shares it.")
    permission: Literal["read", "write"]
    shared_at: Timestamp


class SharedKnowledgeBaseList(BaseModel):
    items: list[SharedKnowledgeBaseOut]
    next_cursor: str | None = next_cursor_field()


_SHARE_PROBLEMS = problems(400, 403, 404)


@router.put(
    "/knowledge-bases/{kb_id}/shares/{workspace_id}",
    operation_id="shareKnowledgeBase",
    summary="Share a knowledge base with another workspace",
    responses=_SHARE_PROBLEMS,
)
def share_knowledge_base(
    kb_id: KnowledgeBaseId, workspace_id: WorkspaceId, body: ShareIn, principal: CurrentPrincipal, shares: SharesDep
) -> ShareOut:
    """Shares one of the workspace's own knowledge bases with another active workspace, or changes the permission of
    its share. That workspace's endpoints and keys reach it once their scope lists it (a key not limited to some
    knowledge bases reaches it by naming it). Needs an admin key with `manage_knowledge`, not limited to some
    knowledge bases; a knowledge base shared *with* this workspace cannot be shared on (404)."""
    return ShareOut.of(shares.share(principal, kb_id, workspace_id, permission=body.permission))


@router.get(
    "/knowledge-bases/{kb_id}/shares",
    operation_id="listKnowledgeBaseShares",
    summary="List a knowledge base's shares",
    responses=problems(403, 404),
)
def list_knowledge_base_shares(
    kb_id: KnowledgeBaseId,
    principal: CurrentPrincipal,
    shares: SharesDep,
    limit: int = limit_query(),
    cursor: str | None = cursor_query(),
) -> ShareList:
    """The workspaces one of the workspace's own knowledge bases is shared with, by workspace id (owner's admin
    only)."""
    page, next_cursor = page_of(
        shares.shares(principal, kb_id),
        key=lambda share: (share.workspace_id,),
        limit=limit,
        cursor=cursor,
        listing=f"kb-shares:{kb_id}",
    )
    return ShareList(items=[ShareOut.of(share) for share in page], next_cursor=next_cursor)


@router.delete(
    "/knowledge-bases/{kb_id}/shares/{workspace_id}",
    operation_id="unshareKnowledgeBase",
    summary="Withdraw a knowledge base's share",
    status_code=204,
    responses=problems(403, 404),
)
def unshare_knowledge_base(
    kb_id: KnowledgeBaseId, workspace_id: WorkspaceId, principal: CurrentPrincipal, shares: SharesDep
) -> Response:
    """Withdraws the share at once: every later request from that workspace for the knowledge base, its documents or
    their images gets 404, endpoints that still list it in their scope included."""
    shares.unshare(principal, kb_id, workspace_id)
    return Response(status_code=204)


@router.get(
    "/shared-knowledge-bases",
    operation_id="listSharedKnowledgeBases",
    summary="List knowledge bases shared with this workspace",
)
def list_shared_knowledge_bases(
    principal: CurrentPrincipal,
    shares: SharesDep,
    semantic: SemanticDep,
    limit: int = limit_query(),
    cursor: str | None = cursor_query(),
) -> SharedKnowledgeBaseList:
    """The knowledge bases other workspaces share with the key's workspace (for a key limited to some knowledge
    bases, those among them), by name (case-insensitive), with the permission each share gives."""
    found, next_cursor = page_of(
        shares.shared_with(knowledge_access(principal, "read")),
        key=lambda s: (s.knowledge_base.name.casefold(), s.knowledge_base.id),
        limit=limit,
        cursor=cursor,
        listing="shared-knowledge-bases",
    )
    return SharedKnowledgeBaseList(
        items=[
            SharedKnowledgeBaseOut(
                **KnowledgeBaseOut.of(s.knowledge_base, semantic=semantic).model_dump(),
                owner_workspace_id=s.knowledge_base.workspace_id,
                permission=s.permission,
                shared_at=s.shared_at,
            )
            for s in found
        ],
        next_cursor=next_cursor,
    )
