"""Names and descriptions people give to things: the one set of rules for trimming, limits and comparison."""

from __future__ import annotations

import unicodedata

from mcpbridge.errors import InvalidInput

NAME_MAX_BYTES = 255
DESCRIPTION_MAX_CHARS = 2000


def clean_name(name: str, *, max_bytes: int = NAME_MAX_BYTES) -> str:
    """Trimmed; 1 to ``max_bytes`` bytes of UTF-8 (400 ``invalid_name`` otherwise)."""
    name = name.strip()
    if not name:
        raise InvalidInput("name is required", code="invalid_name")
    if len(name.encode()) > max_bytes:
        raise InvalidInput(f"name is longer than {max_bytes} bytes", code="invalid_name")
    return name


def clean_description(description: str, *, max_chars: int = DESCRIPTION_MAX_CHARS) -> str:
    description = description.strip()
    if len(description) > max_chars:
        raise InvalidInput(f"description is longer than {max_chars} characters", code="invalid_description")
    return description


def fold(name: str) -> str:
    """The form names are compared in: NFKC, case-folded, trimmed."""
    return unicodedata.normalize("NFKC", name).casefold().strip()
