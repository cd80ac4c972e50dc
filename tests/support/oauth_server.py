"""A real OAuth 2.1 authorization server and an MCP server it protects, in this process on 127.0.0.1.

Built from the MCP SDK's authorization-server handlers (``mcp.server.auth.handlers``: ``/authorize`` with PKCE S256
required, ``/token`` for the code, refresh and JWT-bearer grants, ``/register`` (RFC 7591), ``/revoke`` (RFC 7009))
over an in-memory provider, plus:

* RFC 8414 metadata at ``/.well-known/oauth-authorization-server`` announcing the RFC 9207 ``iss`` parameter (sent on
  every authorization response), and on demand ``client_id_metadata_document_supported`` and the JWT-bearer grant;
* RFC 9728 protected-resource metadata at ``/.well-known/oauth-protected-resource/mcp``;
* an MCP server at ``/mcp`` (low-level ``Server``, stateless Streamable HTTP) that accepts only unexpired bearer tokens
  this server issued for its resource and otherwise answers 401 with
  ``WWW-Authenticate: Bearer error="invalid_token", resource_metadata="..."``. Its tool ``whoami`` answers the
  token's subject, and its resource ``whoami://subject`` reads as that subject.

Options: ``published_metadata=False`` (with ``challenge_hint=False``) is an MCP 2025-03-26 server with no metadata at
all (every well-known path answers 404: clients use the default ``/authorize``, ``/token``, ``/register``);
``well_known_answers`` replaces the answer at chosen well-known paths (status, content type, body);
``unauthenticated_status`` is what ``/mcp`` answers a request without a usable token (401 with its challenge, else a
bare status); ``step_up_scope``: ``tools/call`` needs that scope too, and a token without it gets 403
``WWW-Authenticate: Bearer error="insufficient_scope", scope="<both>"`` (SEP-835); ``granted_scopes``: what every
authorization grants, whatever was asked.

The server approves every authorization at once, as ``approving_user``. Refresh tokens rotate: a used one is dead.
``token_requests`` counts the requests reaching ``/token`` by grant type; ``fail_token_requests`` injects failures.
"""

from __future__ import annotations

import contextlib
import contextvars
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread
import jwt
from mcp import types
from mcp.server.auth.handlers.authorize import AuthorizationHandler
from mcp.server.auth.handlers.register import RegistrationHandler
from mcp.server.auth.handlers.token import TokenHandler
from mcp.server.auth.middleware.client_auth import AuthenticationError, ClientAuthenticator
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    IdentityAssertionParams,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.settings import ClientRegistrationOptions
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.auth import JWT_BEARER_GRANT_TYPE, OAuthClientInformationFull, OAuthToken
from pydantic import AnyUrl
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from tests.support.live_server import live_server

SCOPE = "mcp"
SUBJECT_URI = "whoami://subject"
ASSERTION_TYPE = "oauth-id-jag+jwt"
_subject: contextvars.ContextVar[str | None] = contextvars.ContextVar("oauth_test_subject", default=None)


@dataclass
class InjectedFailure:
    status: int
    body: dict[str, Any] | None
    grant_type: str
    remaining: int


@dataclass
class Issued:
    access: dict[str, AccessToken] = field(default_factory=dict)
    refresh: dict[str, RefreshToken] = field(default_factory=dict)
    pairs: dict[str, str] = field(default_factory=dict)
    """access token -> refresh token issued with it."""


class Provider:
    """The in-memory ``OAuthAuthorizationServerProvider`` behind the SDK handlers."""

    def __init__(self, server: OAuthTestServer) -> None:
        self.server = server
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.tokens = Issued()

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        if client_id in self.clients:
            return self.clients[client_id]
        fetch = self.server.fetch_client_metadata
        if self.server.client_id_metadata_documents and fetch is not None and client_id.startswith("http"):
            document = await anyio.to_thread.run_sync(fetch, client_id)
            if document.get("client_id") != client_id:
                return None
            self.server.metadata_document_fetches += 1
            return OAuthClientInformationFull.model_validate(
                {**document, "token_endpoint_auth_method": "none", "scope": SCOPE}
            )
        return None

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        if self.server.step_up_scope:
            # Every client may ask for every scope this server supports (what a step-up asks for).
            client_info = client_info.model_copy(update={"scope": f"{SCOPE} {self.server.step_up_scope}"})
        self.clients[client_info.client_id] = client_info
        self.server.registrations += 1

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        code = secrets.token_urlsafe(32)
        self.server.issued.add(code)
        granted = self.server.granted_scopes
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=list(granted) if granted is not None else params.scopes or [SCOPE],
            expires_at=time.time() + 300,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
            subject=self.server.approving_user,
        )
        self.server.authorizations.append(
            {"client_id": client.client_id, "resource": params.resource, "scopes": params.scopes}
        )
        return construct_redirect_uri(
            str(params.redirect_uri), code=code, state=params.state, iss=self.server.response_issuer
        )

    async def load_authorization_code(self, client: OAuthClientInformationFull, code: str) -> AuthorizationCode | None:
        return self.codes.get(code)

    def _issue(
        self, client_id: str, scopes: list[str], resource: str | None, subject: str | None, *, refresh: bool
    ) -> OAuthToken:
        access = secrets.token_urlsafe(32)
        self.server.issued.add(access)
        ttl = self.server.access_ttl
        self.tokens.access[access] = AccessToken(
            token=access,
            client_id=client_id,
            scopes=scopes,
            expires_at=int(time.time()) + ttl,
            resource=resource,
            subject=subject,
        )
        refresh_token = None
        if refresh:
            refresh_token = secrets.token_urlsafe(32)
            self.server.issued.add(refresh_token)
            self.tokens.refresh[refresh_token] = RefreshToken(
                token=refresh_token, client_id=client_id, scopes=scopes, resource=resource, subject=subject
            )
            self.tokens.pairs[access] = refresh_token
        return OAuthToken(access_token=access, expires_in=ttl, scope=" ".join(scopes), refresh_token=refresh_token)

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        return self._issue(
            client.client_id,
            authorization_code.scopes,
            authorization_code.resource,
            authorization_code.subject,
            refresh=True,
        )

    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str) -> RefreshToken | None:
        return self.tokens.refresh.get(refresh_token)

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        # Rotation: the presented refresh token is spent.
        self.tokens.refresh.pop(refresh_token.token, None)
        return self._issue(client.client_id, scopes, refresh_token.resource, refresh_token.subject, refresh=True)

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.tokens.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            return None
        return found

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.server.revocations += 1
        if isinstance(token, AccessToken):
            self.tokens.access.pop(token.token, None)
            paired = self.tokens.pairs.pop(token.token, None)
            if paired is not None:
                self.tokens.refresh.pop(paired, None)
        else:
            self.tokens.refresh.pop(token.token, None)
            for access, paired in list(self.tokens.pairs.items()):
                if paired == token.token:
                    self.tokens.access.pop(access, None)
                    self.tokens.pairs.pop(access, None)

    async def exchange_identity_assertion(
        self, client: OAuthClientInformationFull, params: IdentityAssertionParams
    ) -> OAuthToken:
        try:
            header = jwt.get_unverified_header(params.assertion)
            claims = jwt.decode(
                params.assertion, self.server.idp_key, algorithms=["HS256"], audience=self.server.issuer
            )
        except jwt.PyJWTError:
            raise TokenError(error="invalid_grant", error_description="the assertion is not valid") from None
        if header.get("typ") != ASSERTION_TYPE or claims.get("client_id") != client.client_id or not claims.get("sub"):
            raise TokenError(error="invalid_grant", error_description="the assertion is not for this client")
        return self._issue(
            client.client_id, [SCOPE], params.resource or self.server.mcp_url, claims["sub"], refresh=False
        )


def _replay(body: bytes) -> Receive:
    """A ``receive`` that hands the app a request body already read."""
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


class _Asgi:
    """A raw ASGI callable as a Starlette route endpoint (a plain function would be taken for a request handler)."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Any]) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app(scope, receive, send)


class OAuthTestServer:
    """The authorization server and the MCP server it protects, at ``base_url`` (see the module docstring)."""

    def __init__(
        self,
        *,
        access_ttl: int = 3600,
        client_id_metadata_documents: bool = False,
        jwt_bearer: bool = False,
        challenge_hint: bool = True,
        send_iss: bool = True,
        published_metadata: bool = True,
        well_known_answers: dict[str, tuple[int, str, bytes]] | None = None,
        unauthenticated_status: int = 401,
        step_up_scope: str | None = None,
        granted_scopes: list[str] | None = None,
    ) -> None:
        self.published_metadata = published_metadata
        self.well_known_answers = dict(well_known_answers or {})
        self.well_known_requests: list[str] = []
        self.unauthenticated_status = unauthenticated_status
        self.step_up_scope = step_up_scope
        self.granted_scopes = granted_scopes
        self.access_ttl = access_ttl
        self.client_id_metadata_documents = client_id_metadata_documents
        self.jwt_bearer = jwt_bearer
        self.challenge_hint = challenge_hint
        self.send_iss = send_iss
        self.approving_user = "alice"
        self.idp_key = secrets.token_bytes(32)
        self.fetch_client_metadata: Callable[[str], dict[str, Any]] | None = None
        self.base_url = ""
        self.iss_override: str | None = None
        self.registrations = 0
        self.revocations = 0
        self.metadata_document_fetches = 0
        self.authorizations: list[dict[str, Any]] = []
        self.issued: set[str] = set()
        """Every code, access token and refresh token this server ever issued."""
        self.token_requests: Counter[str] = Counter()
        self.mcp_requests: Counter[str] = Counter()
        self.failures: list[InjectedFailure] = []
        self._lock = threading.Lock()
        self.provider = Provider(self)
        self._stack = contextlib.ExitStack()

    # -- addresses -------------------------------------------------------------------------------------------------

    @property
    def issuer(self) -> str:
        return self.base_url

    @property
    def response_issuer(self) -> str | None:
        if not self.send_iss:
            return None
        return self.iss_override or self.issuer

    @property
    def mcp_url(self) -> str:
        return f"{self.base_url}/mcp"

    @property
    def metadata_url(self) -> str:
        return f"{self.base_url}/.well-known/oauth-authorization-server"

    @property
    def resource_metadata_url(self) -> str:
        return f"{self.base_url}/.well-known/oauth-protected-resource/mcp"

    # -- set-up ----------------------------------------------------------------------------------------------------

    def preregister(
        self,
        client_id: str,
        secret: str,
        *,
        method: str = "client_secret_basic",
        redirect_uris: list[str],
        grant_types: list[str] | None = None,
    ) -> None:
        self.provider.clients[client_id] = OAuthClientInformationFull(
            client_id=client_id,
            client_secret=secret,
            token_endpoint_auth_method=method,
            redirect_uris=[AnyUrl(uri) for uri in redirect_uris],
            grant_types=grant_types or ["authorization_code", "refresh_token"],
            scope=SCOPE,
        )

    def fail_token_requests(
        self, status: int, body: dict[str, Any] | None, *, grant_type: str = "refresh_token", times: int = 1
    ) -> None:
        """Answer the next ``times`` token requests of ``grant_type`` with ``status`` and ``body``."""
        with self._lock:
            self.failures.append(InjectedFailure(status, body, grant_type, times))

    def assertion(self, subject: str, client_id: str, *, typ: str = ASSERTION_TYPE, key: bytes | None = None) -> str:
        """A JWT this server accepts in the JWT-bearer grant (signed by the test identity provider's key)."""
        now = int(time.time())
        claims = {
            "iss": "https://idp.test",
            "sub": subject,
            "aud": self.issuer,
            "client_id": client_id,
            "iat": now,
            "exp": now + 300,
            "jti": secrets.token_hex(8),
        }
        return jwt.encode(claims, key or self.idp_key, algorithm="HS256", headers={"typ": typ})

    def expire_access_tokens(self) -> None:
        """Make every issued access token refused by the MCP server (as if it had expired there)."""
        self.provider.tokens.access.clear()

    def live_access_tokens(self) -> set[str]:
        return set(self.provider.tokens.access)

    # -- the app ---------------------------------------------------------------------------------------------------

    def _metadata(self) -> dict[str, Any]:
        issuer = self.issuer
        grants = ["authorization_code", "refresh_token"]
        if self.jwt_bearer:
            grants.append(JWT_BEARER_GRANT_TYPE)
        return {
            "issuer": issuer,
            "authorization_endpoint": f"{issuer}/authorize",
            "token_endpoint": f"{issuer}/token",
            "registration_endpoint": f"{issuer}/register",
            "revocation_endpoint": f"{issuer}/revoke",
            "scopes_supported": [SCOPE],
            "response_types_supported": ["code"],
            "grant_types_supported": grants,
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post", "none"],
            "revocation_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post", "none"],
            "code_challenge_methods_supported": ["S256"],
            "authorization_response_iss_parameter_supported": self.send_iss,
            "client_id_metadata_document_supported": self.client_id_metadata_documents,
        }

    def _resource_metadata(self) -> dict[str, Any]:
        return {
            "resource": self.mcp_url,
            "authorization_servers": [self.issuer],
            "scopes_supported": [SCOPE],
            "bearer_methods_supported": ["header"],
        }

    def _app(self) -> Starlette:
        authenticator = ClientAuthenticator(self.provider)
        token_handler = TokenHandler(self.provider, authenticator, identity_assertion_enabled=self.jwt_bearer)
        authorize_handler = AuthorizationHandler(self.provider)
        valid_scopes = [SCOPE, self.step_up_scope] if self.step_up_scope else [SCOPE]
        registration_handler = RegistrationHandler(
            self.provider, ClientRegistrationOptions(enabled=True, valid_scopes=valid_scopes, default_scopes=[SCOPE])
        )

        async def well_known(request: Request) -> Response:
            path = request.url.path
            self.well_known_requests.append(path)
            if path in self.well_known_answers:
                status, media_type, body = self.well_known_answers[path]
                return Response(body, status_code=status, media_type=media_type)
            if self.published_metadata and path == "/.well-known/oauth-authorization-server":
                return JSONResponse(self._metadata())
            if self.published_metadata and path == "/.well-known/oauth-protected-resource/mcp":
                return JSONResponse(self._resource_metadata())
            return JSONResponse({"error": "not_found"}, status_code=404)

        async def token(request: Request) -> Response:
            form = await request.form()
            grant_type = str(form.get("grant_type", ""))
            with self._lock:
                self.token_requests[grant_type] += 1
                failure = next((f for f in self.failures if f.grant_type == grant_type and f.remaining > 0), None)
                if failure is not None:
                    failure.remaining -= 1
            if failure is not None:
                if failure.body is None:
                    return Response("unavailable", status_code=failure.status)
                return JSONResponse(failure.body, status_code=failure.status)
            return await token_handler.handle(request)

        async def revoke(request: Request) -> Response:
            # RFC 7009 (the SDK's handler insists on a client_secret form field even with Basic authentication).
            try:
                client = await authenticator.authenticate_request(request)
            except AuthenticationError:
                return JSONResponse({"error": "invalid_client"}, status_code=401)
            value = str((await request.form()).get("token", ""))
            found: AccessToken | RefreshToken | None = self.provider.tokens.access.get(value)
            found = found or self.provider.tokens.refresh.get(value)
            if found is not None and found.client_id == client.client_id:
                await self.provider.revoke_token(found)
            return Response(status_code=200)

        server = self._mcp_server()

        async def mcp(scope: Scope, receive: Receive, send: Send) -> None:
            request = Request(scope, receive)
            scheme, _, value = request.headers.get("authorization", "").partition(" ")
            found = await self.provider.load_access_token(value.strip()) if scheme.lower() == "bearer" else None
            if found is None or (found.resource not in (None, self.mcp_url)):
                self.mcp_requests["refused"] += 1
                if self.unauthenticated_status != 401:
                    await JSONResponse({}, status_code=self.unauthenticated_status)(scope, receive, send)
                    return
                challenge = 'Bearer error="invalid_token"'
                if self.challenge_hint:
                    challenge += f', resource_metadata="{self.resource_metadata_url}", scope="{SCOPE}"'
                response = JSONResponse(
                    {"error": "invalid_token"}, status_code=401, headers={"WWW-Authenticate": challenge}
                )
                await response(scope, receive, send)
                return
            if self.step_up_scope and self.step_up_scope not in found.scopes:
                body = await request.body()
                if b'"tools/call"' in body:
                    self.mcp_requests["insufficient_scope"] += 1
                    challenge = f'Bearer error="insufficient_scope", scope="{SCOPE} {self.step_up_scope}"'
                    if self.challenge_hint:
                        challenge += f', resource_metadata="{self.resource_metadata_url}"'
                    refusal = JSONResponse(
                        {"error": "insufficient_scope"}, status_code=403, headers={"WWW-Authenticate": challenge}
                    )
                    await refusal(scope, receive, send)
                    return
                receive = _replay(body)
            self.mcp_requests["accepted"] += 1
            marker = _subject.set(found.subject)
            try:
                manager = StreamableHTTPSessionManager(
                    app=server,
                    json_response=True,
                    stateless=True,
                    security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
                )
                async with manager.run():
                    await manager.handle_request(scope, receive, send)
            finally:
                _subject.reset(marker)

        return Starlette(
            routes=[
                Route("/.well-known/{rest:path}", well_known, methods=["GET"]),
                Route("/authorize", authorize_handler.handle, methods=["GET", "POST"]),
                Route("/token", token, methods=["POST"]),
                Route("/register", registration_handler.handle, methods=["POST"]),
                Route("/revoke", revoke, methods=["POST"]),
                Route("/mcp", _Asgi(mcp)),
            ]
        )

    @staticmethod
    def _mcp_server() -> Server[Any]:
        async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            schema = {"type": "object", "properties": {}}
            return types.ListToolsResult(
                tools=[types.Tool(name="whoami", description="The subject of the bearer token", input_schema=schema)]
            )

        async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            return types.CallToolResult(content=[types.TextContent(type="text", text=f"hello {_subject.get()}")])

        async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
            return types.ListResourcesResult(
                resources=[types.Resource(uri=SUBJECT_URI, name="subject", mime_type="text/plain")]
            )

        async def read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
            contents = types.TextResourceContents(uri=SUBJECT_URI, mime_type="text/plain", text=f"{_subject.get()}")
            return types.ReadResourceResult(contents=[contents])

        return Server(
            "protected",
            version="1.0",
            on_list_tools=list_tools,
            on_call_tool=call_tool,
            on_list_resources=list_resources,
            on_read_resource=read_resource,
        )

    # -- lifetime --------------------------------------------------------------------------------------------------

    def __enter__(self) -> OAuthTestServer:
        self.base_url = self._stack.enter_context(live_server(self._app()))
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._stack.close()


@contextlib.contextmanager
def oauth_server(**options: Any) -> Iterator[OAuthTestServer]:
    with OAuthTestServer(**options) as server:
        yield server
