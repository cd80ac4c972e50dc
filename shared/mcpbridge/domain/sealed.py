"""The ``enc:v1:`` wire format every SecretBox writes: a prefix, then base64url (no padding) of a binary payload.

Byte 0 of the payload names the scheme, which decides the rest::

    0x01 local   scheme | nonce (12) | ciphertext + tag
    0x02 kms     scheme | edk length (2, big-endian) | edk | nonce (12) | ciphertext + tag

This module only frames bytes; the adapters do the cryptography. Anything that does not decode to exactly one of
these layouts raises ``SecretUnreadable``.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import TypeAlias

from mcpbridge.domain.secrets import SEALED_PREFIX, SecretUnreadable

SCHEME_LOCAL = 0x01
SCHEME_KMS = 0x02
NONCE_SIZE = 12
TAG_SIZE = 16
MAX_EDK_SIZE = 0xFFFF

_BASE64URL = re.compile(r"[A-Za-z0-9_-]*")
_EDK_LENGTH_SIZE = 2


@dataclass(frozen=True)
class LocalSealed:
    """A value sealed with the local key file: AES-256-GCM under that key."""

    nonce: bytes
    ciphertext: bytes  # includes the GCM tag


@dataclass(frozen=True)
class KmsSealed:
    """A value sealed with a KMS data key; ``encrypted_key`` is the data key as KMS encrypted it."""

    encrypted_key: bytes
    nonce: bytes
    ciphertext: bytes  # includes the GCM tag


Sealed: TypeAlias = LocalSealed | KmsSealed


def encode(sealed: Sealed) -> str:
    """The ``enc:v1:...`` text of a sealed value."""
    if len(sealed.nonce) != NONCE_SIZE:
        raise ValueError(f"nonce must be {NONCE_SIZE} bytes")
    if len(sealed.ciphertext) < TAG_SIZE:
        raise ValueError("ciphertext must include the GCM tag")
    if isinstance(sealed, LocalSealed):
        payload = bytes([SCHEME_LOCAL]) + sealed.nonce + sealed.ciphertext
    else:
        if not 0 < len(sealed.encrypted_key) <= MAX_EDK_SIZE:
            raise ValueError(f"encrypted data key must be 1 to {MAX_EDK_SIZE} bytes")
        payload = (
            bytes([SCHEME_KMS])
            + len(sealed.encrypted_key).to_bytes(_EDK_LENGTH_SIZE, "big")
            + sealed.encrypted_key
            + sealed.nonce
            + sealed.ciphertext
        )
    return SEALED_PREFIX + _b64encode(payload)


def decode(text: str) -> Sealed:
    """Parse ``enc:v1:...`` text; raise ``SecretUnreadable`` for anything that is not exactly one layout."""
    if not text.startswith(SEALED_PREFIX):
        raise SecretUnreadable("not a sealed value (missing enc:v1: prefix)")
    payload = _b64decode(text[len(SEALED_PREFIX) :])
    if not payload:
        raise SecretUnreadable("sealed value is empty")
    scheme, body = payload[0], payload[1:]
    if scheme == SCHEME_LOCAL:
        return LocalSealed(*_split_nonce(body))
    if scheme == SCHEME_KMS:
        if len(body) < _EDK_LENGTH_SIZE:
            raise SecretUnreadable("sealed value is truncated")
        edk_size = int.from_bytes(body[:_EDK_LENGTH_SIZE], "big")
        edk_end = _EDK_LENGTH_SIZE + edk_size
        if edk_size == 0 or len(body) < edk_end:
            raise SecretUnreadable("sealed value is truncated")
        return KmsSealed(body[_EDK_LENGTH_SIZE:edk_end], *_split_nonce(body[edk_end:]))
    raise SecretUnreadable(f"unknown sealing scheme 0x{scheme:02x}")


def _split_nonce(body: bytes) -> tuple[bytes, bytes]:
    if len(body) < NONCE_SIZE + TAG_SIZE:
        raise SecretUnreadable("sealed value is truncated")
    return body[:NONCE_SIZE], body[NONCE_SIZE:]


def _b64encode(payload: bytes) -> str:
    return base64.urlsafe_b64encode(payload).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    # The stdlib decoder skips stray characters and ignores unused trailing bits, so several texts would map to
    # one payload; accepting only the canonical form keeps exactly one spelling per sealed value.
    if not _BASE64URL.fullmatch(text) or len(text) % 4 == 1:
        raise SecretUnreadable("sealed value is not base64url")
    try:
        payload = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
    except binascii.Error:
        raise SecretUnreadable("sealed value is not base64url") from None
    if _b64encode(payload) != text:
        raise SecretUnreadable("sealed value is not canonical base64url")
    return payload
