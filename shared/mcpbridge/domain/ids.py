"""Identifiers: a type prefix plus a time-ordered random part, so listings sort by creation."""

from __future__ import annotations

import os
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case


def _base32(number: int, length: int) -> str:
    chars = []
    for _ in range(length):
        number, digit = divmod(number, 32)
        chars.append(_ALPHABET[digit])
    return "".join(reversed(chars))


def new_id(prefix: str) -> str:
    """``<prefix>_`` + 10 chars of milliseconds + 16 chars of randomness (80 bits), e.g. ``ws_01jd...``."""
    millis = time.time_ns() // 1_000_000
    return f"{prefix}_{_base32(millis, 10)}{_base32(int.from_bytes(os.urandom(10), 'big'), 16)}"


def is_id(value: str, prefix: str) -> bool:
    head, _, body = value.partition("_")
    return head == prefix and len(body) == 26 and all(c in _ALPHABET for c in body)
