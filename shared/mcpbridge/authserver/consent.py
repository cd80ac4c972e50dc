"""Sign-in and consent: from a client's authorization request to the code it gets back, through one person's browser.

1. ``begin``: the request is validated by Authlib (client, redirect URI, response type, scope, PKCE S256) and here
   (``resource``). Until the client and its redirect URI check out, a failure is an error page and never a redirect
   (no open redirect); after that, it is an error redirect carrying ``state`` and ``iss``. A valid request becomes a
   *pending request* (10 min), its parameters sealed (the client's ``state`` is not stored in plaintext), and a
   handle and a CSRF secret go to the browser in a cookie; the page gets the CSRF secret in a hidden field.
2. The person signs in: with the operator's OpenID Connect provider (``oidc``, a round trip through the provider that
   attaches the user to the pending request), or, where none is configured, with their own mcpbridge API key, typed
   into the page.
3. ``decide``: the form's CSRF secret must equal the cookie's, and its digest the pending request's; approving takes
   the pending request (single use), records the grant and redirects to the client with a code (``iss`` included);
   denying redirects with ``access_denied``.

The user must belong to the endpoint's workspace and be active; the scopes granted are those requested (all of the
endpoint's when none is named) that the user, and the key signed in with, may use (a viewer key never grants
``write``): none left is a refusal.
"""

# Over 400 lines: the three steps share the pending request, its sealing, the CSRF check and the views of the page.

from __future__ import annotations

import hmac
import json
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from authlib.oauth2.rfc6749.errors import OAuth2Error

from mcpbridge.authserver.clients import Client, Clients
from mcpbridge.authserver.grants import Grants, Origin, SignIn
from mcpbridge.authserver.metadata import Issuer
from mcpbridge.authserver.records import REQUEST_TTL_SECONDS, WRITE_SCOPES, digest, request_key
from mcpbridge.authserver.server import (
    Approval,
    EndpointAuthorizationServer,
    InvalidTargetError,
    OAuthHttpRequest,
    with_iss,
)
from mcpbridge.authserver.throttles import MAX_WRONG_KEYS, Throttles
from mcpbridge.domain.identity import CAPABILITIES, Principal, Scope
from mcpbridge.domain.items import Condition, Item, Key, Update
from mcpbridge.domain.secrets import SecretContext
from mcpbridge.errors import ConditionFailed, Forbidden, InvalidInput, MCPBridgeError, RateLimited, Unauthenticated
from mcpbridge.identity.accounts import Accounts
from mcpbridge.identity.records import access_of, status_of, user_key
from mcpbridge.ports import Clock, SecretBox, Store
from mcpbridge.sealing import open_secret_or_none

log = logging.getLogger("mcpbridge.authserver")

SEALED_KIND = "oauth_request"
COOKIE_PREFIX = "mcpbridge_consent_"
SCOPE_TITLES = {
    "read": "Search and read the knowledge bases",
    "ask": "Ask questions answered from the knowledge bases",
    "wiki": "Read the knowledge bases' wikis",
    "write": "Add, change and delete documents",
}


class AuthorizeError(Exception):
    """A failure shown as a page: the client or its redirect URI is not trusted, or the browser's request is not."""

    def __init__(self, status: int, title: str, detail: str, *, retry_after: int | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.title = title
        self.detail = detail
        self.retry_after = retry_after
        """Seconds to wait before trying again (a 429)."""


@dataclass(frozen=True)
class Redirect:
    """Send the browser on (303): to the client with a code or an error, or to the identity provider."""

    location: str = field(repr=False)


@dataclass(frozen=True)
class SignedIn:
    user_id: str
    label: str
    method: SignIn
    identity: str | None = None
    """For a sign-in with the identity provider: the sort key of the identity linked to the user."""


@dataclass(frozen=True)
class ConsentPage:
    """What the page shows, and the secrets the browser must hold to answer it."""

    handle: str
    csrf: str = field(repr=False)
    cookie_value: str = field(repr=False)
    endpoint_name: str
    client_name: str
    client_id: str
    client_kind: str
    client_uri: str | None
    redirect_uri: str
    scopes: tuple[str, ...]
    signed_in: SignedIn | None
    sign_in_with: SignIn
    provider_name: str
    error: str | None = None

    @property
    def scope_titles(self) -> list[tuple[str, str]]:
        return [(scope, SCOPE_TITLES.get(scope, scope)) for scope in self.scopes]


@dataclass(frozen=True)
class _Pending:
    handle: str
    request_id: str = field(repr=False)
    csrf: str = field(repr=False)
    item: Item
    query: list[tuple[str, str]] = field(repr=False)


ServerFactory = Callable[[Issuer], EndpointAuthorizationServer]


class ConsentFlow:
    def __init__(
        self,
        *,
        store: Store,
        clock: Clock,
        secrets_box: SecretBox,
        clients: Clients,
        grants: Grants,
        accounts: Accounts,
        servers: ServerFactory,
        throttles: Throttles,
        sign_in_with: SignIn,
        provider_name: str = "",
    ) -> None:
        self._store = store
        self._clock = clock
        self._secrets = secrets_box
        self._clients = clients
        self._grants = grants
        self._accounts = accounts
        self._servers = servers
        self._throttles = throttles
        self.sign_in_with: SignIn = sign_in_with
        self.provider_name = provider_name

    # ------------------------------------------------------------------------------------------ 1. begin

    async def begin(self, issuer: Issuer, request: OAuthHttpRequest) -> ConsentPage | Redirect:
        """A page to sign in and consent, or the client's error redirect; AuthorizeError when neither is safe."""
        server = self._servers(issuer)
        oauth_request = server.create_oauth2_request(request)
        client_id = oauth_request.payload.client_id
        if not client_id:
            raise AuthorizeError(400, "Missing client", "The request names no client_id.")
        try:
            await self._clients.resolve(issuer.endpoint.workspace_id, client_id)
        except InvalidInput as exc:
            raise AuthorizeError(400, "Unknown application", exc.message) from None
        try:
            grant = server.get_consent_grant(request=oauth_request, end_user=None)
        except OAuth2Error as error:
            return self._error_redirect(issuer, error, error.redirect_uri, oauth_request.payload.state)
        except ValueError:  # Authlib's own error text would quote a parameter holding '"' or '\\'
            raise AuthorizeError(
                400, "Invalid authorization request", "A parameter of this request holds characters it may not hold."
            ) from None
        try:
            server.check_resource(oauth_request)
        except InvalidTargetError as error:
            return self._error_redirect(issuer, error, grant.redirect_uri, oauth_request.payload.state)
        client: Client = grant.client
        scopes = server.granted_scopes(oauth_request.scope)
        pending = self._save(issuer, client, grant.redirect_uri, scopes, [*request.query])
        return self._page(issuer, pending)

    def _error_redirect(self, issuer: Issuer, error: OAuth2Error, redirect_uri: str | None, state: Any) -> Redirect:
        if not redirect_uri:
            raise AuthorizeError(400, "Invalid authorization request", _description(error))
        error.redirect_uri = redirect_uri
        error.state = state
        _, _, headers = error()
        location = dict(headers)["Location"]
        return Redirect(with_iss(location, issuer.issuer))

    def _save(
        self, issuer: Issuer, client: Client, redirect_uri: str, scopes: tuple[str, ...], query: list[tuple[str, str]]
    ) -> _Pending:
        request_id, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        key = request_key(issuer.endpoint.workspace_id, request_id)
        handle = digest(request_id)[:16]
        sealed = self._secrets.seal(json.dumps(query), SecretContext(issuer.endpoint.workspace_id, SEALED_KIND, key.sk))
        item: Item = {
            **key.as_dict(),
            "endpoint_id": issuer.endpoint.id,
            "client_id": client.client_id,
            "client_name": client.display_name,
            "client_kind": client.kind,
            "client_uri": client.client_uri,
            "redirect_uri": redirect_uri,
            "scopes": list(scopes),
            "csrf_sha256": digest(csrf),
            "sealed_query": sealed,
            "expires_at": int(self._clock.now()) + REQUEST_TTL_SECONDS,
        }
        self._store.put(item, condition=Condition.absent("request_new"))
        return _Pending(handle, request_id, csrf, item, query)

    # ------------------------------------------------------------------------------------------ 2. after a sign-in

    def resume(self, issuer: Issuer, handle: str, cookie_value: str | None) -> ConsentPage:
        """The page again, for the browser holding the request's cookie (after the identity provider)."""
        pending = self._pending(issuer, handle, cookie_value, None)
        return self._page(issuer, pending)

    def attach_user(self, workspace_id: str, request_sk: str, cookie_value: str, signed_in: SignedIn) -> None:
        """Record who signed in on a pending request (the identity provider's callback), for the browser that holds
        that request's cookie only."""
        request_id = cookie_value.partition(".")[0]
        if not request_id or not hmac.compare_digest(request_key(workspace_id, request_id).sk, request_sk):
            raise AuthorizeError(400, "Sign-in failed", "This browser did not start this sign-in: start again.")
        self._store.update(
            request_key_of(workspace_id, request_sk),
            Update(
                set={
                    "user_id": signed_in.user_id,
                    "user_label": signed_in.label,
                    "signed_in_with": "oidc",
                    "identity": signed_in.identity,
                }
            ),
            condition=Condition.exists("request_pending"),
        )

    def pending_for_sign_in(self, issuer: Issuer, handle: str, cookie_value: str | None, csrf: str) -> str:
        """The sort key of a pending request the browser may start an external sign-in for (CSRF checked)."""
        return str(self._pending(issuer, handle, cookie_value, csrf).item["sk"])

    # ------------------------------------------------------------------------------------------ 3. decide

    async def decide(
        self,
        issuer: Issuer,
        handle: str,
        cookie_value: str | None,
        *,
        csrf: str,
        approve: bool,
        api_key: str | None = None,
        client_address: str = "unknown",
    ) -> Redirect | ConsentPage:
        """The client's redirect (a code, or ``access_denied``), or the page again with what went wrong."""
        pending = self._pending(issuer, handle, cookie_value, csrf)
        try:
            await self._clients.resolve(issuer.endpoint.workspace_id, str(pending.item["client_id"]))
        except InvalidInput as exc:
            raise AuthorizeError(400, "Unknown application", exc.message) from None
        if not approve:
            self._take(pending)
            return self._authorization_response(issuer, pending, None)
        try:
            signed_in, origin = self._who(issuer, pending, api_key, client_address)
            scopes = self._grantable(issuer, pending, signed_in, origin.key_scope)
        except MCPBridgeError as exc:
            return self._page(issuer, pending, error=exc.message)
        self._take(pending)
        grant = self._grants.approve(
            workspace_id=issuer.endpoint.workspace_id,
            user_id=signed_in.user_id,
            endpoint_id=issuer.endpoint.id,
            client_id=str(pending.item["client_id"]),
            client_name=str(pending.item.get("client_name") or ""),
            scopes=scopes,
            origin=origin,
        )
        return self._authorization_response(issuer, pending, Approval(grant))

    def _who(
        self, issuer: Issuer, pending: _Pending, api_key: str | None, client_address: str
    ) -> tuple[SignedIn, Origin]:
        item = pending.item
        if self.sign_in_with == "oidc":
            if not item.get("user_id"):
                raise Unauthenticated("sign in first", code="sign_in_required")
            identity = str(item.get("identity") or "") or None
            signed_in = SignedIn(str(item["user_id"]), str(item.get("user_label") or ""), "oidc", identity)
            return signed_in, Origin("oidc", identity=identity)
        if not api_key or not api_key.strip():
            raise Unauthenticated("enter your mcpbridge API key to sign in", code="sign_in_required")
        try:
            self._throttles.sign_in(client_address)
        except RateLimited as exc:
            wait = int(exc.details.get("retry_after_seconds", 60))
            raise AuthorizeError(429, "Too many attempts", exc.message, retry_after=wait) from None
        principal = self._key_holder(issuer, pending, api_key.strip())
        user = self._store.get(user_key(principal.workspace_id, principal.user_id))
        if user is None:
            raise Forbidden("that API key has no user who could approve this", code="user_unknown")
        label = str(user.get("email") or user.get("name") or principal.user_id)
        scope = principal.scope
        if not principal.is_admin:  # a viewer key changes nothing through the REST API: nor through a client
            every = scope.capabilities if scope.capabilities is not None else frozenset(CAPABILITIES)
            scope = Scope(capabilities=frozenset(every - WRITE_SCOPES), knowledge_base_ids=scope.knowledge_base_ids)
        return SignedIn(principal.user_id, label, "api_key"), Origin("api_key", principal.api_key_id, key_scope=scope)

    def _key_holder(self, issuer: Issuer, pending: _Pending, api_key: str) -> Principal:
        """Who the key belongs to, if it is valid in the endpoint's workspace; a wrong key counts against the
        pending request, which the last one allowed uses up (AuthorizeError 429)."""
        try:
            principal = self._accounts.authenticate(api_key)
            if principal.workspace_id == issuer.endpoint.workspace_id:
                return principal
        except (Unauthenticated, Forbidden):
            pass
        try:
            wrong = self._store.update(
                Key(str(pending.item["pk"]), str(pending.item["sk"])),
                Update(add={"wrong_keys": 1}),
                condition=Condition.exists("request_pending"),
            )
        except ConditionFailed:
            raise _expired() from None
        if int(wrong.get("wrong_keys") or 0) >= MAX_WRONG_KEYS:
            self._take(pending)
            log.warning("a consent request on endpoint %s was used up by wrong API keys", issuer.endpoint.id)
            raise AuthorizeError(429, "Too many wrong keys", "Start again from the application.", retry_after=1)
        raise Unauthenticated("that API key is not valid here", code="invalid_api_key")

    def _grantable(self, issuer: Issuer, pending: _Pending, signed_in: SignedIn, key_scope: Scope) -> tuple[str, ...]:
        user = self._store.get(user_key(issuer.endpoint.workspace_id, signed_in.user_id))
        if user is None or status_of(user) != "active":
            raise Forbidden("your account is disabled or was deleted", code="user_inactive")
        bounds = (access_of(user), key_scope)
        scopes = tuple(s for s in pending.item.get("scopes") or () if all(b.allows(s) for b in bounds))
        if not scopes:
            raise Forbidden("your account may not use any of what this application asks for", code="scope_exceeded")
        return scopes

    def _authorization_response(self, issuer: Issuer, pending: _Pending, approval: Approval | None) -> Redirect:
        server = self._servers(issuer)
        request = OAuthHttpRequest(method="GET", url=f"{issuer.issuer}/authorize", query=pending.query)
        oauth_request = server.create_oauth2_request(request)
        try:
            grant = server.get_consent_grant(request=oauth_request, end_user=approval)
        except (
            OAuth2Error,
            ValueError,
        ):  # the client changed since (its registration or redirect URIs): nowhere safe to go
            raise AuthorizeError(
                400, "Invalid authorization request", "The application's registration changed; start again."
            ) from None
        reply = server.create_authorization_response(request=oauth_request, grant_user=approval, grant=grant)
        if reply.location is None:  # the client changed since (its redirect URI went): nowhere safe to go
            raise AuthorizeError(400, "Invalid authorization request", "The application's registration changed.")
        if approval is not None:
            log.info(
                "user %s approved a client on endpoint %s (grant %s)",
                approval.grant.user_id,
                issuer.endpoint.id,
                approval.grant.id,
            )
        return Redirect(reply.location)

    # ------------------------------------------------------------------------------------------ the pending request

    def _pending(self, issuer: Issuer, handle: str, cookie_value: str | None, csrf: str | None) -> _Pending:
        """The pending request this browser holds; AuthorizeError when it has none, or the CSRF check fails."""
        request_id, _, cookie_csrf = (cookie_value or "").partition(".")
        if not request_id or not cookie_csrf or not hmac.compare_digest(digest(request_id)[:16], handle[:16]):
            raise _expired()
        if csrf is not None and not hmac.compare_digest(csrf.encode(), cookie_csrf.encode()):
            raise AuthorizeError(403, "Request refused", "This form was not sent by the page mcpbridge showed you.")
        key = request_key(issuer.endpoint.workspace_id, request_id)
        item = self._store.get(key)
        if item is None or item.get("endpoint_id") != issuer.endpoint.id:
            raise _expired()
        if not hmac.compare_digest(str(item.get("csrf_sha256")).encode(), digest(cookie_csrf).encode()):
            raise AuthorizeError(403, "Request refused", "This form was not sent by the page mcpbridge showed you.")
        opened = open_secret_or_none(
            self._secrets, item.get("sealed_query"), SecretContext(issuer.endpoint.workspace_id, SEALED_KIND, key.sk)
        )
        if opened is None:
            raise _expired()
        query = [(str(name), str(value)) for name, value in json.loads(opened)]
        return _Pending(handle, request_id, cookie_csrf, item, query)

    def _take(self, pending: _Pending) -> None:
        """Use the pending request up (one decision per request, even from two tabs at once)."""
        gone = self._store.delete(
            request_key_of(str(pending.item["pk"]).removeprefix("WS#"), str(pending.item["sk"])),
            condition=Condition.exists("request_pending"),
        )
        if gone is None:
            raise _expired()

    def _page(self, issuer: Issuer, pending: _Pending, *, error: str | None = None) -> ConsentPage:
        item = pending.item
        signed_in = None
        if item.get("user_id"):
            signed_in = SignedIn(str(item["user_id"]), str(item.get("user_label") or ""), "oidc")
        return ConsentPage(
            handle=pending.handle,
            csrf=pending.csrf,
            cookie_value=f"{pending.request_id}.{pending.csrf}",
            endpoint_name=issuer.endpoint.name,
            client_name=str(item.get("client_name") or item["client_id"]),
            client_id=str(item["client_id"]),
            client_kind=str(item.get("client_kind") or ""),
            client_uri=item.get("client_uri"),
            redirect_uri=str(item["redirect_uri"]),
            scopes=tuple(item.get("scopes") or ()),
            signed_in=signed_in,
            sign_in_with=self.sign_in_with,
            provider_name=self.provider_name,
            error=error,
        )


def request_key_of(workspace_id: str, sort_key: str) -> Key:
    return Key(f"WS#{workspace_id}", sort_key)


def cookie_name(handle: str) -> str:
    return COOKIE_PREFIX + handle[:16]


def _expired() -> AuthorizeError:
    return AuthorizeError(
        400, "This sign-in has expired", "Start again from the application (a sign-in is valid for 10 minutes)."
    )


def _description(error: OAuth2Error) -> str:
    return str(error.description or error.error or "the request is not valid")
