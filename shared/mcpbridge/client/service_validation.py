"""What a service's settings may be: each field of a create or update checked and cleaned, a clear 400 naming the
field otherwise (a value that may be a credential is never quoted back).

Bounds of ``advanced_config``: ``timeout`` 1 to 300 seconds (default 30), ``retry_count`` 0 to 10 (default 3),
``retry_delay`` 0 to 60 seconds (default 1).
"""

from __future__ import annotations

import builtins
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from mcpbridge.domain.external_services import (
    AUTH_TYPES,
    DEFAULT_API_KEY_HEADER,
    SECRET_FIELDS,
    STDIO_REFUSED,
    TRANSPORTS,
    AdvancedConfig,
    AuthConfig,
    Transport,
)
from mcpbridge.errors import InvalidInput

MAX_TIMEOUT_SECONDS = 300.0
MAX_RETRY_COUNT = 10
MAX_RETRY_DELAY_SECONDS = 60.0
MAX_URL_CHARS = 2048
MAX_HEADERS = 50
MAX_HEADER_VALUE_CHARS = 8192
MAX_SCOPES = 50
MAX_SCOPE_CHARS = 200
MAX_CLIENT_ID_CHARS = 512
MAX_USAGE_INSTRUCTIONS_CHARS = 10_000
MAX_SECRET_CHARS = 16_384

_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}")
_HEADER_VALUE_BAD = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
# Headers the HTTP client or the MCP transport owns: a service may not set them.
_RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "transfer-encoding",
        "connection",
        "upgrade",
        "te",
        "trailer",
        "keep-alive",
        "proxy-connection",
        "mcp-session-id",
        "mcp-protocol-version",
        "last-event-id",
    }
)
_AUTH_KEYS = frozenset({"auth_type", "api_key_header", "client_id", "scopes", "auth_server_metadata_url"})
_ADVANCED_KEYS = frozenset({"timeout", "retry_count", "retry_delay"})


def clean_text(value: Any, field_name: str) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"{field_name} must be a string", code=f"invalid_{field_name}")
    return value


def clean_bool(value: Any, field_name: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidInput(f"{field_name} must be true or false", code=f"invalid_{field_name}")
    return value


def clean_transport(transport: Any) -> Transport:
    value = transport.strip().lower() if isinstance(transport, str) else transport
    if value == "stdio":
        raise InvalidInput(STDIO_REFUSED, code="stdio_disabled")
    for known in TRANSPORTS:
        if value == known:
            return known
    raise InvalidInput(
        "transport must be sse or http-streamable", code="invalid_transport", details={"allowed": list(TRANSPORTS)}
    )


def clean_usage(text: Any) -> str:
    value = clean_text(text, "usage_instructions").strip()
    if len(value) > MAX_USAGE_INSTRUCTIONS_CHARS:
        raise InvalidInput(
            f"usage_instructions is longer than {MAX_USAGE_INSTRUCTIONS_CHARS} characters",
            code="invalid_usage_instructions",
        )
    return value


def clean_header_name(name: Any, field_name: str) -> str:
    if not isinstance(name, str) or not _HEADER_NAME.fullmatch(name):
        raise InvalidInput(f"{field_name} holds an invalid header name", code="invalid_headers")
    return name


def clean_headers(headers: Any) -> dict[str, str]:
    if not isinstance(headers, Mapping):
        raise InvalidInput("headers must be an object of strings", code="invalid_headers")
    if len(headers) > MAX_HEADERS:
        raise InvalidInput(f"at most {MAX_HEADERS} headers", code="invalid_headers")
    cleaned: dict[str, str] = {}
    seen: set[str] = set()
    for name, value in headers.items():
        header = clean_header_name(name, "headers")
        lowered = header.lower()
        if lowered in _RESERVED_HEADERS:
            raise InvalidInput(f"the header {header} cannot be set", code="invalid_headers")
        if lowered in seen:
            raise InvalidInput(f"the header {header} appears twice", code="invalid_headers")
        seen.add(lowered)
        # The value is never quoted back: it may be a credential.
        if not isinstance(value, str) or len(value) > MAX_HEADER_VALUE_CHARS or _HEADER_VALUE_BAD.search(value):
            raise InvalidInput(
                f"the value of header {header} must be a string of at most {MAX_HEADER_VALUE_CHARS} characters "
                "without line breaks or control characters",
                code="invalid_headers",
            )
        cleaned[header] = value
    return cleaned


def clean_auth(current: AuthConfig, changes: Mapping[str, Any], warnings: builtins.list[str]) -> AuthConfig:
    """``current`` with ``changes`` applied; secret fields are dropped with a warning."""
    values: dict[str, Any] = {
        "auth_type": current.auth_type,
        "api_key_header": current.api_key_header,
        "client_id": current.client_id,
        "scopes": current.scopes,
        "auth_server_metadata_url": current.auth_server_metadata_url,
    }
    for key, value in changes.items():
        if key in SECRET_FIELDS:
            if value is not None:
                warnings.append(f"auth_config.{key} is deprecated here and was ignored; set it with PUT /credentials")
            continue
        if key not in _AUTH_KEYS:
            raise InvalidInput(f"auth_config has no field {shown(str(key))}", code="invalid_auth_config")
        if value is None:
            continue
        values[key] = value
    auth_type = values["auth_type"]
    if auth_type == "":
        auth_type = "none"
    if auth_type not in AUTH_TYPES:
        raise InvalidInput(
            "auth_config.auth_type must be none, api_key, bearer or oauth",
            code="invalid_auth_config",
            details={"allowed": list(AUTH_TYPES)},
        )
    header = values["api_key_header"]
    if header == "":
        header = DEFAULT_API_KEY_HEADER
    header = clean_header_name(header, "auth_config.api_key_header")
    if header.lower() in _RESERVED_HEADERS:
        raise InvalidInput(f"the header {header} cannot be set", code="invalid_auth_config")
    client_id = values["client_id"]
    if not isinstance(client_id, str) or len(client_id.strip()) > MAX_CLIENT_ID_CHARS:
        raise InvalidInput(
            f"auth_config.client_id must be a string of at most {MAX_CLIENT_ID_CHARS} characters",
            code="invalid_auth_config",
        )
    scopes = values["scopes"]
    if isinstance(scopes, str) or not isinstance(scopes, Iterable):
        raise InvalidInput("auth_config.scopes must be a list of strings", code="invalid_auth_config")
    cleaned_scopes = tuple(dict.fromkeys(_clean_scope(s) for s in scopes))
    if len(cleaned_scopes) > MAX_SCOPES:
        raise InvalidInput(f"auth_config.scopes holds at most {MAX_SCOPES} scopes", code="invalid_auth_config")
    metadata_url = values["auth_server_metadata_url"]
    if not isinstance(metadata_url, str):
        raise InvalidInput("auth_config.auth_server_metadata_url must be a string", code="invalid_auth_config")
    return AuthConfig(
        auth_type=auth_type,
        api_key_header=header,
        client_id=client_id.strip(),
        scopes=cleaned_scopes,
        auth_server_metadata_url=metadata_url.strip(),
    )


def _clean_scope(scope: Any) -> str:
    if (
        not isinstance(scope, str)
        or not scope.strip()
        or len(scope.strip()) > MAX_SCOPE_CHARS
        or any(c.isspace() for c in scope.strip())
    ):
        raise InvalidInput(
            f"each scope is a non-empty string without spaces, at most {MAX_SCOPE_CHARS} characters",
            code="invalid_auth_config",
        )
    return scope.strip()


def clean_advanced(current: AdvancedConfig, changes: Mapping[str, Any]) -> AdvancedConfig:
    unknown = sorted(set(changes) - _ADVANCED_KEYS)
    if unknown:
        raise InvalidInput(f"advanced_config has no field {shown(str(unknown[0]))}", code="invalid_advanced_config")
    timeout = _number(changes.get("timeout"), current.timeout, "timeout", 1.0, MAX_TIMEOUT_SECONDS)
    delay = _number(changes.get("retry_delay"), current.retry_delay, "retry_delay", 0.0, MAX_RETRY_DELAY_SECONDS)
    count = changes.get("retry_count")
    if count is None:
        count = current.retry_count
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_RETRY_COUNT:
        raise InvalidInput(
            f"advanced_config.retry_count must be an integer from 0 to {MAX_RETRY_COUNT}",
            code="invalid_advanced_config",
        )
    return AdvancedConfig(timeout=timeout, retry_count=count, retry_delay=delay)


def _number(value: Any, default: float, name: str, low: float, high: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidInput(f"advanced_config.{name} must be a number", code="invalid_advanced_config")
    if not low <= value <= high:
        raise InvalidInput(
            f"advanced_config.{name} must be from {low:g} to {high:g} seconds",
            code="invalid_advanced_config",
            details={"min": low, "max": high},
        )
    return float(value)


def clean_secret(name: str, value: Any) -> str:
    # The value is never quoted back, whatever is wrong with it.
    if not isinstance(value, str) or len(value) > MAX_SECRET_CHARS or _HEADER_VALUE_BAD.search(value):
        raise InvalidInput(
            f"{name} must be a string of at most {MAX_SECRET_CHARS} characters without line breaks or control "
            "characters",
            code="invalid_credential",
        )
    return value


def shown(value: str) -> str:
    return value if len(value) <= 64 else value[:64] + "…"
