"""Bearer credentials: API keys (``sk_``), MCP endpoint tokens (``mcp_``) and what mcpbridge's authorization server
issues for published endpoints: OAuth access tokens (``mcpat_``), refresh tokens (``mcprt_``), authorization codes
(``mcpac_``) and client secrets of registered clients (``mcpcs_``).

A credential is the prefix plus 32 random bytes in base64url (43 characters). Only its SHA-256 is stored; the
plaintext is shown once. The hint (prefix plus a few characters) lets a person recognise a credential in a list.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

API_KEY_PREFIX = "sk_"
ENDPOINT_TOKEN_PREFIX = "mcp_"  # noqa: S105 - a prefix, not a secret
OAUTH_ACCESS_PREFIX = "mcpat_"
OAUTH_REFRESH_PREFIX = "mcprt_"
OAUTH_CODE_PREFIX = "mcpac_"
OAUTH_CLIENT_SECRET_PREFIX = "mcpcs_"  # noqa: S105 - a prefix, not a secret
_BODY = r"[A-Za-z0-9_-]{43}"
_FORMATS = {
    prefix: re.compile(re.escape(prefix) + _BODY)
    for prefix in (
        API_KEY_PREFIX,
        ENDPOINT_TOKEN_PREFIX,
        OAUTH_ACCESS_PREFIX,
        OAUTH_REFRESH_PREFIX,
        OAUTH_CODE_PREFIX,
        OAUTH_CLIENT_SECRET_PREFIX,
    )
}


@dataclass(frozen=True)
class IssuedCredential:
    plaintext: str
    sha256: str
    hint: str


def issue(prefix: str) -> IssuedCredential:
    body = base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")
    plaintext = prefix + body
    return IssuedCredential(plaintext=plaintext, sha256=digest(plaintext), hint=hint(plaintext))


def digest(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


def hint(plaintext: str) -> str:
    """The first 12 characters, enough to tell credentials apart and far too few to guess the rest."""
    return plaintext[:12]


def well_formed(plaintext: str, prefix: str) -> bool:
    return _FORMATS[prefix].fullmatch(plaintext) is not None


def same_digest(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())
