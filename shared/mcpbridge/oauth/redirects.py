"""Where browsers are sent: the OAuth callback URL of mcpbridge, and the front-end URL after the callback.

A ``frontend_redirect`` is accepted only when it cannot send the browser (and the result fragment) anywhere else:

* an app-relative path: starts with one ``/`` (never ``//host``), no scheme, no authority;
* or an absolute ``http(s)`` URL whose origin (scheme, host, port) is the origin of one of ``MCPBRIDGE_FRONTEND_URLS``
  or of ``MCPBRIDGE_PUBLIC_BASE_URL``, without userinfo. Hosts compare as written (case aside): ``localhost.`` is
  another name than ``localhost``, one a resolver may answer differently, so it is not that origin.

Refused anywhere in the value: backslashes, whitespace and control characters, a fragment (``#``, the result is
appended as one), and percent-encoded slashes, backslashes, ``#`` or control characters (``%2f%2fevil.com``). Every
refusal is an ``InvalidInput`` with code ``invalid_frontend_redirect``; the value is never quoted back.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urlsplit

from mcpbridge.errors import InvalidInput

CALLBACK_PATH = "/api/v1/mcp-oauth/callback"
MAX_REDIRECT_CHARS = 2048
_UNSAFE = re.compile(r"[\x00-\x20\x7f\\#]")
_UNSAFE_ENCODED = re.compile(r"%(?:2f|5c|23|[01][0-9a-f]|7f|20)", re.IGNORECASE)
_DEFAULT_PORTS = {"http": 80, "https": 443}

Origin = tuple[str, str, int]


def callback_url(base_url: str) -> str:
    """mcpbridge's redirect URI under ``base_url`` (the public base URL, or the request's)."""
    return base_url.rstrip("/") + CALLBACK_PATH


def origin_of(url: str) -> Origin | None:
    """``(scheme, host, port)`` of an absolute http(s) URL, None for anything else."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port or _DEFAULT_PORTS[scheme]


def allowed_origins(urls: Iterable[str]) -> frozenset[Origin]:
    return frozenset(origin for origin in (origin_of(url) for url in urls if url) if origin is not None)


def _refused(reason: str) -> InvalidInput:
    return InvalidInput(f"frontend_redirect refused: {reason}", code="invalid_frontend_redirect")


def validate_frontend_redirect(value: str, origins: frozenset[Origin]) -> str:
    """``value`` when it is a safe place to send the browser back to (see the module docstring)."""
    if not isinstance(value, str) or not value:
        raise _refused("it is empty")
    if len(value) > MAX_REDIRECT_CHARS:
        raise _refused(f"it is longer than {MAX_REDIRECT_CHARS} characters")
    if _UNSAFE.search(value):
        raise _refused("it holds whitespace, a control character, a backslash or a fragment")
    if _UNSAFE_ENCODED.search(value):
        raise _refused("it holds an encoded slash, backslash, fragment or control character")
    if value.startswith("/"):
        if value.startswith("//"):
            raise _refused("a path must not start with //")
        parts = urlsplit(value)
        if parts.scheme or parts.netloc:
            raise _refused("a path must not name a scheme or a host")
        return value
    try:
        parts = urlsplit(value)
    except ValueError:
        raise _refused("it is not a URL") from None
    if parts.scheme.lower() not in _DEFAULT_PORTS:
        raise _refused("only app-relative paths and http(s) URLs are allowed")
    if "@" in parts.netloc:
        raise _refused("URLs with credentials are not allowed")
    origin = origin_of(value)
    if origin is None:
        raise _refused("it is not a valid absolute URL")
    if origin not in origins:
        raise _refused("its origin is not one of the configured front-end URLs")
    return value


def with_result(frontend_redirect: str, *, error: str | None) -> str:
    """The front-end URL with the outcome as its fragment."""
    fragment = f"mcp_oauth_error={error}" if error else "mcp_oauth_result=success"
    return f"{frontend_redirect}#{fragment}"
