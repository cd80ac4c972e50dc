"""Who may see and revoke which grants: the authority rules of the key, user and endpoint routes, applied to grants.

* Another user's grants need an admin key with ``manage_users`` (403 ``admin_required``, ``capability_missing``) and
  a user of the caller's workspace (404 ``user_not_found`` otherwise, as on every user route). Revoking them also
  needs a key at least as broad as each active key of that user (403 ``scope_exceeded``): a key never takes access
  away from someone broader than itself, as it never disables them.
* A grant is seen and revoked only on an endpoint the caller's key covers: the endpoint's knowledge bases within the
  key's, the capabilities its tools need among the key's (what ``GET /mcp-endpoints/{id}`` asks). Lists leave the
  others out; a revocation matching one of them revokes nothing (403 ``scope_exceeded``). A grant whose endpoint
  was deleted reaches nothing: whoever may act on its user may see and revoke it.
* An endpoint's grants need ``manage_users`` and the endpoint as its own route would show it to the key: 404
  ``endpoint_not_found`` outside the caller's workspace, 403 ``scope_exceeded`` beyond the key's scope.
"""

from __future__ import annotations

import builtins

from mcpbridge.authserver.grants import Grant, Grants
from mcpbridge.domain.identity import Principal
from mcpbridge.errors import Forbidden, NotFound
from mcpbridge.identity.accounts import require_user_manager
from mcpbridge.identity.users import Users
from mcpbridge.publishing.endpoints import Endpoint, EndpointService


class GrantReviews:
    """Grants as admins and users list and revoke them through the REST API."""

    def __init__(self, grants: Grants, users: Users, endpoints: EndpointService) -> None:
        self._grants = grants
        self._users = users
        self._endpoints = endpoints

    def list(
        self, principal: Principal, user_id: str, *, endpoint_id: str | None = None, client_id: str | None = None
    ) -> builtins.list[Grant]:
        """A user's grants within the caller's scope: the caller's own, or (``manage_users``) another user's."""
        self._require_reviewer(principal, user_id)
        found = self._grants.of_user(principal.workspace_id, user_id, endpoint_id=endpoint_id, client_id=client_id)
        return self._within_scope(principal, found)

    def of_endpoint(self, principal: Principal, endpoint_id: str) -> builtins.list[Grant]:
        """Every user's grants on one endpoint of the caller's workspace, within the caller's scope."""
        require_user_manager(principal)
        endpoint = self._endpoints.find(endpoint_id)
        if endpoint is None or endpoint.workspace_id != principal.workspace_id:
            raise NotFound("MCP endpoint not found", code="endpoint_not_found")
        if not principal.scope.covers(endpoint.scope):
            raise Forbidden("this endpoint reaches beyond this API key's scope", code="scope_exceeded")
        return self._grants.of_endpoint(principal.workspace_id, endpoint_id)

    def revoke(
        self,
        principal: Principal,
        user_id: str,
        *,
        grant_id: str | None = None,
        endpoint_id: str | None = None,
        client_id: str | None = None,
    ) -> builtins.list[Grant]:
        """Revoke one grant (``grant_id``: 404 ``grant_not_found``), or every grant of the user matching the filters;
        the revoked ones. 403 ``scope_exceeded``, nothing revoked, when one of them is on an endpoint beyond the
        caller's key (as a key revokes no key broader than itself): narrow the filters to what the key covers."""
        self._require_reviewer(principal, user_id)
        if user_id != principal.user_id:
            self._users.require_outranks(principal, user_id)
        found = self._grants.of_user(principal.workspace_id, user_id, endpoint_id=endpoint_id, client_id=client_id)
        if grant_id is not None:
            found = [g for g in found if g.id == grant_id]
            if not found:
                raise NotFound("no such grant for this user", code="grant_not_found")
        revoked = self._within_scope(principal, found)
        if len(revoked) != len(found):
            raise Forbidden(
                "a grant matched is on an endpoint beyond this API key's scope: nothing was revoked",
                code="scope_exceeded",
            )
        for grant in revoked:
            self._grants.revoke(grant, why=f"revoked by user {principal.user_id}")
        return revoked

    def _require_reviewer(self, principal: Principal, user_id: str) -> None:
        if user_id == principal.user_id:
            return
        require_user_manager(principal)
        self._users.get(principal, user_id)  # 404 for a user of no workspace or of another one

    def _within_scope(self, principal: Principal, grants: builtins.list[Grant]) -> builtins.list[Grant]:
        endpoints: dict[str, Endpoint | None] = {}
        for endpoint_id in {g.endpoint_id for g in grants}:
            endpoint = self._endpoints.find(endpoint_id)
            endpoints[endpoint_id] = endpoint if endpoint and endpoint.workspace_id == principal.workspace_id else None
        return [g for g in grants if _covers(principal, endpoints[g.endpoint_id])]


def _covers(principal: Principal, endpoint: Endpoint | None) -> bool:
    return endpoint is None or principal.scope.covers(endpoint.scope)
