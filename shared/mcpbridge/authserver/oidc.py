"""Sign-in with the operator's OpenID Connect provider (any issuer: Cognito, Entra ID, Okta, Google, Keycloak...).

mcpbridge is then a relying party: authorization code flow with PKCE S256, a ``state`` (single use, 10 min, stored as
a digest, the verifier sealed) and a ``nonce``; the provider's RFC 9207 ``iss`` is checked when it announces it. The
ID token is verified with the provider's keys (JWKS; signature, ``iss``, ``aud``/``azp``, ``exp``, ``nonce``) using
joserfc, the JOSE library Authlib itself rests on. Discovery documents and keys are cached in memory for an hour.

Two flows use it, each with its own callback and a ``purpose`` written in the state: an endpoint's consent page
(``endpoint``, back at ``/oauth/oidc/callback``) and the console's sign-in (``console``, back at
``/console/oidc/callback``, the state also bound to the browser that started it by the digest of a cookie). A state
is taken only by the flow it was made for: one of the other flow is refused and left as it was.

Every request to the provider goes through the SSRF guard (https unless the host is allowlisted, no redirects,
bounded answers, 10 s each).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import secrets
import ssl
import time
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote, urlencode, urlsplit

from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet

from mcpbridge.authserver.records import OIDC_STATE_TTL_SECONDS, digest, oidc_state_key
from mcpbridge.domain.items import AttrAbsent, Compare, Condition, ItemExists, all_of, any_of
from mcpbridge.domain.secrets import SecretContext
from mcpbridge.errors import ConditionFailed, MCPBridgeError, Unauthenticated, UpstreamError
from mcpbridge.outbound import json_http
from mcpbridge.outbound.policy import EgressPolicy
from mcpbridge.ports import Clock, SecretBox, Store
from mcpbridge.sealing import open_secret_or_none

log = logging.getLogger("mcpbridge.authserver")

CALLBACK_PATH = "/oauth/oidc/callback"
CONSOLE_CALLBACK_PATH = "/console/oidc/callback"
Purpose = Literal["endpoint", "console"]
_CALLBACKS: dict[str, str] = {"endpoint": CALLBACK_PATH, "console": CONSOLE_CALLBACK_PATH}
TIMEOUT_SECONDS = 10.0
CACHE_SECONDS = 3600
SEALED_KIND = "oidc_state"
_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")


@dataclass(frozen=True)
class OidcSettings:
    issuer: str
    client_id: str
    client_secret: str = field(repr=False)
    scopes: str = "openid email profile"
    provider_name: str = ""
    match: Literal["email", "subject"] = "email"
    provision: bool = False
    allowed_domains: tuple[str, ...] = ()


@dataclass(frozen=True)
class Identity:
    """Who the provider says signed in. ``email`` only when the provider says it is verified."""

    issuer: str
    subject: str
    email: str | None
    name: str


@dataclass(frozen=True)
class Returned:
    """An external sign-in that came back: the pending request it belongs to, and who signed in."""

    workspace_id: str
    endpoint_id: str
    request_sk: str
    handle: str
    identity: Identity
    browser_sha256: str = ""
    """The console's flow: the digest of the cookie of the browser that started it."""
    next_path: str = ""
    """The console's flow: the console page to go on to."""


class OidcSignIn:
    def __init__(
        self,
        settings: OidcSettings,
        *,
        store: Store,
        clock: Clock,
        secrets_box: SecretBox,
        egress: EgressPolicy,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.settings = settings
        self._store = store
        self._clock = clock
        self._secrets = secrets_box
        self._egress = egress
        self._ssl_context = ssl_context
        self._cache: dict[str, tuple[float, dict[str, Any]]] = {}

    @property
    def provider_name(self) -> str:
        return self.settings.provider_name or "your organisation's sign-in"

    async def authorization_origin(self) -> str | None:
        """The origin of the provider's authorization endpoint (the consent page's forms may lead there), or None
        while the provider cannot be reached."""
        try:
            discovery = await self._discovery()
        except MCPBridgeError:
            return None
        parts = urlsplit(str(discovery["authorization_endpoint"]))
        return f"{parts.scheme}://{parts.netloc}"

    async def start(self, *, workspace_id: str, endpoint_id: str, request_sk: str, handle: str, base_url: str) -> str:
        """The provider's authorization URL for this pending request (its state stored, single use)."""
        fields = {"endpoint_id": endpoint_id, "request_sk": request_sk, "handle": handle}
        return await self._begin("endpoint", workspace_id, base_url, fields)

    async def start_console(self, *, workspace_id: str, browser_sha256: str, next_path: str, base_url: str) -> str:
        """The provider's authorization URL for a sign-in to the console in ``workspace_id``, the state bound to the
        browser whose cookie has the digest ``browser_sha256``."""
        fields = {"browser_sha256": browser_sha256, "next_path": next_path}
        return await self._begin("console", workspace_id, base_url, fields)

    async def _begin(self, purpose: Purpose, workspace_id: str, base_url: str, fields: dict[str, str]) -> str:
        discovery = await self._discovery()
        state, nonce, verifier = secrets.token_urlsafe(32), secrets.token_urlsafe(32), secrets.token_urlsafe(48)
        key = oidc_state_key(state)
        self._store.put(
            {
                **key.as_dict(),
                **fields,
                "purpose": purpose,
                "workspace_id": workspace_id,
                "nonce_sha256": digest(nonce),
                "sealed_verifier": self._secrets.seal(verifier, SecretContext(workspace_id, SEALED_KIND, key.pk)),
                "expires_at": int(self._clock.now()) + OIDC_STATE_TTL_SECONDS,
            },
            condition=Condition.absent("oidc_state_new"),
        )
        query = {
            "response_type": "code",
            "client_id": self.settings.client_id,
            "redirect_uri": callback_url(base_url, purpose),
            "scope": self.settings.scopes,
            "state": state,
            "nonce": nonce,
            "code_challenge": _s256(verifier),
            "code_challenge_method": "S256",
        }
        return f"{discovery['authorization_endpoint']}?{urlencode(query)}"

    async def finish(
        self,
        *,
        state: str,
        code: str | None,
        error: str | None,
        iss: str | None,
        base_url: str,
        purpose: Purpose = "endpoint",
    ) -> Returned:
        """Take the state (single use, and only one made for ``purpose``), exchange the code, verify the ID token.
        Raises Unauthenticated with a message fit for the person (never a code, state or token)."""
        key = oidc_state_key(state)
        # A state of the other flow is left where it is: refused here, not used up.
        same_purpose = Compare("purpose", "=", purpose)
        if purpose == "endpoint":  # states stored before purposes were written are the endpoints'
            condition = Condition(
                "oidc_state_pending", all_of(ItemExists(), any_of(AttrAbsent("purpose"), same_purpose))
            )
        else:
            condition = Condition.equals("oidc_state_pending", "purpose", purpose)
        try:
            taken = self._store.delete(key, condition=condition)
        except ConditionFailed:  # used already, expired, never issued, or of the other flow
            taken = None
        if taken is not None and int(taken.get("expires_at") or 0) <= self._clock.now():
            taken = None
        if taken is None:
            raise Unauthenticated("this sign-in is unknown, used or expired: start again", code="oidc_state_invalid")
        if error:
            raise Unauthenticated("the identity provider did not sign you in", code="oidc_denied")
        discovery = await self._discovery()
        if discovery.get("authorization_response_iss_parameter_supported") and iss != discovery["issuer"]:
            raise Unauthenticated("the sign-in came back from another issuer", code="oidc_issuer_mismatch")
        verifier = open_secret_or_none(
            self._secrets, taken.get("sealed_verifier"), SecretContext(taken["workspace_id"], SEALED_KIND, key.pk)
        )
        if not code or verifier is None:
            raise Unauthenticated("the identity provider returned no code", code="oidc_code_missing")
        id_token = await self._exchange(discovery, code, verifier, callback_url(base_url, purpose))
        claims = await self._verified(discovery, id_token, str(taken["nonce_sha256"]))
        email = claims.get("email") if claims.get("email_verified") is True else None
        identity = Identity(
            issuer=str(discovery["issuer"]),
            subject=str(claims["sub"]),
            email=str(email).strip().lower() if isinstance(email, str) and "@" in email else None,
            name=str(claims.get("name") or claims.get("preferred_username") or email or "")[:255],
        )
        return Returned(
            workspace_id=str(taken["workspace_id"]),
            endpoint_id=str(taken.get("endpoint_id") or ""),
            request_sk=str(taken.get("request_sk") or ""),
            handle=str(taken.get("handle") or ""),
            identity=identity,
            browser_sha256=str(taken.get("browser_sha256") or ""),
            next_path=str(taken.get("next_path") or ""),
        )

    # ------------------------------------------------------------------------------------------ the provider

    async def _discovery(self) -> dict[str, Any]:
        issuer = self.settings.issuer.rstrip("/")
        document = await self._cached_json(f"{issuer}/.well-known/openid-configuration", "OpenID configuration")
        if str(document.get("issuer", "")).rstrip("/") != issuer:
            raise UpstreamError("the identity provider's configuration names another issuer", code="oidc_misconfigured")
        for name in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
            if not isinstance(document.get(name), str):
                raise UpstreamError(f"the identity provider's configuration has no {name}", code="oidc_misconfigured")
            json_http.require_https(self._egress, document[name], "identity provider")
        return document

    async def _cached_json(self, url: str, what: str, *, fresh: bool = False) -> dict[str, Any]:
        now = time.monotonic()
        cached = self._cache.get(url)
        if cached is not None and cached[0] > now and not fresh:
            return cached[1]
        answer = await json_http.get_json(
            self._egress, url, what=what, timeout=TIMEOUT_SECONDS, ssl_context=self._ssl_context
        )
        document = answer.json_object()
        if answer.status != 200 or document is None:
            raise UpstreamError(f"the identity provider's {what} answered {answer.status}", code="oidc_unavailable")
        self._cache[url] = (now + CACHE_SECONDS, document)
        return document

    async def _exchange(self, discovery: dict[str, Any], code: str, verifier: str, redirect_uri: str) -> str:
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": redirect_uri,
            "code_verifier": verifier,
            "client_id": self.settings.client_id,
        }
        headers: dict[str, str] = {}
        methods = discovery.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
        if "client_secret_basic" in methods:
            pair = f"{_form_quote(self.settings.client_id)}:{_form_quote(self.settings.client_secret)}"
            headers["authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        else:
            form["client_secret"] = self.settings.client_secret
        answer = await json_http.post_form(
            self._egress,
            discovery["token_endpoint"],
            form,
            what="identity provider's token endpoint",
            timeout=TIMEOUT_SECONDS,
            headers=headers,
            ssl_context=self._ssl_context,
        )
        body = answer.json_object() or {}
        if answer.status != 200 or not isinstance(body.get("id_token"), str):
            log.warning("the identity provider refused the code exchange (HTTP %s)", answer.status)
            raise Unauthenticated("the identity provider refused the sign-in", code="oidc_exchange_failed")
        return str(body["id_token"])

    async def _verified(self, discovery: dict[str, Any], id_token: str, nonce_sha256: str) -> dict[str, Any]:
        algorithms = [
            a for a in discovery.get("id_token_signing_alg_values_supported") or ["RS256"] if a in _ALGORITHMS
        ]
        for fresh in (False, True):  # keys rotate: one refetch when the token's key is not among the cached ones
            keys = await self._cached_json(discovery["jwks_uri"], "signing keys", fresh=fresh)
            try:
                token = jwt.decode(id_token, KeySet.import_key_set(keys), algorithms=algorithms or ["RS256"])  # type: ignore[arg-type]
                break
            except JoseError as exc:
                if fresh:
                    log.warning("an ID token failed verification (%s)", type(exc).__name__)
                    raise Unauthenticated(
                        "the identity provider's answer did not verify", code="oidc_invalid"
                    ) from None
        claims: dict[str, Any] = dict(token.claims)
        registry = jwt.JWTClaimsRegistry(
            now=int(self._clock.now()),
            leeway=60,
            iss={"essential": True, "value": str(discovery["issuer"])},
            aud={"essential": True, "value": self.settings.client_id},
            sub={"essential": True},
            exp={"essential": True},
        )
        try:
            registry.validate(claims)
        except JoseError:
            raise Unauthenticated(
                "the identity provider's answer is not for this sign-in", code="oidc_invalid"
            ) from None
        audience = claims.get("aud")
        if isinstance(audience, list) and len(audience) > 1 and claims.get("azp") != self.settings.client_id:
            raise Unauthenticated("the identity provider's answer is not for this sign-in", code="oidc_invalid")
        if not isinstance(claims.get("nonce"), str) or digest(claims["nonce"]) != nonce_sha256:
            raise Unauthenticated("the identity provider's answer is not for this sign-in", code="oidc_invalid")
        return claims


def callback_url(base_url: str, purpose: Purpose = "endpoint") -> str:
    return f"{base_url.rstrip('/')}{_CALLBACKS[purpose]}"


def allowed_email(email: str | None, domains: tuple[str, ...]) -> bool:
    """No domain restriction, or the address is in one of the allowed domains."""
    if not domains:
        return True
    return email is not None and email.rpartition("@")[2] in {d.lower().lstrip("@") for d in domains}


def _s256(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")


def _form_quote(value: str) -> str:
    return quote(value, safe="")
