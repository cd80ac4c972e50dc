"""Grants: a user's consent to one client on one endpoint, and everything revoking one takes with it.

A grant holds the scopes the user approved and, when the user signed in with an API key rather than the operator's
identity provider, that key's scope: tokens of the grant never reach beyond it. Approving the same client again with
the same key (or identity) updates the grant in place (same generation: the client's other sessions keep working);
approving it with another one, or revoking it, replaces or deletes the grant and its tokens, and every token of it is
refused from the next request on (the grant is read on each), even if the user approves the client again later (a
new grant has a new generation).

A grant follows what it was made from, read on every use of its tokens (:meth:`Grants.standing`), whatever route
changed it: the API key signed in with (or the identity provider's subject, linked to the user), the user and the
workspace. A revoked key, a deleted user or identity link, a workspace deleted or being deleted: the grant is gone
(revoked on the spot). A disabled user or workspace: the grant is suspended (its tokens refused, nothing deleted) as
that user's API keys are. A grant stored before grants recorded their key or identity has nothing to follow: it is
gone, and the person signs in again.

Admins list and revoke a user's grants (all of them, per endpoint, per client) with ``manage_users``, on the
endpoints within their key's scope, and never those of a user holding a key broader than theirs; a user lists and
revokes their own, on the endpoints within their key's scope (:mod:`.grant_reviews`).
"""

from __future__ import annotations

import builtins
import logging
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from mcpbridge.authserver.records import grant_key, grant_prefix, grant_tokens_partition
from mcpbridge.domain.identity import Scope, scope_of, timestamp
from mcpbridge.domain.ids import new_id
from mcpbridge.domain.items import Item, Key
from mcpbridge.identity.records import api_key_key, status_of, user_key, workspace_key
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
    api_key_id: str | None = None
    """The API key the user signed in with (``api_key``); None for grants stored before grants recorded it."""
    identity: str | None = None
    """The sort key of the identity provider's subject linked to the user (``oidc``: ``USERSUB#<digest>``)."""

    @property
    def key(self) -> Key:
        return grant_key(self.workspace_id, self.user_id, self.endpoint_id, self.client_id)

    @property
    def origin(self) -> str | None:
        """What the grant was made from: its key or its identity (None: not recorded)."""
        return self.api_key_id if self.signed_in_with == "api_key" else self.identity


Verdict = Literal["stands", "suspended", "gone"]


@dataclass(frozen=True)
class Standing:
    """Whether a grant's origin still holds: ``stands`` (``user`` is the user's item), ``suspended`` (refused until
    re-enabled: ``code`` says why, as an API key would be refused) or ``gone`` (for good: revoke it)."""

    verdict: Verdict
    why: str = ""
    code: str = ""
    user: Item | None = None


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
        api_key_id=item.get("api_key_id") or None,
        identity=item.get("identity") or None,
    )


@dataclass(frozen=True)
class Origin:
    """What a consent is made from: the sign-in method, and the key (or identity link) and its scope."""

    signed_in_with: SignIn
    api_key_id: str | None = None
    identity: str | None = None
    key_scope: Scope = field(default_factory=Scope)

    @property
    def id(self) -> str | None:
        return self.api_key_id if self.signed_in_with == "api_key" else self.identity


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
        origin: Origin,
    ) -> Grant:
        """Record the user's consent: the existing grant with these scopes when it was made from the same key or
        identity, else a new grant (the one it replaces is revoked with its tokens)."""
        key = grant_key(workspace_id, user_id, endpoint_id, client_id)
        now = timestamp(self._clock.now())
        current = self._store.get(key)
        if current is not None and (origin.id is None or grant_of(current).origin != origin.id):
            self.revoke(grant_of(current), why="approved again with another key or identity")
            current = None
        scope = origin.key_scope
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
            "signed_in_with": origin.signed_in_with,
            "api_key_id": origin.api_key_id,
            "identity": origin.identity,
            "key_capabilities": None if scope.capabilities is None else sorted(scope.capabilities),
            "key_knowledge_base_ids": None if scope.knowledge_base_ids is None else sorted(scope.knowledge_base_ids),
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

    def standing(self, grant: Grant) -> Standing:
        """Whether what the grant was made from still holds, read now (nothing cached): the workspace, the user,
        and the API key signed in with or the identity linked to the user."""
        workspace = self._store.get(workspace_key(grant.workspace_id))
        if workspace is None or workspace.get("status") == "deleting":
            return Standing("gone", "its workspace was deleted")
        if workspace.get("status") != "active":
            return Standing("suspended", "its workspace is not active", "workspace_inactive")
        user = self._store.get(user_key(grant.workspace_id, grant.user_id))
        if user is None or status_of(user) == "deleting":
            return Standing("gone", "its user was deleted")
        if status_of(user) != "active":
            return Standing("suspended", "its user is disabled", "user_inactive")
        gone = self._origin_gone(grant)
        return Standing("gone", gone) if gone else Standing("stands", user=user)

    def _origin_gone(self, grant: Grant) -> str | None:
        if grant.origin is None:
            return "it was approved before grants recorded the key or identity they were made with"
        if grant.signed_in_with == "api_key":
            key = self._store.get(api_key_key(grant.workspace_id, grant.origin))
            if key is None or key.get("revoked_at") or key.get("user_id") != grant.user_id:
                return "the API key it was approved with was revoked"
            return None
        link = self._store.get(Key(f"WS#{grant.workspace_id}", grant.origin))
        if link is None or link.get("user_id") != grant.user_id:
            return "the sign-in identity it was approved with is no longer its user's"
        return None

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

    # ------------------------------------------------------------------------------------------ lookups

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

    def of_endpoint(self, workspace_id: str, endpoint_id: str) -> builtins.list[Grant]:
        """Every user's grants on one endpoint."""
        items = every_item(self._store, f"WS#{workspace_id}", sk_prefix=grant_prefix())
        return [g for g in (grant_of(item) for item in items) if g.endpoint_id == endpoint_id]
