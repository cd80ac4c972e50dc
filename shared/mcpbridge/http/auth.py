"""API-key authentication for the REST surfaces: ``Authorization: Bearer sk_...`` or ``X-API-Key``.

A signed-in console (``mcpbridge_console`` cookie, :mod:`mcpbridge.http.console.session`) authenticates with its
session instead when the request carries no key; a change made that way needs the session's ``X-CSRF-Token``.

A platform admin (an admin key of the platform's own workspace with ``manage_workspaces``, the operator's key) may
address another workspace with ``X-MCPBridge-Workspace: ws_...``: the request then acts in that workspace with full
authority, as the key's user; ``X-MCPBridge-User: usr_...`` makes it act as that user of the workspace instead
(whose OAuth tokens and calls it reaches), still with full authority. Anyone else sending either header gets 403
``platform_admin_required``; an unknown or inactive workspace or user is refused (404, 409) before anything runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from anyio import to_thread
from fastapi import Depends, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from mcpbridge.bootstrap import Container
from mcpbridge.domain.identity import Principal
from mcpbridge.domain.knowledge import KnowledgeAccess
from mcpbridge.errors import Conflict, Forbidden, Unauthenticated
from mcpbridge.http.store_reads import store_read

if TYPE_CHECKING:
    from mcpbridge.identity.accounts import Accounts


def container_of(request: Request) -> Container:
    container: Container = request.app.state.container
    return container


async def service_of(request: Request, name: str) -> Any:
    """The container's service ``name``, read on the event loop once built. The first request builds it in a
    worker thread, as building may read files or the store."""
    container = container_of(request)
    try:
        return container.__dict__[name]  # a built cached_property lives in the instance's __dict__
    except KeyError:
        return await to_thread.run_sync(getattr, container, name)


def presented_api_key(request: Request) -> str | None:
    authorization = request.headers.get("authorization")
    if authorization is not None:
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise Unauthenticated("use Authorization: Bearer <API key>", code="invalid_authorization_header")
        return value.strip()
    return request.headers.get("x-api-key")


# Declared for the OpenAPI document (its security schemes, the docs page's Authorize button, each operation's
# security); the key itself is read by presented_api_key, whose errors are mcpbridge's own.
API_KEY_BEARER = HTTPBearer(
    scheme_name="apiKeyBearer",
    bearerFormat="sk_...",
    description="An API key (`sk_` + 43 characters) as a bearer token: `Authorization: Bearer sk_...`.",
    auto_error=False,
)
API_KEY_HEADER = APIKeyHeader(
    name="X-API-Key",
    scheme_name="apiKeyHeader",
    description="The same API key in the `X-API-Key` header instead.",
    auto_error=False,
)


async def current_principal(
    request: Request,
    _bearer: Annotated[HTTPAuthorizationCredentials | None, Security(API_KEY_BEARER)],
    _header: Annotated[str | None, Security(API_KEY_HEADER)],
) -> Principal:
    """The key's principal, checked against the store on every request (its reads on the event loop where they are
    local); the key's last-use write, due once a minute, in a worker thread."""
    presented = presented_api_key(request)
    if presented is None and CONSOLE_COOKIE in request.cookies:
        from mcpbridge.http.console.session import checked_session, principal_of_session

        session = await checked_session(request)  # a console session: its CSRF token checked for changes
        principal = await principal_of_session(request, session)
    else:
        principal = await principal_of_key(request, presented)
    workspace_id = request.headers.get(WORKSPACE_HEADER)
    user_id = request.headers.get(USER_HEADER)
    if workspace_id is None and user_id is None:
        return principal
    return await to_thread.run_sync(addressed, container_of(request), principal, workspace_id, user_id)


async def principal_of_key(request: Request, presented: str | None) -> Principal:
    """The principal of an API key, as every REST request checks it (the console's sign-in too)."""
    accounts: Accounts = await service_of(request, "identity")
    principal, stale = await store_read(container_of(request), accounts.verify, presented)
    if stale is not None:
        await to_thread.run_sync(accounts.touch, stale)
    return principal


CONSOLE_COOKIE = "mcpbridge_console"
"""The console's session cookie: the API key sealed with an expiry (:mod:`mcpbridge.http.console.session`)."""
WORKSPACE_HEADER = "x-mcpbridge-workspace"
USER_HEADER = "x-mcpbridge-user"


def addressed(container: Container, principal: Principal, workspace_id: str | None, user_id: str | None) -> Principal:
    """The platform admin's principal in the workspace (and as the user) its request addresses."""
    container.workspaces.require_operator(principal)
    target = (workspace_id or principal.workspace_id).strip()
    workspace = container.workspaces.find(target)
    if workspace.status != "active":
        raise Conflict(f"workspace {workspace.id} is {workspace.status}", code="workspace_inactive")
    acting = principal.user_id
    if user_id is not None:
        user = container.users.find(workspace.id, user_id.strip())
        if user.status != "active":
            raise Conflict(f"user {user.id} is {user.status}", code="user_inactive")
        acting = user.id
    return Principal(workspace.id, acting, principal.api_key_id, "admin", principal.scope)


CurrentPrincipal = Annotated[Principal, Depends(current_principal)]
ContainerDep = Annotated[Container, Depends(container_of)]


def knowledge_access(principal: Principal, capability: str) -> KnowledgeAccess:
    """The knowledge a principal may reach for ``capability`` (read, ask, wiki): its workspace, its KB whitelist."""
    if not principal.scope.allows(capability):
        raise Forbidden(f"this API key lacks the {capability} capability", code="capability_missing")
    return KnowledgeAccess(principal.workspace_id, principal.scope.knowledge_base_ids)


def knowledge_write_access(principal: Principal, capability: str) -> KnowledgeAccess:
    """As ``knowledge_access``, for changes: an admin key with ``capability`` (write, manage_knowledge)."""
    if not principal.is_admin:
        raise Forbidden("this needs an admin API key", code="admin_required")
    return knowledge_access(principal, capability)
