"""OAuth for external MCP services (SPEC Part D) end to end: mcpbridge's REST API (TestClient on the combined app)
against a real authorization server and the MCP server it protects (``tests/support/oauth_server.py``, the MCP SDK's
authorization-server handlers served by uvicorn on 127.0.0.1).

The browser is played by ``http.client``: it opens the authorization URL, the server approves at once and redirects
to mcpbridge's callback, whose path and query the test then requests from mcpbridge. Plain http to 127.0.0.1 works
because the tests allowlist it (``ssrf_allowlist=["127.0.0.1"]``); anywhere else OAuth requires https.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import anyio
import httpx
import pytest
import uvicorn
from fastapi.testclient import TestClient
from moto import mock_aws

from mcpbridge.bootstrap import Container
from mcpbridge.client.connection import Connection, ConnectionSpec
from mcpbridge.client.oauth_calls import call_with_oauth
from mcpbridge.domain import credentials
from mcpbridge.domain.external_services import ExternalService
from mcpbridge.domain.identity import Scope
from mcpbridge.domain.items import Update
from mcpbridge.domain.secrets import SecretContext
from mcpbridge.errors import InvalidInput, OAuthRequired, UpstreamError
from mcpbridge.http.apps import create_combined_app
from mcpbridge.identity.accounts import _api_key_item
from mcpbridge.oauth.attempts import state_key
from mcpbridge.oauth.rows import token_key
from mcpbridge.outbound.policy import EgressPolicy
from mcpbridge.settings import Settings
from tests.support.aws import create_aws_resources, set_fake_aws_env
from tests.support.clock import FakeClock
from tests.support.moto_atomic import atomic_dynamodb
from tests.support.oauth_server import OAuthTestServer, oauth_server
from tests.support.readiness import Worker, wait_until

PUBLIC = "http://127.0.0.1:8080"
"""mcpbridge's public base URL in these tests (only ever part of redirect URIs; nothing listens there)."""
CALLBACK = f"{PUBLIC}/api/v1/mcp-oauth/callback"
FRONTEND = "https://app.example"
ANSWER_TIMEOUT = 60.0
"""A last resort against a hang of the live server (the test's own timeout is 120 s)."""
BASE = "/api/v1/mcp-services"
SETTINGS: dict[str, Any] = {"ssrf_allowlist": ["127.0.0.1"], "public_base_url": PUBLIC, "frontend_urls": [FRONTEND]}


# ---------------------------------------------------------------------------------------------------- fixtures


@contextlib.contextmanager
def instances(
    backend: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    clock: FakeClock,
    *,
    count: int = 1,
    settings: dict[str, Any] | None = None,
) -> Iterator[list[Container]]:
    """``count`` independent containers (each its own store, secret box and OAuth objects) over one SQLite file or
    one DynamoDB table in moto, like separate Lambda instances."""
    extra = {**SETTINGS, **(settings or {})}
    if backend == "local":
        built = [Container(Settings(data_dir=tmp_path / "data", **extra), clock=clock) for _ in range(count)]
        try:
            yield built
        finally:
            for container in built:
                container.close()
        return
    set_fake_aws_env(monkeypatch)
    with mock_aws(), atomic_dynamodb():
        resources = create_aws_resources(table_name=f"mcpbridge-{uuid.uuid4().hex[:8]}")
        built = [
            Container(
                Settings(
                    backend="aws",
                    table_name=resources.table_name,
                    kms_key_id=resources.kms_key_id,
                    bucket_name=resources.bucket_name,
                    aws_region="eu-west-1",
                    index_cache_dir=tmp_path / "index-cache",
                    **extra,
                ),
                clock=clock,
            )
            for _ in range(count)
        ]
        try:
            yield built
        finally:
            for container in built:
                container.close()


@pytest.fixture
def clock() -> FakeClock:
    # Starts at the real time: the authorization server judges expiry by its own (real) clock.
    return FakeClock(time.time())


@pytest.fixture(params=["local", "aws"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def container(backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: FakeClock) -> Iterator[Container]:
    with instances(backend, tmp_path, monkeypatch, clock) as built:
        yield built[0]


@pytest.fixture
def local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: FakeClock) -> Iterator[Container]:
    with instances("local", tmp_path, monkeypatch, clock) as built:
        yield built[0]


class Api:
    """mcpbridge's REST API as the admin (and other users), recording every response."""

    def __init__(self, container: Container) -> None:
        self.container = container
        self.responses: list[httpx.Response] = []
        self.client = TestClient(create_combined_app(container), raise_server_exceptions=False)
        self.client.event_hooks["response"].append(self._record)
        initialized = container.identity.initialize()
        assert initialized.api_key is not None
        self.admin_key = initialized.api_key
        self.client.headers["Authorization"] = f"Bearer {self.admin_key}"
        workspace = container.identity.installed_workspace_id()
        assert workspace is not None
        self.workspace_id = workspace
        self.admin_user = container.identity.authenticate(self.admin_key).user_id

    def _record(self, response: httpx.Response) -> None:
        response.read()
        self.responses.append(response)

    def user_key(self, user_id: str, role: str = "viewer") -> str:
        """An API key of another user of the workspace."""
        issued = credentials.issue(credentials.API_KEY_PREFIX)
        item = _api_key_item(
            self.workspace_id, f"key_{user_id}", user_id, user_id, role, Scope(), issued, "2027-01-01T00:00:00Z"
        )
        self.container.store.put(item)
        return issued.plaintext

    def create_service(self, server: OAuthTestServer, *, name: str = "protected", **auth: Any) -> str:
        body = {
            "name": name,
            "url": server.mcp_url,
            "transport": "http-streamable",
            "auth_config": {"auth_type": "oauth", **auth},
        }
        created = self.client.post(BASE, json=body)
        assert created.status_code == 201, created.text
        return str(created.json()["id"])

    def authorize(self, service_id: str, *, key: str | None = None, **body: Any) -> dict[str, Any]:
        answer = self.client.post(f"{BASE}/{service_id}/oauth/authorize-url", json=body, headers=_as(key))
        assert answer.status_code == 200, answer.text
        assert answer.headers["cache-control"] == "no-store"
        return dict(answer.json())

    def status(self, service_id: str, *, key: str | None = None, attempt: str | None = None) -> dict[str, Any]:
        params = {"authorization_attempt": attempt} if attempt else {}
        answer = self.client.get(f"{BASE}/{service_id}/oauth/status", params=params, headers=_as(key))
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    def callback(self, location: str) -> httpx.Response:
        """The browser arriving at mcpbridge's callback from the authorization server's redirect."""
        assert location.startswith(CALLBACK + "?"), location
        parts = urlsplit(location)
        return self.client.get(f"{parts.path}?{parts.query}", follow_redirects=False)

    def complete(self, service_id: str, *, key: str | None = None, **body: Any) -> tuple[dict[str, Any], str]:
        """A whole browser authorization: authorize-url, approval, callback; the attempt and the final redirect."""
        started = self.authorize(service_id, key=key, **body)
        finished = self.callback(approve(started["authorization_url"]))
        assert finished.status_code == 303, finished.text
        return started, finished.headers["location"]

    def service(self, service_id: str) -> ExternalService:
        return self.container.services.find(self.workspace_id, service_id)

    def whoami(self, service_id: str, user_id: str | None = None, container: Container | None = None) -> str:
        return anyio.run(self.awhoami, service_id, user_id, container)

    async def awhoami(self, service_id: str, user_id: str | None = None, container: Container | None = None) -> str:
        """Call the protected server's tool through ``call_with_oauth`` and a real :class:`Connection`."""
        used = container or self.container
        service = self.service(service_id)

        async def call(spec: ConnectionSpec) -> str:
            async with Connection(spec, used.egress) as connection:
                result = await connection.call_tool("whoami", {})
            text = result.content[0]
            assert text.type == "text"
            return text.text

        return await call_with_oauth(used.oauth, service, self.workspace_id, "user", user_id or self.admin_user, call)


def _as(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def approve(authorization_url: str) -> str:
    """The user's browser at the authorization server (which approves at once): the redirect it answers with.

    ``http.client`` rather than httpx: nothing in the test process logs the URL, so log scans stay meaningful."""
    parts = urlsplit(authorization_url)
    assert parts.hostname == "127.0.0.1"
    assert parts.port is not None
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        connection.request("GET", f"{parts.path}?{parts.query}")
        answer = connection.getresponse()
        answer.read()
        assert answer.status == 302, answer.status
        location = answer.getheader("location")
    finally:
        connection.close()
    assert location is not None
    return location


def query_of(url: str) -> dict[str, str]:
    return {name: values[0] for name, values in parse_qs(urlsplit(url).query).items()}


@pytest.fixture
def api(container: Container) -> Iterator[Api]:
    built = Api(container)
    with built.client:
        yield built


@pytest.fixture
def local_api(local: Container) -> Iterator[Api]:
    built = Api(local)
    with built.client:
        yield built


def problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["code"] == code, body
    return body


def stored_attempts(api: Api) -> list[dict[str, Any]]:
    return api.container.store.query(f"WS#{api.workspace_id}", sk_prefix="OAUTHATTEMPT#").items


def stored_clients(api: Api) -> list[dict[str, Any]]:
    return api.container.store.query(f"WS#{api.workspace_id}", sk_prefix="OAUTHCLIENT#").items


def stored_token(api: Api, service_id: str, user_id: str | None = None) -> dict[str, Any] | None:
    return api.container.store.get(token_key(api.workspace_id, service_id, "user", user_id or api.admin_user))


# ---------------------------------------------------------------------------------------------------- the flow


def test_authorization_code_flow_with_dynamic_registration(api: Api) -> None:
    with oauth_server() as server:
        service_id = api.create_service(server)
        assert api.status(service_id)["status"] == "reauth_required"

        started = api.authorize(service_id, frontend_redirect="/settings/mcp")
        url = started["authorization_url"]
        assert url.startswith(f"{server.issuer}/authorize?")
        params = query_of(url)
        assert params["response_type"] == "code"
        assert params["code_challenge_method"] == "S256"
        assert len(params["code_challenge"]) == 43
        assert params["resource"] == server.mcp_url, "RFC 8707 resource indicator"
        assert params["scope"] == "mcp"
        assert params["redirect_uri"] == CALLBACK
        assert server.registrations == 1, "registered once (RFC 7591) at the discovered registration endpoint"
        assert params["client_id"] in server.provider.clients
        assert "code_verifier" not in url

        # The verifier stays server-side, sealed; the state is stored only as a digest.
        state_item = api.container.store.get(state_key(params["state"]))
        assert state_item is not None
        assert str(state_item["secret_code_verifier"]).startswith("enc:v1:")
        assert params["state"] not in repr(state_item)
        pending = api.status(service_id, attempt=started["authorization_attempt"])
        assert pending["status"] == "reauth_required"
        assert pending["authorization_attempt"] == {
            "id": started["authorization_attempt"],
            "status": "pending",
            "error": None,
        }

        location = approve(url)
        assert query_of(location)["iss"] == server.issuer, "the server sends the RFC 9207 iss parameter"
        finished = api.callback(location)
        assert finished.status_code == 303
        assert finished.headers["location"] == "/settings/mcp#mcp_oauth_result=success"
        assert finished.headers["cache-control"] == "no-store"
        assert server.token_requests["authorization_code"] == 1

        done = api.status(service_id, attempt=started["authorization_attempt"])
        assert done["status"] == "authorized"
        assert done["authorization_attempt"]["status"] == "completed"
        assert done["refreshable"] is True
        assert done["scope"] == "mcp"
        assert api.container.store.get(state_key(params["state"])) is None, "the state is single use"

        assert api.whoami(service_id) == "hello alice"
        token = stored_token(api, service_id)
        assert token is not None
        assert str(token["secret_access_token"]).startswith("enc:v1:")
        assert str(token["secret_refresh_token"]).startswith("enc:v1:")


def test_a_second_user_reuses_the_registration_and_gets_its_own_token(api: Api) -> None:
    with oauth_server() as server:
        service_id = api.create_service(server)
        api.complete(service_id)
        bob = api.user_key("usr_bob")
        server.approving_user = "bob"
        _, location = api.complete(service_id, key=bob)
        assert location == f"{FRONTEND}#mcp_oauth_result=success", "the first front-end URL is the default"
        assert server.registrations == 1, "one registration per (workspace, service, issuer)"
        assert len(stored_clients(api)) == 1
        assert len({a["client_id"] for a in server.authorizations}) == 1
        assert api.whoami(service_id, "usr_bob") == "hello bob"
        assert api.whoami(service_id) == "hello alice"
        assert api.status(service_id, key=bob)["status"] == "authorized"


def test_revocation_deletes_the_token_and_revokes_it_upstream(api: Api) -> None:
    with oauth_server() as server:
        service_id = api.create_service(server)
        api.complete(service_id)
        bob = api.user_key("usr_bob")
        api.complete(service_id, key=bob)
        before = server.live_access_tokens()
        assert len(before) == 2

        revoked = api.client.delete(f"{BASE}/{service_id}/oauth/token")
        assert revoked.status_code == 204
        assert api.status(service_id)["status"] == "reauth_required"
        assert stored_token(api, service_id) is None
        assert server.revocations >= 1
        assert len(server.live_access_tokens()) == 1, "the server no longer accepts the revoked token"
        with pytest.raises(OAuthRequired) as refused:
            api.whoami(service_id)
        assert refused.value.code == "oauth_required"
        assert refused.value.status == 403
        assert api.whoami(service_id, "usr_bob") == "hello alice", "another user's token is untouched"
        assert api.client.delete(f"{BASE}/{service_id}/oauth/token").status_code == 204, "idempotent"


def test_pre_registered_client_with_secret(local_api: Api, clock: FakeClock) -> None:
    api = local_api
    with oauth_server() as server:
        server.preregister("mcpbridge-pre", "pre-secret-7a1c", redirect_uris=[CALLBACK])
        service_id = api.create_service(server, client_id="mcpbridge-pre")
        stored = api.client.put(f"{BASE}/{service_id}/credentials", json={"client_secret": "pre-secret-7a1c"})
        assert stored.status_code == 200
        started, location = api.complete(service_id)
        assert query_of(started["authorization_url"])["client_id"] == "mcpbridge-pre"
        assert location.endswith("#mcp_oauth_result=success")
        assert server.registrations == 0
        assert stored_clients(api) == []
        assert api.whoami(service_id) == "hello alice"
        # The refresh authenticates with the same client (Basic), kept only in the credentials sub-resource.
        clock.advance(3600)
        assert api.whoami(service_id) == "hello alice"
        assert server.token_requests["refresh_token"] == 1


def test_discovery_from_the_well_known_path_and_from_a_pinned_metadata_url(local_api: Api) -> None:
    api = local_api
    with oauth_server(challenge_hint=False) as server:
        found = api.create_service(server, name="found")
        api.complete(found)
        pinned = api.create_service(server, name="pinned", auth_server_metadata_url=server.metadata_url)
        started, _ = api.complete(pinned)
        assert api.whoami(found) == "hello alice"
        assert api.whoami(pinned) == "hello alice"
        # Pinned: no protected-resource metadata, so the resource is the service URL itself.
        assert query_of(started["authorization_url"])["resource"] == server.mcp_url
        assert server.registrations == 2, "one registration per service"


def test_client_id_metadata_document(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: FakeClock) -> None:
    document_url = f"{PUBLIC}/api/v1/mcp-oauth/client-metadata.json"
    settings = {"oauth_client_metadata_url": document_url}
    with (
        instances("local", tmp_path, monkeypatch, clock, settings=settings) as built,
        oauth_server(client_id_metadata_documents=True) as server,
    ):
        api = Api(built[0])
        with api.client:
            document = api.client.get("/api/v1/mcp-oauth/client-metadata.json")
            assert document.status_code == 200
            assert document.json()["client_id"] == document_url
            assert document.json()["redirect_uris"] == [CALLBACK]
            server.fetch_client_metadata = lambda url: api.client.get(urlsplit(url).path).json()
            service_id = api.create_service(server)
            started, location = api.complete(service_id)
            assert query_of(started["authorization_url"])["client_id"] == document_url
            assert location.endswith("#mcp_oauth_result=success")
            assert server.registrations == 0
            assert server.metadata_document_fetches >= 1
            assert api.whoami(service_id) == "hello alice"


def test_a_401_gets_one_forced_refresh_and_one_retry(local_api: Api) -> None:
    api = local_api
    with oauth_server() as server:
        service_id = api.create_service(server)
        api.complete(service_id)
        server.expire_access_tokens()  # the MCP server now refuses the token mcpbridge thinks is valid
        assert api.whoami(service_id) == "hello alice"
        assert server.token_requests["refresh_token"] == 1
        assert server.mcp_requests["refused"] >= 1


def test_listeners_hear_about_stored_and_removed_tokens(local_api: Api, clock: FakeClock) -> None:
    api = local_api
    events: list[tuple[str, ...]] = []
    seen_tokens: list[bool] = []

    def stored(workspace_id: str, service_id: str, principal_type: str, principal_id: str) -> None:
        events.append(("stored", workspace_id, service_id, principal_type, principal_id))
        seen_tokens.append(stored_token(api, service_id, principal_id) is not None)

    async def removed(workspace_id: str, service_id: str, principal_type: str, principal_id: str) -> None:
        await anyio.sleep(0)
        events.append(("removed", workspace_id, service_id, principal_type, principal_id))

    def broken(*args: str) -> None:
        raise RuntimeError("a listener bug must not break the flow")

    api.container.oauth.on_token_stored(broken)
    api.container.oauth.on_token_stored(stored)
    api.container.oauth.on_token_removed(removed)
    with oauth_server() as server:
        service_id = api.create_service(server)
        _, location = api.complete(service_id)
        assert location.endswith("#mcp_oauth_result=success")
        who = (api.workspace_id, service_id, "user", api.admin_user)
        assert events == [("stored", *who)]
        assert seen_tokens == [True], "listeners run once the token is stored"
        clock.advance(3600)
        assert api.whoami(service_id) == "hello alice"
        assert events == [("stored", *who), ("stored", *who)], "a refresh stores a token too"
        assert api.client.delete(f"{BASE}/{service_id}/oauth/token").status_code == 204
        assert events[-1] == ("removed", *who)


# ---------------------------------------------------------------------------------------------------- refresh race


@pytest.mark.parametrize("store_backend", ["local", "aws"])
def test_refresh_race_across_four_instances(
    store_backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    with instances(store_backend, tmp_path, monkeypatch, clock, count=4) as containers, oauth_server() as server:
        api = Api(containers[0])
        with api.client:
            service_id = api.create_service(server)
            api.complete(service_id)
        first = api.whoami(service_id)
        assert first == "hello alice"
        clock.advance(3600)  # every instance now sees an expired access token
        results: list[str] = []

        async def caller(index: int) -> None:
            results.append(await api.awhoami(service_id, container=containers[index % 4]))

        async def everyone() -> None:
            async with anyio.create_task_group() as group:
                for index in range(20):
                    group.start_soon(caller, index)

        anyio.run(everyone)
        assert results == ["hello alice"] * 20
        assert server.token_requests["refresh_token"] == 1, "the rotating refresh token was used exactly once"
        token = stored_token(api, service_id)
        assert token is not None
        assert "lease_id" not in token, "the lease was released"


# ---------------------------------------------------------------------------------------------------- state


def test_a_reused_state_is_refused_and_leaves_no_token(api: Api) -> None:
    with oauth_server() as server:
        service_id = api.create_service(server)
        started = api.authorize(service_id)
        location = approve(started["authorization_url"])
        state = query_of(location)["state"]
        denied = api.client.get(
            "/api/v1/mcp-oauth/callback?" + urlencode({"error": "access_denied", "state": state}),
            follow_redirects=False,
        )
        assert denied.status_code == 303
        assert denied.headers["location"] == f"{FRONTEND}#mcp_oauth_error=access_denied"
        replay = api.callback(location)  # the same state again, now with a valid code
        problem(replay, 400, "oauth_state_invalid")
        assert stored_token(api, service_id) is None
        assert server.token_requests["authorization_code"] == 0, "the code never reached the token endpoint"
        attempt = api.status(service_id, attempt=started["authorization_attempt"])["authorization_attempt"]
        assert attempt == {"id": started["authorization_attempt"], "status": "failed", "error": "access_denied"}

        # A state that completed an authorization cannot complete another one.
        again = api.authorize(service_id)
        location = approve(again["authorization_url"])
        assert api.callback(location).status_code == 303
        token = stored_token(api, service_id)
        problem(api.callback(location), 400, "oauth_state_invalid")
        assert stored_token(api, service_id) == token
        assert server.token_requests["authorization_code"] == 1


def test_an_expired_state_is_refused(api: Api, clock: FakeClock) -> None:
    with oauth_server() as server:
        service_id = api.create_service(server)
        started = api.authorize(service_id)
        location = approve(started["authorization_url"])
        clock.advance(601)
        problem(api.callback(location), 400, "oauth_state_invalid")
        assert stored_token(api, service_id) is None
        assert server.token_requests["authorization_code"] == 0
        status = api.status(service_id, attempt=started["authorization_attempt"])
        assert status["status"] == "reauth_required"
        assert status["authorization_attempt"]["status"] == "expired"


def test_a_state_of_another_service_is_refused(api: Api) -> None:
    with oauth_server() as first, oauth_server() as second:
        one = api.create_service(first, name="one")
        two = api.create_service(second, name="two")
        started = api.authorize(one)
        location = approve(started["authorization_url"])
        # Mix-up: the callback carries the first service's state but the second server's issuer (RFC 9207).
        mixed = {**query_of(location), "iss": second.issuer}
        answered = api.callback(f"{CALLBACK}?{urlencode(mixed)}")
        assert answered.status_code == 303
        assert answered.headers["location"] == f"{FRONTEND}#mcp_oauth_error=issuer_mismatch"
        assert stored_token(api, one) is None
        assert stored_token(api, two) is None
        assert first.token_requests["authorization_code"] == 0
        # An attempt is only ever reported for its own service.
        elsewhere = api.client.get(
            f"{BASE}/{two}/oauth/status", params={"authorization_attempt": started["authorization_attempt"]}
        )
        problem(elsewhere, 404, "oauth_attempt_not_found")


def test_iss_is_checked_and_required_where_the_server_promises_it(local_api: Api) -> None:
    api = local_api
    with oauth_server() as server:
        service_id = api.create_service(server)
        started = api.authorize(service_id)
        without = {k: v for k, v in query_of(approve(started["authorization_url"])).items() if k != "iss"}
        answered = api.callback(f"{CALLBACK}?{urlencode(without)}")
        assert answered.headers["location"] == f"{FRONTEND}#mcp_oauth_error=issuer_mismatch"
        assert stored_token(api, service_id) is None
    with oauth_server(send_iss=False) as quiet:
        service_id = api.create_service(quiet, name="quiet")
        _, location = api.complete(service_id)
        assert location == f"{FRONTEND}#mcp_oauth_result=success", "no iss where none was promised"


def test_callback_without_or_with_an_unknown_state(api: Api) -> None:
    problem(api.client.get("/api/v1/mcp-oauth/callback?code=abc"), 400, "oauth_state_missing")
    problem(api.client.get("/api/v1/mcp-oauth/callback?code=abc&state=unknown"), 400, "oauth_state_invalid")


# ---------------------------------------------------------------------------------------------------- refresh failures


def _expired(api: Api, server: OAuthTestServer, clock: FakeClock) -> str:
    service_id = api.create_service(server)
    api.complete(service_id)
    clock.advance(3600)
    return service_id


def test_invalid_grant_deletes_the_token(local_api: Api, clock: FakeClock) -> None:
    api = local_api
    with oauth_server() as server:
        service_id = _expired(api, server, clock)
        calls = server.mcp_requests["accepted"] + server.mcp_requests["refused"]
        server.fail_token_requests(400, {"error": "invalid_grant"})
        with pytest.raises(OAuthRequired) as refused:
            api.whoami(service_id)
        assert refused.value.details["reason"] == "refresh_refused"
        assert stored_token(api, service_id) is None
        assert api.status(service_id)["status"] == "reauth_required"
        assert len(stored_clients(api)) == 1, "the client registration is kept"
        assert server.mcp_requests["accepted"] + server.mcp_requests["refused"] == calls, "no call went out"


def test_invalid_client_drops_the_token_and_the_registration(local_api: Api, clock: FakeClock) -> None:
    api = local_api
    with oauth_server() as server:
        service_id = _expired(api, server, clock)
        server.fail_token_requests(401, {"error": "invalid_client"})
        with pytest.raises(OAuthRequired):
            api.whoami(service_id)
        assert stored_token(api, service_id) is None
        assert stored_clients(api) == []
        api.complete(service_id)
        assert server.registrations == 2, "the next authorization registers again"
        assert api.whoami(service_id) == "hello alice"


@pytest.mark.parametrize("status", [500, 503])
def test_a_server_error_keeps_the_token(local_api: Api, clock: FakeClock, status: int) -> None:
    api = local_api
    with oauth_server() as server:
        service_id = _expired(api, server, clock)
        server.fail_token_requests(status, None)
        with pytest.raises(UpstreamError) as failed:
            api.whoami(service_id)
        assert failed.value.code == "oauth_refresh_failed"
        assert failed.value.retryable is True
        token = stored_token(api, service_id)
        assert token is not None, "the token is kept"
        assert "lease_id" not in token, "the lease is released"
        assert api.status(service_id)["status"] == "refreshable"
        assert api.whoami(service_id) == "hello alice", "the next call refreshes"
        assert server.token_requests["refresh_token"] == 2


def test_an_unreachable_token_endpoint_keeps_the_token(local_api: Api, clock: FakeClock) -> None:
    api = local_api
    with oauth_server() as server:
        service_id = _expired(api, server, clock)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            closed = probe.getsockname()[1]
        key = token_key(api.workspace_id, service_id, "user", api.admin_user)
        api.container.store.update(key, Update(set={"token_endpoint": f"http://127.0.0.1:{closed}/token"}))
        with pytest.raises(UpstreamError) as failed:
            api.whoami(service_id)
        assert failed.value.code == "oauth_server_unreachable"
        token = stored_token(api, service_id)
        assert token is not None
        assert "lease_id" not in token
        assert server.token_requests["refresh_token"] == 0


def test_failed_refreshes_are_counted_by_outcome(tmp_path: Path, clock: FakeClock) -> None:
    from tests.functional.test_telemetry import RecordingTelemetry

    telemetry = RecordingTelemetry()
    container = Container(Settings(data_dir=tmp_path / "data", **SETTINGS), clock=clock, telemetry=telemetry)
    api = Api(container)
    with api.client, oauth_server() as server:
        service_id = _expired(api, server, clock)
        server.fail_token_requests(503, None)
        with pytest.raises(UpstreamError):
            api.whoami(service_id)
        key = token_key(api.workspace_id, service_id, "user", api.admin_user)
        endpoint = stored_token(api, service_id)["token_endpoint"]  # type: ignore[index]
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            closed = probe.getsockname()[1]
        api.container.store.update(key, Update(set={"token_endpoint": f"http://127.0.0.1:{closed}/token"}))
        with pytest.raises(UpstreamError):
            api.whoami(service_id)
        api.container.store.update(key, Update(set={"token_endpoint": endpoint}))
        server.fail_token_requests(400, {"error": "invalid_grant"})
        with pytest.raises(OAuthRequired):
            api.whoami(service_id)
    container.close()
    outcomes = [dims["outcome"] for _, unit, dims in telemetry.named("OAuthRefreshFailures")]
    assert outcomes == ["kept", "kept", "refused"]


# ---------------------------------------------------------------------------------------------------- assertion grant


def test_jwt_bearer_assertion_grant(local_api: Api) -> None:
    api = local_api
    with oauth_server(jwt_bearer=True) as server:
        grants = ["authorization_code", "refresh_token", "urn:ietf:params:oauth:grant-type:jwt-bearer"]
        server.preregister("mcpbridge-agents", "agents-secret-33", redirect_uris=[CALLBACK], grant_types=grants)
        service_id = api.create_service(server, client_id="mcpbridge-agents")
        api.client.put(f"{BASE}/{service_id}/credentials", json={"client_secret": "agents-secret-33"})

        forged = server.assertion("mallory", "mcpbridge-agents", key=b"k" * 32)
        refused = api.client.post(f"{BASE}/{service_id}/oauth/assertion", json={"assertion": forged})
        problem(refused, 400, "oauth_assertion_rejected")
        assert stored_token(api, service_id) is None

        assertion = server.assertion("carol", "mcpbridge-agents")
        granted = api.client.post(f"{BASE}/{service_id}/oauth/assertion", json={"assertion": assertion})
        assert granted.status_code == 200, granted.text
        assert granted.json()["status"] == "authorized"
        assert granted.json()["refreshable"] is False
        assert api.whoami(service_id) == "hello carol"
        assert assertion not in granted.text


def test_assertion_grant_needs_a_server_that_supports_it(local_api: Api) -> None:
    api = local_api
    with oauth_server() as server:
        service_id = api.create_service(server)
        assertion = server.assertion("carol", "anyone")
        refused = api.client.post(f"{BASE}/{service_id}/oauth/assertion", json={"assertion": assertion})
        problem(refused, 409, "oauth_assertion_unsupported")
        assert stored_token(api, service_id) is None
        problem(
            api.client.post(f"{BASE}/{service_id}/oauth/assertion", json={"assertion": "not a jwt"}),
            400,
            "invalid_assertion",
        )


# ---------------------------------------------------------------------------------------------------- bad input


BAD_REDIRECTS = [
    "//evil.example/x",
    "/\\evil.example",
    "https://evil.example/",
    "https://app.example.evil.example/",
    "/%2f%2fevil.example",
    "/%5cevil.example",
    "javascript:alert(1)",
    "/settings\r\nSet-Cookie: a=b",
    "/settings\x00",
    "https://user@app.example/",
    "https://app.example/#frag",
    "settings/relative",
    "http://app.example/",
    "data:text/html,hi",
]


@pytest.fixture(scope="module")
def shared_server() -> Iterator[OAuthTestServer]:
    with oauth_server() as server:
        yield server


@pytest.mark.parametrize("bad", BAD_REDIRECTS)
def test_open_redirects_are_refused_and_nothing_is_stored(
    local_api: Api, shared_server: OAuthTestServer, bad: str
) -> None:
    api = local_api
    service_id = api.create_service(shared_server)
    answer = api.client.post(f"{BASE}/{service_id}/oauth/authorize-url", json={"frontend_redirect": bad})
    body = problem(answer, 400, "invalid_frontend_redirect")
    assert bad not in body["detail"]
    assert stored_attempts(api) == []
    assert stored_clients(api) == []
    assert shared_server.registrations == 0, "refused before any request to the authorization server"


@pytest.mark.parametrize("bad", ['mcp:"x"', "a\\b", "a  b", "é"])
def test_a_malformed_step_up_scope_is_refused_and_nothing_is_stored(
    local_api: Api, shared_server: OAuthTestServer, bad: str
) -> None:
    api = local_api
    service_id = api.create_service(shared_server)
    answer = api.client.post(f"{BASE}/{service_id}/oauth/authorize-url", json={"scope": bad})
    problem(answer, 400, "invalid_scope")
    assert stored_attempts(api) == []
    assert shared_server.registrations == 0, "refused before any request to the authorization server"


def test_a_step_up_asks_for_the_union_of_the_scopes(local_api: Api, shared_server: OAuthTestServer) -> None:
    api = local_api
    service_id = api.create_service(shared_server)
    body = {"scope": "mcp:write files.read"}
    answer = api.client.post(f"{BASE}/{service_id}/oauth/authorize-url", json=body)
    assert answer.status_code == 200, answer.text
    query = parse_qs(urlsplit(answer.json()["authorization_url"]).query)
    assert set(query["scope"][0].split(" ")) >= {"mcp:write", "files.read"}


@pytest.mark.parametrize("good", ["/settings/mcp?tab=oauth", f"{FRONTEND}/settings", f"{PUBLIC}/ui"])
def test_allowed_front_end_redirects(local_api: Api, good: str) -> None:
    api = local_api
    with oauth_server() as server:
        service_id = api.create_service(server)
        _, location = api.complete(service_id, frontend_redirect=good)
        assert location == f"{good}#mcp_oauth_result=success"


def test_bad_requests_change_nothing(local_api: Api) -> None:
    api = local_api
    with oauth_server() as server:
        service_id = api.create_service(server)
        plain = api.client.post(BASE, json={"name": "plain", "url": server.mcp_url}).json()["id"]
        url = f"{BASE}/{service_id}/oauth/authorize-url"
        problem(api.client.post(url, json={"redirect_uri": "https://evil.example/cb"}), 400, "invalid_redirect_uri")
        problem(api.client.post(url, json={"unknown": 1}), 422, "validation_failed")
        problem(api.client.post(f"{BASE}/{plain}/oauth/authorize-url", json={}), 409, "service_not_oauth")
        problem(api.client.post(f"{BASE}/svc_missing/oauth/authorize-url", json={}), 404, "service_not_found")
        problem(
            api.client.get(f"{BASE}/{service_id}/oauth/status", params={"authorization_attempt": "oauth_nope"}),
            404,
            "oauth_attempt_not_found",
        )
        problem(api.client.post(url, json={}, headers={"Authorization": "Bearer sk_wrong"}), 401, "invalid_api_key")
        assert stored_attempts(api) == []
        assert server.registrations == 0
        assert api.client.delete(f"{BASE}/{service_id}/oauth/token").status_code == 204
        # The explicit callback URL is accepted.
        assert api.client.post(url, json={"redirect_uri": CALLBACK}).status_code == 200


# ---------------------------------------------------------------------------------------------------- secrets


def test_no_code_state_verifier_or_token_in_responses_or_logs(
    local_api: Api, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    api = local_api
    caplog.set_level(logging.DEBUG)
    with oauth_server() as server:
        service_id = api.create_service(server)
        started = api.authorize(service_id)
        state = query_of(started["authorization_url"])["state"]
        pending = api.container.store.get(state_key(state))
        assert pending is not None
        verifier = api.container.secrets.open(
            pending["secret_code_verifier"],
            SecretContext(api.workspace_id, "oauth_state", started["authorization_attempt"]),
        )
        location = approve(started["authorization_url"])
        code = query_of(location)["code"]
        finished = api.callback(location)
        api.whoami(service_id)
        clock.advance(3600)
        api.whoami(service_id)  # refreshed
        api.client.get(f"{BASE}/{service_id}/oauth/status")
        api.client.delete(f"{BASE}/{service_id}/oauth/token")
        client = next(iter(server.provider.clients.values()))
        secrets = {code, state, verifier, *server.issued}
        assert client.client_secret is not None
        secrets.add(client.client_secret)
        assert code not in finished.headers["location"]
        assert state not in finished.headers["location"]

    # The authorization URL (for the user's browser) is the one place the state legitimately appears.
    shown = [r for r in api.responses if r.request.url.path != f"{BASE}/{service_id}/oauth/authorize-url"]
    callback_path = "/api/v1/mcp-oauth/callback"
    for response in shown:
        seen = response.text + " ".join(f"{k}: {v}" for k, v in response.headers.items())
        assert not any(secret in seen for secret in secrets), response.request.url.path
    logged = [
        record.getMessage()
        for record in caplog.records
        # The test's own HTTP client logs the URLs it requests (the callback's query included); the SDK
        # authorization server is test scaffolding.
        if not (record.name in ("httpx", "httpx2") and "http://testserver" in record.getMessage())
        and not record.name.startswith("mcp.server")
    ]
    assert any("OAuth" in line for line in logged), "the flow was logged"
    for line in logged:
        assert not any(secret in line for secret in secrets), line
    assert all(callback_path not in line or "?" not in line for line in logged if "testserver" not in line)


def test_uvicorn_access_log_hides_the_callback_query(local: Container) -> None:
    captured: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            captured.append(record.getMessage())

    app = create_combined_app(local)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # As ``mcpbridge serve`` runs it: uvicorn's own logging configuration, access log on.
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="info", lifespan="off"))
    handler = Capture()
    access = logging.getLogger("uvicorn.access")
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    worker = Worker.thread("the test server", thread)
    try:
        wait_until(lambda: server.started, worker, what="starting")
        access.addHandler(handler)
        answer = httpx.get(
            f"http://127.0.0.1:{port}/api/v1/mcp-oauth/callback?code=SECRETCODE123&state=SECRETSTATE456",
            timeout=ANSWER_TIMEOUT,
            trust_env=False,
        )
        assert answer.status_code == 400
        wait_until(lambda: bool(captured), worker, what="logging the request")
    finally:
        access.removeHandler(handler)
        server.should_exit = True
        thread.join(timeout=10)
    assert captured, "the access log line was written"
    assert any("/api/v1/mcp-oauth/callback?[redacted]" in line for line in captured), captured
    assert not any("SECRETCODE123" in line or "SECRETSTATE456" in line for line in captured)


def test_plain_http_is_refused_outside_the_allowlist(tmp_path: Path, clock: FakeClock) -> None:
    """Tokens, codes and secrets only travel over https; the tests' 127.0.0.1 is allowed because it is allowlisted."""

    def resolve(host: str, port: int) -> list[str]:
        if host == "mcp.example.com":
            return ["93.184.216.34"]
        raise socket.gaierror(host)

    policy = EgressPolicy(["127.0.0.1"], resolver=resolve)
    container = Container(Settings(data_dir=tmp_path / "data", **SETTINGS), clock=clock, egress=policy)
    try:
        api = Api(container)
        with api.client:
            created = api.client.post(
                BASE,
                json={"name": "plain", "url": "http://mcp.example.com/mcp", "auth_config": {"auth_type": "oauth"}},
            )
            assert created.status_code == 201, created.text
            service_id = created.json()["id"]
            refused = api.client.post(f"{BASE}/{service_id}/oauth/authorize-url", json={})
            body = problem(refused, 400, "url_scheme_not_allowed")
            assert "https" in body["detail"]
            assert stored_attempts(api) == []
            with pytest.raises(InvalidInput) as no_bearer:
                api.whoami(service_id)
            assert no_bearer.value.code == "url_scheme_not_allowed"
    finally:
        container.close()
