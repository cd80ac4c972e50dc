"""OAuth scope strings (RFC 6749 section 3.3): which are well formed, and the union of several."""

from __future__ import annotations

import re

_SCOPE_TOKEN = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")
MAX_SCOPE_CHARS = 1024


def valid_scope(scope: str) -> bool:
    """An RFC 6749 section 3.3 scope: space-separated tokens of printable ASCII without ``"`` or ``\\``."""
    return 0 < len(scope) <= MAX_SCOPE_CHARS and all(_SCOPE_TOKEN.fullmatch(part) for part in scope.split(" "))


def scope_union(*scopes: str | None) -> str | None:
    """The scopes of all of them, each once, in first-seen order (SEP-835: step-up asks for the union)."""
    seen: dict[str, None] = {}
    for scope in scopes:
        for part in (scope or "").split():
            seen.setdefault(part, None)
    return " ".join(seen) or None
