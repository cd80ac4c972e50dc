"""Authlib's authorization-server pieces, wired to mcpbridge's store. Which pieces, and why:

* ``rfc6749.AuthorizationServer``: request validation, grant dispatch and RFC-shaped errors, free of any web framework.
  Authlib serves Flask and Django only, so :class:`OAuthHttpRequest` carries plain request data (the edge fills it)
  into Authlib's ``OAuth2Request``/``JsonRequest``, and :class:`Reply` carries the answer back.
* ``rfc6749.grants.AuthorizationCodeGrant`` with ``rfc7636.CodeChallenge``, narrowed to S256 and required of every
  client (OAuth 2.1): a missing or ``plain`` challenge is refused at the authorization endpoint, a missing or wrong
  verifier at the token endpoint; a ``code_verifier`` without a challenge is refused by Authlib itself.
* ``rfc6749.grants.RefreshTokenGrant``, rotating: every refresh returns a new refresh token and uses the old one up
  in one transaction with storing the new pair, a retry by the same client within a few seconds gets the same pair
  (:meth:`Tokens.rotate`).
* ``rfc7009.RevocationEndpoint``; ``rfc7591.ClientRegistrationEndpoint`` with its ``ClientMetadataClaims`` (then the
  redirect URI rules of :mod:`.clients`); ``rfc9207.IssuerParameter`` (``iss`` on every authorization response).

Written here, for want of an Authlib piece: RFC 8707 resource indicators (``resource`` must name this endpoint, at the
authorization and the token endpoint), the endpoint's scopes, client ID metadata documents (:mod:`.clients`) and single
use with replay detection (:mod:`.tokens`: a code or refresh token presented twice revokes its grant).

One server object per request: it is bound to one endpoint's issuer.
"""

# Over 400 lines: the Authlib adapters, the three grants, revocation and registration belong to one server object.

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from authlib.common.urls import add_params_to_uri
from authlib.oauth2 import rfc6749
from authlib.oauth2.rfc6749 import grants
from authlib.oauth2.rfc6749.errors import (
    InvalidGrantError,
    InvalidRequestError,
    InvalidScopeError,
    OAuth2Error,
    UnauthorizedClientError,
)
from authlib.oauth2.rfc7009 import RevocationEndpoint
from authlib.oauth2.rfc7591 import ClientRegistrationEndpoint
from authlib.oauth2.rfc7591.errors import InvalidClientMetadataError, InvalidRedirectURIError
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oauth2.rfc9207 import IssuerParameter

from mcpbridge.authserver.clients import (
    AuthMethod,
    Client,
    Clients,
    clean_grant_types,
    clean_name,
    clean_redirect_uris,
    registered_client_item,
)
from mcpbridge.authserver.grants import Grant, Grants
from mcpbridge.authserver.metadata import Issuer
from mcpbridge.authserver.records import AUTH_METHODS, IGNORED_SCOPES
from mcpbridge.authserver.throttles import Throttles
from mcpbridge.authserver.tokens import Tokens
from mcpbridge.domain import credentials
from mcpbridge.domain.ids import new_id
from mcpbridge.domain.items import Item, Key
from mcpbridge.errors import InvalidInput, RateLimited
from mcpbridge.ports import Clock, Store

log = logging.getLogger("mcpbridge.authserver")
# Authlib logs issued tokens at DEBUG ("Issue token {...}"): never let its records through, whatever the root level.
logging.getLogger("authlib").setLevel(logging.WARNING)

_CLIENT_AUTH = list(AUTH_METHODS)


@dataclass(frozen=True)
class OAuthHttpRequest:
    """An HTTP request as the edge received it: ``query`` and ``form`` keep repeated parameters."""

    method: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    query: Sequence[tuple[str, str]] = ()
    form: Sequence[tuple[str, str]] = ()
    json: Any = None
    client_address: str = "unknown"
    """Whom the request counts against (``throttles.address_of`` the peer)."""


@dataclass
class Reply:
    """What the server answers: a status, a JSON body (or ``""``) and headers (a redirect has ``Location``)."""

    status: int
    body: Any
    headers: list[tuple[str, str]]

    @property
    def location(self) -> str | None:
        return next((value for name, value in self.headers if name.lower() == "location"), None)

    @location.setter
    def location(self, value: str) -> None:
        self.headers = [(n, v) for n, v in self.headers if n.lower() != "location"] + [("Location", value)]


class InvalidTargetError(OAuth2Error):  # type: ignore[misc]
    """RFC 8707 2: the ``resource`` is not this endpoint."""

    error = "invalid_target"


@dataclass(frozen=True)
class Approval:
    """The resource owner of an authorization, as Authlib's grants see it: the grant the consent produced."""

    grant: Grant

    def get_user_id(self) -> str:
        return self.grant.user_id


@dataclass(frozen=True)
class StoredCode:
    """An authorization code as stored (Authlib's AuthorizationCodeMixin)."""

    item: Item

    @property
    def code_challenge(self) -> str | None:
        return self.item.get("code_challenge")

    @property
    def code_challenge_method(self) -> str | None:
        return self.item.get("code_challenge_method")

    def get_redirect_uri(self) -> str | None:
        return self.item.get("redirect_uri")

    def get_scope(self) -> str:
        return str(self.item.get("scope") or "")


@dataclass(frozen=True)
class StoredToken:
    """An access or refresh token as stored (Authlib's TokenMixin)."""

    item: Item
    refresh: bool

    def check_client(self, client: Client) -> bool:
        return bool(self.item.get("client_id") == client.client_id)

    def get_scope(self) -> str:
        return " ".join(self.item.get("scopes") or ())

    def get_expires_in(self) -> int:
        return max(0, int(self.item.get("expires_at", 0)) - int(self.item.get("issued_at", 0)))

    def is_expired(self) -> bool:
        return False  # an expired item is never read

    def is_revoked(self) -> bool:
        return False


# ---------------------------------------------------------------------------------------------------- adapters


class _Headers(dict[str, str]):
    """Request headers looked up case-insensitively (Authlib asks for ``Authorization``)."""

    def __init__(self, headers: Mapping[str, str]) -> None:
        super().__init__({name.lower(): value for name, value in headers.items()})

    def get(self, key: str, default: Any = None) -> Any:
        return super().get(key.lower(), default)

    def __getitem__(self, key: str) -> str:
        return super().__getitem__(key.lower())

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and super().__contains__(key.lower())


class _Payload(rfc6749.OAuth2Payload):  # type: ignore[misc]
    def __init__(self, pairs: Sequence[tuple[str, str]]) -> None:
        values: defaultdict[str, list[str]] = defaultdict(list)
        for name, value in pairs:
            values[name].append(value)
        self._datalist = values
        self._data = {name: items[0] for name, items in values.items()}

    @property
    def data(self) -> dict[str, str]:
        return self._data

    @property
    def datalist(self) -> defaultdict[str, list[str]]:
        return self._datalist


class _Request(rfc6749.OAuth2Request):  # type: ignore[misc]
    def __init__(self, request: OAuthHttpRequest) -> None:
        super().__init__(method=request.method, uri=request.url, headers=_Headers(request.headers))
        self.payload = _Payload([*request.query, *request.form])
        self._args = dict(reversed(request.query))
        self._form = dict(reversed(request.form))

    @property
    def args(self) -> dict[str, str]:
        return self._args

    @property
    def form(self) -> dict[str, str]:
        return self._form


class _JsonPayload(rfc6749.JsonPayload):  # type: ignore[misc]
    def __init__(self, data: Any) -> None:
        self._data = data

    @property
    def data(self) -> Any:
        return self._data


class _JsonRequest(rfc6749.JsonRequest):  # type: ignore[misc]
    def __init__(self, request: OAuthHttpRequest) -> None:
        super().__init__(request.method, request.url, _Headers(request.headers))
        self.payload = _JsonPayload(request.json)


# ---------------------------------------------------------------------------------------------------- the server


class EndpointAuthorizationServer(rfc6749.AuthorizationServer):  # type: ignore[misc]
    """The authorization server of one endpoint (one issuer)."""

    def __init__(
        self,
        issuer: Issuer,
        *,
        store: Store,
        clock: Clock,
        clients: Clients,
        grants: Grants,
        tokens: Tokens,
        throttles: Throttles,
    ) -> None:
        super().__init__(scopes_supported=[*issuer.scopes, *sorted(IGNORED_SCOPES)])
        self.issuer = issuer
        self.store = store
        self.clock = clock
        self.clients = clients
        self.grants = grants
        self.tokens = tokens
        self.throttles = throttles
        self.register_token_generator("default", self._generate_token)
        self.register_grant(_AuthorizationCodeGrant, [_S256Required()])
        self.register_grant(_RefreshTokenGrant)
        self.register_endpoint(_Revocation)
        self.register_extension(_Iss(issuer.issuer))

    @property
    def workspace_id(self) -> str:
        return self.issuer.endpoint.workspace_id

    # Authlib's framework hooks ------------------------------------------------------------------------------

    def query_client(self, client_id: str) -> Client | None:
        return self.clients.find(self.workspace_id, self.issuer.endpoint.id, client_id)

    def save_token(self, token: dict[str, Any], request: rfc6749.OAuth2Request) -> None:
        """Nothing: :meth:`_generate_token` stored the tokens it made."""

    def create_oauth2_request(self, request: OAuthHttpRequest | rfc6749.OAuth2Request) -> rfc6749.OAuth2Request:
        return request if isinstance(request, rfc6749.OAuth2Request) else _Request(request)

    def create_json_request(self, request: OAuthHttpRequest) -> rfc6749.JsonRequest:
        return _JsonRequest(request)

    def handle_response(self, status: int, body: Any, headers: Any) -> Reply:
        return Reply(status, body, [(str(n), str(v)) for n, v in headers])

    def send_signal(self, name: str, *args: Any, **kwargs: Any) -> None:
        return None

    def validate_requested_scope(self, scope: str | None) -> None:
        requested = set((scope or "").split())
        if requested - set(self.scopes_supported):
            raise InvalidScopeError(f"this endpoint grants only: {' '.join(self.issuer.scopes)}")

    # mcpbridge's rules --------------------------------------------------------------------------------------

    def granted_scopes(self, requested: str | None) -> tuple[str, ...]:
        """What a request for ``requested`` gets: those of the endpoint's scopes (all of them when none is named)."""
        named = set((requested or "").split()) - IGNORED_SCOPES
        return tuple(s for s in self.issuer.scopes if not named or s in named)

    def check_resource(self, request: rfc6749.OAuth2Request) -> None:
        """RFC 8707: a ``resource`` given must be this endpoint's URL (only one, with or without a final slash)."""
        resources = request.payload.datalist.get("resource", [])
        if len(resources) > 1:
            raise InvalidTargetError("one resource only: this endpoint's URL")
        if resources and not self.issuer.is_resource(resources[0]):
            raise InvalidTargetError("the resource is not this endpoint; its URL is the only resource here")

    def revoke_grant_of(self, item: Item, *, why: str) -> None:
        """Revoke the grant a code or token came from (if it still stands)."""
        grant = self.grants.live(
            self.workspace_id, item["user_id"], item["endpoint_id"], item["client_id"], item["generation"]
        )
        if grant is not None:
            self.grants.revoke(grant, why=why)

    def approval_of(self, item: Item) -> Approval | None:
        """The live grant a code or refresh token came from, on an enabled endpoint, while what the grant was made
        from stands (a grant whose origin is gone is revoked here)."""
        grant = self.grants.live(
            self.workspace_id, item["user_id"], item["endpoint_id"], item["client_id"], item["generation"]
        )
        if grant is None or not self.issuer.endpoint.enabled:
            return None
        standing = self.grants.standing(grant)
        if standing.verdict == "gone":
            self.grants.revoke(grant, why=standing.why)
        return Approval(grant) if standing.verdict == "stands" else None

    def _generate_token(
        self,
        grant_type: str,
        client: Client,
        user: Approval | None = None,
        scope: str | None = None,
        expires_in: int | None = None,
        include_refresh_token: bool = True,
    ) -> dict[str, Any]:
        assert user is not None
        scopes = tuple(s for s in (scope or "").split() if s in self.issuer.scopes)
        issued = self.tokens.issue(user.grant, scopes, refresh=include_refresh_token)
        self.clients.touch_registered(self.workspace_id, client)
        return issued.response()

    # the flows the edge calls ----------------------------------------------------------------------------

    def registration(self, request: OAuthHttpRequest) -> Reply:
        """RFC 7591, counted per endpoint and per client address before anything is read (:mod:`.throttles`)."""
        endpoint = _Registration(self)
        try:
            self.throttles.registration(self.issuer.endpoint.id, request.client_address)
            bound = self.throttles.max_unused_clients
            if self.clients.unused_registrations(self.issuer.endpoint.id, bound) >= bound:
                raise RateLimited(
                    "too many clients registered at this endpoint have not signed anyone in yet: retry later",
                    details={"retry_after_seconds": 3600},
                )
            status, body, headers = endpoint.create_registration_response(self.create_json_request(request))
        except RateLimited as limited:
            return _busy(limited)
        except OAuth2Error as error:
            return self.handle_error_response(request, error)  # type: ignore[no-any-return]
        shown = {name: value for name, value in body.items() if value is not None}
        if shown.get("token_endpoint_auth_method") == "none":
            shown.pop("client_secret", None)
            shown.pop("client_secret_expires_at", None)
        return Reply(status, shown, [(str(n), str(v)) for n, v in headers])

    def token(self, request: OAuthHttpRequest) -> Reply:
        return self.create_token_response(request)  # type: ignore[no-any-return]

    def revocation(self, request: OAuthHttpRequest) -> Reply:
        return self.create_endpoint_response(_Revocation.ENDPOINT_NAME, request)  # type: ignore[no-any-return]


def _busy(limited: RateLimited) -> Reply:
    """429 with the wait (RFC 6585); ``temporarily_unavailable`` as RFC 6749 names a server that cannot serve now."""
    wait = str(limited.details.get("retry_after_seconds", 60))
    body = {"error": "temporarily_unavailable", "error_description": _ascii(limited.message)}
    return Reply(429, body, [("Retry-After", wait)])


def with_iss(location: str, issuer: str) -> str:
    """An authorization error redirect that Authlib builds outside ``create_authorization_response``, given the
    ``iss`` RFC 9207 requires on every authorization response."""
    return str(add_params_to_uri(location, [("iss", issuer)]))


# ---------------------------------------------------------------------------------------------------- the grants


class _S256Required(CodeChallenge):  # type: ignore[misc]
    """PKCE for every client, S256 only (OAuth 2.1; MCP authorization)."""

    SUPPORTED_CODE_CHALLENGE_METHOD = ["S256"]  # noqa: RUF012 - Authlib reads this class attribute
    DEFAULT_CODE_CHALLENGE_METHOD = "S256"

    def validate_code_challenge(self, grant: Any, redirect_uri: str) -> None:
        data = grant.request.payload.data
        if not data.get("code_challenge"):
            raise InvalidRequestError("PKCE is required: send code_challenge with code_challenge_method=S256")
        if data.get("code_challenge_method") != "S256":
            raise InvalidRequestError("code_challenge_method must be S256 (plain is not accepted)")
        super().validate_code_challenge(grant, redirect_uri)

    def validate_code_verifier(self, grant: Any, result: Any) -> None:
        if not grant.request.form.get("code_verifier"):
            raise InvalidRequestError("Missing 'code_verifier'")
        super().validate_code_verifier(grant, result)


class _AuthorizationCodeGrant(grants.AuthorizationCodeGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = _CLIENT_AUTH
    server: EndpointAuthorizationServer

    def generate_authorization_code(self) -> str:
        return credentials.issue(credentials.OAUTH_CODE_PREFIX).plaintext

    def save_authorization_code(self, code: str, request: rfc6749.OAuth2Request) -> None:
        approval: Approval = request.user
        data = request.payload.data
        details = {
            "redirect_uri": data.get("redirect_uri"),
            # What the person approved, of what the client asked for.
            "scope": " ".join(s for s in self.server.granted_scopes(request.scope) if s in approval.grant.scopes),
            "code_challenge": data.get("code_challenge"),
            "code_challenge_method": data.get("code_challenge_method"),
        }
        self.server.tokens.save_code(code, approval.grant, details)

    def query_authorization_code(self, code: str, client: Client) -> StoredCode | None:
        taken = self.server.tokens.take_code(self.server.workspace_id, code)
        if taken.item is None:
            return None
        if taken.replayed:
            self.server.revoke_grant_of(taken.item, why="its authorization code was used twice")
            return None
        if taken.item.get("endpoint_id") != self.server.issuer.endpoint.id:
            return None
        if taken.item.get("client_id") != client.client_id:
            return None
        return StoredCode(taken.item)

    def delete_authorization_code(self, authorization_code: StoredCode) -> None:
        """Nothing: taking the code used it up."""

    def authenticate_user(self, authorization_code: StoredCode) -> Approval | None:
        return self.server.approval_of(authorization_code.item)

    def validate_token_request(self) -> None:
        self.server.check_resource(self.request)
        super().validate_token_request()


class _RefreshTokenGrant(grants.RefreshTokenGrant):  # type: ignore[misc]
    """Rotating refresh tokens (:meth:`Tokens.rotate`): the origin of the grant is checked before the token is used
    up, so a refresh refused while the user or workspace is disabled leaves the token to a refresh after."""

    TOKEN_ENDPOINT_AUTH_METHODS = _CLIENT_AUTH
    INCLUDE_NEW_REFRESH_TOKEN = True
    server: EndpointAuthorizationServer

    def validate_token_request(self) -> None:
        self.server.check_resource(self.request)
        client: Client = self.authenticate_token_endpoint_client()
        if not client.check_grant_type(self.GRANT_TYPE):
            raise UnauthorizedClientError("this client did not register the refresh_token grant type")
        self.request.client = client
        presented = self.request.form.get("refresh_token")
        if not presented:
            raise InvalidRequestError("Missing 'refresh_token' in request.")
        item = self.server.tokens.refresh_token(self.server.workspace_id, presented)
        if item is None or item.get("endpoint_id") != self.server.issuer.endpoint.id:
            raise InvalidGrantError("the refresh token is not valid here")
        if item.get("client_id") != client.client_id:
            self.server.revoke_grant_of(item, why="one of its refresh tokens was presented by another client")
            raise InvalidGrantError("the refresh token is not valid here")
        token = StoredToken(item, refresh=True)
        self._validate_token_scope(token)
        self.request.refresh_token = token

    def create_token_response(self) -> tuple[int, dict[str, Any], list[tuple[str, str]]]:
        token: StoredToken = self.request.refresh_token
        client: Client = self.request.client
        approval = self.authenticate_user(token)
        requested = self.request.payload.scope or token.get_scope()
        scopes = tuple(s for s in requested.split() if s in self.server.issuer.scopes)
        rotation = self.server.tokens.rotate(token.item, approval.grant, scopes, client_id=client.client_id)
        if rotation.replayed:
            self.server.revoke_grant_of(token.item, why="one of its refresh tokens was used twice")
        if rotation.issued is None:
            raise InvalidGrantError("the refresh token was used already")
        self.server.clients.touch_registered(self.server.workspace_id, client)
        return 200, rotation.issued.response(), self.TOKEN_RESPONSE_HEADER

    def authenticate_user(self, refresh_token: StoredToken) -> Approval:
        approval = self.server.approval_of(refresh_token.item)
        if approval is None:
            raise InvalidGrantError("the grant of this refresh token was revoked, or its user is not active")
        return approval


class _Revocation(RevocationEndpoint):  # type: ignore[misc]
    CLIENT_AUTH_METHODS = _CLIENT_AUTH
    server: EndpointAuthorizationServer

    def query_token(self, token_string: str, token_type_hint: str | None) -> StoredToken | None:
        found = self.server.tokens.find(self.server.workspace_id, token_string)
        if found is None or found[1].get("endpoint_id") != self.server.issuer.endpoint.id:
            return None
        key, item = found
        return StoredToken(item, refresh=key.sk.startswith("OAREFRESH#"))

    def revoke_token(self, token: StoredToken, request: rfc6749.OAuth2Request) -> None:
        if token.refresh:
            # A refresh token stands for the client's whole authorization: the grant goes, with its tokens.
            self.server.revoke_grant_of(token.item, why="the client revoked its refresh token")
            return
        self.server.tokens.delete(Key(token.item["pk"], token.item["sk"]))


class _Iss(IssuerParameter):  # type: ignore[misc]
    def __init__(self, issuer: str) -> None:
        self._issuer = issuer

    def get_issuer(self) -> str:
        return self._issuer


# ---------------------------------------------------------------------------------------------------- registration


class _Registration(ClientRegistrationEndpoint):  # type: ignore[misc]
    """Open dynamic registration (RFC 7591), as MCP clients expect: a client is bound to this endpoint's issuer."""

    server: EndpointAuthorizationServer

    def authenticate_token(self, request: Any) -> bool:
        return True

    def get_server_metadata(self) -> dict[str, Any]:
        return self.server.issuer.authorization_server_metadata()

    def generate_client_id(self, request: Any) -> str:
        return new_id("mcpc")

    def generate_client_secret(self, request: Any) -> str | None:
        method = (request.payload.data or {}).get("token_endpoint_auth_method", "client_secret_basic")
        return None if method == "none" else credentials.issue(credentials.OAUTH_CLIENT_SECRET_PREFIX).plaintext

    def save_client(self, client_info: dict[str, Any], client_metadata: dict[str, Any], request: Any) -> Client:
        method: AuthMethod = client_metadata.get("token_endpoint_auth_method") or "client_secret_basic"
        if method not in AUTH_METHODS:
            raise InvalidClientMetadataError(f"token_endpoint_auth_method must be one of {', '.join(AUTH_METHODS)}")
        response_types = client_metadata.get("response_types") or ["code"]
        if list(response_types) != ["code"]:
            raise InvalidClientMetadataError("response_types must be [code]")
        try:
            redirect_uris = clean_redirect_uris(client_metadata.get("redirect_uris"))
        except InvalidInput as exc:
            raise InvalidRedirectURIError(_ascii(exc.message)) from None
        try:
            grant_types = clean_grant_types(client_metadata.get("grant_types"))
            name = clean_name(client_metadata.get("client_name"))
        except InvalidInput as exc:
            raise InvalidClientMetadataError(_ascii(exc.message)) from None
        secret = client_info.get("client_secret")
        client = Client(
            client_id=client_info["client_id"],
            kind="registered",
            client_name=name,
            redirect_uris=redirect_uris,
            grant_types=grant_types,
            token_endpoint_auth_method=method,
            endpoint_id=self.server.issuer.endpoint.id,
            client_uri=client_metadata.get("client_uri"),
            secret_sha256=credentials.digest(secret) if secret else None,
        )
        item = registered_client_item(self.server.workspace_id, client, int(self.server.clock.now()))
        self.server.store.put(item)
        log.info("registered OAuth client %s at endpoint %s", client.client_id, self.server.issuer.endpoint.id)
        return client


def _ascii(text: str) -> str:
    """An error description Authlib accepts (RFC 6749 restricts it to printable ASCII without quotes or '\\')."""
    return "".join(c if 0x20 <= ord(c) <= 0x7E and c not in '"\\' else "?" for c in text)
