"""OAuth tokens of external services, one per (workspace, principal type, principal id, service), and the pieces
of their refresh: the token endpoint exchange (RFC 6749 sections 4.1.3, 5 and 6), the classification of its
failures, and the refresh lease.

Item:

    WS#<ws> / OAUTHTOKEN#<service_id>#<principal_type>#<principal_id>
        service_id, principal_type, principal_id, issuer, token_endpoint, revocation_endpoint, resource, scope,
        token_type, client_id, client_source, client_auth_method, client_record, created_at, updated_at,
        access_expires_at   epoch seconds, or None when the server gave no ``expires_in``
        generation          random, new with every write of the token material (what waiting refreshers watch)
        lease_id, lease_until   the refresh lease, present only while an instance refreshes
        secret_access_token, secret_refresh_token
                            sealed under SecretContext(ws, "oauth_token", "<service>#<type>#<id>")
        expires_at          TTL: only for a token without refresh token, at its real expiry (it cannot outlive it)

Refresh rules (applied by :class:`mcpbridge.oauth.refresh.Bearers`):

* due 30 s before ``access_expires_at`` when a refresh token exists; a token without one lives to its real expiry;
* the refresher first takes the lease with a conditional update (the item exists, its ``generation`` is the one it
  read, and no unexpired lease is held); the lease lasts 45 s, longer than the 20 s token request, so a rotating
  refresh token is presented exactly once across every instance; the new material is written on condition that the
  lease is still ours, which also releases it;
* instances that lose the lease poll the item every 100 ms and reuse the token once its ``generation`` changes;
* failures (:func:`classify`): ``invalid_grant`` / ``invalid_token`` / ``expired_token`` / ``bad_refresh_token`` or
  HTTP 400: the token is deleted (re-authorize); ``invalid_client`` / ``unauthorized_client`` or HTTP 401: the token
  and the dynamic client registration are dropped; anything else (5xx, network, timeout): a temporary error, the token
  is kept and the lease released.
"""

# Over 400 lines: the token item, its exchange at the token endpoint and its refresh lease are one lifecycle.

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from mcpbridge.domain.identity import timestamp
from mcpbridge.domain.items import (
    AllOf,
    AnyOf,
    AttrAbsent,
    Check,
    Compare,
    Condition,
    Item,
    ItemExists,
    Key,
    Put,
    Update,
    WriteOp,
)
from mcpbridge.domain.secrets import SecretContext
from mcpbridge.errors import ConditionFailed, Forbidden, UpstreamError
from mcpbridge.identity.records import NOT_REFUSED, user_key, workspace_key
from mcpbridge.oauth.registration import ClientIdentity
from mcpbridge.oauth.rows import token_key
from mcpbridge.outbound.json_http import Answer, post_form
from mcpbridge.outbound.policy import EgressPolicy
from mcpbridge.paging import every_item
from mcpbridge.ports import Clock, SecretBox, Store
from mcpbridge.sealing import open_secret_or_none

log = logging.getLogger("mcpbridge.oauth")

SECRET_KIND = "oauth_token"  # noqa: S105 - a SecretContext kind, not a secret
REFRESH_SKEW_SECONDS = 30
LEASE_SECONDS = 45
TOKEN_REQUEST_TIMEOUT = 20.0
LEASE_POLL_SECONDS = 0.1
TokenState = Literal["authorized", "refreshable", "reauth_required"]
Verdict = Literal["reauthorize", "drop_client", "temporary"]

_WORKSPACE_ACTIVE = Condition.equals("oauth_workspace_active", "status", "active")
REAUTHORIZE_ERRORS = frozenset({"invalid_grant", "invalid_token", "expired_token", "bad_refresh_token"})
CLIENT_ERRORS = frozenset({"invalid_client", "unauthorized_client"})
_LEASE_ATTRS = ("lease_id", "lease_until")


def _context(workspace_id: str, service_id: str, principal_type: str, principal_id: str) -> SecretContext:
    return SecretContext(workspace_id, SECRET_KIND, f"{service_id}#{principal_type}#{principal_id}")


def classify(status: int, error: str | None) -> Verdict:
    """What a refused token request means for the stored token (see the module docstring)."""
    if error in CLIENT_ERRORS:
        return "drop_client"
    if error in REAUTHORIZE_ERRORS:
        return "reauthorize"
    if status == 401:
        return "drop_client"
    if status == 400:
        return "reauthorize"
    return "temporary"


# ---------------------------------------------------------------------------------------------------- exchange


@dataclass(frozen=True)
class IssuedToken:
    """A token endpoint's successful answer (secrets left out of ``repr``)."""

    access_token: str = field(repr=False)
    refresh_token: str | None = field(repr=False)
    expires_in: int | None
    scope: str | None
    token_type: str = "Bearer"  # noqa: S105 - the RFC 6750 token type, not a secret


class TokenRefused(Exception):
    """The token endpoint refused the request (an HTTP status with an OAuth ``error``, maybe)."""

    def __init__(self, status: int, error: str | None) -> None:
        super().__init__(f"the token endpoint refused the request: HTTP {status} {error or ''}".strip())
        self.status = status
        self.error = error

    @property
    def verdict(self) -> Verdict:
        return classify(self.status, self.error)


def _error_code(answer: Answer) -> str | None:
    body = answer.json_object()
    error = body.get("error") if body else None
    # Only an RFC-shaped code is kept: it ends up in logs and problem details.
    if isinstance(error, str) and error.replace("_", "").isalnum() and len(error) <= 64:
        return error
    return None


def _issued(answer: Answer) -> IssuedToken:
    from mcp.shared.auth import OAuthToken
    from pydantic import ValidationError

    body = answer.json_object()
    try:
        token = OAuthToken.model_validate(body)
    except ValidationError:
        raise UpstreamError(
            "the token endpoint answered without a usable bearer token", code="oauth_token_invalid"
        ) from None
    if not token.access_token:
        raise UpstreamError("the token endpoint answered without an access token", code="oauth_token_invalid")
    expires_in = token.expires_in if token.expires_in is not None and token.expires_in >= 0 else None
    return IssuedToken(
        access_token=token.access_token,
        refresh_token=token.refresh_token or None,
        expires_in=expires_in,
        scope=token.scope,
        token_type=token.token_type,
    )


async def token_request(
    policy: EgressPolicy,
    endpoint: str,
    client: ClientIdentity,
    form: Mapping[str, str],
    *,
    timeout: float = TOKEN_REQUEST_TIMEOUT,
) -> IssuedToken:
    """POST ``form`` (authenticated as ``client``) to the token endpoint.

    Raises :class:`TokenRefused` for a 4xx (or a 5xx carrying an OAuth error), UpstreamError when the server cannot be
    reached, times out or answers nonsense, InvalidInput when the endpoint URL is refused."""
    body, headers = client.authenticate(form)
    answer = await post_form(policy, endpoint, body, what="token endpoint", timeout=timeout, headers=headers)
    if answer.ok:
        return _issued(answer)
    raise TokenRefused(answer.status, _error_code(answer))


# ---------------------------------------------------------------------------------------------------- the item


@dataclass(frozen=True)
class StoredToken:
    """A stored token with its secrets opened (left out of ``repr``)."""

    workspace_id: str
    service_id: str
    principal_type: str
    principal_id: str
    issuer: str
    token_endpoint: str
    revocation_endpoint: str | None
    resource: str
    scope: str | None
    client_id: str
    client_source: str
    client_auth_method: str
    client_record: str | None
    access_expires_at: int | None
    generation: str
    updated_at: str
    access_token: str = field(repr=False)
    refresh_token: str | None = field(repr=False)
    lease_id: str | None = None
    lease_until: int | None = None
    created_at: str = ""

    @property
    def key(self) -> Key:
        return token_key(self.workspace_id, self.service_id, self.principal_type, self.principal_id)

    def usable(self, now: float) -> bool:
        """Whether the access token may be sent as it is (refresh skew only when a refresh is possible)."""
        if self.access_expires_at is None:
            return True
        skew = REFRESH_SKEW_SECONDS if self.refresh_token else 0
        return now < self.access_expires_at - skew

    def state(self, now: float) -> TokenState:
        if self.usable(now):
            return "authorized"
        return "refreshable" if self.refresh_token else "reauth_required"


@dataclass(frozen=True)
class TokenOrigin:
    """Where a token comes from: the server, the client it was issued to, the resource it is bound to."""

    issuer: str
    token_endpoint: str
    revocation_endpoint: str | None
    resource: str
    client: ClientIdentity


class TokenStore:
    """The token items (blocking store and SecretBox calls)."""

    def __init__(self, store: Store, clock: Clock, secrets_box: SecretBox) -> None:
        self._store = store
        self._clock = clock
        self._secrets = secrets_box

    def get(self, key: Key) -> StoredToken | None:
        item = self._store.get(key)
        return None if item is None else self._opened(item)

    def of_principal(self, workspace_id: str, principal_type: str, principal_id: str) -> list[StoredToken]:
        """Every readable token of one principal of the workspace, whatever the service, by service id."""
        tokens = []
        for item in every_item(self._store, f"WS#{workspace_id}", sk_prefix="OAUTHTOKEN#"):
            if (item.get("principal_type"), item.get("principal_id")) == (principal_type, principal_id):
                token = self._opened(item)
                if token is not None:
                    tokens.append(token)
        return sorted(tokens, key=lambda token: token.service_id)

    def _opened(self, item: Item) -> StoredToken | None:
        context = _context(item["workspace_id"], item["service_id"], item["principal_type"], item["principal_id"])
        access = open_secret_or_none(self._secrets, item.get("secret_access_token"), context)
        if access is None:
            # Unreadable (key lost, tampered): as good as absent; a new authorization replaces it.
            return None
        refresh = open_secret_or_none(self._secrets, item.get("secret_refresh_token"), context)
        expires = item.get("access_expires_at")
        until = item.get("lease_until")
        return StoredToken(
            workspace_id=str(item["workspace_id"]),
            service_id=str(item["service_id"]),
            principal_type=str(item["principal_type"]),
            principal_id=str(item["principal_id"]),
            issuer=str(item.get("issuer") or ""),
            token_endpoint=str(item.get("token_endpoint") or ""),
            revocation_endpoint=item.get("revocation_endpoint") or None,
            resource=str(item.get("resource") or ""),
            scope=item.get("scope") or None,
            client_id=str(item.get("client_id") or ""),
            client_source=str(item.get("client_source") or ""),
            client_auth_method=str(item.get("client_auth_method") or "none"),
            client_record=item.get("client_record") or None,
            access_expires_at=int(expires) if isinstance(expires, (int, float)) else None,
            generation=str(item.get("generation") or ""),
            updated_at=str(item.get("updated_at") or ""),
            access_token=access,
            refresh_token=refresh,
            lease_id=item.get("lease_id") or None,
            lease_until=int(until) if isinstance(until, (int, float)) else None,
            created_at=str(item.get("created_at") or ""),
        )

    def _material(self, key_parts: tuple[str, str, str, str], issued: IssuedToken, refresh_token: str | None) -> Item:
        now = self._clock.now()
        context = _context(*key_parts)
        expires = int(now) + issued.expires_in if issued.expires_in is not None else None
        material: Item = {
            "secret_access_token": self._secrets.seal(issued.access_token, context),
            "access_expires_at": expires,
            "token_type": issued.token_type,
            "generation": secrets.token_hex(16),
            "updated_at": timestamp(now),
        }
        if refresh_token:
            material["secret_refresh_token"] = self._secrets.seal(refresh_token, context)
        return material

    def save(
        self,
        workspace_id: str,
        service_id: str,
        principal_type: str,
        principal_id: str,
        issued: IssuedToken,
        origin: TokenOrigin,
        *,
        scope: str | None,
    ) -> StoredToken:
        """Store a newly granted token, replacing whatever the principal had for the service."""
        parts = (workspace_id, service_id, principal_type, principal_id)
        material = self._material(parts, issued, issued.refresh_token)
        item: Item = {
            **token_key(*parts).as_dict(),
            "workspace_id": workspace_id,
            "service_id": service_id,
            "principal_type": principal_type,
            "principal_id": principal_id,
            "issuer": origin.issuer,
            "token_endpoint": origin.token_endpoint,
            "revocation_endpoint": origin.revocation_endpoint,
            "resource": origin.resource,
            "scope": issued.scope or scope,
            "client_id": origin.client.client_id,
            "client_source": origin.client.source,
            "client_auth_method": origin.client.auth_method,
            "client_record": origin.client.record,
            "created_at": material["updated_at"],
            **material,
        }
        if not issued.refresh_token and material["access_expires_at"] is not None:
            item["expires_at"] = material["access_expires_at"]
        # Stored only while the workspace is active and the user neither disabled nor being deleted: a callback
        # finishing after either changed leaves nothing behind.
        ops: list[WriteOp] = [Put(item), Check(workspace_key(workspace_id), _WORKSPACE_ACTIVE)]
        if principal_type == "user":  # oauth.rules.USER (rules imports this module)
            ops.append(Check(user_key(workspace_id, principal_id), Condition("oauth_user_active", NOT_REFUSED)))
        try:
            self._store.transact(ops)
        except ConditionFailed as lost:
            what = "workspace is not active" if lost.condition == _WORKSPACE_ACTIVE.name else "user is not active"
            raise Forbidden(f"the token was not stored: the {what}", code="principal_inactive") from None
        stored = self._opened(item)
        assert stored is not None
        return stored

    def acquire_lease(self, token: StoredToken) -> str | None:
        """Take the refresh lease of ``token`` as read (same generation, no live lease); the lease id, or None."""
        now = int(self._clock.now())
        lease_id = secrets.token_hex(16)
        free = Condition(
            "oauth_refresh_lease_free",
            AllOf(
                (
                    ItemExists(),
                    Compare("generation", "=", token.generation),
                    AnyOf((AttrAbsent("lease_until"), Compare("lease_until", "<", now))),
                )
            ),
        )
        try:
            self._store.update(
                token.key, Update(set={"lease_id": lease_id, "lease_until": now + LEASE_SECONDS}), condition=free
            )
        except ConditionFailed:
            return None
        return lease_id

    @staticmethod
    def _held(lease_id: str) -> Condition:
        return Condition.equals("oauth_refresh_lease_held", "lease_id", lease_id)

    def save_refreshed(self, token: StoredToken, lease_id: str, issued: IssuedToken) -> StoredToken | None:
        """Write the refreshed material and release the lease, if the lease is still ours (else None)."""
        parts = (token.workspace_id, token.service_id, token.principal_type, token.principal_id)
        # RFC 6749 section 6: a server that does not rotate omits refresh_token; the old one stays valid.
        refresh_token = issued.refresh_token or token.refresh_token
        material = self._material(parts, issued, refresh_token)
        material["scope"] = issued.scope or token.scope
        remove = list(_LEASE_ATTRS)
        if refresh_token is None and material["access_expires_at"] is not None:
            material["expires_at"] = material["access_expires_at"]
        else:
            remove.append("expires_at")
        if refresh_token is None:
            remove.append("secret_refresh_token")
        try:
            item = self._store.update(token.key, Update(set=material, remove=remove), condition=self._held(lease_id))
        except ConditionFailed:
            return None
        return self._opened(item)

    def release_lease(self, token: StoredToken, lease_id: str) -> None:
        try:
            self._store.update(token.key, Update(remove=list(_LEASE_ATTRS)), condition=self._held(lease_id))
        except ConditionFailed:
            log.info("the refresh lease on a token of service %s was already gone", token.service_id)

    def delete(self, key: Key, *, lease_id: str | None = None, generation: str | None = None) -> Item | None:
        """Delete the token (only while ``lease_id`` is held / while it is still ``generation``, when given); the
        deleted item, or None."""
        condition: Condition | None = None
        if lease_id is not None:
            condition = self._held(lease_id)
        elif generation is not None:
            condition = Condition.equals("oauth_token_unchanged", "generation", generation)
        try:
            return self._store.delete(key, condition=condition)
        except ConditionFailed:
            return None
