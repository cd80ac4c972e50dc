"""Authorization codes, access tokens and refresh tokens of the authorization server, kept as digests.

A code lives 60 s, an access token 1 h; each is ``<prefix>`` + 32 random bytes (``domain.credentials``). A code is
single use: taking it is a conditional write that marks it used, so of two requests presenting it exactly one wins;
the loser, and anyone presenting it later, is a replay, and the grant it came from is revoked (its caller does that:
:meth:`Taken.replayed`).

Refresh tokens rotate: each refresh uses the token up and hands out a new pair, in one transaction (the use is
conditional on the token being unused: of concurrent refreshes exactly one rotates). A sign-in starts a *session*
whose refresh tokens all end ``refresh_seconds`` after it (``Settings.oauth_refresh_token_seconds``, 30 days):
rotation never extends it, and no access token outlives it. The pair a token was rotated into is kept on the used
token, sealed with the SecretBox (never in plaintext), for the *grace*: the same client presenting the used token
again within ``grace_seconds`` (a retry, or two requests that met a 401 together) gets that same pair back. Outside
the grace, or from another client, the used token is a replay: the grant is revoked (RFC 9700 4.14). A refresh token
stored before sessions were recorded ends where it ends (its own expiry); its rotations keep that end.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any, Literal

from mcpbridge.authserver.grants import Grant
from mcpbridge.authserver.records import (
    CODE_TTL_SECONDS,
    USED_KEPT_SECONDS,
    access_key,
    code_key,
    grant_tokens_partition,
    refresh_key,
)
from mcpbridge.domain import credentials
from mcpbridge.domain.identity import timestamp
from mcpbridge.domain.items import (
    AttrAbsent,
    Condition,
    Item,
    ItemExists,
    Key,
    Patch,
    Put,
    Update,
    all_of,
)
from mcpbridge.domain.secrets import SecretContext
from mcpbridge.errors import ConditionFailed
from mcpbridge.ports import Clock, SecretBox, Store
from mcpbridge.sealing import open_secret_or_none

log = logging.getLogger("mcpbridge.authserver")

Kind = Literal["code"]
SUCCESSOR_KIND = "oauth_refresh_successor"
DEFAULT_GRACE_SECONDS = 10


@dataclass(frozen=True)
class Taken:
    """The outcome of presenting a single-use credential: the item when this was its first use; ``replayed`` when
    it had been used already (the item, still kept, names the grant to revoke); neither for an unknown one."""

    item: Item | None
    replayed: bool = False


@dataclass(frozen=True)
class IssuedTokens:
    access_token: str = field(repr=False)
    expires_in: int
    scope: str
    refresh_token: str | None = field(default=None, repr=False)
    access_expires_at: int = 0

    def response(self) -> dict[str, Any]:
        """The token response body (RFC 6749 5.1): the only place the plaintexts are handed out."""
        body: dict[str, Any] = {
            "access_token": self.access_token,
            "token_type": "Bearer",
            "expires_in": self.expires_in,
            "scope": self.scope,
        }
        if self.refresh_token is not None:
            body["refresh_token"] = self.refresh_token
        return body

    def sealed_form(self) -> dict[str, Any]:
        """What is sealed on the used refresh token, to answer the grace's repeated request with the same pair."""
        return {
            "access_token": self.access_token,
            "refresh_token": self.refresh_token,
            "scope": self.scope,
            "access_expires_at": self.access_expires_at,
        }

    @classmethod
    def from_sealed_form(cls, form: dict[str, Any], now: int) -> IssuedTokens:
        ends = int(form["access_expires_at"])
        return cls(str(form["access_token"]), max(0, ends - now), str(form["scope"]), form["refresh_token"], ends)


@dataclass(frozen=True)
class Rotation:
    """The outcome of a refresh: the pair to answer with, or none (``replayed``: revoke the grant; otherwise the
    token is gone, its grant revoked meanwhile)."""

    issued: IssuedTokens | None
    replayed: bool = False


@dataclass(frozen=True)
class _Pair:
    issued: IssuedTokens
    items: list[Item]


def session_end(refresh_item: Item) -> int:
    """When the session of a refresh token ends (a token stored before sessions were recorded: its own expiry)."""
    return int(refresh_item.get("session_ends_at") or refresh_item["expires_at"])


def _successor_context(workspace_id: str, used: Key) -> SecretContext:
    return SecretContext(workspace_id, SUCCESSOR_KIND, used.sk)


class Tokens:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        secrets_box: SecretBox,
        *,
        access_seconds: int = 3600,
        refresh_seconds: int = 30 * 86400,
        grace_seconds: int = DEFAULT_GRACE_SECONDS,
    ) -> None:
        self._store = store
        self._clock = clock
        self._box = secrets_box
        self.access_seconds = access_seconds
        self.refresh_seconds = refresh_seconds
        self.grace_seconds = grace_seconds

    # ------------------------------------------------------------------------------------------ codes

    def save_code(self, code: str, grant: Grant, details: dict[str, Any]) -> None:
        """Keep a new code (its digest) with what the token request must match: client, redirect URI, PKCE
        challenge, scope, resource; bound to the grant the consent produced."""
        now = int(self._clock.now())
        self._store.put(
            {
                **code_key(grant.workspace_id, code).as_dict(),
                **_grant_fields(grant),
                **details,
                "issued_at": now,
                "expires_at": now + CODE_TTL_SECONDS,
            },
            condition=Condition.absent("code_new"),
        )

    def take_code(self, workspace_id: str, code: str) -> Taken:
        if not credentials.well_formed(code, credentials.OAUTH_CODE_PREFIX):
            return Taken(None)
        return self._take(code_key(workspace_id, code), "code")

    # ------------------------------------------------------------------------------------------ tokens

    def issue(self, grant: Grant, scopes: tuple[str, ...], *, refresh: bool) -> IssuedTokens:
        """A new access token (and refresh token) for the grant, both stored as digests: the first of a session,
        which rotation can never make last longer than ``refresh_seconds`` from now."""
        now = int(self._clock.now())
        pair = self._pair(grant, scopes, now, session_ends_at=now + self.refresh_seconds, refresh=refresh)
        for item in pair.items:
            self._store.put(item, condition=Condition.absent("token_new"))
        return pair.issued

    def refresh_token(self, workspace_id: str, token: str) -> Item | None:
        """The live refresh token item (consistent read), used or not, or None."""
        if not credentials.well_formed(token, credentials.OAUTH_REFRESH_PREFIX):
            return None
        return self._store.get(refresh_key(workspace_id, token))

    def rotate(self, presented: Item, grant: Grant, scopes: tuple[str, ...], *, client_id: str) -> Rotation:
        """Use up a refresh token for a new pair, in one transaction with storing that pair (its successor, sealed,
        is kept on the used token). A token used already: its successor again when the same client presents it
        within the grace, else a replay (``Rotation.replayed``: the caller revokes the grant)."""
        now = int(self._clock.now())
        key = Key(presented["pk"], presented["sk"])
        if presented.get("used_at") is None:
            pair = self._pair(grant, scopes, now, session_ends_at=session_end(presented), refresh=True)
            sealed = self._box.seal(json.dumps(pair.issued.sealed_form()), _successor_context(grant.workspace_id, key))
            unused = Condition("refresh_unused", all_of(ItemExists(), AttrAbsent("used_at")))
            use = Patch(key, Update(set={"used_at": now, "successor": sealed}), unused)
            try:
                self._store.transact([use, *(Put(item, Condition.absent("token_new")) for item in pair.items)])
                return Rotation(pair.issued)
            except ConditionFailed as lost:
                if lost.operation_index != 0:
                    raise
                if lost.current is None:
                    return Rotation(None)  # deleted meanwhile: its grant was revoked
                presented = lost.current
        return self._again(presented, key, client_id, now)

    def _again(self, used: Item, key: Key, client_id: str, now: int) -> Rotation:
        """A used refresh token presented again: the pair it was rotated into, for the same client within the
        grace (a retry, or two requests that met a 401 together); otherwise a replay."""
        fresh = self.grace_seconds > 0 and now - int(used.get("used_at") or 0) <= self.grace_seconds
        if fresh and used.get("client_id") == client_id:
            opened = open_secret_or_none(
                self._box, used.get("successor"), _successor_context(str(used["workspace_id"]), key)
            )
            if opened is not None:
                return Rotation(IssuedTokens.from_sealed_form(json.loads(opened), now))
        log.warning("a used refresh token was presented again (grant %s)", used.get("grant_id"))
        return Rotation(None, replayed=True)

    def _pair(self, grant: Grant, scopes: tuple[str, ...], now: int, *, session_ends_at: int, refresh: bool) -> _Pair:
        access = credentials.issue(credentials.OAUTH_ACCESS_PREFIX).plaintext
        base = {
            **_grant_fields(grant),
            "scopes": list(scopes),
            "issued_at": now,
            "gsi1pk": grant_tokens_partition(grant.id),
        }
        access_ends = min(now + self.access_seconds, session_ends_at)
        items: list[Item] = [
            {
                **access_key(grant.workspace_id, access).as_dict(),
                **base,
                "gsi1sk": f"ACCESS#{now}",
                "expires_at": access_ends,
            }
        ]
        refresh_token = None
        if refresh:
            refresh_token = credentials.issue(credentials.OAUTH_REFRESH_PREFIX).plaintext
            items.append(
                {
                    **refresh_key(grant.workspace_id, refresh_token).as_dict(),
                    **base,
                    "gsi1sk": f"REFRESH#{now}",
                    "session_ends_at": session_ends_at,
                    "expires_at": session_ends_at,
                }
            )
        issued = IssuedTokens(access, access_ends - now, " ".join(scopes), refresh_token, access_ends)
        return _Pair(issued, items)

    def access(self, workspace_id: str, token: str) -> Item | None:
        """The live access token item (consistent read), or None."""
        if not credentials.well_formed(token, credentials.OAUTH_ACCESS_PREFIX):
            return None
        return self._store.get(access_key(workspace_id, token))

    def find(self, workspace_id: str, token: str) -> tuple[Key, Item] | None:
        """An access or refresh token by its plaintext (revocation), or None."""
        for prefix, key_of in (
            (credentials.OAUTH_ACCESS_PREFIX, access_key),
            (credentials.OAUTH_REFRESH_PREFIX, refresh_key),
        ):
            if credentials.well_formed(token, prefix):
                key = key_of(workspace_id, token)
                item = self._store.get(key)
                return None if item is None else (key, item)
        return None

    def delete(self, key: Key) -> None:
        self._store.delete(key)

    # ------------------------------------------------------------------------------------------ single use

    def _take(self, key: Key, kind: Kind) -> Taken:
        now = int(self._clock.now())
        unused = Condition(f"{kind}_unused", all_of(ItemExists(), AttrAbsent("used_at")))
        try:
            item = self._store.update(key, Update(set={"used_at": now}), condition=unused)
        except ConditionFailed as lost:
            if lost.current is None:
                return Taken(None)
            log.warning("a used %s was presented again (grant %s)", kind, lost.current.get("grant_id"))
            return Taken(lost.current, replayed=True)
        # Kept a while past its use, so a replay is recognised (and revokes the grant) rather than unknown.
        self._store.update(key, Update(set={"expires_at": now + USED_KEPT_SECONDS}))
        return Taken(item)


def _grant_fields(grant: Grant) -> dict[str, Any]:
    return {
        "workspace_id": grant.workspace_id,
        "user_id": grant.user_id,
        "endpoint_id": grant.endpoint_id,
        "client_id": grant.client_id,
        "grant_id": grant.id,
        "generation": grant.generation,
    }


def issued_at_text(item: Item) -> str:
    return timestamp(float(item.get("issued_at", 0)))
