"""RFC 7636 PKCE (S256 only) and the ``state`` of an authorization request.

The verifier and the state are random per authorization; the verifier never leaves the server (it is stored sealed
with the attempt and sent only to the token endpoint), the state travels through the browser and comes back once.
Only a digest of the state is stored, so the store alone cannot answer a callback.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field

STATE_BYTES = 32


@dataclass(frozen=True)
class Pkce:
    verifier: str = field(repr=False)
    challenge: str
    method: str = "S256"


def new_pkce() -> Pkce:
    """A fresh verifier (128 characters of the unreserved set) and its S256 challenge (the SDK's generator)."""
    from mcp.client.auth.oauth2 import PKCEParameters

    generated = PKCEParameters.generate()
    return Pkce(verifier=generated.code_verifier, challenge=generated.code_challenge)


def new_state() -> str:
    """256 random bits, URL-safe."""
    return secrets.token_urlsafe(STATE_BYTES)


def state_digest(state: str) -> str:
    """What the store keeps instead of the state."""
    return hashlib.sha256(state.encode("utf-8", errors="surrogatepass")).hexdigest()
