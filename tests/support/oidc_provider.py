"""An OpenID Connect provider for tests, served over HTTPS by :func:`tests.support.tls.https_server`: discovery
(``/.well-known/openid-configuration``), the authorization endpoint (code flow; PKCE S256 and a nonce required; RFC
9207 ``iss`` on the way back), the token endpoint (``client_secret_basic``, codes single use, PKCE verified) and a JWKS.
ID tokens are RS256 JWTs signed with joserfc.

Whoever the provider signs in is :attr:`OpenIdProvider.person` (None: the person declines, ``access_denied``); no
page is shown, as with a provider where the person already has a session. :attr:`signing_key` can be swapped for a
key the JWKS does not publish, to forge a token.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from joserfc import jwt
from joserfc.jwk import KeySet, RSAKey
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

CLIENT_ID = "mcpbridge-test"
CLIENT_SECRET = "provider-secret-" + "s" * 24


@dataclass(frozen=True)
class Person:
    subject: str
    email: str | None
    name: str
    email_verified: bool = True


def new_key(kid: str) -> RSAKey:
    return RSAKey.generate_key(2048, parameters={"kid": kid, "use": "sig", "alg": "RS256"})


@dataclass
class OpenIdProvider:
    issuer: str = ""
    """Set once served (its https origin)."""
    redirect_uris: list[str] = field(default_factory=list)
    person: Person | None = None
    published: RSAKey = field(default_factory=lambda: new_key("k1"))
    signing_key: RSAKey | None = None
    """The key ID tokens are signed with (None: the published one)."""
    codes: dict[str, dict[str, Any]] = field(default_factory=dict)
    authorizations: list[dict[str, str]] = field(default_factory=list)
    """The query of every authorization request, in order."""
    exchanges: list[dict[str, str]] = field(default_factory=list)
    """The form of every token request, in order (the client's secret went in the header)."""
    issued: list[dict[str, Any]] = field(default_factory=list)
    """Every token response's body, in order."""

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/.well-known/openid-configuration", self._configuration),
                Route("/authorize", self._authorize),
                Route("/token", self._token, methods=["POST"]),
                Route("/jwks", self._jwks),
            ]
        )

    async def _configuration(self, request: Request) -> JSONResponse:
        return JSONResponse(
            {
                "issuer": self.issuer,
                "authorization_endpoint": f"{self.issuer}/authorize",
                "token_endpoint": f"{self.issuer}/token",
                "jwks_uri": f"{self.issuer}/jwks",
                "response_types_supported": ["code"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256"],
                "token_endpoint_auth_methods_supported": ["client_secret_basic"],
                "code_challenge_methods_supported": ["S256"],
                "scopes_supported": ["openid", "email", "profile"],
                "authorization_response_iss_parameter_supported": True,
            }
        )

    async def _authorize(self, request: Request) -> Response:
        query = dict(request.query_params)
        self.authorizations.append(query)
        redirect_uri = query.get("redirect_uri", "")
        if query.get("client_id") != CLIENT_ID or redirect_uri not in self.redirect_uris:
            return JSONResponse({"error": "invalid_request"}, status_code=400)
        answer: dict[str, str] = {"state": query.get("state", ""), "iss": self.issuer}
        acceptable = (
            query.get("response_type") == "code"
            and "openid" in query.get("scope", "").split()
            and query.get("code_challenge_method") == "S256"
            and bool(query.get("code_challenge"))
            and bool(query.get("nonce"))
        )
        if not acceptable:
            answer["error"] = "invalid_request"
        elif self.person is None:
            answer["error"] = "access_denied"
        else:
            code = secrets.token_urlsafe(24)
            self.codes[code] = {**query, "person": self.person}
            answer["code"] = code
        return RedirectResponse(f"{redirect_uri}?{urlencode(answer)}", status_code=302)

    async def _token(self, request: Request) -> JSONResponse:
        form = {k: str(v) for k, v in (await request.form()).items()}
        self.exchanges.append(form)
        expected = base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()
        if request.headers.get("authorization") != f"Basic {expected}":
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        issued = self.codes.pop(form.get("code", ""), None)
        verifier = form.get("code_verifier", "")
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
        if (
            issued is None
            or form.get("grant_type") != "authorization_code"
            or form.get("redirect_uri") != issued["redirect_uri"]
            or challenge != issued["code_challenge"]
        ):
            return JSONResponse({"error": "invalid_grant"}, status_code=400)
        person: Person = issued["person"]
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "sub": person.subject,
            "aud": CLIENT_ID,
            "iat": now,
            "exp": now + 300,
            "nonce": issued["nonce"],
            "name": person.name,
        }
        if person.email is not None:
            claims.update(email=person.email, email_verified=person.email_verified)
        key = self.signing_key or self.published
        id_token = jwt.encode({"alg": "RS256", "kid": key.kid}, claims, key)
        body = {
            "access_token": secrets.token_urlsafe(24),
            "token_type": "Bearer",
            "expires_in": 300,
            "id_token": id_token,
        }
        self.issued.append(body)
        return JSONResponse(body)

    async def _jwks(self, request: Request) -> JSONResponse:
        return JSONResponse(KeySet([self.published]).as_dict(private=False))
