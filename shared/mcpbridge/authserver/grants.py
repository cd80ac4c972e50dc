"""Grants: a user's consent to one client on one endpoint, and everything revoking one takes with it.

A grant holds the scopes the user approved and, when the user signed in with an API key rather than the operator's
identity provider, that key's scope: tokens of the grant never reach beyond it. Approving the same client again
updates the grant in place (same generation: the client's other sessions keep working); revoking it deletes the
grant and its tokens, and every token of it is refused from the next request on (the grant is read on each), even if
the user approves the client again later (a new grant has a new generation).

Admins list and revoke a user's grants (all of them, per endpoint, per client) with ``manage_users``; a user lists
and revokes their own.
"""

from __future__ import annotations

import builtins
import logging
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from mcpbridge.authserver.records import grant_key, grant_prefix, grant_tokens_partition
from mcpbridge.domain.identity import Principal, Scope, scope_of, timestamp
from mcpbridge.domain.ids import new_id
from mcpbridge.domain.items import Item, Key
from mcpbridge.errors import Forbidden, NotFound
from mcpbridge.paging import every_item
from mcpbridge.ports import Clock, Store

log = logging.getLogger("mcpbridge.authserver")

SignIn = Literal["oidc", "api_key"]
ID_PREFIX = "oag"


@dataclass(frozen=True)
class Grant:
    id: str
    workspace_id: str
    user_id: str
    endpoint_id: str
    client_id: str
    client_name: str
    scopes: tuple[str, ...]
    signed_in_with: SignIn
    key_scope: Scope
    """The scope of the API key the user signed in with; unrestricted for a sign-in with the identity provider."""
    generation: str
    created_at: str
    updated_at: str
    last_used_at: str | None = None

    @property
    def key(self) -> Key:
        return grant_key(self.workspace_id, self.user_id, self.endpoint_id, self.client_id)


def grant_of(item: Item) -> Grant:
    return Grant(
        id=item["id"],
        workspace_id=item["workspace_id"],
        user_id=item["user_id"],
        endpoint_id=item["endpoint_id"],
        client_id=item["client_id"],
        client_name=item.get("client_name") or "",
        scopes=tuple(item.get("scopes") or ()),
        signed_in_with=item.get("signed_in_with") or "api_key",
        key_scope=scope_of(item.get("key_capabilities"), item.get("key_knowledge_base_ids")),
        generation=item["generation"],
        created_at=item["created_at"],
        updated_at=item.get("updated_at") or item["created_at"],
        last_used_at=item.get("last_used_at"),
    )


class Grants:
    """Consents, as the consent flow records them and as admins and users review and revoke them."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    # ------------------------------------------------------------------------------------------ the flow

    def approve(
        self,
        *,
        workspace_id: str,
        user_id: str,
        endpoint_id: str,
        client_id: str,
        client_name: str,
        scopes: Iterable[str],
        signed_in_with: SignIn,
        key_scope: Scope,
    ) -> Grant:
        """Record the user's consent (a new grant, or the existing one with these scopes and key scope)."""
        key = grant_key(workspace_id, user_id, endpoint_id, client_id)
        now = timestamp(self._clock.now())
        current = self._store.get(key)
        item: dict[str, Any] = {
            **key.as_dict(),
            "id": current["id"] if current else new_id(ID_PREFIX),
            "generation": current["generation"] if current else secrets.token_hex(8),
            "created_at": current["created_at"] if current else now,
            "workspace_id": workspace_id,
            "user_id": user_id,
            "endpoint_id": endpoint_id,
            "client_id": client_id,
            "client_name": client_name,
            "scopes": sorted(set(scopes)),
            "signed_in_with": signed_in_with,
            "key_capabilities": None if key_scope.capabilities is None else sorted(key_scope.capabilities),
            "key_knowledge_base_ids": None
            if key_scope.knowledge_base_ids is None
            else sorted(key_scope.knowledge_base_ids),
            "updated_at": now,
        }
        self._store.put(item)
        log.info("user %s approved client grant %s on endpoint %s", user_id, item["id"], endpoint_id)
        return grant_of(item)

    def live(self, workspace_id: str, user_id: str, endpoint_id: str, client_id: str, generation: str) -> Grant | None:
        """The grant a token was issued under, if it still stands (not revoked, not replaced by a new approval
        after a revocation)."""
        item = self._store.get(grant_key(workspace_id, user_id, endpoint_id, client_id))
        if item is None or item.get("generation") != generation:
            return None
        return grant_of(item)

    def revoke(self, grant: Grant, *, why: str) -> None:
        """Delete the grant, then its tokens (which the deletion already made useless)."""
        self._store.delete(grant.key)
        for item in list(every_item(self._store, grant_tokens_partition(grant.id), index="gsi1")):
            self._store.delete(Key(item["pk"], item["sk"]))
        log.warning("revoked grant %s of user %s on endpoint %s: %s", grant.id, grant.user_id, grant.endpoint_id, why)

    def forget_user(self, workspace_id: str, user_id: str) -> int:
        """Revoke every grant of a user (the user is being deleted); how many went."""
        found = self.of_user(workspace_id, user_id)
        for grant in found:
            self.revoke(grant, why="the user was deleted")
        return len(found)

    # ------------------------------------------------------------------------------------------ review

    def of_user(
        self, workspace_id: str, user_id: str, *, endpoint_id: str | None = None, client_id: str | None = None
    ) -> builtins.list[Grant]:
        items = every_item(self._store, f"WS#{workspace_id}", sk_prefix=grant_prefix(user_id))
        grants = [grant_of(item) for item in items]
        return [
            g
            for g in grants
            if (endpoint_id is None or g.endpoint_id == endpoint_id) and (client_id is None or g.client_id == client_id)
        ]

    def list(
        self,
        principal: Principal,
        user_id: str,
        *,
        endpoint_id: str | None = None,
        client_id: str | None = None,
    ) -> builtins.list[Grant]:
        """A user's grants: the caller's own, or (``manage_users``) any user's of the workspace."""
        _require_reviewer(principal, user_id)
        return self.of_user(principal.workspace_id, user_id, endpoint_id=endpoint_id, client_id=client_id)

    def of_endpoint(self, principal: Principal, endpoint_id: str) -> builtins.list[Grant]:
        """Every user's grants on one endpoint (admins with ``manage_users``)."""
        _require_reviewer(principal, None)
        items = every_item(self._store, f"WS#{principal.workspace_id}", sk_prefix=grant_prefix())
        return [g for g in (grant_of(item) for item in items) if g.endpoint_id == endpoint_id]

    def revoke_matching(
        self,
        principal: Principal,
        user_id: str,
        *,
        grant_id: str | None = None,
        endpoint_id: str | None = None,
        client_id: str | None = None,
    ) -> builtins.list[Grant]:
        """Revoke one grant (``grant_id``), or every grant of the user matching the filters; the revoked ones.
        404 ``grant_not_found`` when a named grant does not exist."""
        found = self.list(principal, user_id, endpoint_id=endpoint_id, client_id=client_id)
        if grant_id is not None:
            found = [g for g in found if g.id == grant_id]
            if not found:
                raise NotFound("no such grant for this user", code="grant_not_found")
        for grant in found:
            self.revoke(grant, why=f"revoked by user {principal.user_id}")
        return found


def _require_reviewer(principal: Principal, user_id: str | None) -> None:
    if user_id is not None and user_id == principal.user_id:
        return
    if not principal.is_admin:
        raise Forbidden("this needs an admin API key", code="admin_required")
    if not principal.scope.allows("manage_users"):
        raise Forbidden("this API key lacks the manage_users capability", code="capability_missing")
