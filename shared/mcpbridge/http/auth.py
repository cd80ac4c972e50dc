"""API-key authentication for the REST surfaces: ``Authorization: Bearer sk_...`` or ``X-API-Key``."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from mcpbridge.bootstrap import Container
from mcpbridge.domain.identity import Principal
from mcpbridge.domain.knowledge import KnowledgeAccess
from mcpbridge.errors import Forbidden, Unauthenticated


def container_of(request: Request) -> Container:
    container: Container = request.app.state.container
    return container


def presented_api_key(request: Request) -> str | None:
    authorization = request.headers.get("authorization")
    if authorization is not None:
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise Unauthenticated("use Authorization: Bearer <API key>", code="invalid_authorization_header")
        return value.strip()
    return request.headers.get("x-api-key")


def current_principal(request: Request) -> Principal:
    return container_of(request).identity.authenticate(presented_api_key(request))


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
