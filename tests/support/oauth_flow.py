"""Driving mcpbridge's authorization server over real HTTP: a hub served on 127.0.0.1 on either backend, a person's
browser played with form posts (its own cookie jar), and an OAuth client that registers, authorizes and exchanges
codes the way the RFCs say (PKCE S256, RFC 8707 ``resource``)."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import re
import secrets
import ssl
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from moto import mock_aws

from mcpbridge.bootstrap import Container
from mcpbridge.http.apps import create_combined_app
from mcpbridge.settings import Settings
from tests.support.api_gateway import ApiGateway, deployed_functions, template_routes
from tests.support.aws import create_aws_resources, set_fake_aws_env
from tests.support.containers import container_on
from tests.support.embedder import HashingEmbedder
from tests.support.live_server import live_server
from tests.support.moto_atomic import atomic_dynamodb

REDIRECT_URI = "http://127.0.0.1:4999/callback"
TEST_THROTTLES = {"oauth_registrations_per_minute": 5000, "oauth_sign_ins_per_minute": 5000}
"""Every test signs in from 127.0.0.1: the per-address counts are raised (not turned off) unless a test sets them."""
_OPEN: list[httpx.Client] = []


def _http(**options: Any) -> httpx.Client:
    """An HTTP client closed by :func:`close_clients` (a test module's autouse fixture calls it after each test)."""
    client = httpx.Client(timeout=30, **options)
    _OPEN.append(client)
    return client


def close_clients() -> None:
    while _OPEN:
        _OPEN.pop().close()


@dataclass
class Hub:
    base_url: str
    container: Container
    admin_key: str

    def api(self, key: str | None = None) -> httpx.Client:
        return httpx.Client(
            base_url=self.base_url, headers={"Authorization": f"Bearer {key or self.admin_key}"}, timeout=30
        )

    def post(self, path: str, body: dict[str, Any], key: str | None = None) -> dict[str, Any]:
        with self.api(key) as api:
            response = api.post(path, json=body)
        assert response.status_code in (200, 201), response.text
        return response.json()  # type: ignore[no-any-return]

    def publish(self, **body: Any) -> dict[str, Any]:
        return self.post("/api/v1/mcp-endpoints", {"name": "Field notes", **body})

    def user_with_key(self, name: str, **key: Any) -> tuple[str, str]:
        """A new user of the workspace and an API key of theirs: (user id, key)."""
        user = self.post("/api/v1/users", {"name": name})
        minted = self.post(f"/api/v1/users/{user['id']}/api-keys", {"name": f"{name}'s key", "role": "viewer", **key})
        return user["id"], minted["key"]

    def items(self, sk_prefix: str) -> list[dict[str, Any]]:
        """Every live item of the install's workspace whose sort key starts with ``sk_prefix``."""
        workspace_id = self.container.identity.installed_workspace_id()
        page = self.container.store.query(f"WS#{workspace_id}", sk_prefix=sk_prefix, limit=500)
        return page.items


@contextlib.contextmanager
def hub_on(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, clock: Any = None, **settings: Any
) -> Iterator[Hub]:
    """The combined app on ``backend``, served on 127.0.0.1; ``clock`` (e.g. a ``FakeClock``) replaces the system's
    for the store's expiry and every lifetime."""
    overrides = {"clock": clock} if clock is not None else {}
    with container_on(
        backend,
        tmp_path,
        monkeypatch,
        settings={"jobs": "inline", **TEST_THROTTLES, **settings},
        embedder=HashingEmbedder(32),
        **overrides,
    ) as container:
        key = container.identity.initialize().api_key
        assert key is not None
        with live_server(create_combined_app(container)) as base_url:
            yield Hub(base_url, container, key)


HTTP_FUNCTIONS = [
    "AdminApiFunction",
    "McpEndpointFunction",
    "OAuthCallbackFunction",
    "ResolutionsFunction",
    "AuthorizationServerFunction",
]


@contextlib.contextmanager
def lambda_hub(monkeypatch: pytest.MonkeyPatch, **settings: str) -> Iterator[Hub]:
    """The deployment on AWS: the template's functions behind an emulated HTTP API, state in moto's DynamoDB, KMS
    and S3. ``settings``: extra MCPBRIDGE_* variables of every function (as the template would set them)."""
    set_fake_aws_env(monkeypatch)
    with mock_aws(), atomic_dynamodb():
        resources = create_aws_resources(table_name="mcpbridge-lambda")
        environment = {
            "MCPBRIDGE_BACKEND": "aws",
            "MCPBRIDGE_TABLE_NAME": resources.table_name,
            "MCPBRIDGE_KMS_KEY_ID": resources.kms_key_id,
            "MCPBRIDGE_BUCKET_NAME": resources.bucket_name,
            "MCPBRIDGE_EMBEDDING_PROVIDER": "none",
            "MCPBRIDGE_REQUEST_BUDGET_SECONDS": "20",
            **{f"MCPBRIDGE_{name.upper()}": str(value) for name, value in {**TEST_THROTTLES, **settings}.items()},
        }
        for name, value in environment.items():
            monkeypatch.setenv(name, value)
        container = Container(Settings())
        key = container.identity.initialize().api_key
        assert key is not None
        routes, _ = template_routes()
        with deployed_functions(HTTP_FUNCTIONS) as handlers, live_server(ApiGateway(handlers, routes)) as base_url:
            yield Hub(base_url, container, key)
        container.close()


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    return verifier, challenge


@dataclass
class Browser:
    """A person's browser: it keeps cookies, follows nothing by itself, submits the page's forms."""

    http: httpx.Client = field(default_factory=lambda: _http(follow_redirects=False))

    def open(self, url: str, **params: Any) -> httpx.Response:
        return self.http.get(url, params=params)

    def submit(self, page: httpx.Response, decision: str, **fields: str) -> httpx.Response:
        form = consent_form(page.text)
        action = re.search(r'<form method="post" action="([^"]+)"', page.text)
        assert action is not None, page.text
        return self.http.post(
            action.group(1).replace("&amp;", "&"),
            data={**form, "decision": decision, **fields},
            headers={"origin": origin_of(action.group(1)), "sec-fetch-site": "same-origin"},
        )


def browser_trusting(ca: Path) -> Browser:
    """A browser that also trusts the certificate authority in ``ca`` (a test server's throwaway CA)."""
    return Browser(http=_http(follow_redirects=False, verify=ssl.create_default_context(cafile=str(ca))))


def consent_form(html: str) -> dict[str, str]:
    found = dict(re.findall(r'<input type="hidden" name="(consent|csrf)" value="([^"]*)"', html))
    assert set(found) == {"consent", "csrf"}, html
    return found


def origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def query_of(location: str) -> dict[str, str]:
    return {name: values[0] for name, values in parse_qs(urlsplit(location).query).items()}


@dataclass
class OAuthClient:
    """An OAuth client of one endpoint, speaking to its authorization server the way MCP clients do."""

    endpoint_url: str
    http: httpx.Client = field(default_factory=_http)
    metadata: dict[str, Any] = field(default_factory=dict)
    client_id: str = ""
    client_secret: str | None = None
    redirect_uri: str = REDIRECT_URI

    def discover(self) -> dict[str, Any]:
        challenge = self.http.post(self.endpoint_url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert challenge.status_code == 401, challenge.text
        header = challenge.headers["www-authenticate"]
        found = re.search(r'resource_metadata="([^"]+)"', header)
        assert found is not None, header
        resource = self.http.get(found.group(1)).json()
        issuer = resource["authorization_servers"][0]
        parts = urlsplit(issuer)
        well_known = f"{parts.scheme}://{parts.netloc}/.well-known/oauth-authorization-server{parts.path}"
        self.metadata = self.http.get(well_known).json()
        return resource

    def register(self, **metadata: Any) -> httpx.Response:
        body = {
            "client_name": "Field client",
            "redirect_uris": [self.redirect_uri],
            "grant_types": ["authorization_code", "refresh_token"],
            "token_endpoint_auth_method": "none",
            **metadata,
        }
        response = self.http.post(self.metadata["registration_endpoint"], json=body)
        if response.status_code == 201:
            self.client_id = response.json()["client_id"]
            self.client_secret = response.json().get("client_secret")
        return response

    def authorize_params(self, challenge: str, **extra: Any) -> dict[str, Any]:
        params = {
            "response_type": "code",
            "client_id": self.client_id,
            "redirect_uri": self.redirect_uri,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "state": secrets.token_urlsafe(16),
            "resource": self.endpoint_url,
            **extra,
        }
        return {name: value for name, value in params.items() if value is not None}

    def exchange(self, code: str, verifier: str | None, **extra: Any) -> httpx.Response:
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": self.redirect_uri,
            "client_id": self.client_id,
            "code_verifier": verifier,
            "resource": self.endpoint_url,
            **extra,
        }
        return self.token({name: value for name, value in form.items() if value is not None})

    def refresh(self, refresh_token: str, **extra: Any) -> httpx.Response:
        return self.token(
            {"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": self.client_id, **extra}
        )

    def token(self, form: dict[str, Any]) -> httpx.Response:
        if self.client_secret is not None and "client_secret" not in form:
            form = {**form, "client_secret": self.client_secret}
        return self.http.post(self.metadata["token_endpoint"], data=form)

    def sign_in(self, browser: Browser, api_key: str, **extra: Any) -> tuple[str, str, dict[str, str]]:
        """The whole authorization with an API key typed into the page: (code, verifier, redirect query)."""
        verifier, challenge = pkce()
        params = self.authorize_params(challenge, **extra)
        page = browser.open(self.metadata["authorization_endpoint"], **params)
        assert page.status_code == 200, page.text
        answer = browser.submit(page, "approve", api_key=api_key)
        assert answer.status_code == 303, answer.text
        redirected = query_of(answer.headers["location"])
        assert redirected.get("state") == params["state"], redirected
        return redirected["code"], verifier, redirected

    def tokens(self, browser: Browser, api_key: str) -> dict[str, Any]:
        code, verifier, _ = self.sign_in(browser, api_key)
        response = self.exchange(code, verifier)
        assert response.status_code == 200, response.text
        return response.json()  # type: ignore[no-any-return]


def mcp_post(
    url: str, token: str | None, method: str = "tools/list", params: dict[str, Any] | None = None
) -> httpx.Response:
    """One JSON-RPC request of the 2025-06-18 era (no handshake needed by a stateless server)."""
    headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-06-18"}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
    return httpx.post(url, json=body, headers=headers, timeout=30)
