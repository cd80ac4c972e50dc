"""Reading an HTTP ``WWW-Authenticate`` challenge (RFC 9110 section 11.6.1), as MCP servers send it with a 401:
``Bearer resource_metadata="https://...", scope="read write"`` (RFC 9728 section 5.1)."""

from __future__ import annotations

import re

_AUTH_PARAM = r'{name}\s*=\s*(?:"([^"]*)"|([^\s,]+))'


def auth_param(challenge: str, name: str) -> str | None:
    """One parameter of a challenge (quoted or not), or None."""
    match = re.search(_AUTH_PARAM.format(name=re.escape(name)), challenge, re.IGNORECASE)
    if match is None:
        return None
    return match.group(1) if match.group(1) is not None else match.group(2)
