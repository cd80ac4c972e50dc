"""Who a person signed in with the operator's OpenID Connect provider is, among a workspace's users.

In order: the user this provider identity (issuer and subject) signed in as before; with ``match="email"``, the user
whose e-mail address is the verified one the provider gave (the identity is then linked to that user, so a later
change of address at the provider does not lose them); with ``provision``, a new user (read, ask and wiki; every
knowledge base) linked to the identity. A user who is disabled or being deleted is refused, and so is a person whose
address is outside the allowed domains.

Signed in to the console that way, a person acts as :func:`signed_in_principal` says, read again on every request.
"""

from __future__ import annotations

import logging
from typing import Literal

from mcpbridge.domain.identity import Principal, User, timestamp
from mcpbridge.domain.ids import new_id
from mcpbridge.domain.items import Condition, Put, WriteOp
from mcpbridge.domain.names import clean_name
from mcpbridge.errors import ConditionFailed, Forbidden, NotFound, Unauthenticated
from mcpbridge.identity.records import (
    access_of,
    status_of,
    user_email_key,
    user_item,
    user_key,
    user_of,
    user_subject_key,
    workspace_key,
)
from mcpbridge.identity.users import ID_PREFIX, Users
from mcpbridge.ports import Clock, Store

log = logging.getLogger("mcpbridge.identity")

PROVISIONED_CAPABILITIES = ("ask", "read", "wiki")


def signed_in_principal(store: Store, workspace_id: str, user_id: str) -> Principal:
    """A user signed in through the OpenID Connect provider (the console): a viewer with the user's own ``access``
    scope, the bound an OAuth sign-in of the user has at an endpoint (``access_of``), and no key. Read from the store
    on every call: a user removed or disabled since, or a workspace no longer active, is refused (401
    ``console_session_ended``), as the session then ends."""
    workspace = store.get(workspace_key(workspace_id))
    user = store.get(user_key(workspace_id, user_id))
    if workspace is None or workspace.get("status") != "active" or user is None or status_of(user) != "active":
        raise Unauthenticated(
            "your account or its workspace is no longer active: sign in again", code="console_session_ended"
        )
    return Principal(workspace_id=workspace_id, user_id=user_id, api_key_id="", role="viewer", scope=access_of(user))


class SignInIdentities:
    def __init__(self, store: Store, clock: Clock, users: Users) -> None:
        self._store = store
        self._clock = clock
        self._users = users

    def user_for(
        self,
        workspace_id: str,
        *,
        issuer: str,
        subject: str,
        email: str | None,
        name: str,
        match: Literal["email", "subject"],
        provision: bool,
        allowed_domains: tuple[str, ...] = (),
    ) -> User:
        """The active user this identity signs in as; Forbidden ``user_unknown`` / ``user_inactive`` otherwise."""
        if allowed_domains and (email is None or email.rpartition("@")[2] not in {d.lower() for d in allowed_domains}):
            raise Forbidden("your e-mail domain may not sign in here", code="domain_not_allowed")
        link = user_subject_key(workspace_id, issuer, subject)
        linked = self._store.get(link)
        user = self._existing(workspace_id, str(linked["user_id"])) if linked else None
        if user is None and match == "email" and email:
            user = self._users.find_by_email(workspace_id, email)
            if user is not None:
                self._store.put({**link.as_dict(), "user_id": user.id})
                log.info("linked a sign-in identity to user %s of workspace %s", user.id, workspace_id)
        if user is None and provision:
            user = self._provision(workspace_id, link.sk, email, name)
        if user is None:
            raise Forbidden("no user of this workspace signs in as you: ask its admin", code="user_unknown")
        if user.status != "active":
            raise Forbidden("your account is disabled or being deleted", code="user_inactive")
        return user

    def _existing(self, workspace_id: str, user_id: str) -> User | None:
        try:
            return self._users.find(workspace_id, user_id)
        except NotFound:
            return None

    def _provision(self, workspace_id: str, link_sk: str, email: str | None, name: str) -> User:
        now = timestamp(self._clock.now())
        item = user_item(workspace_id, new_id(ID_PREFIX), clean_name(name or email or "signed-in user"), now)
        item.update({"capabilities": list(PROVISIONED_CAPABILITIES), "knowledge_base_ids": None, "provisioned": True})
        ops: list[WriteOp] = [
            Put(item, Condition.absent("user_new")),
            Put({"pk": f"WS#{workspace_id}", "sk": link_sk, "user_id": item["id"]}, Condition.absent("identity_free")),
        ]
        if email and self._store.get(user_email_key(workspace_id, email)) is None:
            item["email"] = email
            ops.append(
                Put(
                    {**user_email_key(workspace_id, email).as_dict(), "user_id": item["id"], "email": email},
                    Condition.absent("email_free"),
                )
            )
        try:
            self._store.transact(ops)
        except ConditionFailed as lost:
            if lost.condition != "identity_free" or lost.current is None:
                raise
            # Provisioned by a concurrent sign-in of the same person: theirs stands.
            winner = self._existing(workspace_id, str(lost.current["user_id"]))
            if winner is None:
                raise
            return winner
        log.info("provisioned user %s in workspace %s from a sign-in", item["id"], workspace_id)
        return user_of(workspace_id, item)
