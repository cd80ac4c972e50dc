"""The authorization server refuses cleanly, on both backends over real HTTP: malformed requests at every door get
the RFC's error (never a 500) and change nothing; redirect URIs are checked at registration; registration is rate
limited and bounded; client metadata documents are fetched over https only; the consent page slows, then locks, a
sign-in after wrong keys. The hub's clock is a ``FakeClock``: a test moves it past the counts' minute."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.support.clock import FakeClock
from tests.support.live_server import live_server
from tests.support.oauth_flow import REDIRECT_URI, Browser, Hub, OAuthClient, close_clients, hub_on, pkce
from tests.support.tls import https_server, write_certificates

BACKENDS = ["local", "aws"]
REGISTRATIONS_PER_MINUTE = 4
SIGN_INS_PER_MINUTE = 8
MAX_UNUSED = 6
DOCUMENT_PATH = "/clients/desk.json"


class Documents:
    """Client ID metadata documents served over http and https on 127.0.0.1, counting the fetches."""

    def __init__(self) -> None:
        self.fetches = 0
        self.http_url = ""
        self.https_url = ""

    async def serve(self, request: Request) -> JSONResponse:
        self.fetches += 1
        url = self.https_url if request.url.scheme == "https" else self.http_url
        body = {"client_id": url, "client_name": "Desk", "redirect_uris": [REDIRECT_URI]}
        return JSONResponse({**body, "token_endpoint_auth_method": "none"})


@pytest.fixture(scope="module")
def clock() -> FakeClock:
    return FakeClock(time.time())


@pytest.fixture(scope="module")
def documents(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Documents, Any]]:
    served = Documents()
    ca, cert, key = write_certificates(tmp_path_factory.mktemp("tls"), "127.0.0.1")
    app = Starlette(routes=[Route(DOCUMENT_PATH, served.serve)])
    with live_server(app) as plain, https_server(app, cert, key, hostname="127.0.0.1") as secure:
        served.http_url, served.https_url = f"{plain}{DOCUMENT_PATH}", f"{secure}{DOCUMENT_PATH}"
        yield served, ca


@pytest.fixture(scope="module", params=BACKENDS)
def hub(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    clock: FakeClock,
    documents: tuple[Documents, Any],
) -> Iterator[Hub]:
    _, ca = documents
    with (
        pytest.MonkeyPatch.context() as monkeypatch,
        hub_on(
            request.param,
            tmp_path_factory.mktemp(request.param),
            monkeypatch,
            clock=clock,
            oauth_registrations_per_minute=REGISTRATIONS_PER_MINUTE,
            oauth_sign_ins_per_minute=SIGN_INS_PER_MINUTE,
            oauth_max_unused_clients=MAX_UNUSED,
            outbound_ca_file=ca,
            ssrf_allowlist=["127.0.0.1"],
        ) as served,
    ):
        yield served


@pytest.fixture(autouse=True)
def _fresh_minute(clock: FakeClock) -> Iterator[None]:
    clock.advance(61)  # every count of the previous test has left its window
    yield
    close_clients()


@pytest.fixture
def endpoint(hub: Hub) -> dict[str, Any]:
    return hub.publish()


def client_of(endpoint: dict[str, Any]) -> OAuthClient:
    client = OAuthClient(endpoint["url"])
    client.discover()
    assert client.register().status_code == 201
    return client


def clients_of(hub: Hub) -> int:
    return len(hub.items("OACLIENT#"))


def oauth_error(answer: httpx.Response, status: int, error: str) -> None:
    assert answer.status_code == status, answer.text
    assert answer.json()["error"] == error, answer.text


# ---------------------------------------------------------------------------------------------------- authorize


@pytest.mark.parametrize("character", ['"', "\\", "\x00", "<"])
def test_an_authorize_request_with_a_hostile_redirect_uri_is_a_400(
    hub: Hub, endpoint: dict[str, Any], character: str
) -> None:
    client = client_of(endpoint)
    _, challenge = pkce()
    pending = len(hub.items("OAREQ#"))
    for client_id in (client.client_id, "unknown-client"):
        params = client.authorize_params(challenge, client_id=client_id, redirect_uri=f"{REDIRECT_URI}{character}x")
        answer = Browser().open(client.metadata["authorization_endpoint"], **params)
        assert answer.status_code == 400, answer.text
        assert "location" not in answer.headers, "a bad redirect URI is never redirected to"
    assert len(hub.items("OAREQ#")) == pending, "nothing is stored"


# ---------------------------------------------------------------------------------------------------- registration


@pytest.mark.parametrize(
    "uri",
    [
        "https://app.example/cb\r\nSet-Cookie: x=1",
        "https://app.example/c\nb",
        "https://app.example/c\tb",
        "https://app.example/c b",
        'https://app.example/c"b',
        "javascript:alert(1)",
        "data:text/html,<script>alert(1)</script>",
        "file:///etc/passwd",
        "chrome://settings",
        "chrome-extension://abcdef/cb",
        "moz-extension://abcdef/cb",
        "http://app.example/cb",
        "http://localhost.:4999/cb",
        "https://app.example/cb#fragment",
    ],
)
def test_registration_refuses_a_redirect_uri_that_is_not_safe(hub: Hub, endpoint: dict[str, Any], uri: str) -> None:
    client = OAuthClient(endpoint["url"])
    client.discover()
    before = clients_of(hub)
    answer = client.register(redirect_uris=[uri])
    assert answer.status_code == 400, answer.text
    # RFC 7591 3.2.2: Authlib's own claims check names the metadata, the redirect URI rules name the URI.
    assert answer.json()["error"] in ("invalid_redirect_uri", "invalid_client_metadata"), answer.text
    assert clients_of(hub) == before, "nothing is stored"
    assert "\r" not in answer.text
    assert "\n" not in answer.json()["error_description"]


def test_registration_is_rate_limited_per_endpoint_and_per_address(hub: Hub, clock: FakeClock) -> None:
    first, second = hub.publish(name="First"), hub.publish(name="Second")
    client = OAuthClient(first["url"])
    client.discover()
    for _ in range(REGISTRATIONS_PER_MINUTE):
        assert client.register().status_code == 201
    before = clients_of(hub)
    refused = client.register()
    oauth_error(refused, 429, "temporarily_unavailable")
    assert int(refused.headers["retry-after"]) >= 1
    elsewhere = OAuthClient(second["url"])
    elsewhere.discover()
    oauth_error(elsewhere.register(), 429, "temporarily_unavailable")  # the same address, another endpoint
    assert clients_of(hub) == before
    clock.advance(61)
    assert elsewhere.register().status_code == 201


def test_clients_registered_but_never_used_are_bounded_per_endpoint(hub: Hub, clock: FakeClock) -> None:
    endpoint = hub.publish(name="Crowded")
    client = OAuthClient(endpoint["url"])
    client.discover()
    for n in range(MAX_UNUSED):
        if n and n % REGISTRATIONS_PER_MINUTE == 0:
            clock.advance(61)
        assert client.register().status_code == 201
    clock.advance(61)
    oauth_error(client.register(), 429, "temporarily_unavailable")
    # A sign-in makes the last one a client in use: room for one more.
    client.tokens(Browser(), hub.admin_key)
    assert client.register().status_code == 201
    oauth_error(client.register(), 429, "temporarily_unavailable")


# ------------------------------------------------------------------------------------------------ metadata documents


def test_a_client_metadata_document_is_fetched_over_https_only(
    hub: Hub, endpoint: dict[str, Any], documents: tuple[Documents, Any]
) -> None:
    served, _ca = documents
    client = OAuthClient(endpoint["url"])
    client.discover()
    _, challenge = pkce()
    before = served.fetches
    plain = client.authorize_params(challenge, client_id=served.http_url)
    refused = Browser().open(client.metadata["authorization_endpoint"], **plain)
    assert refused.status_code == 400, refused.text
    assert "location" not in refused.headers
    assert served.fetches == before, "a plain http document is not even fetched"

    secure = client.authorize_params(challenge, client_id=served.https_url)
    page = Browser().open(client.metadata["authorization_endpoint"], **secure)
    assert page.status_code == 200, page.text
    assert served.fetches == before + 1


# ---------------------------------------------------------------------------------------------------- sign-in


def consent_page(client: OAuthClient, browser: Browser) -> httpx.Response:
    _, challenge = pkce()
    page = browser.open(client.metadata["authorization_endpoint"], **client.authorize_params(challenge))
    assert page.status_code == 200, page.text
    return page


def test_wrong_keys_lock_the_sign_in_then_the_address_is_slowed(
    hub: Hub, endpoint: dict[str, Any], clock: FakeClock
) -> None:
    client = client_of(endpoint)
    browser = Browser()
    page = consent_page(client, browser)
    for _ in range(4):
        wrong = browser.submit(page, "approve", api_key="mcpb_" + "x" * 43)
        assert wrong.status_code == 400, wrong.text
        assert "not valid" in wrong.text
    locked = browser.submit(page, "approve", api_key="mcpb_" + "y" * 43)
    assert locked.status_code == 429, locked.text
    right = browser.submit(page, "approve", api_key=hub.admin_key)
    assert right.status_code == 400, "the locked request is used up: even the right key starts again"
    assert "location" not in right.headers

    # Five tries counted this minute from this address: three more, then every try waits, the right key too.
    fresh = consent_page(client, browser)
    for _ in range(SIGN_INS_PER_MINUTE - 5):
        assert browser.submit(fresh, "approve", api_key="mcpb_" + "z" * 43).status_code == 400
    slowed = browser.submit(fresh, "approve", api_key=hub.admin_key)
    assert slowed.status_code == 429
    assert int(slowed.headers["retry-after"]) >= 1
    clock.advance(61)
    assert browser.submit(fresh, "approve", api_key=hub.admin_key).status_code == 303


# ---------------------------------------------------------------------------------------------------- corpus


def test_malformed_requests_at_every_door_get_an_oauth_error(hub: Hub, endpoint: dict[str, Any]) -> None:
    client = client_of(endpoint)
    token_url, revoke_url = client.metadata["token_endpoint"], client.metadata["revocation_endpoint"]
    register_url = client.metadata["registration_endpoint"]
    with httpx.Client(timeout=30) as http:
        answers = [
            http.post(token_url, data={"grant_type": "refresh_token", "client_id": client.client_id}),
            http.post(token_url, data={"grant_type": "refresh_token", "refresh_token": 'a"\\', "client_id": 'x"\\'}),
            http.post(token_url, data={"grant_type": "authorization_code", "code": "\x00", "client_id": "\\"}),
            http.post(token_url, data={"grant_type": "password", "client_id": client.client_id}),
            http.post(
                token_url, content=b"\xff\xfe=\xff", headers={"content-type": "application/x-www-form-urlencoded"}
            ),
            http.post(token_url, json={"grant_type": "refresh_token"}),
            http.post(revoke_url, data={"client_id": '"\\'}),
            http.post(register_url, json=["not", "an", "object"]),
            http.post(register_url, content=b"{", headers={"content-type": "application/json"}),
            http.post(register_url, json={"redirect_uris": "https://app.example/cb"}),
            http.post(register_url, json={"redirect_uris": [REDIRECT_URI], "client_name": "\x00" * 3}),
        ]
    for answer in answers:
        assert 400 <= answer.status_code < 500, (answer.request.url, answer.status_code, answer.text)
        assert "error" in answer.json(), answer.text
