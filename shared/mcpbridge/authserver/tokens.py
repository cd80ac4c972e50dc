"""Authorization codes, access tokens and refresh tokens of the authorization server, kept as digests.

A code lives 60 s, an access token 1 h, a refresh token 30 days (``Settings.oauth_*``); each is ``<prefix>`` + 32
random bytes (``domain.credentials``). Codes and refresh tokens are single use: taking one is a conditional write
that marks it used, so of two requests presenting it exactly one wins; the loser, and anyone presenting it later, is
a replay, and the grant it came from is revoked (its caller does that: :meth:`Taken.replayed`).
"""

from __future__ import annotations

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
from mcpbridge.domain.items import AttrAbsent, Condition, Item, ItemExists, Key, Update, all_of
from mcpbridge.errors import ConditionFailed
from mcpbridge.ports import Clock, Store

log = logging.getLogger("mcpbridge.authserver")

Kind = Literal["code", "refresh"]


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


class Tokens:
    def __init__(
        self, store: Store, clock: Clock, *, access_seconds: int = 3600, refresh_seconds: int = 30 * 86400
    ) -> None:
        self._store = store
        self._clock = clock
        self.access_seconds = access_seconds
        self.refresh_seconds = refresh_seconds

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
        """A new access token (and refresh token) for the grant, both stored as digests."""
        now = int(self._clock.now())
        access = credentials.issue(credentials.OAUTH_ACCESS_PREFIX).plaintext
        scope = " ".join(scopes)
        base = {**_grant_fields(grant), "scopes": list(scopes), "issued_at": now}
        self._store.put(
            {
                **access_key(grant.workspace_id, access).as_dict(),
                **base,
                "gsi1pk": grant_tokens_partition(grant.id),
                "gsi1sk": f"ACCESS#{now}",
                "expires_at": now + self.access_seconds,
            },
            condition=Condition.absent("token_new"),
        )
        refresh_token = None
        if refresh:
            refresh_token = credentials.issue(credentials.OAUTH_REFRESH_PREFIX).plaintext
            self._store.put(
                {
                    **refresh_key(grant.workspace_id, refresh_token).as_dict(),
                    **base,
                    "gsi1pk": grant_tokens_partition(grant.id),
                    "gsi1sk": f"REFRESH#{now}",
                    "expires_at": now + self.refresh_seconds,
                },
                condition=Condition.absent("token_new"),
            )
        return IssuedTokens(access, self.access_seconds, scope, refresh_token)

    def take_refresh(self, workspace_id: str, token: str) -> Taken:
        if not credentials.well_formed(token, credentials.OAUTH_REFRESH_PREFIX):
            return Taken(None)
        return self._take(refresh_key(workspace_id, token), "refresh")

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
        if kind == "code":
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
