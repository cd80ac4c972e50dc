"""The clients of the authorization server, and the rules their redirect URIs follow.

Two kinds, both public unless a registration says otherwise:

* **Client ID metadata documents** (draft-ietf-oauth-client-id-metadata-document, the MCP spec's preferred way): the
  ``client_id`` is an https URL whose document names the client and its redirect URIs. It is fetched through the
  SSRF guard (https, no redirects, at most 64 KiB, 5 s), must name itself as ``client_id``, may not use a client
  secret, and is cached per workspace for its ``max-age`` (60 s to 1 day; 1 h without one).
* **Registered clients** (RFC 7591, :mod:`.server`): registered at one endpoint's issuer and unknown at every other;
  their secret, if they asked for one, is kept as a digest.

Redirect URIs (both kinds): absolute, no fragment, no user info, only the characters a URI may hold (RFC 3986: no
space, control character, quote, backslash or non-ASCII character, raw or as the IDNA of a host); ``https``;
``http`` to a loopback address only (``127.0.0.1``, ``[::1]``, ``localhost``: never ``localhost.`` or another
name); or a private-use scheme of a native app (``cursor://...``), never one a browser or the system keeps for
itself (``javascript:``, ``data:``, ``file:``, ``chrome:``, ``chrome-extension:``, ``about:``...). At the
authorization endpoint a redirect URI must equal a registered one, except that a loopback ``http`` one may use any
port (RFC 8252 7.3). A request whose client or redirect URI fails never redirects anywhere.

A registered client no sign-in has used yet is forgotten a day after it registered (:data:`UNUSED_CLIENT_TTL_SECONDS`)
and counted per endpoint (gsi2 ``OACLIENTUNUSED#<ep>``), so registration cannot fill the store; its first token
makes it a client in use, kept :data:`~.records.CLIENT_TTL_SECONDS` from its last use.
"""
# Over 400 lines: both kinds of client share the redirect URI rules, the lookup and the registration records.

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import re
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from mcpbridge.authserver.records import (
    CLIENT_TTL_SECONDS,
    digest,
    metadata_document_key,
    registered_client_key,
)
from mcpbridge.errors import InvalidInput, MCPBridgeError
from mcpbridge.outbound import json_http
from mcpbridge.outbound.policy import EgressPolicy
from mcpbridge.ports import Clock, Store

log = logging.getLogger("mcpbridge.authserver")

AuthMethod = Literal["none", "client_secret_post", "client_secret_basic"]
GRANT_TYPES = ("authorization_code", "refresh_token")
MAX_REDIRECT_URIS = 10
MAX_URI_LENGTH = 2000
MAX_NAME_LENGTH = 200
DOCUMENT_MAX_BYTES = 64 * 1024
DOCUMENT_TIMEOUT_SECONDS = 5.0
DOCUMENT_TTL_SECONDS = (60, 3600, 86400)
"""Shortest, default and longest time a fetched metadata document is trusted."""
UNUSED_CLIENT_TTL_SECONDS = 86400
_LOOPBACK_NAMES = frozenset({"localhost"})
_REFUSED_SCHEMES = frozenset(
    {
        "javascript", "data", "file", "vbscript", "about", "blob", "filesystem", "view-source", "ws", "wss", "ftp",
        "jar", "resource", "intent", "content", "devtools", "mailto", "tel", "sms", "urn",
    }
)  # fmt: skip
_REFUSED_SCHEME_PREFIXES = (
    "chrome", "edge", "brave", "opera", "vivaldi", "moz-", "safari-", "ms-", "webkit", "android-", "web+", "x-apple-",
)  # fmt: skip
"""Schemes of browsers' own pages and extensions, and of the system's (``chrome://``, ``moz-extension://``...)."""
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*")
_URI_CHARACTERS = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+")
"""What RFC 3986 lets a URI hold; anything else (space, CR LF, quote, backslash, non-ASCII) is refused, not cleaned."""


@dataclass(frozen=True)
class Client:
    """A client as the authorization server knows it; also Authlib's ``ClientMixin``."""

    client_id: str
    kind: Literal["metadata_document", "registered"]
    client_name: str
    redirect_uris: tuple[str, ...]
    grant_types: tuple[str, ...] = ("authorization_code",)
    token_endpoint_auth_method: AuthMethod = "none"  # noqa: S105 - a method name, not a secret
    endpoint_id: str | None = None
    """The endpoint a registered client belongs to (None: a metadata document, valid at every endpoint)."""
    client_uri: str | None = None
    secret_sha256: str | None = field(default=None, repr=False)

    @property
    def display_name(self) -> str:
        """The name to show a person: the client's own, with the host its identity comes from for a document."""
        if self.kind == "metadata_document":
            host = urlsplit(self.client_id).hostname or self.client_id
            return f"{self.client_name} ({host})" if self.client_name and self.client_name != host else host
        return self.client_name or "an unnamed application"

    # Authlib's ClientMixin -------------------------------------------------------------------------------------

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str | None:
        return self.redirect_uris[0] if len(self.redirect_uris) == 1 else None

    def get_allowed_scope(self, scope: str | None) -> str:
        return scope or ""  # the endpoint decides (AuthorizationServer.validate_requested_scope)

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return any(redirect_matches(registered, redirect_uri) for registered in self.redirect_uris)

    def check_client_secret(self, client_secret: str) -> bool:
        if not self.secret_sha256 or not client_secret:
            return False
        return hmac.compare_digest(self.secret_sha256.encode(), digest(client_secret).encode())

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method == self.token_endpoint_auth_method

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type in self.grant_types


# ---------------------------------------------------------------------------------------------------- redirect URIs


def check_redirect_uri(uri: object) -> str:
    """``uri`` if it may be registered as a redirect URI, else InvalidInput saying why."""
    if not isinstance(uri, str) or not uri or len(uri) > MAX_URI_LENGTH:
        raise _bad_redirect("a redirect URI must be a non-empty string of at most 2000 characters")
    if not _URI_CHARACTERS.fullmatch(uri):
        raise _bad_redirect("a redirect URI may hold only the characters of a URI (no space, control or quote)")
    try:
        parts = urlsplit(uri)
        port = parts.port
    except ValueError:
        raise _bad_redirect("a redirect URI is not a valid URI") from None
    scheme = parts.scheme.lower()
    if not _SCHEME.fullmatch(scheme) or "#" in uri:
        raise _bad_redirect("a redirect URI must be absolute and carry no fragment")
    if "@" in parts.netloc:
        raise _bad_redirect("a redirect URI must not carry user information")
    if scheme == "https":
        if not parts.hostname:
            raise _bad_redirect("an https redirect URI needs a host")
    elif scheme == "http":
        if not is_loopback(parts.hostname):
            raise _bad_redirect("plain http redirect URIs are allowed to a loopback address only")
    elif scheme in _REFUSED_SCHEMES or scheme.startswith(_REFUSED_SCHEME_PREFIXES):
        raise _bad_redirect(f"the {scheme} scheme cannot be a redirect URI")
    del port
    return uri


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def redirect_matches(registered: str, presented: str) -> bool:
    """Exact match, or the same loopback http URI on another port (native apps pick a free port at run time)."""
    if hmac.compare_digest(registered.encode(), presented.encode()):
        return True
    try:
        a, b = urlsplit(registered), urlsplit(presented)
        a_port, b_port = a.port, b.port
    except ValueError:
        return False
    del a_port, b_port
    return (
        a.scheme == b.scheme == "http"
        and is_loopback(a.hostname)
        and a.hostname == b.hostname
        and (a.path, a.query, a.fragment) == (b.path, b.query, b.fragment)
    )


def _bad_redirect(detail: str) -> InvalidInput:
    return InvalidInput(detail, code="invalid_redirect_uri")


def clean_redirect_uris(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise _bad_redirect("redirect_uris must be a non-empty list")
    if len(value) > MAX_REDIRECT_URIS:
        raise _bad_redirect(f"at most {MAX_REDIRECT_URIS} redirect URIs")
    return tuple(dict.fromkeys(check_redirect_uri(uri) for uri in value))


def clean_name(value: object, fallback: str = "") -> str:
    if value is None:
        return fallback
    if not isinstance(value, str):
        raise InvalidInput("client_name must be a string", code="invalid_client_metadata")
    if any(not c.isspace() and (ord(c) < 32 or 127 <= ord(c) < 160) for c in value):
        raise InvalidInput("client_name may not hold control characters", code="invalid_client_metadata")
    cleaned = " ".join(value.split())[:MAX_NAME_LENGTH]
    return cleaned or fallback


def clean_grant_types(value: object) -> tuple[str, ...]:
    if value is None:
        return ("authorization_code",)
    if not isinstance(value, list) or not all(isinstance(g, str) for g in value):
        raise InvalidInput("grant_types must be a list of strings", code="invalid_client_metadata")
    unknown = sorted(set(value) - set(GRANT_TYPES))
    if unknown:
        raise InvalidInput(
            f"unsupported grant type: {unknown[0][:64]}",
            code="invalid_client_metadata",
            details={"supported": list(GRANT_TYPES)},
        )
    if "authorization_code" not in value:
        raise InvalidInput("grant_types must include authorization_code", code="invalid_client_metadata")
    return tuple(g for g in GRANT_TYPES if g in value)


# ---------------------------------------------------------------------------------------------------- the registry


class Clients:
    """Looks clients up for one workspace: registered ones in the store, documents from the cache or the network."""

    def __init__(
        self, store: Store, clock: Clock, egress: EgressPolicy, *, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self._store = store
        self._clock = clock
        self._egress = egress
        self._ssl_context = ssl_context

    def find(self, workspace_id: str, endpoint_id: str, client_id: str) -> Client | None:
        """A client usable at this endpoint, from the store only (a metadata document must have been fetched by
        :meth:`resolve`): None for an unknown client or one registered at another endpoint."""
        if not client_id or len(client_id) > MAX_URI_LENGTH:
            return None
        if is_metadata_document_url(client_id):
            item = self._store.get(metadata_document_key(workspace_id, client_id))
            return None if item is None else _document_client(client_id, json.loads(item["document"]))
        item = self._store.get(registered_client_key(workspace_id, client_id))
        if item is None or item.get("endpoint_id") != endpoint_id:
            return None
        return registered_client_of(item)

    async def resolve(self, workspace_id: str, client_id: str) -> None:
        """Make a metadata-document client known to :meth:`find` (fetching its document unless cached); nothing for
        other client ids. Raises InvalidInput ``invalid_client_metadata`` for a document that cannot be used."""
        if client_id.lower().startswith("http://"):
            raise InvalidInput(
                "a client ID metadata document is fetched over https only: this client_id is a plain http URL",
                code="invalid_client_metadata",
            )
        if not is_metadata_document_url(client_id):
            return
        key = metadata_document_key(workspace_id, client_id)
        if self._store.get(key) is not None:
            return
        document, ttl = await self._fetch(client_id)
        _document_client(client_id, document)  # refuse a bad document before caching it
        self._store.put(
            {
                **key.as_dict(),
                "client_id": client_id,
                "document": json.dumps(document, separators=(",", ":")),
                "fetched_at": int(self._clock.now()),
                "expires_at": int(self._clock.now()) + ttl,
            }
        )

    async def _fetch(self, url: str) -> tuple[dict[str, Any], int]:
        try:
            answer = await json_http.get_json(
                self._egress,
                url,
                what="client metadata document",
                timeout=DOCUMENT_TIMEOUT_SECONDS,
                ssl_context=self._ssl_context,
                max_bytes=DOCUMENT_MAX_BYTES,
            )
        except MCPBridgeError as exc:
            raise InvalidInput(
                f"the client's metadata document could not be fetched: {exc.message}", code="invalid_client_metadata"
            ) from None
        document = answer.json_object()
        if answer.status != 200 or document is None:
            raise InvalidInput(
                f"the client's metadata document answered {answer.status} without a JSON object",
                code="invalid_client_metadata",
            )
        return document, _max_age(answer.headers.get("cache-control", ""))

    def touch_registered(self, workspace_id: str, client: Client) -> None:
        """Keep a registered client that a grant uses from expiring (written at most once a day); its first use
        takes it out of the unused ones."""
        if client.kind != "registered":
            return
        now = int(self._clock.now())
        item = self._store.get(registered_client_key(workspace_id, client.client_id))
        if item is None or int(item.get("expires_at", 0)) > now + CLIENT_TTL_SECONDS - 86400:
            return
        kept = {name: value for name, value in item.items() if name not in ("gsi2pk", "gsi2sk")}
        self._store.put({**kept, "expires_at": now + CLIENT_TTL_SECONDS})

    def unused_registrations(self, endpoint_id: str, bound: int) -> int:
        """How many clients registered at the endpoint no sign-in has used yet (counted up to ``bound``)."""
        page = self._store.query(unused_partition(endpoint_id), index="gsi2", limit=max(1, bound))
        return len(page.items)


def is_metadata_document_url(client_id: str) -> bool:
    """An https URL with a path (a metadata-document client id), as opposed to an id this server registered."""
    if not client_id.startswith("https://"):
        return False
    try:
        parts = urlsplit(client_id)
    except ValueError:
        return False
    return bool(parts.hostname) and parts.path not in ("", "/")


def _document_client(client_id: str, document: Mapping[str, Any]) -> Client:
    """The client a fetched document describes, or InvalidInput ``invalid_client_metadata`` saying what is wrong."""
    parts = urlsplit(client_id)
    if parts.fragment or "@" in parts.netloc or any(seg in (".", "..") for seg in parts.path.split("/")):
        raise _bad_document("the client id URL must have no fragment, user information or dot segments")
    if document.get("client_id") != client_id:
        raise _bad_document("the document does not name its own URL as client_id")
    method = document.get("token_endpoint_auth_method", "none")
    if method != "none" or "client_secret" in document:
        raise _bad_document("a client identified by a metadata document cannot use a client secret")
    try:
        redirect_uris = clean_redirect_uris(document.get("redirect_uris"))
        grant_types = clean_grant_types(document.get("grant_types"))
        name = clean_name(document.get("client_name"), fallback=parts.hostname or "")
    except InvalidInput as exc:
        raise _bad_document(exc.message) from None
    client_uri = document.get("client_uri")
    return Client(
        client_id=client_id,
        kind="metadata_document",
        client_name=name,
        redirect_uris=redirect_uris,
        grant_types=grant_types,
        client_uri=client_uri if isinstance(client_uri, str) and client_uri.startswith("https://") else None,
    )


def _bad_document(detail: str) -> InvalidInput:
    return InvalidInput(f"the client's metadata document is not usable: {detail}", code="invalid_client_metadata")


def _max_age(cache_control: str) -> int:
    shortest, default, longest = DOCUMENT_TTL_SECONDS
    for directive in cache_control.lower().split(","):
        name, _, value = directive.strip().partition("=")
        if name in ("no-store", "no-cache"):
            return shortest
        if name == "max-age" and value.strip().isdigit():
            return max(shortest, min(longest, int(value.strip())))
    return default


def registered_client_of(item: Mapping[str, Any]) -> Client:
    return Client(
        client_id=str(item["client_id"]),
        kind="registered",
        client_name=str(item.get("client_name") or ""),
        redirect_uris=tuple(item.get("redirect_uris") or ()),
        grant_types=tuple(item.get("grant_types") or ("authorization_code",)),
        token_endpoint_auth_method=item.get("token_endpoint_auth_method") or "none",
        endpoint_id=item.get("endpoint_id"),
        client_uri=item.get("client_uri"),
        secret_sha256=item.get("secret_sha256"),
    )


def registered_client_item(workspace_id: str, client: Client, now: int) -> dict[str, Any]:
    return {
        **registered_client_key(workspace_id, client.client_id).as_dict(),
        "client_id": client.client_id,
        "endpoint_id": client.endpoint_id,
        "client_name": client.client_name,
        "redirect_uris": list(client.redirect_uris),
        "grant_types": list(client.grant_types),
        "token_endpoint_auth_method": client.token_endpoint_auth_method,
        "client_uri": client.client_uri,
        "secret_sha256": client.secret_sha256,
        "created_at": now,
        "expires_at": now + UNUSED_CLIENT_TTL_SECONDS,
        "gsi2pk": unused_partition(str(client.endpoint_id)),
        "gsi2sk": client.client_id,
    }


def unused_partition(endpoint_id: str) -> str:
    """gsi2 partition of the clients registered at an endpoint that no sign-in used yet."""
    return f"OACLIENTUNUSED#{endpoint_id}"


def unique(values: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(values))
