"""Finding a service's authorization server: RFC 9728 protected-resource metadata, then RFC 8414 (or OpenID
configuration) authorization-server metadata, or the metadata URL an admin pinned.

Order, as the MCP authorization spec and the SDK's client do it:

1. Unless ``auth_server_metadata_url`` is pinned: an unauthenticated request to the MCP server, whose 401 may name the
   resource metadata (``WWW-Authenticate: Bearer resource_metadata="..."``, and a ``scope``); then the candidates
   (that hint, ``/.well-known/oauth-protected-resource/<path>``, ``/.well-known/oauth-protected-resource``), first
   valid document wins. Its ``resource`` must cover the service URL (RFC 8707 / RFC 9728 section 7.3).
2. The authorization server's metadata: the pinned URL, or the RFC 8414 / OpenID candidates of the first listed
   server (of the service's origin when there is no resource metadata). Its ``issuer`` must be the one asked for
   (RFC 8414 section 3.3), and it must offer PKCE with S256 (the MCP spec: refuse otherwise).
3. MCP 2025-03-26 servers (section 2.3.3 of that version): when the authorization server's metadata is absent, the
   default endpoints at the service's origin, ``/authorize``, ``/token`` and ``/register``. "Absent" is narrow:
   the server answered the probe with a 401 that names no resource metadata (a server that names one speaks a later
   version), and every metadata URL tried, resource and authorization server, answered 404. A fetch that was
   refused (SSRF guard, https), capped, timed out or unreachable fails discovery before that, and any other answer
   (a redirect, a document that is not metadata, a 401 or 403) is not absence: discovery fails rather than guess.

Every URL goes through :mod:`mcpbridge.outbound.json_http` (SSRF guard, https, no redirects). The SDK's URL builders,
validators and pydantic models (``mcp.client.auth.utils``, ``mcp.shared.auth``) do the RFC work.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio
import httpx2
from mcp.client.auth.utils import (
    build_oauth_authorization_server_metadata_discovery_urls,
    build_protected_resource_metadata_discovery_urls,
    get_client_metadata_scopes,
    issuers_match,
)
from mcp.shared.auth import OAuthMetadata, ProtectedResourceMetadata
from mcp.shared.auth_utils import check_resource_allowed, resource_url_from_server_url
from pydantic import ValidationError

from mcpbridge.domain.external_services import ExternalService
from mcpbridge.domain.www_authenticate import auth_param
from mcpbridge.errors import InvalidInput, MCPBridgeError, UpstreamError
from mcpbridge.outbound.http import guarded_async_client
from mcpbridge.outbound.json_http import get_json, require_https
from mcpbridge.outbound.policy import EgressPolicy

log = logging.getLogger("mcpbridge.oauth")

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"


@dataclass(frozen=True)
class Discovery:
    """What mcpbridge knows about a service's authorization server after discovery."""

    metadata: OAuthMetadata
    issuer: str
    resource: str
    """The RFC 8707 resource indicator sent with every authorization and token request."""
    resource_metadata: ProtectedResourceMetadata | None
    scope: str | None
    """The scope to ask for: the service's configured scopes, else the server's hints (challenge, metadata)."""

    @property
    def supports_jwt_bearer(self) -> bool:
        return JWT_BEARER in (self.metadata.grant_types_supported or [])

    @property
    def revocation_endpoint(self) -> str | None:
        endpoint = self.metadata.revocation_endpoint
        return str(endpoint) if endpoint else None


def _failed(message: str, code: str = "oauth_discovery_failed") -> UpstreamError:
    return UpstreamError(message, code=code)


@dataclass(frozen=True)
class _Challenge:
    """What the MCP server answered to an unauthenticated request."""

    status: int | None
    """None when it did not answer (refused, unreachable, timed out)."""
    resource_metadata: str | None = None
    scope: str | None = None


async def _challenge(service: ExternalService, policy: EgressPolicy, timeout: float) -> _Challenge:
    """The status and, from a 401, the ``resource_metadata`` and ``scope`` the MCP server answers to an
    unauthenticated request."""
    require_https(policy, service.url, "MCP server")
    headers = {"accept": "application/json, text/event-stream", **service.headers}
    with contextlib.suppress(httpx2.HTTPError, MCPBridgeError, TimeoutError):
        async with guarded_async_client(policy, timeout=timeout) as http:
            with anyio.fail_after(timeout):
                if service.transport == "sse":
                    stream = http.stream("GET", service.url, headers=headers)
                else:
                    ping = {"jsonrpc": "2.0", "id": 0, "method": "ping"}
                    stream = http.stream("POST", service.url, json=ping, headers=headers)
                # Only the status and headers matter: an SSE body would never end.
                async with stream as response:
                    if response.status_code != 401:
                        return _Challenge(response.status_code)
                    challenge = response.headers.get("www-authenticate", "")
                    return _Challenge(401, auth_param(challenge, "resource_metadata"), auth_param(challenge, "scope"))
    return _Challenge(None)


async def _resource_metadata(
    service: ExternalService, policy: EgressPolicy, hint: str | None, timeout: float
) -> tuple[ProtectedResourceMetadata | None, bool]:
    """The first valid resource metadata document, and whether every URL tried answered 404 (the documents are
    absent, as opposed to refused, redirected or unreadable)."""
    absent = True
    for url in build_protected_resource_metadata_discovery_urls(hint, service.url):
        try:
            answer = await get_json(policy, url, what="resource metadata", timeout=timeout)
        except InvalidInput:
            if url == hint:
                log.warning("MCP service %s names refused resource metadata; trying the well-known paths", service.id)
                absent = False
                continue
            raise
        if answer.status >= 500 or answer.status == 429:
            raise _failed(f"the resource metadata of {service.id} is unavailable (HTTP {answer.status})")
        if answer.status != 200 or answer.json_object() is None:
            absent = absent and answer.status == 404
            continue
        try:
            return ProtectedResourceMetadata.model_validate(answer.body), False
        except ValidationError:
            absent = False
            continue
    return None, absent


def _default_endpoints(origin: str) -> OAuthMetadata:
    """MCP 2025-03-26 section 2.3.3: without metadata, ``/authorize``, ``/token`` and ``/register`` at the server's
    origin; PKCE (S256) is required of every client in that version."""
    return OAuthMetadata.model_validate(
        {
            "issuer": origin,
            "authorization_endpoint": f"{origin}/authorize",
            "token_endpoint": f"{origin}/token",
            "registration_endpoint": f"{origin}/register",
            "response_types_supported": ["code"],
            "code_challenge_methods_supported": ["S256"],
        }
    )


async def _server_metadata(
    policy: EgressPolicy,
    candidates: list[str],
    expected_issuer: str | None,
    timeout: float,
    *,
    when_absent: OAuthMetadata | None = None,
) -> OAuthMetadata:
    """The first valid metadata document of ``candidates``; ``when_absent`` only when every one answered 404."""
    absent = True
    for url in candidates:
        answer = await get_json(policy, url, what="authorization server metadata", timeout=timeout)
        if answer.status >= 500 or answer.status == 429:
            raise _failed(f"the authorization server metadata is unavailable (HTTP {answer.status})")
        if answer.status != 200 or answer.json_object() is None:
            absent = absent and answer.status == 404
            continue
        try:
            metadata = OAuthMetadata.model_validate(answer.body)
        except ValidationError:
            absent = False
            continue
        # RFC 8414 section 3.3: simple string comparison (a root issuer with or without its slash is the same).
        if expected_issuer is not None and not issuers_match(str(metadata.issuer), expected_issuer):
            raise _failed("the authorization server metadata names another issuer", code="oauth_issuer_mismatch")
        return metadata
    if absent and when_absent is not None:
        return when_absent
    raise _failed("no authorization server metadata was found for this service")


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


async def discover(service: ExternalService, policy: EgressPolicy, *, timeout: float) -> Discovery:
    """The service's authorization server, its metadata, the resource indicator and the scope to ask for.

    Raises InvalidInput when a URL is refused (SSRF, plain http) and UpstreamError (``oauth_discovery_failed``,
    ``oauth_issuer_mismatch``, ``oauth_resource_mismatch``, ``oauth_pkce_unsupported``, ``oauth_server_*``).
    """
    canonical = resource_url_from_server_url(service.url)
    pinned = service.auth.auth_server_metadata_url
    resource_metadata: ProtectedResourceMetadata | None = None
    challenge_scope: str | None = None
    if pinned:
        metadata = await _server_metadata(policy, [pinned], None, timeout)
    else:
        challenge = await _challenge(service, policy, timeout)
        challenge_scope = challenge.scope
        resource_metadata, resource_absent = await _resource_metadata(
            service, policy, challenge.resource_metadata, timeout
        )
        if resource_metadata is not None:
            if not check_resource_allowed(
                requested_resource=canonical, configured_resource=str(resource_metadata.resource)
            ):
                raise _failed(
                    "the protected resource metadata describes another resource", code="oauth_resource_mismatch"
                )
            issuer = str(resource_metadata.authorization_servers[0])
            candidates = build_oauth_authorization_server_metadata_discovery_urls(issuer, service.url)
            metadata = await _server_metadata(policy, candidates, issuer, timeout)
        else:
            # Servers from before RFC 9728 (MCP 2025-03-26): the metadata sits at the service's origin, and without
            # it (every document genuinely absent, see the module docstring) the default endpoints there.
            origin = _origin(service.url)
            legacy = challenge.status == 401 and challenge.resource_metadata is None and resource_absent
            candidates = build_oauth_authorization_server_metadata_discovery_urls(None, service.url)
            metadata = await _server_metadata(
                policy, candidates, origin, timeout, when_absent=_default_endpoints(origin) if legacy else None
            )
    if "S256" not in (metadata.code_challenge_methods_supported or []):
        raise _failed("the authorization server does not offer PKCE with S256", code="oauth_pkce_unsupported")
    resource = str(resource_metadata.resource) if resource_metadata is not None else canonical
    if service.auth.scopes:
        scope: str | None = " ".join(service.auth.scopes)
    else:
        scope = get_client_metadata_scopes(
            challenge_scope, resource_metadata, metadata, client_grant_types=["authorization_code", "refresh_token"]
        )
    return Discovery(
        metadata=metadata,
        issuer=str(metadata.issuer),
        resource=resource,
        resource_metadata=resource_metadata,
        scope=scope,
    )
