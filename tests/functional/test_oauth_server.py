"""mcpbridge as the OAuth 2.1 authorization server of its published endpoints, over real HTTP on both backends
(SQLite; DynamoDB, KMS and S3 in moto): discovery from a bare 401, dynamic registration, the consent page with a
sign-in by API key, PKCE S256, codes and refresh tokens used once, RFC 8707 audiences, revocation, the endpoint's
auth mode; and the refusals, each leaving nothing behind."""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from authlib.oauth2 import rfc8414, rfc9207

from tests.support.oauth_flow import (
    Browser,
    Hub,
    OAuthClient,
    close_clients,
    consent_form,
    hub_on,
    mcp_post,
    pkce,
    query_of,
)

BACKENDS = ["local", "aws"]


@pytest.fixture(scope="module", params=BACKENDS)
def hub(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    with (
        pytest.MonkeyPatch.context() as monkeypatch,
        hub_on(request.param, tmp_path_factory.mktemp(request.param), monkeypatch) as served,
    ):
        yield served


@pytest.fixture(autouse=True)
def _closed_clients() -> Iterator[None]:
    yield
    close_clients()


@pytest.fixture
def endpoint(hub: Hub) -> dict[str, Any]:
    return hub.publish()


@pytest.fixture
def client(endpoint: dict[str, Any]) -> OAuthClient:
    oauth = OAuthClient(endpoint["url"])
    oauth.discover()
    assert oauth.register().status_code == 201
    return oauth


def tool_names(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text
    return [tool["name"] for tool in response.json()["result"]["tools"]]


# ---------------------------------------------------------------------------------------------------- discovery


def test_a_bare_401_leads_to_both_metadata_documents(hub: Hub, endpoint: dict[str, Any]) -> None:
    url, endpoint_id = endpoint["url"], endpoint["id"]
    refused = mcp_post(url, None)
    assert refused.status_code == 401
    challenge = refused.headers["www-authenticate"]
    metadata_url = f"{hub.base_url}/.well-known/oauth-protected-resource/mcp/{endpoint_id}"
    assert f'resource_metadata="{metadata_url}"' in challenge
    assert 'scope="read ask wiki"' in challenge
    assert "error=" not in challenge, "no token was sent: no error (RFC 6750 3.1)"
    assert 'error="invalid_token"' in mcp_post(url, "mcpat_" + "x" * 43).headers["www-authenticate"]

    resource = httpx.get(metadata_url).json()
    issuer = f"{hub.base_url}/oauth/{endpoint_id}"
    assert resource == {
        "resource": url,
        "authorization_servers": [issuer],
        "scopes_supported": ["read", "ask", "wiki"],
        "bearer_methods_supported": ["header"],
        "resource_name": "Field notes",
    }
    assert httpx.get(f"{url}/.well-known/oauth-protected-resource").json() == resource

    server = httpx.get(f"{hub.base_url}/.well-known/oauth-authorization-server/oauth/{endpoint_id}").json()
    assert httpx.get(f"{issuer}/.well-known/oauth-authorization-server").json() == server
    metadata = rfc8414.AuthorizationServerMetadata(server)
    metadata.validate(metadata_classes=[rfc9207.AuthorizationServerMetadata])
    assert server["issuer"] == issuer
    assert server["code_challenge_methods_supported"] == ["S256"]
    assert server["authorization_response_iss_parameter_supported"] is True
    assert server["client_id_metadata_document_supported"] is True
    assert set(server["grant_types_supported"]) == {"authorization_code", "refresh_token"}


def test_a_static_only_endpoint_has_no_authorization_server(hub: Hub) -> None:
    endpoint = hub.publish(auth_mode="static")
    refused = mcp_post(endpoint["url"], None)
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"] == 'Bearer realm="mcpbridge"'
    assert httpx.get(f"{hub.base_url}/.well-known/oauth-protected-resource/mcp/{endpoint['id']}").status_code == 404
    assert httpx.get(f"{hub.base_url}/.well-known/oauth-authorization-server/oauth/{endpoint['id']}").status_code == 404
    assert tool_names(mcp_post(endpoint["url"], endpoint["token"]))  # the static token works as ever


def test_unknown_endpoints_have_no_metadata(hub: Hub) -> None:
    assert httpx.get(f"{hub.base_url}/.well-known/oauth-protected-resource/mcp/ep_nothing").status_code == 404
    refused = mcp_post(f"{hub.base_url}/mcp/ep_01aaaaaaaaaaaaaaaaaaaaaaaa", None)
    assert refused.headers["www-authenticate"] == 'Bearer realm="mcpbridge"'


# ---------------------------------------------------------------------------------------------------- the flow


def test_register_sign_in_call_refresh_and_revoke(hub: Hub, endpoint: dict[str, Any]) -> None:
    client = OAuthClient(endpoint["url"])
    client.discover()
    registered = client.register()
    assert registered.status_code == 201, registered.text
    assert "client_secret" not in registered.json(), "a public client gets no secret"
    browser = Browser()
    code, verifier, redirected = client.sign_in(browser, hub.admin_key)
    assert redirected["iss"] == f"{hub.base_url}/oauth/{endpoint['id']}", "RFC 9207"
    tokens = client.exchange(code, verifier).json()
    assert tokens["token_type"] == "Bearer"
    assert tokens["scope"] == "read ask wiki"
    assert 0 < tokens["expires_in"] <= 3600
    assert tokens["access_token"].startswith("mcpat_")
    assert tokens["refresh_token"].startswith("mcprt_")
    assert "search_knowledge" in tool_names(mcp_post(endpoint["url"], tokens["access_token"]))

    refreshed = client.refresh(tokens["refresh_token"])
    assert refreshed.status_code == 200, refreshed.text
    rotated = refreshed.json()
    assert rotated["refresh_token"] != tokens["refresh_token"]
    assert tool_names(mcp_post(endpoint["url"], rotated["access_token"]))

    revoked = client.http.post(
        client.metadata["revocation_endpoint"], data={"token": rotated["refresh_token"], "client_id": client.client_id}
    )
    assert revoked.status_code == 200
    for token in (rotated["access_token"], tokens["access_token"]):
        assert mcp_post(endpoint["url"], token).status_code == 401, "revoking the refresh token ends the grant"
    assert client.refresh(rotated["refresh_token"]).json()["error"] == "invalid_grant"


def test_a_refresh_token_used_twice_revokes_the_grant(hub: Hub, client: OAuthClient) -> None:
    # Within the grace the same client gets the same pair back (test_oauth_refresh_grace); without it, a replay.
    tokens = client.tokens(Browser(), hub.admin_key)
    first = client.refresh(tokens["refresh_token"]).json()
    retried = client.refresh(tokens["refresh_token"])
    assert retried.status_code == 200, retried.text
    assert retried.json()["refresh_token"] == first["refresh_token"]
    hub.container.oauth_tokens.grace_seconds = 0
    try:
        replayed = client.refresh(tokens["refresh_token"])
    finally:
        hub.container.oauth_tokens.grace_seconds = hub.container.settings.oauth_refresh_grace_seconds
    assert replayed.status_code == 400
    assert replayed.json()["error"] == "invalid_grant"
    assert mcp_post(client.endpoint_url, first["access_token"]).status_code == 401
    assert client.refresh(first["refresh_token"]).json()["error"] == "invalid_grant"


def test_confidential_clients_need_their_secret(hub: Hub, endpoint: dict[str, Any]) -> None:
    for method in ("client_secret_post", "client_secret_basic"):
        client = OAuthClient(endpoint["url"])
        client.discover()
        registered = client.register(token_endpoint_auth_method=method).json()
        secret = registered["client_secret"]
        assert secret.startswith("mcpcs_")
        code, verifier, _ = client.sign_in(Browser(), hub.admin_key)
        client.client_secret = None
        if method == "client_secret_basic":
            assert client.exchange(code, verifier).json()["error"] == "invalid_client"
            basic = base64.b64encode(f"{client.client_id}:{secret}".encode()).decode()
            code, verifier, _ = client.sign_in(Browser(), hub.admin_key)
            answer = client.http.post(
                client.metadata["token_endpoint"],
                data={
                    "grant_type": "authorization_code",
                    "code": code,
                    "redirect_uri": client.redirect_uri,
                    "code_verifier": verifier,
                },
                headers={"authorization": f"Basic {basic}"},
            )
        else:
            assert (
                client.exchange(code, verifier, client_secret="mcpcs_" + "w" * 43).json()["error"] == "invalid_client"
            )
            code, verifier, _ = client.sign_in(Browser(), hub.admin_key)
            answer = client.exchange(code, verifier, client_secret=secret)
        assert answer.status_code == 200, answer.text
        stored = [i for i in hub.items("OACLIENT#") if i["client_id"] == client.client_id]
        assert len(stored) == 1
        assert secret not in repr(stored), "only the secret's digest is stored"


# ---------------------------------------------------------------------------------------------------- security


def test_pkce_downgrades_are_refused(hub: Hub, client: OAuthClient) -> None:
    browser = Browser()
    authorize = client.metadata["authorization_endpoint"]
    _, challenge = pkce()
    before = len(hub.items("OAREQ#"))
    for params in (
        client.authorize_params(None),  # type: ignore[arg-type]
        client.authorize_params(challenge, code_challenge_method="plain"),
        client.authorize_params(challenge, code_challenge_method=None),
    ):
        answer = browser.open(authorize, **params)
        assert answer.status_code == 303, answer.text
        redirected = query_of(answer.headers["location"])
        assert redirected["error"] == "invalid_request"
        assert redirected["state"] == params["state"]
        assert redirected["iss"] == client.metadata["issuer"]
    assert len(hub.items("OAREQ#")) == before, "no pending request was made"

    code, _, _ = client.sign_in(browser, hub.admin_key)
    missing = client.exchange(code, None)
    assert missing.status_code == 400
    assert missing.json()["error"] == "invalid_request"
    code, _, _ = client.sign_in(browser, hub.admin_key)
    wrong = client.exchange(code, pkce()[0])
    assert wrong.json()["error"] == "invalid_grant"


def test_a_code_used_twice_is_refused_and_revokes_the_grant(hub: Hub, client: OAuthClient) -> None:
    code, verifier, _ = client.sign_in(Browser(), hub.admin_key)
    first = client.exchange(code, verifier)
    assert first.status_code == 200
    tokens = first.json()
    assert tool_names(mcp_post(client.endpoint_url, tokens["access_token"]))
    again = client.exchange(code, verifier)
    assert again.status_code == 400
    assert again.json()["error"] == "invalid_grant"
    assert mcp_post(client.endpoint_url, tokens["access_token"]).status_code == 401
    assert client.refresh(tokens["refresh_token"]).json()["error"] == "invalid_grant"


def test_redirect_uris_must_match_the_registration(hub: Hub, client: OAuthClient) -> None:
    browser = Browser()
    _, challenge = pkce()
    before = len(hub.items("OAREQ#"))
    for redirect in ("https://attacker.example/callback", "http://127.0.0.1:4999/callback/../evil", None):
        params = client.authorize_params(challenge, redirect_uri=redirect)
        if redirect is None:
            params.pop("redirect_uri", None)
            client_two = OAuthClient(client.endpoint_url, metadata=client.metadata)
            client_two.register(redirect_uris=["http://127.0.0.1:4999/a", "http://127.0.0.1:4999/b"])
            params["client_id"] = client_two.client_id
        answer = browser.open(client.metadata["authorization_endpoint"], **params)
        assert answer.status_code == 400, answer.text
        assert "location" not in answer.headers, "never redirected to an unregistered URI"
        assert "attacker.example" not in answer.text.split("<main>")[1].split("</h1>")[0]
    unknown = browser.open(
        client.metadata["authorization_endpoint"], **{**client.authorize_params(challenge), "client_id": "mcpc_nobody"}
    )
    assert unknown.status_code == 400
    assert "location" not in unknown.headers
    assert len(hub.items("OAREQ#")) == before

    # A loopback redirect URI may change its port (RFC 8252 7.3), nothing else.
    moved = browser.open(
        client.metadata["authorization_endpoint"],
        **client.authorize_params(challenge, redirect_uri="http://127.0.0.1:5111/callback"),
    )
    assert moved.status_code == 200
    code, verifier, _ = client.sign_in(browser, hub.admin_key)
    assert (
        client.exchange(code, verifier, redirect_uri="http://127.0.0.1:4999/other").json()["error"] == "invalid_grant"
    )


@pytest.mark.parametrize(
    "redirect_uris",
    [
        ["http://example.com/callback"],
        ["javascript:alert(1)"],
        ["https://example.com/cb#fragment"],
        ["https://user:pass@example.com/cb"],
        [],
        "https://example.com/cb",
    ],
)
def test_registration_refuses_unsafe_redirect_uris(hub: Hub, endpoint: dict[str, Any], redirect_uris: Any) -> None:
    client = OAuthClient(endpoint["url"])
    client.discover()
    before = len(hub.items("OACLIENT#"))
    answer = client.register(redirect_uris=redirect_uris)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] in ("invalid_redirect_uri", "invalid_client_metadata")
    assert len(hub.items("OACLIENT#")) == before


def test_tokens_are_bound_to_their_endpoint(hub: Hub, client: OAuthClient) -> None:
    other = hub.publish(name="Other")
    tokens = client.tokens(Browser(), hub.admin_key)
    refused = mcp_post(other["url"], tokens["access_token"])
    assert refused.status_code == 401
    assert refused.json()["code"] == "invalid_token"
    assert tool_names(mcp_post(client.endpoint_url, tokens["access_token"]))

    # The resource named must be this endpoint, at the authorization and at the token endpoint (RFC 8707).
    browser = Browser()
    _, challenge = pkce()
    answer = browser.open(
        client.metadata["authorization_endpoint"], **client.authorize_params(challenge, resource=other["url"])
    )
    assert query_of(answer.headers["location"])["error"] == "invalid_target"
    code, verifier, _ = client.sign_in(browser, hub.admin_key)
    assert client.exchange(code, verifier, resource=other["url"]).json()["error"] == "invalid_target"
    # A client registered at one endpoint is unknown at another.
    elsewhere = OAuthClient(other["url"])
    elsewhere.discover()
    elsewhere.client_id = client.client_id
    _, challenge = pkce()
    page = browser.open(elsewhere.metadata["authorization_endpoint"], **elsewhere.authorize_params(challenge))
    assert page.status_code == 400
    assert "location" not in page.headers


def test_the_consent_form_refuses_cross_site_and_forged_posts(hub: Hub, client: OAuthClient) -> None:
    browser = Browser()
    _, challenge = pkce()
    page = browser.open(client.metadata["authorization_endpoint"], **client.authorize_params(challenge))
    assert page.status_code == 200
    assert page.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert page.headers["cache-control"] == "no-store"
    cookie = page.headers["set-cookie"].lower()
    assert "httponly" in cookie
    assert "samesite=lax" in cookie
    action = client.metadata["authorization_endpoint"]
    form = consent_form(page.text)
    grants_before = len(hub.items("OAGRANT#"))
    forged = {**form, "decision": "approve", "api_key": hub.admin_key}

    attacker = Browser().http  # another browser: no cookie of this request
    assert attacker.post(action, data=forged).status_code == 400
    wrong_secret = browser.http.post(action, data={**forged, "csrf": "x" * 43})
    assert wrong_secret.status_code == 403
    cross_site = browser.http.post(action, data=forged, headers={"origin": "https://attacker.example"})
    assert cross_site.status_code == 403
    fetched = browser.http.post(action, data=forged, headers={"sec-fetch-site": "cross-site"})
    assert fetched.status_code == 403
    assert len(hub.items("OAGRANT#")) == grants_before, "no forged post approved anything"

    approved = browser.submit(page, "approve", api_key=hub.admin_key)
    assert approved.status_code == 303
    assert browser.submit(page, "approve", api_key=hub.admin_key).status_code == 400, "a request is decided once"


def test_denying_redirects_with_access_denied(hub: Hub, client: OAuthClient) -> None:
    browser = Browser()
    _, challenge = pkce()
    params = client.authorize_params(challenge)
    page = browser.open(client.metadata["authorization_endpoint"], **params)
    answer = browser.submit(page, "deny")
    redirected = query_of(answer.headers["location"])
    assert redirected.pop("error_description")
    assert redirected == {"error": "access_denied", "state": params["state"], "iss": client.metadata["issuer"]}


def test_a_wrong_or_foreign_key_signs_nobody_in(hub: Hub, client: OAuthClient, tmp_path_factory: Any) -> None:
    browser = Browser()
    _, challenge = pkce()
    page = browser.open(client.metadata["authorization_endpoint"], **client.authorize_params(challenge))
    again = browser.submit(page, "approve", api_key="sk_" + "n" * 43)
    assert again.status_code == 400
    assert "not valid here" in again.text
    assert "location" not in again.headers
    # The page is shown again with the same request: the right key still works.
    assert browser.submit(again, "approve", api_key=hub.admin_key).status_code == 303


def test_nothing_secret_reaches_a_body_or_a_log_line(
    hub: Hub, client: OAuthClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    browser = Browser()
    verifier, challenge = pkce()
    params = client.authorize_params(challenge)
    page = browser.open(client.metadata["authorization_endpoint"], **params)
    assert params["state"] not in page.text
    assert challenge not in page.text
    answer = browser.submit(page, "approve", api_key=hub.admin_key)
    code = query_of(answer.headers["location"])["code"]
    assert code not in answer.text
    tokens = client.exchange(code, verifier).json()
    refreshed = client.refresh(tokens["refresh_token"]).json()
    listed = mcp_post(client.endpoint_url, refreshed["access_token"])
    secrets_seen = [
        hub.admin_key,
        params["state"],
        verifier,
        code,
        tokens["access_token"],
        tokens["refresh_token"],
        refreshed["access_token"],
        refreshed["refresh_token"],
    ]
    assert not any(secret in listed.text for secret in secrets_seen)
    # Every record of the server side (the test's own HTTP client, httpx and httpcore, logs the URLs it fetches).
    server_side = [r for r in caplog.records if not r.name.startswith(("httpx", "httpcore"))]
    logged = "\n".join(f"{r.getMessage()} {r.args!r}" for r in server_side)
    assert logged, "the flow logs what happened"
    leaked = [secret[:10] for secret in secrets_seen if secret in logged]
    assert leaked == []
    stored = repr(hub.container.store.query(f"WS#{hub.container.identity.installed_workspace_id()}", limit=1000).items)
    assert not [s[:10] for s in secrets_seen[1:] if s in stored], "only digests at rest"


# ---------------------------------------------------------------------------------------------------- auth modes


def test_auth_modes(hub: Hub) -> None:
    oauth_only = hub.publish(name="OAuth only", auth_mode="oauth")
    refused = mcp_post(oauth_only["url"], oauth_only["token"])
    assert refused.status_code == 401
    assert refused.json()["code"] == "static_token_not_accepted"
    assert "resource_metadata=" in refused.headers["www-authenticate"]
    client = OAuthClient(oauth_only["url"])
    client.discover()
    client.register()
    tokens = client.tokens(Browser(), hub.admin_key)
    assert tool_names(mcp_post(oauth_only["url"], tokens["access_token"]))

    with hub.api() as api:
        changed = api.put(f"/api/v1/mcp-endpoints/{oauth_only['id']}", json={"auth_mode": "static"})
        assert changed.status_code == 200
        assert changed.json()["auth_mode"] == "static"
        refused = mcp_post(oauth_only["url"], tokens["access_token"])
        assert refused.status_code == 401
        assert refused.json()["code"] == "oauth_not_accepted"
        assert tool_names(mcp_post(oauth_only["url"], oauth_only["token"]))
        bad = api.put(f"/api/v1/mcp-endpoints/{oauth_only['id']}", json={"auth_mode": "sometimes"})
        assert bad.status_code == 422
        assert api.get(f"/api/v1/mcp-endpoints/{oauth_only['id']}").json()["auth_mode"] == "static"


def test_disabling_the_user_or_the_endpoint_applies_to_the_next_call(hub: Hub, endpoint: dict[str, Any]) -> None:
    user_id, key = hub.user_with_key("Ada")
    client = OAuthClient(endpoint["url"])
    client.discover()
    client.register()
    tokens = client.tokens(Browser(), key)
    assert tool_names(mcp_post(endpoint["url"], tokens["access_token"]))
    with hub.api() as api:
        assert api.post(f"/api/v1/users/{user_id}/disable").status_code == 200
        refused = mcp_post(endpoint["url"], tokens["access_token"])
        assert refused.status_code == 403
        assert refused.json()["code"] == "user_inactive"
        assert client.refresh(tokens["refresh_token"]).json()["error"] == "invalid_grant"
        assert api.post(f"/api/v1/users/{user_id}/enable").status_code == 200
        tokens = client.tokens(Browser(), key)
        assert api.put(f"/api/v1/mcp-endpoints/{endpoint['id']}", json={"enabled": False}).status_code == 200
        assert mcp_post(endpoint["url"], tokens["access_token"]).json()["code"] == "endpoint_disabled"
