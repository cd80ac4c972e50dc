"""External MCP services as the product knows them: transport, authentication and advanced settings, and whose view
of a service a connection or catalog is. Pure data; the registry (``client/registry``) stores and changes them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from mcpbridge.domain.identity import Principal
from mcpbridge.domain.secrets import SecretContext

ID_PREFIX = "svc"
BUILTIN_PARTITION = "BUILTIN"
SECRET_KIND = "mcp_service"  # noqa: S105 - a SecretContext kind, not a secret
HEADERS_KIND = "mcp_service_headers"
URL_KIND = "mcp_service_url"

Transport = Literal["sse", "http-streamable"]
AuthType = Literal["none", "api_key", "bearer", "oauth"]
SecretField = Literal["api_key", "token", "client_secret"]

TRANSPORTS: Final[tuple[Transport, ...]] = ("sse", "http-streamable")
AUTH_TYPES: Final[tuple[AuthType, ...]] = ("none", "api_key", "bearer", "oauth")
SECRET_FIELDS: Final[tuple[SecretField, ...]] = ("api_key", "token", "client_secret")
STDIO_REFUSED = "stdio transport is disabled for security reasons"
DEFAULT_TRANSPORT: Final[Transport] = "http-streamable"
DEFAULT_API_KEY_HEADER = "X-API-Key"

DEFAULT_TIMEOUT_SECONDS = 30.0
DEFAULT_RETRY_COUNT = 3
DEFAULT_RETRY_DELAY_SECONDS = 1.0


@dataclass(frozen=True)
class AuthConfig:
    """The non-secret part of a service's authentication. The strategies are exclusive."""

    auth_type: AuthType = "none"
    api_key_header: str = DEFAULT_API_KEY_HEADER
    client_id: str = ""
    scopes: tuple[str, ...] = ()
    auth_server_metadata_url: str = ""
    """Optional pin of the OAuth authorization server's metadata; empty: discovery (RFC 9728 / RFC 8414)."""


@dataclass(frozen=True)
class AdvancedConfig:
    timeout: float = DEFAULT_TIMEOUT_SECONDS
    retry_count: int = DEFAULT_RETRY_COUNT
    retry_delay: float = DEFAULT_RETRY_DELAY_SECONDS


@dataclass(frozen=True)
class ExternalService:
    """A service as stored. ``sealed`` holds the sealed (``enc:v1:``) secrets only, never a plaintext."""

    id: str
    workspace_id: str | None
    """None for a builtin service."""
    name: str
    description: str
    enabled: bool
    transport: Transport
    url: str
    headers: Mapping[str, str]
    """``custom_headers``: sent after the auth header, and able to override it."""
    auth: AuthConfig
    advanced: AdvancedConfig
    usage_instructions: str
    catalog_stale: bool
    created_at: str
    updated_at: str
    version: int
    connection_version: int = 1
    """Moves with every change of the connection settings or credentials only (catalog snapshots record it)."""
    sealed: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def is_builtin(self) -> bool:
        return self.workspace_id is None

    @property
    def secret_context(self) -> SecretContext:
        return SecretContext(self.workspace_id or BUILTIN_PARTITION, SECRET_KIND, self.id)

    @property
    def headers_context(self) -> SecretContext:
        return SecretContext(self.workspace_id or BUILTIN_PARTITION, HEADERS_KIND, self.id)

    @property
    def url_context(self) -> SecretContext:
        return SecretContext(self.workspace_id or BUILTIN_PARTITION, URL_KIND, self.id)


WORKSPACE_SCOPE = "workspace"


def scope_for(service: ExternalService, principal: Principal) -> str:
    """Whose view of a service a connection or catalog is: per user for OAuth services (each user's token),
    the workspace's otherwise."""
    return f"user:{principal.user_id}" if service.auth.auth_type == "oauth" else WORKSPACE_SCOPE
