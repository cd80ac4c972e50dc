"""``/api/v1/workspaces``: the platform's workspaces, for its operators only (an admin key of the platform's own
workspace, the one ``init`` created, with ``manage_workspaces``; 403 ``platform_admin_required`` for anyone else).

    GET    /                  list (paged), with each one's status: active, disabled, deleting
    POST   /                  {name, admin_name?}: the workspace, its first user and that user's unrestricted admin
                              key (shown once, in this response only)
    GET    /pending-calls     per workspace where some wait, how many tool calls wait for a person (paged)
    GET    /{id}
    PUT    /{id}              {name}: rename
    POST   /{id}/disable      every key and endpoint token of it is refused from the next request on
    POST   /{id}/enable
    DELETE /{id}              202: marked deleting at once (refused like disabled), purged in the background; the
                              workspace is gone (404) once its purge is done

The platform's own workspace cannot be disabled or deleted (409 ``platform_workspace``).
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Response
from pydantic import BaseModel, ConfigDict, Field

from mcpbridge.domain.identity import Principal, Workspace
from mcpbridge.http.auth import CurrentPrincipal
from mcpbridge.http.deps import BrokerDep, WorkspacesDep
from mcpbridge.http.fields import WorkspaceId
from mcpbridge.http.openapi import problems
from mcpbridge.http.paging import cursor_query, limit_query, next_cursor_field, page_of
from mcpbridge.http.routes.api_keys import CreatedApiKey
from mcpbridge.http.views import Timestamp

router = APIRouter(prefix="/api/v1/workspaces", tags=["workspaces"])
_MAX_WORKSPACE_PAGES = 1000


class WorkspaceIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid", strict=True, json_schema_extra={"examples": [{"name": "Acme", "admin_name": "Acme admin"}]}
    )

    name: str = Field(min_length=1, max_length=255, description="1 to 255 bytes once trimmed.")
    admin_name: str = Field(
        default="admin", min_length=1, max_length=255, description="The name of the workspace's first user."
    )


class WorkspaceRename(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"examples": [{"name": "Acme Corp"}]})

    name: str = Field(min_length=1, max_length=255, description="1 to 255 bytes once trimmed.")


class WorkspaceOut(BaseModel):
    id: str
    name: str
    status: Literal["active", "disabled", "deleting"]
    created_at: Timestamp
    updated_at: Timestamp

    @classmethod
    def of(cls, workspace: Workspace) -> WorkspaceOut:
        return cls(
            id=workspace.id,
            name=workspace.name,
            status=workspace.status,
            created_at=workspace.created_at,
            updated_at=workspace.updated_at,
        )


class CreatedWorkspaceOut(WorkspaceOut):
    admin_user_id: str = Field(description="The workspace's first user, who holds the admin key.")
    admin_api_key: CreatedApiKey = Field(description="Its unrestricted admin key, shown only in this response.")


class WorkspacePage(BaseModel):
    items: list[WorkspaceOut]
    next_cursor: str | None = next_cursor_field()


@router.get("", operation_id="listWorkspaces", summary="List workspaces", responses=problems(400))
def list_workspaces(
    principal: CurrentPrincipal,
    workspaces: WorkspacesDep,
    limit: int = limit_query(),
    cursor: str | None = cursor_query(),
) -> WorkspacePage:
    """Every workspace of the platform, with its status. Only for the platform admin (an admin key of the workspace
    `init` created, with `manage_workspaces`)."""
    found, next_cursor = workspaces.list(principal, limit=limit, cursor=cursor)
    return WorkspacePage(items=[WorkspaceOut.of(w) for w in found], next_cursor=next_cursor)


class WaitingCalls(BaseModel):
    workspace_id: str
    workspace_name: str
    pending: int = Field(description="Tool calls of the workspace waiting for an approval or an authorization.")


class WaitingCallsList(BaseModel):
    items: list[WaitingCalls]
    next_cursor: str | None = next_cursor_field()


@router.get("/pending-calls", operation_id="countPendingCallsByWorkspace", summary="Count waiting calls per workspace")
def pending_calls(
    principal: CurrentPrincipal,
    workspaces: WorkspacesDep,
    broker: BrokerDep,
    limit: int = limit_query(),
    cursor: str | None = cursor_query(),
) -> WaitingCallsList:
    """Per active workspace where some wait, how many tool calls wait for a person, by workspace id. Only for the
    platform admin, who reads them with `GET /api/v1/agent/pending` and `X-MCPBridge-Workspace: ws_...`."""
    workspaces.require_operator(principal)
    counted: list[WaitingCalls] = []
    listed: str | None = None
    for _ in range(_MAX_WORKSPACE_PAGES):
        found, listed = workspaces.list(principal, limit=200, cursor=listed)
        for workspace in found:
            if workspace.status != "active":
                continue
            there = Principal(workspace.id, principal.user_id, principal.api_key_id, "admin", principal.scope)
            waiting = len(broker.pending(there))
            if waiting:
                counted.append(WaitingCalls(workspace_id=workspace.id, workspace_name=workspace.name, pending=waiting))
        if listed is None:
            break
    shown, next_cursor = page_of(
        counted, key=lambda w: (w.workspace_id,), limit=limit, cursor=cursor, listing="workspaces/pending-calls"
    )
    return WaitingCallsList(items=shown, next_cursor=next_cursor)


@router.post("", operation_id="createWorkspace", summary="Create a workspace", status_code=201)
def create_workspace(
    body: WorkspaceIn, principal: CurrentPrincipal, workspaces: WorkspacesDep, response: Response
) -> CreatedWorkspaceOut:
    """The workspace, its first user and that user's unrestricted admin key, which is in this response only
    (`Cache-Control: no-store`)."""
    created = workspaces.create(principal, name=body.name, admin_name=body.admin_name)
    response.headers["Cache-Control"] = "no-store"
    return CreatedWorkspaceOut(
        **WorkspaceOut.of(created.workspace).model_dump(),
        admin_user_id=created.admin_user_id,
        admin_api_key=CreatedApiKey.of_new(created.admin_key),
    )


@router.get("/{workspace_id}", operation_id="getWorkspace", summary="Get a workspace")
def get_workspace(workspace_id: WorkspaceId, principal: CurrentPrincipal, workspaces: WorkspacesDep) -> WorkspaceOut:
    """One workspace, by id."""
    return WorkspaceOut.of(workspaces.get(principal, workspace_id))


@router.put("/{workspace_id}", operation_id="renameWorkspace", summary="Rename a workspace", responses=problems(409))
def rename_workspace(
    workspace_id: WorkspaceId, body: WorkspaceRename, principal: CurrentPrincipal, workspaces: WorkspacesDep
) -> WorkspaceOut:
    """Changes the workspace's name."""
    return WorkspaceOut.of(workspaces.rename(principal, workspace_id, name=body.name))


@router.post(
    "/{workspace_id}/disable", operation_id="disableWorkspace", summary="Disable a workspace", responses=problems(409)
)
def disable_workspace(
    workspace_id: WorkspaceId, principal: CurrentPrincipal, workspaces: WorkspacesDep
) -> WorkspaceOut:
    """Every key and endpoint token of the workspace is refused from the very next request. The platform's own
    workspace cannot be disabled (409 `platform_workspace`)."""
    return WorkspaceOut.of(workspaces.disable(principal, workspace_id))


@router.post(
    "/{workspace_id}/enable", operation_id="enableWorkspace", summary="Enable a workspace", responses=problems(409)
)
def enable_workspace(workspace_id: WorkspaceId, principal: CurrentPrincipal, workspaces: WorkspacesDep) -> WorkspaceOut:
    """A disabled workspace's keys and endpoint tokens work again from the next request."""
    return WorkspaceOut.of(workspaces.enable(principal, workspace_id))


@router.delete(
    "/{workspace_id}",
    operation_id="deleteWorkspace",
    summary="Delete a workspace",
    status_code=202,
    responses=problems(409),
)
def delete_workspace(workspace_id: WorkspaceId, principal: CurrentPrincipal, workspaces: WorkspacesDep) -> WorkspaceOut:
    """202: the workspace is marked `deleting` at once (refused like a disabled one) and purged in the background:
    knowledge bases, documents, endpoints, services, tokens, calls, users and keys. It answers 404 once the purge is
    done."""
    return WorkspaceOut.of(workspaces.delete(principal, workspace_id))
