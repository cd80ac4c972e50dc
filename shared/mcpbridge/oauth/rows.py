"""Where the OAuth state of external services lives, per workspace, and how it goes with its service.

    WS#<ws> / OAUTHTOKEN#<service_id>#<principal_type>#<principal_id>    a principal's tokens (``oauth/tokens``)
    WS#<ws> / OAUTHCLIENT#<service_id>#<sha256(issuer)[:32]>             a dynamic registration (``oauth/registration``)

Light on purpose (the store only): the registry tells it when a service is deleted, in functions that never load
the OAuth machinery; a user's deletion forgets that user's tokens. Tokens are not revoked upstream then: the server,
or the user, is being forgotten.
"""

from __future__ import annotations

import hashlib

from mcpbridge.domain.items import Key
from mcpbridge.paging import delete_every_item, every_item
from mcpbridge.ports import Store


def token_key(workspace_id: str, service_id: str, principal_type: str, principal_id: str) -> Key:
    return Key(f"WS#{workspace_id}", f"OAUTHTOKEN#{service_id}#{principal_type}#{principal_id}")


def issuer_digest(issuer: str) -> str:
    return hashlib.sha256(issuer.encode()).hexdigest()[:32]


def client_key(workspace_id: str, service_id: str, issuer: str) -> Key:
    return Key(f"WS#{workspace_id}", f"OAUTHCLIENT#{service_id}#{issuer_digest(issuer)}")


class OAuthRows:
    """The tokens and registered clients of a service, forgotten with it."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def forget_service(self, workspace_id: str, service_id: str) -> None:
        for prefix in (f"OAUTHTOKEN#{service_id}#", f"OAUTHCLIENT#{service_id}#"):
            delete_every_item(self._store, f"WS#{workspace_id}", sk_prefix=prefix)

    def forget_principal(self, workspace_id: str, principal_type: str, principal_id: str) -> int:
        """Delete one principal's tokens of every service (its user is being deleted); how many went."""
        tokens = [
            item
            for item in every_item(self._store, f"WS#{workspace_id}", sk_prefix="OAUTHTOKEN#")
            if (item.get("principal_type"), item.get("principal_id")) == (principal_type, principal_id)
        ]
        for item in tokens:
            self._store.delete(Key(item["pk"], item["sk"]))
        return len(tokens)
