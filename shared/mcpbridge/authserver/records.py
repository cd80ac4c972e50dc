"""How the authorization server keeps its state: item keys, lifetimes and the digests that stand for secrets.

Every item lives in the endpoint's workspace partition (a workspace's purge removes them with the rest), except the
state of an external sign-in, which the provider brings back to one fixed callback URL:

    WS#<ws> / OACLIENT#<client_id>          a dynamically registered client, bound to one endpoint; TTL, renewed by use
    WS#<ws> / OACIMD#<sha256(client_id)>    a fetched client ID metadata document; TTL (the document's max-age, bounded)
    WS#<ws> / OAREQ#<sha256(request)>       an authorization request waiting for sign-in and consent; 10 min
    WS#<ws> / OACODE#<sha256(code)>         an authorization code; 60 s; single use (``used_at``)
    WS#<ws> / OAGRANT#<user>#<ep>#<client>  a user's consent to one client on one endpoint (client: digest of its id)
    WS#<ws> / OAACCESS#<sha256(token)>      an access token; 1 h;   gsi1 = OAGRANTTOKENS#<grant id> / ACCESS#...
    WS#<ws> / OAREFRESH#<sha256(token)>     a refresh token; 30 d;  gsi1 = OAGRANTTOKENS#<grant id> / REFRESH#...;
                                            single use (``used_at``), kept until it expires to recognise a replay
    OIDCSTATE#<sha256(state)> / OIDCSTATE   an external sign-in in progress; 10 min; single use (deleted)

Only SHA-256 digests of codes, tokens, client secrets, request handles and states are stored; the plaintext exists in
the one response that hands it out. A code or refresh token presented twice is a replay: the second use is refused
and the whole grant is revoked (RFC 9700 4.14, OAuth 2.1 4.1.3).
"""

from __future__ import annotations

import hashlib

from mcpbridge.domain.items import Key

REQUEST_TTL_SECONDS = 600
CODE_TTL_SECONDS = 60
OIDC_STATE_TTL_SECONDS = 600
CLIENT_TTL_SECONDS = 90 * 24 * 3600
"""A registered client no grant uses any more is forgotten after this long (a refresh or a consent renews it)."""
USED_KEPT_SECONDS = 600
"""How long a used code stays recognisable as used, past its own expiry."""

AUTH_METHODS = ("none", "client_secret_post", "client_secret_basic")
"""How clients authenticate at the token and revocation endpoints: public clients (PKCE only) or a client secret."""
SCOPES: tuple[str, ...] = ("read", "ask", "wiki", "write")
"""The scopes an endpoint can grant: the groups of its tools (``publishing.offered_tools``)."""
WRITE_SCOPES = frozenset({"write"})
"""Scopes a sign-in with a viewer key never grants (as that key changes nothing through the REST API)."""
IGNORED_SCOPES = frozenset({"offline_access"})
"""Asked for by some clients to get a refresh token; granted implicitly (refresh tokens go to clients that use them)."""


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def client_key(client_id: str) -> str:
    """A fixed-length stand-in for a client id in sort keys (a metadata-document client id is a whole URL)."""
    return digest(client_id)[:32]


def registered_client_key(workspace_id: str, client_id: str) -> Key:
    return Key(f"WS#{workspace_id}", f"OACLIENT#{client_id}")


def metadata_document_key(workspace_id: str, client_id: str) -> Key:
    return Key(f"WS#{workspace_id}", f"OACIMD#{digest(client_id)}")


def request_key(workspace_id: str, handle: str) -> Key:
    return Key(f"WS#{workspace_id}", f"OAREQ#{digest(handle)}")


def code_key(workspace_id: str, code: str) -> Key:
    return Key(f"WS#{workspace_id}", f"OACODE#{digest(code)}")


def grant_key(workspace_id: str, user_id: str, endpoint_id: str, client_id: str) -> Key:
    return Key(f"WS#{workspace_id}", f"{grant_prefix(user_id)}{endpoint_id}#{client_key(client_id)}")


def grant_prefix(user_id: str = "") -> str:
    return f"OAGRANT#{user_id}#" if user_id else "OAGRANT#"


def access_key(workspace_id: str, token: str) -> Key:
    return Key(f"WS#{workspace_id}", f"OAACCESS#{digest(token)}")


def refresh_key(workspace_id: str, token: str) -> Key:
    return Key(f"WS#{workspace_id}", f"OAREFRESH#{digest(token)}")


def grant_tokens_partition(grant_id: str) -> str:
    """gsi1 partition of a grant's access and refresh tokens (to delete them with the grant)."""
    return f"OAGRANTTOKENS#{grant_id}"


def oidc_state_key(state: str) -> Key:
    return Key(f"OIDCSTATE#{digest(state)}", "OIDCSTATE")
