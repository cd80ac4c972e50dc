"""The MCP SDK's own OAuth client (``mcp.client.auth.OAuthClientProvider``) signing in to published endpoints, on
both deployments: the local app (SQLite, the app ``mcpbridge serve`` runs) and AWS (the template's Lambda functions
behind an emulated HTTP API, state in moto's DynamoDB, KMS and S3).

The SDK does everything a client does: discovery from the 401, registration (RFC 7591, or a client ID metadata
document the hub fetches over https from a test server with a throwaway CA), PKCE, the token exchange, RFC 9207's
``iss``, refresh before expiry. The person at the consent page is played by form posts (the page needs no script, so
a browser would add nothing): they sign in with their API key and approve.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio.to_thread
import httpx2
import pytest
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.support.oauth_flow import (
    REDIRECT_URI,
    Browser,
    Hub,
    OAuthClient,
    close_clients,
    hub_on,
    lambda_hub,
    mcp_post,
    query_of,
)
from tests.support.tls import https_server, write_certificates

BACKENDS = ["local", "aws"]
DOCUMENT_PATH = "/clients/field-notes.json"


@dataclass(frozen=True)
class Served:
    hub: Hub
    document_url: str
    """The https URL of a client ID metadata document (its own ``client_id``)."""


@pytest.fixture(scope="module", params=BACKENDS)
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    certificates = tmp_path_factory.mktemp("tls")
    ca, cert, key = write_certificates(certificates, "127.0.0.1")
    documents: dict[str, Any] = {}

    async def document(request: Request) -> JSONResponse:
        return JSONResponse(documents["body"], headers={"cache-control": "max-age=300"})

    app = Starlette(routes=[Route(DOCUMENT_PATH, document)])
    with https_server(app, cert, key, hostname="127.0.0.1") as origin, pytest.MonkeyPatch.context() as monkeypatch:
        url = f"{origin}{DOCUMENT_PATH}"
        documents["body"] = {
            "client_id": url,
            "client_name": "Field notes desktop",
            "redirect_uris": [REDIRECT_URI],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        }
        with _hub(request.param, tmp_path_factory.mktemp(request.param), monkeypatch, ca) as hub:
            yield Served(hub, url)


def _hub(backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ca: Path) -> Any:
    if backend == "local":
        return hub_on("local", tmp_path, monkeypatch, outbound_ca_file=ca, ssrf_allowlist=["127.0.0.1"])
    return lambda_hub(monkeypatch, outbound_ca_file=str(ca), ssrf_allowlist="127.0.0.1")


@pytest.fixture(autouse=True)
def _closed_clients() -> Iterator[None]:
    yield
    close_clients()


class MemoryStorage:
    """The SDK's token storage, in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


@dataclass
class Person:
    """Whoever the SDK sends to the authorization URL: they read the consent page, sign in with their API key and
    approve; the redirect's query goes back to the SDK as its callback would."""

    api_key: str
    browser: Browser = field(default_factory=Browser)
    pages: list[str] = field(default_factory=list)
    """Every consent page shown, in order."""
    result: AuthorizationCodeResult | None = None

    async def redirect(self, authorization_url: str) -> None:
        self.result = await anyio.to_thread.run_sync(self._consent, authorization_url)

    def _consent(self, authorization_url: str) -> AuthorizationCodeResult:
        page = self.browser.http.get(authorization_url)
        assert page.status_code == 200, page.text
        self.pages.append(page.text)
        answer = self.browser.submit(page, "approve", api_key=self.api_key)
        assert answer.status_code == 303, answer.text
        redirected = query_of(answer.headers["location"])
        assert "code" in redirected, redirected
        return AuthorizationCodeResult(code=redirected["code"], state=redirected.get("state"), iss=redirected["iss"])

    async def callback(self) -> AuthorizationCodeResult:
        assert self.result is not None
        result, self.result = self.result, None
        return result


@dataclass
class SdkClient:
    """One MCP client application: its OAuth provider (storage kept between sessions) and every response it saw."""

    url: str
    person: Person
    client_metadata_url: str | None = None
    storage: MemoryStorage = field(default_factory=MemoryStorage)
    seen: list[tuple[str, str, int]] = field(default_factory=list)
    provider: OAuthClientProvider = field(init=False)

    def __post_init__(self) -> None:
        metadata = OAuthClientMetadata(
            client_name="Field notes (SDK)",
            redirect_uris=[REDIRECT_URI],  # type: ignore[list-item]
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        )
        self.provider = OAuthClientProvider(
            server_url=self.url,
            client_metadata=metadata,
            storage=self.storage,
            redirect_handler=self.person.redirect,
            callback_handler=self.person.callback,
            client_metadata_url=self.client_metadata_url,
        )

    def session(self, mode: str, *calls: str) -> list[Any]:
        """Open an SDK session, list the tools and call each tool named in ``calls`` without arguments."""
        return asyncio.run(self._session(mode, calls))

    async def _session(self, mode: str, calls: tuple[str, ...]) -> list[Any]:
        async def record(response: httpx2.Response) -> None:
            self.seen.append((response.request.method, response.request.url.path, response.status_code))

        http = httpx2.AsyncClient(auth=self.provider, timeout=30, event_hooks={"response": [record]})
        async with http, Client(streamable_http_client(self.url, http_client=http), mode=mode) as client:
            results: list[Any] = [await client.list_tools()]
            for name in calls:
                results.append(await client.call_tool(name, {}))
        return results

    def expire_access_token(self) -> None:
        """What the SDK does once ``expires_in`` has passed (the hub's shortest TTL is a minute)."""
        self.provider.context.token_expiry_time = time.time() - 1

    def paths_seen(self) -> list[str]:
        return [f"{method} {path} {status}" for method, path, status in self.seen]


def tool_names(listed: Any) -> set[str]:
    return {tool.name for tool in listed.tools}


def knowledge_bases(result: Any) -> list[str]:
    assert not result.is_error, result.content
    return [base["name"] for base in json.loads(result.content[0].text)["knowledge_bases"]]


# ---------------------------------------------------------------------------------------------------- RFC 7591


def test_registration_consent_tools_refresh_and_revocation(served: Served) -> None:
    hub = served.hub
    base = hub.post("/api/v1/knowledge-bases", {"name": "Walrus notes"})
    endpoint = hub.publish(knowledge_base_ids=[base["id"]])
    user_id, key = hub.user_with_key("Ada")
    client = SdkClient(endpoint["url"], Person(key))

    listed, called = client.session("legacy", "list_knowledge_bases")
    assert "search_knowledge" in tool_names(listed)
    assert knowledge_bases(called) == ["Walrus notes"]
    issuer = f"{hub.base_url}/oauth/{endpoint['id']}"
    assert client.paths_seen()[:6] == [
        f"POST /mcp/{endpoint['id']} 401",
        f"GET /.well-known/oauth-protected-resource/mcp/{endpoint['id']} 200",
        f"GET /.well-known/oauth-authorization-server/oauth/{endpoint['id']} 200",
        f"POST /oauth/{endpoint['id']}/register 201",
        f"POST /oauth/{endpoint['id']}/token 200",
        f"POST /mcp/{endpoint['id']} 200",
    ]
    info = client.storage.client_info
    assert info is not None
    assert info.client_id.startswith("mcpc_")
    assert str(client.provider.context.oauth_metadata.issuer).rstrip("/") == issuer  # type: ignore[union-attr]
    [page] = client.person.pages
    assert "Field notes (SDK)" in page, "the page names the client"
    assert "127.0.0.1:4999" in page, "and where it will redirect"
    first = client.storage.tokens
    assert first is not None
    assert first.refresh_token is not None

    # A later session, after the access token expired: the SDK refreshes (rotated), nobody is asked again.
    client.expire_access_token()
    (listed,) = client.session("2026-07-28")
    assert tool_names(listed)
    second = client.storage.tokens
    assert second is not None
    assert f"POST /oauth/{endpoint['id']}/token 200" in client.paths_seen()[6:]
    assert second.access_token != first.access_token
    assert second.refresh_token not in (None, first.refresh_token)
    assert len(client.person.pages) == 1
    assert mcp_post(endpoint["url"], second.access_token).status_code == 200

    # The admin revokes the grant: the next call with its token is refused, its refresh token too, and the SDK
    # is sent back to the consent page (a new grant).
    with hub.api() as api:
        revoked = api.delete(f"/api/v1/users/{user_id}/oauth-grants", params={"endpoint_id": endpoint["id"]})
    assert [grant["client_id"] for grant in revoked.json()["items"]] == [info.client_id]
    refused = mcp_post(endpoint["url"], second.access_token)
    assert refused.status_code == 401
    assert 'error="invalid_token"' in refused.headers["www-authenticate"]
    direct = OAuthClient(endpoint["url"], client_id=info.client_id)
    direct.discover()
    assert direct.refresh(second.refresh_token or "").json()["error"] == "invalid_grant"
    before = len(client.seen)
    (listed,) = client.session("2026-07-28")
    assert tool_names(listed)
    assert client.paths_seen()[before] == f"POST /mcp/{endpoint['id']} 401"
    assert len(client.person.pages) == 2


def test_a_token_for_one_endpoint_is_refused_at_another(served: Served) -> None:
    hub = served.hub
    first, second = hub.publish(name="First"), hub.publish(name="Second")
    _, key = hub.user_with_key("Grace")
    client = SdkClient(first["url"], Person(key))
    client.session("legacy")
    tokens = client.storage.tokens
    assert tokens is not None

    refused = mcp_post(second["url"], tokens.access_token)
    assert refused.status_code == 401
    assert 'error="invalid_token"' in refused.headers["www-authenticate"]
    assert f"/mcp/{second['id']}" in refused.headers["www-authenticate"], "the challenge names the other resource"
    # The same application pointed at the second endpoint, with the first one's tokens and registration: its
    # first request is refused, and the SDK registers and asks for consent again at the second's issuer.
    elsewhere = SdkClient(second["url"], client.person, storage=client.storage)
    (listed,) = elsewhere.session("2026-07-28")
    assert tool_names(listed)
    assert elsewhere.paths_seen()[0] == f"POST /mcp/{second['id']} 401"
    assert f"POST /oauth/{second['id']}/register 201" in elsewhere.paths_seen()
    assert len(client.person.pages) == 2
    assert mcp_post(first["url"], tokens.access_token).status_code == 200, "the first endpoint's token stands"


# ---------------------------------------------------------------------------------------------------- metadata document


def test_a_client_id_metadata_document_over_https(served: Served) -> None:
    hub = served.hub
    endpoint = hub.publish()
    user_id, key = hub.user_with_key("Katherine")
    client = SdkClient(endpoint["url"], Person(key), client_metadata_url=served.document_url)

    listed, called = client.session("2026-07-28", "list_knowledge_bases")
    assert "search_knowledge" in tool_names(listed)
    assert not called.is_error
    assert not any("/register" in seen for seen in client.paths_seen()), "no registration: the URL is the id"
    info = client.storage.client_info
    assert info is not None
    assert info.client_id == served.document_url
    [page] = client.person.pages
    assert "Field notes desktop" in page, "the name the document gives, not the SDK's own"
    with hub.api() as api:
        grants = api.get(f"/api/v1/users/{user_id}/oauth-grants").json()["items"]
    assert [(grant["client_id"], grant["client_name"]) for grant in grants] == [
        (served.document_url, "Field notes desktop (127.0.0.1)")
    ], "a metadata document's client is shown with the host that vouches for it"

    client.expire_access_token()
    (listed,) = client.session("legacy")
    assert tool_names(listed)
    assert f"POST /oauth/{endpoint['id']}/token 200" in client.paths_seen()[-4:]
    assert len(client.person.pages) == 1
