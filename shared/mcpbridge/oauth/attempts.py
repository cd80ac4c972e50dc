"""Authorization attempts: the pending state of a browser authorization, and the record a front end polls.

Items:

    OAUTHSTATE#<sha256(state)> / OAUTHSTATE      the pending authorization; single use; ``expires_at`` = start + 10 min
        workspace_id, attempt_id, principal_type, principal_id, service_id, issuer, iss_required, token_endpoint,
        revocation_endpoint, resource, scope, redirect_uri, frontend_redirect, client_id, client_source,
        client_auth_method, client_record, created_at,
        secret_code_verifier (sealed under SecretContext(ws, "oauth_state", attempt_id))
    WS#<ws> / OAUTHATTEMPT#<attempt_id>           the attempt as the front end sees it; ``expires_at`` = start + 1 day
        service_id, principal_type, principal_id, status (pending | completed | failed), error, created_at,
        state_expires_at, finished_at, state_pk (the state item's partition, so a deletion finds it)

The state is taken by a conditional delete that returns the item (DynamoDB ``ReturnValues=ALL_OLD``; SQLite in one
``BEGIN IMMEDIATE``): of two callbacks carrying the same state, exactly one gets the pending authorization. An
expired state is absent for every read and condition, whether or not TTL has removed it yet. The attempt is marked
``completed`` only after the token is stored, so a front end polling it never sees success before a call can work.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Literal

from mcpbridge.domain.identity import timestamp
from mcpbridge.domain.items import Condition, Item, Key, Put, Update
from mcpbridge.domain.secrets import SecretContext
from mcpbridge.errors import ConditionFailed
from mcpbridge.oauth.pkce import state_digest
from mcpbridge.paging import every_item
from mcpbridge.ports import Clock, SecretBox, Store
from mcpbridge.sealing import open_secret_or_none

log = logging.getLogger("mcpbridge.oauth")

STATE_TTL_SECONDS = 600
ATTEMPT_TTL_SECONDS = 24 * 3600
SECRET_KIND = "oauth_state"  # noqa: S105 - a SecretContext kind, not a secret
AttemptStatus = Literal["pending", "completed", "failed", "expired"]


def state_key(state: str) -> Key:
    return Key(f"OAUTHSTATE#{state_digest(state)}", "OAUTHSTATE")


def attempt_key(workspace_id: str, attempt_id: str) -> Key:
    return Key(f"WS#{workspace_id}", f"OAUTHATTEMPT#{attempt_id}")


def forget_attempts(store: Store, workspace_id: str, *, principal: tuple[str, str] | None = None) -> int:
    """Delete the workspace's authorization attempts (only those of ``principal``, a (type, id) pair, when given)
    and their pending states, so no callback can complete them; how many attempts went."""
    gone = 0
    for item in list(every_item(store, f"WS#{workspace_id}", sk_prefix="OAUTHATTEMPT#")):
        if principal is not None and (item.get("principal_type"), item.get("principal_id")) != principal:
            continue
        if item.get("state_pk"):
            store.delete(Key(str(item["state_pk"]), "OAUTHSTATE"))
        store.delete(Key(item["pk"], item["sk"]))
        gone += 1
    return gone


@dataclass(frozen=True)
class PendingAuthorization:
    """Everything the callback needs to finish an authorization (the verifier is left out of ``repr``)."""

    attempt_id: str
    workspace_id: str
    principal_type: str
    principal_id: str
    service_id: str
    issuer: str
    iss_required: bool
    """The server advertised ``authorization_response_iss_parameter_supported``: a callback without ``iss`` fails."""
    token_endpoint: str
    revocation_endpoint: str | None
    resource: str
    scope: str | None
    redirect_uri: str
    frontend_redirect: str
    """Where the browser goes afterwards; empty: mcpbridge's own small result page."""
    client_id: str
    client_source: str
    client_auth_method: str
    client_record: str | None
    code_verifier: str = field(repr=False)


@dataclass(frozen=True)
class Attempt:
    id: str
    service_id: str
    principal_type: str
    principal_id: str
    status: AttemptStatus
    error: str | None
    created_at: str
    state_expires_at: int


class AuthorizationAttempts:
    """Pending authorizations and attempt records on the store (blocking store and SecretBox calls)."""

    def __init__(self, store: Store, clock: Clock, secrets: SecretBox) -> None:
        self._store = store
        self._clock = clock
        self._secrets = secrets

    def begin(self, pending: PendingAuthorization, state: str) -> int:
        """Store the pending authorization under its state and the attempt record, both or neither; returns the
        epoch second the state expires."""
        now = self._clock.now()
        expires = int(now) + STATE_TTL_SECONDS
        context = SecretContext(pending.workspace_id, SECRET_KIND, pending.attempt_id)
        state_item: Item = {
            **state_key(state).as_dict(),
            "workspace_id": pending.workspace_id,
            "attempt_id": pending.attempt_id,
            "principal_type": pending.principal_type,
            "principal_id": pending.principal_id,
            "service_id": pending.service_id,
            "issuer": pending.issuer,
            "iss_required": pending.iss_required,
            "token_endpoint": pending.token_endpoint,
            "revocation_endpoint": pending.revocation_endpoint,
            "resource": pending.resource,
            "scope": pending.scope,
            "redirect_uri": pending.redirect_uri,
            "frontend_redirect": pending.frontend_redirect,
            "client_id": pending.client_id,
            "client_source": pending.client_source,
            "client_auth_method": pending.client_auth_method,
            "client_record": pending.client_record,
            "created_at": timestamp(now),
            "secret_code_verifier": self._secrets.seal(pending.code_verifier, context),
            "expires_at": expires,
        }
        attempt_item: Item = {
            **attempt_key(pending.workspace_id, pending.attempt_id).as_dict(),
            "id": pending.attempt_id,
            "service_id": pending.service_id,
            "principal_type": pending.principal_type,
            "principal_id": pending.principal_id,
            "status": "pending",
            "error": None,
            "created_at": timestamp(now),
            "state_expires_at": expires,
            "expires_at": int(now) + ATTEMPT_TTL_SECONDS,
            # The state's own key (a digest, not the state): so deleting a workspace or a user finds its states.
            "state_pk": state_item["pk"],
        }
        self._store.transact(
            [
                Put(state_item, Condition.absent("oauth_state_new")),
                Put(attempt_item, Condition.absent("oauth_attempt_new")),
            ]
        )
        return expires

    def take(self, state: str) -> PendingAuthorization | None:
        """The pending authorization of ``state``, deleted in the same step; None when the state is unknown, used or
        expired. A verifier that cannot be opened makes the attempt unusable (None as well, the attempt failed)."""
        try:
            item = self._store.delete(state_key(state), condition=Condition.exists("oauth_state_live"))
        except ConditionFailed:
            return None
        if item is None:
            return None
        return self._pending_of(item)

    def _pending_of(self, item: Item) -> PendingAuthorization | None:
        workspace_id = str(item["workspace_id"])
        attempt_id = str(item["attempt_id"])
        verifier = open_secret_or_none(
            self._secrets, item.get("secret_code_verifier"), SecretContext(workspace_id, SECRET_KIND, attempt_id)
        )
        if verifier is None:
            self.finish(workspace_id, attempt_id, error="authorization_failed")
            return None

        def text(name: str) -> str:
            return str(item.get(name) or "")

        def optional(name: str) -> str | None:
            value: Any = item.get(name)
            return str(value) if value else None

        return PendingAuthorization(
            attempt_id=attempt_id,
            workspace_id=workspace_id,
            principal_type=text("principal_type"),
            principal_id=text("principal_id"),
            service_id=text("service_id"),
            issuer=text("issuer"),
            iss_required=bool(item.get("iss_required")),
            token_endpoint=text("token_endpoint"),
            revocation_endpoint=optional("revocation_endpoint"),
            resource=text("resource"),
            scope=optional("scope"),
            redirect_uri=text("redirect_uri"),
            frontend_redirect=text("frontend_redirect"),
            client_id=text("client_id"),
            client_source=text("client_source"),
            client_auth_method=text("client_auth_method"),
            client_record=optional("client_record"),
            code_verifier=verifier,
        )

    def finish(self, workspace_id: str, attempt_id: str, *, error: str | None) -> None:
        """Mark a pending attempt completed (``error`` None) or failed; an attempt already finished stays as it is."""
        now = self._clock.now()
        update = Update(
            set={
                "status": "failed" if error else "completed",
                "error": error,
                "finished_at": timestamp(now),
            }
        )
        try:
            self._store.update(
                attempt_key(workspace_id, attempt_id),
                update,
                condition=Condition.equals("oauth_attempt_pending", "status", "pending"),
            )
        except ConditionFailed:
            log.info("authorization attempt %s was already finished or has expired", attempt_id)

    def get(self, workspace_id: str, attempt_id: str) -> Attempt | None:
        item = self._store.get(attempt_key(workspace_id, attempt_id))
        if item is None:
            return None
        status: AttemptStatus = "pending"
        for known in ("completed", "failed"):
            if item.get("status") == known:
                status = "completed" if known == "completed" else "failed"
        state_expires = int(item.get("state_expires_at") or 0)
        if status == "pending" and state_expires <= self._clock.now():
            status = "expired"
        return Attempt(
            id=str(item["id"]),
            service_id=str(item["service_id"]),
            principal_type=str(item["principal_type"]),
            principal_id=str(item["principal_id"]),
            status=status,
            error=item.get("error"),
            created_at=str(item["created_at"]),
            state_expires_at=state_expires,
        )
