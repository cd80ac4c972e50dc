"""A published endpoint's MCP Server Card (SEP-2127, a draft): ``GET /mcp/{endpoint_id}/server-card``.

The draft (the Server Card extension, ``modelcontextprotocol/experimental-ext-server-card``, as of August 2026)
reserves ``<streamable-http-url>/server-card`` for a server's card, served as ``application/mcp-server-card+json``
with open CORS (``Access-Control-Allow-Origin: *``), caching headers and an ``ETag`` honoured by ``If-None-Match``.
A card names the server (``name`` in reverse-DNS form, ``version``, ``description``, optional ``title`` and
``icons``) and how to connect (``remotes``: transport, URL, protocol versions, headers). It deliberately lists no
primitives and no capabilities: those stay with the protocol's own listings, after authentication.

Anyone may read a card, so it says only what an unauthenticated caller learns anyway: the endpoint's URL (in the
request), the protocol versions, how to authenticate (the bearer token header; for an endpoint that signs clients in
with OAuth, its RFC 9728 metadata URL, which a 401 names too) and, for those same endpoints, the endpoint's name
(their public RFC 9728 metadata gives it as ``resource_name``). Never its knowledge bases, tools, workspace or
description. An endpoint that is unknown, disabled or whose workspace is not active has no card (404, the same
answer for all three).
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
from typing import TYPE_CHECKING, Any, Final

from starlette.requests import Request
from starlette.responses import Response

from mcpbridge import __version__
from mcpbridge.errors import Forbidden
from mcpbridge.http.mcp.protocol import HANDSHAKE_VERSIONS, MODERN_VERSIONS
from mcpbridge.http.mcp.tool_outputs import server_icon
from mcpbridge.http.problems import problem
from mcpbridge.http.store_reads import store_read

if TYPE_CHECKING:
    from mcpbridge.bootstrap import Container
    from mcpbridge.publishing.endpoints import Endpoint

SCHEMA: Final = "https://static.modelcontextprotocol.io/schemas/v1/server-card.schema.json"
MEDIA_TYPE: Final = "application/mcp-server-card+json"
PATH_SUFFIX: Final = "/server-card"
DESCRIPTION: Final = "Knowledge bases published through mcpbridge: search, read and cite their documents."
MAX_AGE_SECONDS: Final = 300
"""Shorter than the draft's example hour: a disabled endpoint's card should not outlive it long in caches."""
CORS: Final = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Methods": "GET",
    "Access-Control-Allow-Headers": "Content-Type, If-None-Match",
    "Access-Control-Expose-Headers": "ETag",
}
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_NOT_HERE = "no MCP server card here"


def card_name(host: str, endpoint_id: str) -> str:
    """The card's ``name``: the host in reverse-DNS order, a slash, the endpoint id (``com.example.api/ep_...``).
    A host that is not a DNS name (an IP address) gives ``local.mcpbridge``."""
    labels = host.lower().rstrip(".").split(".")
    try:
        ipaddress.ip_address(host.strip("[]"))
        is_address = True
    except ValueError:
        is_address = False
    if is_address or not all(_LABEL.fullmatch(label) for label in labels):
        return f"local.mcpbridge/{endpoint_id}"
    return f"{'.'.join(reversed(labels))}/{endpoint_id}"


def server_card(endpoint: Endpoint, base_url: str, host: str) -> dict[str, Any]:
    """The card of ``endpoint`` as reached at ``base_url`` (see the module docstring for what it holds)."""
    from mcpbridge.authserver.metadata import resource_metadata_url

    url = f"{base_url.rstrip('/')}/mcp/{endpoint.id}"
    remote: dict[str, Any] = {
        "type": "streamable-http",
        "url": url,
        "supportedProtocolVersions": [*HANDSHAKE_VERSIONS, *MODERN_VERSIONS],
    }
    authorization: dict[str, Any] = {"bearer": True, "oauth": endpoint.accepts_oauth}
    if endpoint.accepts_static_token:
        how = "Bearer and the endpoint's mcp_ token"
        if endpoint.accepts_oauth:
            how += ", or an OAuth access token (clients that sign in get one by themselves)"
        remote["headers"] = [
            {
                "name": "Authorization",
                "description": how,
                "isRequired": not endpoint.accepts_oauth,
                "isSecret": True,
            }
        ]
    if endpoint.accepts_oauth:
        authorization["protectedResourceMetadata"] = resource_metadata_url(base_url, endpoint.id)
    card: dict[str, Any] = {
        "$schema": SCHEMA,
        "name": card_name(host, endpoint.id),
        "version": __version__,
        "description": DESCRIPTION,
    }
    if endpoint.accepts_oauth:  # already public: the RFC 9728 metadata names the resource
        card["title"] = endpoint.name[:100]
    card["icons"] = [server_icon()]
    card["remotes"] = [remote]
    card["_meta"] = {"io.mcpbridge/authorization": authorization}
    return card


async def answer(container: Container, request: Request, endpoint_id: str, base_url: str | None) -> Response:
    """The answer to a request for ``/mcp/{endpoint_id}/server-card``; ``base_url`` is None for a host not served
    here."""
    if request.method == "OPTIONS":
        return Response(status_code=204, headers={**CORS, "Access-Control-Max-Age": "600"})
    if request.method not in ("GET", "HEAD"):
        allow = {"Allow": "GET, HEAD, OPTIONS", **CORS}
        return problem(405, "method_not_allowed", "a server card is read with GET", headers=allow)
    if base_url is None:
        return problem(421, "misdirected_request", "this host name is not served here")
    media_type = _negotiated(request.headers.get("accept"))
    if media_type is None:
        return problem(406, "not_acceptable", f"a server card is {MEDIA_TYPE} (or application/json)", headers=CORS)
    endpoint = await store_read(container, _open_endpoint, container, endpoint_id)
    if endpoint is None:
        return problem(404, "server_card_not_found", _NOT_HERE, headers=CORS)
    host = (request.url.hostname or "").strip("[]")
    body = json.dumps(server_card(endpoint, base_url, host), ensure_ascii=False, sort_keys=True).encode()
    etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
    headers = {**CORS, "ETag": etag, "Cache-Control": f"public, max-age={MAX_AGE_SECONDS}", "Vary": "Accept"}
    wanted = _entity_tags(request.headers.get("if-none-match"))
    if etag in wanted or "*" in wanted:
        return Response(status_code=304, headers=headers)
    return Response(body if request.method == "GET" else b"", media_type=media_type, headers=headers)


def _open_endpoint(container: Container, endpoint_id: str) -> Endpoint | None:
    """The endpoint if it exists, is enabled and its workspace is active (blocking: store reads)."""
    endpoint = container.endpoints.find(endpoint_id)
    if endpoint is None:
        return None
    try:
        container.endpoints.require_open(endpoint)
    except Forbidden:
        return None
    return endpoint


def _negotiated(accept: str | None) -> str | None:
    """The media type to answer with: the card's own, or ``application/json`` for a client that asks for that
    only; None when the client accepts neither."""
    if accept is None or not accept.strip():
        return MEDIA_TYPE
    accepted = {part.split(";")[0].strip().lower() for part in accept.split(",")}
    if accepted & {MEDIA_TYPE, "*/*", "application/*"}:
        return MEDIA_TYPE
    if "application/json" in accepted:
        return "application/json"
    return None


def _entity_tags(value: str | None) -> set[str]:
    """The entity tags of an ``If-None-Match`` header (``*`` included; weak ones compared weakly, RFC 9110 13.1.2)."""
    if not value:
        return set()
    return {part.strip().removeprefix("W/") for part in value.split(",")}
