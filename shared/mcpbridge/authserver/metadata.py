"""The URLs of one endpoint as a protected resource and as an issuer, and their metadata documents.

    resource   <base>/mcp/<ep>
    issuer     <base>/oauth/<ep>

RFC 9728 protected-resource metadata names the issuer and the scopes; RFC 8414 authorization-server metadata names
the endpoints, PKCE S256, the grants, client ID metadata documents and the RFC 9207 ``iss`` parameter. ``<base>`` is
``MCPBRIDGE_PUBLIC_BASE_URL``, or the URL the request came in on (its host checked against the allowed hosts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from mcpbridge.authserver.records import AUTH_METHODS, SCOPES
from mcpbridge.publishing.endpoints import Endpoint
from mcpbridge.publishing.offered_tools import BY_NAME


def endpoint_scopes(endpoint: Endpoint) -> tuple[str, ...]:
    """The scopes an endpoint can grant: the groups of its tools, in catalog order."""
    groups = {BY_NAME[name].group for name in endpoint.tools if name in BY_NAME}
    return tuple(scope for scope in SCOPES if scope in groups)


def resource_url(base_url: str, endpoint_id: str) -> str:
    return f"{base_url.rstrip('/')}/mcp/{endpoint_id}"


def resource_metadata_url(base_url: str, endpoint_id: str) -> str:
    """Where RFC 9728 metadata of the endpoint is served (the path-suffixed well-known URL)."""
    return f"{base_url.rstrip('/')}/.well-known/oauth-protected-resource/mcp/{endpoint_id}"


def issuer_url(base_url: str, endpoint_id: str) -> str:
    return f"{base_url.rstrip('/')}/oauth/{endpoint_id}"


@dataclass(frozen=True)
class Issuer:
    """One endpoint seen from the authorization server."""

    base_url: str
    endpoint: Endpoint

    @property
    def issuer(self) -> str:
        return issuer_url(self.base_url, self.endpoint.id)

    @property
    def resource(self) -> str:
        return resource_url(self.base_url, self.endpoint.id)

    @property
    def scopes(self) -> tuple[str, ...]:
        return endpoint_scopes(self.endpoint)

    def is_resource(self, value: str) -> bool:
        """RFC 8707: the resource named is this endpoint (scheme and host compared case-insensitively, a trailing
        slash ignored); a query or fragment never matches."""
        try:
            given, mine = urlsplit(value), urlsplit(self.resource)
        except ValueError:
            return False
        if given.query or given.fragment or "@" in given.netloc:
            return False
        return (given.scheme.lower(), given.netloc.lower(), given.path.rstrip("/")) == (
            mine.scheme.lower(),
            mine.netloc.lower(),
            mine.path.rstrip("/"),
        )

    def protected_resource_metadata(self) -> dict[str, Any]:
        return {
            "resource": self.resource,
            "authorization_servers": [self.issuer],
            "scopes_supported": list(self.scopes),
            "bearer_methods_supported": ["header"],
            "resource_name": self.endpoint.name,
        }

    def authorization_server_metadata(self) -> dict[str, Any]:
        issuer = self.issuer
        return {
            "issuer": issuer,
            "authorization_endpoint": f"{issuer}/authorize",
            "token_endpoint": f"{issuer}/token",
            "registration_endpoint": f"{issuer}/register",
            "revocation_endpoint": f"{issuer}/revoke",
            "scopes_supported": list(self.scopes),
            "response_types_supported": ["code"],
            "response_modes_supported": ["query"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "token_endpoint_auth_methods_supported": list(AUTH_METHODS),
            "revocation_endpoint_auth_methods_supported": list(AUTH_METHODS),
            "code_challenge_methods_supported": ["S256"],
            "authorization_response_iss_parameter_supported": True,
            "client_id_metadata_document_supported": True,
        }

    def challenge(self, *, error: str | None = None) -> str:
        """``WWW-Authenticate`` of a 401 from the endpoint (RFC 6750 3, RFC 9728 5.1)."""
        parts = ['Bearer realm="mcpbridge"']
        if error:
            parts.append(f'error="{error}"')
        parts.append(f'resource_metadata="{resource_metadata_url(self.base_url, self.endpoint.id)}"')
        if self.scopes:
            parts.append(f'scope="{" ".join(self.scopes)}"')
        return ", ".join(parts)
