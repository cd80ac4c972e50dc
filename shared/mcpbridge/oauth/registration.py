"""Who mcpbridge is at an authorization server, in this order of preference:

1. **Pre-registered client**: ``auth_config.client_id`` of the service, its ``client_secret`` set only through the
   credentials sub-resource (``PUT /mcp-services/{id}/credentials``).
2. **Client ID metadata document**: when the server advertises ``client_id_metadata_document_supported`` and
   ``MCPBRIDGE_OAUTH_CLIENT_METADATA_URL`` is set, that URL is the ``client_id`` (a public client, no secret).
3. **Dynamic registration** (RFC 7591) at the server's ``registration_endpoint``, once per (workspace, service,
   issuer), stored sealed and reused by every user of the workspace. The item is keyed by the issuer, so a service
   whose authorization server changes registers anew; a registration whose redirect URI no longer matches (the public
   URL of mcpbridge changed) or whose secret expired is replaced.

Items:

    WS#<ws> / OAUTHCLIENT#<service_id>#<sha256(issuer)[:32]>     a dynamic registration
        issuer, client_id, token_endpoint_auth_method, redirect_uri, scope, client_secret_expires_at, registered_at,
        secret_client_secret (sealed under SecretContext(ws, "oauth_client", "<service_id>#<digest>"))

Two first authorizations racing both register at the server; the conditional write keeps exactly one registration
and the loser uses the winner's (its own stays unused at the server).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote, urlsplit

from anyio import to_thread

from mcpbridge.client.registry import ServiceRegistry
from mcpbridge.domain.external_services import ExternalService
from mcpbridge.domain.identity import timestamp
from mcpbridge.domain.items import Condition, Item, Key
from mcpbridge.domain.secrets import SecretContext
from mcpbridge.errors import ConditionFailed, Conflict, InvalidInput, UpstreamError
from mcpbridge.oauth.discovery import Discovery
from mcpbridge.oauth.rows import client_key
from mcpbridge.outbound.json_http import request, require_https
from mcpbridge.outbound.policy import EgressPolicy
from mcpbridge.ports import Clock, SecretBox, Store
from mcpbridge.sealing import open_secret_or_none

log = logging.getLogger("mcpbridge.oauth")

SECRET_KIND = "oauth_client"  # noqa: S105 - a SecretContext kind, not a secret
CLIENT_NAME = "mcpbridge"
ClientSource = Literal["preregistered", "metadata_document", "dynamic"]
AuthMethod = Literal["none", "client_secret_basic", "client_secret_post"]
# RFC 8414 section 2: a server that lists no methods supports client_secret_basic.
_DEFAULT_METHODS = ("client_secret_basic",)


@dataclass(frozen=True)
class ClientIdentity:
    """The client mcpbridge presents at one authorization server (the secret is left out of ``repr``)."""

    client_id: str
    auth_method: AuthMethod
    source: ClientSource
    secret: str | None = field(default=None, repr=False)
    record: str | None = None
    """Sort key of the stored dynamic registration (only for ``source == "dynamic"``)."""

    def authenticate(self, form: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
        """``form`` and headers of a token-endpoint request with this client's authentication (RFC 6749 2.3.1).

        ``client_id`` is always in the body (servers such as the MCP SDK's require it even with Basic)."""
        body = {**form, "client_id": self.client_id}
        headers: dict[str, str] = {}
        if self.secret and self.auth_method == "client_secret_basic":
            pair = f"{quote(self.client_id, safe='')}:{quote(self.secret, safe='')}"
            headers["authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        elif self.secret and self.auth_method == "client_secret_post":
            body["client_secret"] = self.secret
        return body, headers


def choose_auth_method(supported: list[str] | None, *, has_secret: bool) -> AuthMethod:
    """The token-endpoint authentication to use: Basic when the server takes it, else a secret in the body."""
    if not has_secret:
        return "none"
    offered = supported or list(_DEFAULT_METHODS)
    if "client_secret_basic" in offered:
        return "client_secret_basic"
    if "client_secret_post" in offered:
        return "client_secret_post"
    return "client_secret_basic"


def _method(value: Any) -> AuthMethod:
    if value == "client_secret_basic":
        return "client_secret_basic"
    if value == "client_secret_post":
        return "client_secret_post"
    return "none"


class ClientRegistrations:
    """The stored dynamic registrations of a workspace (blocking store and SecretBox calls)."""

    def __init__(self, store: Store, clock: Clock, secrets: SecretBox) -> None:
        self._store = store
        self._clock = clock
        self._secrets = secrets

    @staticmethod
    def key(workspace_id: str, service_id: str, issuer: str) -> Key:
        return client_key(workspace_id, service_id, issuer)

    @staticmethod
    def _context(workspace_id: str, sk: str) -> SecretContext:
        return SecretContext(workspace_id, SECRET_KIND, sk.removeprefix("OAUTHCLIENT#"))

    def _identity(self, workspace_id: str, item: Item) -> ClientIdentity:
        secret = open_secret_or_none(
            self._secrets, item.get("secret_client_secret"), self._context(workspace_id, item["sk"])
        )
        return ClientIdentity(
            client_id=str(item["client_id"]),
            auth_method=_method(item.get("token_endpoint_auth_method")),
            source="dynamic",
            secret=secret,
            record=str(item["sk"]),
        )

    def load(self, workspace_id: str, service_id: str, issuer: str) -> tuple[ClientIdentity, Item] | None:
        item = self._store.get(self.key(workspace_id, service_id, issuer))
        if item is None:
            return None
        return self._identity(workspace_id, item), item

    def load_record(self, workspace_id: str, record: str) -> ClientIdentity | None:
        item = self._store.get(Key(f"WS#{workspace_id}", record))
        return None if item is None else self._identity(workspace_id, item)

    def usable(self, item: Item, redirect_uri: str) -> bool:
        """Whether a stored registration serves this redirect URI and its secret has not expired."""
        expires = item.get("client_secret_expires_at") or 0
        return bool(item.get("redirect_uri") == redirect_uri and (not expires or expires > self._clock.now() + 60))

    def save(
        self,
        workspace_id: str,
        service_id: str,
        issuer: str,
        registered: Mapping[str, Any],
        redirect_uri: str,
        *,
        replacing: Item | None,
    ) -> ClientIdentity:
        """Store a registration unless another one got there first (then that one is returned)."""
        key = self.key(workspace_id, service_id, issuer)
        item: Item = {
            **key.as_dict(),
            "service_id": service_id,
            "issuer": issuer,
            "client_id": registered["client_id"],
            "token_endpoint_auth_method": registered["token_endpoint_auth_method"],
            "redirect_uri": redirect_uri,
            "scope": registered.get("scope"),
            "client_secret_expires_at": int(registered.get("client_secret_expires_at") or 0),
            "registered_at": timestamp(self._clock.now()),
        }
        if registered.get("client_secret"):
            item["secret_client_secret"] = self._secrets.seal(
                str(registered["client_secret"]), self._context(workspace_id, key.sk)
            )
        if replacing is None:
            condition = Condition.absent("oauth_client_unregistered")
        else:
            condition = Condition.equals("oauth_client_unchanged", "client_id", replacing["client_id"])
        try:
            self._store.put(item, condition=condition)
        except ConditionFailed as lost:
            if lost.current is not None:
                return self._identity(workspace_id, lost.current)
            raise Conflict("the client registration changed meanwhile; retry", code="oauth_busy") from None
        log.info("registered an OAuth client for MCP service %s in workspace %s", service_id, workspace_id)
        return self._identity(workspace_id, item)

    def drop(self, workspace_id: str, record: str) -> bool:
        """Forget a registration the server no longer accepts (the next authorization registers again)."""
        dropped = self._store.delete(Key(f"WS#{workspace_id}", record)) is not None
        if dropped:
            log.warning("dropped the OAuth client registration %s of workspace %s", record, workspace_id)
        return dropped


class ClientIdentities:
    """Picks the client identity for a new authorization and finds it again for a refresh or a revocation."""

    def __init__(
        self,
        registrations: ClientRegistrations,
        registry: ServiceRegistry,
        policy: EgressPolicy,
        client_metadata_url: str,
    ) -> None:
        self._registrations = registrations
        self._registry = registry
        self._policy = policy
        self._client_metadata_url = client_metadata_url

    @property
    def registrations(self) -> ClientRegistrations:
        return self._registrations

    def metadata_document_url(self) -> str | None:
        """The configured client ID metadata document URL when it can serve as a ``client_id`` (https with a
        path; plain http only to an allowlisted host)."""
        url = self._client_metadata_url
        if not url or urlsplit(url).path in ("", "/"):
            return None
        try:
            require_https(self._policy, url, "client metadata document")
        except InvalidInput:
            return None
        return url

    async def for_authorization(
        self, workspace_id: str, service: ExternalService, discovery: Discovery, redirect_uri: str, *, timeout: float
    ) -> ClientIdentity:
        metadata = discovery.metadata
        if service.auth.client_id:
            secrets = await to_thread.run_sync(self._registry.connection_secrets, service)
            secret = secrets.get("client_secret")
            return ClientIdentity(
                client_id=service.auth.client_id,
                auth_method=choose_auth_method(metadata.token_endpoint_auth_methods_supported, has_secret=bool(secret)),
                source="preregistered",
                secret=secret,
            )
        document = self.metadata_document_url()
        if metadata.client_id_metadata_document_supported and document is not None:
            return ClientIdentity(client_id=document, auth_method="none", source="metadata_document")
        if metadata.registration_endpoint is None:
            raise Conflict(
                "the authorization server offers no dynamic client registration: set auth_config.client_id (and the "
                "client_secret credential) of the service",
                code="oauth_client_required",
            )
        stored = await to_thread.run_sync(self._registrations.load, workspace_id, service.id, discovery.issuer)
        if stored is not None and self._registrations.usable(stored[1], redirect_uri):
            return stored[0]
        registered = await self._register(str(metadata.registration_endpoint), discovery, redirect_uri, timeout)
        return await to_thread.run_sync(
            lambda: self._registrations.save(
                workspace_id,
                service.id,
                discovery.issuer,
                registered,
                redirect_uri,
                replacing=stored[1] if stored is not None else None,
            )
        )

    async def _register(self, endpoint: str, discovery: Discovery, redirect_uri: str, timeout: float) -> dict[str, Any]:
        from mcp.client.auth.exceptions import OAuthRegistrationError
        from mcp.client.auth.oauth2 import check_registration_usable
        from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata
        from pydantic import AnyUrl, ValidationError

        method = choose_auth_method(discovery.metadata.token_endpoint_auth_methods_supported, has_secret=True)
        request_body = OAuthClientMetadata(
            redirect_uris=[AnyUrl(redirect_uri)],
            token_endpoint_auth_method=method,
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            scope=discovery.scope,
            client_name=CLIENT_NAME,
            application_type="web",
        ).model_dump(by_alias=True, mode="json", exclude_none=True)
        answer = await request(
            self._policy, "POST", endpoint, what="client registration endpoint", timeout=timeout, json_body=request_body
        )
        body = answer.json_object()
        if answer.status not in (200, 201) or body is None:
            raise UpstreamError(
                f"the authorization server refused the client registration (HTTP {answer.status})",
                code="oauth_registration_failed",
                details={"status": answer.status},
            )
        body.pop("issuer", None)
        try:
            info = OAuthClientInformationFull.model_validate(body)
            check_registration_usable(info)
        except (ValidationError, OAuthRegistrationError) as exc:
            raise UpstreamError(
                "the authorization server answered the registration with an unusable client",
                code="oauth_registration_failed",
            ) from exc
        return {
            "client_id": info.client_id,
            "client_secret": info.client_secret,
            "token_endpoint_auth_method": _method(info.token_endpoint_auth_method or method),
            "scope": info.scope,
            "client_secret_expires_at": info.client_secret_expires_at,
        }

    async def for_token(
        self,
        workspace_id: str,
        service: ExternalService,
        *,
        source: str,
        client_id: str,
        auth_method: str,
        record: str | None,
    ) -> ClientIdentity | None:
        """The identity a stored token was issued to, or None when it is gone (configuration changed, registration
        dropped): such a token can no longer be refreshed."""
        if source == "preregistered":
            if service.auth.client_id != client_id:
                return None
            secrets = await to_thread.run_sync(self._registry.connection_secrets, service)
            secret = secrets.get("client_secret")
            return ClientIdentity(client_id, _method(auth_method), "preregistered", secret)
        if source == "metadata_document":
            return ClientIdentity(client_id, "none", "metadata_document")
        if record is None:
            return None
        identity = await to_thread.run_sync(self._registrations.load_record, workspace_id, record)
        if identity is None or identity.client_id != client_id:
            return None
        return identity
