"""Sign-in on the consent page through the operator's OpenID Connect provider, on both deployments (the local app;
the Lambda functions behind the emulated HTTP API, state in moto), against an OIDC provider served over HTTPS
(``tests/support/oidc_provider.py``: discovery, PKCE, nonce, RS256 ID tokens, JWKS, RFC 9207 ``iss``).

The person is matched by verified e-mail address (then linked by subject) or provisioned, per the settings; someone
the workspace does not know, an unverified address, a declined sign-in, a replayed callback and a forged ID token
all end on a refusal page and approve nothing."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import httpx
import pytest

from tests.support.oauth_flow import (
    Browser,
    Hub,
    OAuthClient,
    browser_trusting,
    close_clients,
    mcp_post,
    pkce,
    query_of,
)
from tests.support.oidc_provider import CLIENT_SECRET, Person, new_key
from tests.support.oidc_sign_in import PROVIDER_NAME, Provider, hub_signing_in, served_provider

BACKENDS = ["local", "aws"]


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Provider]:
    with served_provider(tmp_path_factory.mktemp("tls")) as served:
        yield served


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, provider: Provider) -> Iterator[str]:
    provider.op.person, provider.op.signing_key = None, None
    yield str(request.param)
    close_clients()


def person_browser(provider: Provider) -> Browser:
    return browser_trusting(provider.ca)


@dataclass
class Outcome:
    page: httpx.Response
    """The last page the hub showed (the consent page once signed in, or a refusal)."""
    code: str | None = None
    verifier: str = ""
    answers: list[httpx.Response] = field(default_factory=list)
    """Every answer of the hub on the way, in order."""


def sign_in(provider: Provider, hub: Hub, client: OAuthClient, browser: Browser) -> Outcome:
    """Open the consent page, sign in with the provider, and approve if the hub lets the person."""
    verifier, challenge = pkce()
    params = client.authorize_params(challenge)
    page = browser.open(client.metadata["authorization_endpoint"], **params)
    assert page.status_code == 200, page.text
    assert f"Sign in with {PROVIDER_NAME}" in page.text
    assert 'name="api_key"' not in page.text, "with a provider, no API key is asked for"
    to_provider = browser.submit(page, "sign_in")
    assert to_provider.status_code == 303, to_provider.text
    assert to_provider.headers["location"].startswith(f"{provider.op.issuer}/authorize?")
    from_provider = browser.http.get(to_provider.headers["location"])
    assert from_provider.status_code == 302
    callback = browser.http.get(from_provider.headers["location"])
    if callback.status_code != 303:
        return Outcome(callback, answers=[page, to_provider, callback])
    consent = browser.http.get(urljoin(hub.base_url, callback.headers["location"]))
    assert consent.status_code == 200, consent.text
    approved = browser.submit(consent, "approve")
    assert approved.status_code == 303, approved.text
    returned = query_of(approved.headers["location"])
    assert returned["state"] == params["state"]
    return Outcome(consent, returned["code"], verifier, [page, to_provider, callback, consent, approved])


def oauth_client(hub: Hub) -> OAuthClient:
    client = OAuthClient(hub.publish()["url"])
    client.discover()
    assert client.register().status_code == 201
    return client


def users(hub: Hub) -> list[dict[str, Any]]:
    with hub.api() as api:
        listed = api.get("/api/v1/users", params={"limit": 100})
    assert listed.status_code == 200, listed.text
    return listed.json()["items"]  # type: ignore[no-any-return]


def grant_users(hub: Hub) -> list[str]:
    return [str(item["user_id"]) for item in hub.items("OAGRANT#")]


# ---------------------------------------------------------------------------------------------------- matching


def test_a_verified_address_matches_a_user_who_keeps_the_link(
    backend: str, provider: Provider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with hub_signing_in(backend, provider, tmp_path, monkeypatch, match="email") as hub:
        ada, _ = hub.user_with_key("Ada")
        with hub.api() as api:
            set_access = api.put(f"/api/v1/users/{ada}/access", json={"email": "ada@example.com"})
        assert set_access.status_code == 200, set_access.text
        provider.op.person = Person("subject-ada", "Ada@Example.com", "Ada L.")
        client = oauth_client(hub)

        outcome = sign_in(provider, hub, client, person_browser(provider))
        assert outcome.code is not None, outcome.page.text
        assert "Signed in as" in outcome.page.text
        [asked] = provider.op.authorizations[-1:]
        assert asked["code_challenge_method"] == "S256"
        assert asked["nonce"]
        assert "client_secret" not in provider.op.exchanges[-1], "the secret goes in the Basic header"
        tokens = client.exchange(outcome.code, outcome.verifier)
        assert tokens.status_code == 200, tokens.text
        assert mcp_post(client.endpoint_url, tokens.json()["access_token"]).status_code == 200
        assert grant_users(hub) == [ada]

        # The address changes at the provider: the subject was linked, the same user signs in.
        provider.op.person = Person("subject-ada", "ada@elsewhere.example", "Ada L.")
        again = sign_in(provider, hub, oauth_client(hub), person_browser(provider))
        assert again.code is not None, again.page.text
        assert set(grant_users(hub)) == {ada}
        assert len(users(hub)) == 2, "the admin and Ada: nobody provisioned"


def test_unknown_or_unverified_people_are_refused(
    backend: str, provider: Provider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with hub_signing_in(backend, provider, tmp_path, monkeypatch, match="email") as hub:
        grace, _ = hub.user_with_key("Grace")
        with hub.api() as api:
            assert api.put(f"/api/v1/users/{grace}/access", json={"email": "grace@example.com"}).status_code == 200
        client = oauth_client(hub)
        before = len(users(hub))
        for person in (
            Person("subject-stranger", "stranger@example.com", "Stranger"),
            Person("subject-grace-2", "grace@example.com", "Not Grace", email_verified=False),
            Person("subject-no-mail", None, "No address"),
        ):
            provider.op.person = person
            refused = sign_in(provider, hub, client, person_browser(provider))
            assert refused.code is None
            assert refused.page.status_code == 403, refused.page.text
            assert "no user of this workspace signs in as you" in refused.page.text
        assert len(users(hub)) == before
        assert grant_users(hub) == []


def test_people_are_provisioned_by_subject(
    backend: str, provider: Provider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with hub_signing_in(backend, provider, tmp_path, monkeypatch, match="subject", provision=True) as hub:
        before = {user["id"] for user in users(hub)}
        provider.op.person = Person("subject-hopper", "grace.hopper@example.com", "Grace Hopper")
        first = sign_in(provider, hub, oauth_client(hub), person_browser(provider))
        assert first.code is not None, first.page.text
        [new] = [user for user in users(hub) if user["id"] not in before]
        assert new["name"] == "Grace Hopper"
        assert grant_users(hub) == [new["id"]]

        provider.op.person = Person("subject-hopper", "other@example.com", "G. Hopper")
        second = sign_in(provider, hub, oauth_client(hub), person_browser(provider))
        assert second.code is not None
        assert {user["id"] for user in users(hub)} == before | {new["id"]}, "the same subject: the same user"


# ---------------------------------------------------------------------------------------------------- refusals


def test_declined_replayed_and_forged_sign_ins_approve_nothing(
    backend: str, provider: Provider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with hub_signing_in(backend, provider, tmp_path, monkeypatch, match="subject", provision=True) as hub:
        client = oauth_client(hub)
        before = len(users(hub))

        provider.op.person = None
        declined = sign_in(provider, hub, client, person_browser(provider))
        assert declined.page.status_code == 400, declined.page.text
        assert "did not sign you in" in declined.page.text

        provider.op.person = Person("subject-mallory", "mallory@example.com", "Mallory")
        provider.op.signing_key = new_key("k1")  # the published key's id, another key: the signature fails
        forged = sign_in(provider, hub, client, person_browser(provider))
        assert forged.code is None
        assert "did not verify" in forged.page.text
        provider.op.signing_key = None

        # A callback the browser already delivered, delivered again: the state was used.
        browser = person_browser(provider)
        _, challenge = pkce()
        page = browser.open(client.metadata["authorization_endpoint"], **client.authorize_params(challenge))
        to_provider = browser.submit(page, "sign_in")
        callback_url = browser.http.get(to_provider.headers["location"]).headers["location"]
        assert browser.http.get(callback_url).status_code == 303
        replayed = browser.http.get(callback_url)
        assert replayed.status_code in (400, 401, 403)
        assert "unknown, used or expired" in replayed.text
        assert "code=" not in replayed.text
        assert len(users(hub)) == before + 1, "only the sign-in that went through provisioned someone"
        assert grant_users(hub) == []


def test_no_provider_secret_reaches_a_page_a_log_line_or_the_store(
    backend: str,
    provider: Provider,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    with hub_signing_in(backend, provider, tmp_path, monkeypatch, match="subject", provision=True) as hub:
        provider.op.person = Person("subject-lin", "lin@example.com", "Lin")
        client = oauth_client(hub)
        outcome = sign_in(provider, hub, client, person_browser(provider))
        assert outcome.code is not None, outcome.page.text
        assert client.exchange(outcome.code, outcome.verifier).status_code == 200
        asked, exchanged, issued = provider.op.authorizations[-1], provider.op.exchanges[-1], provider.op.issued[-1]
        secrets_seen = {
            "client secret": CLIENT_SECRET,
            "state": asked["state"],
            "nonce": asked["nonce"],
            "verifier": exchanged["code_verifier"],
            "code": exchanged["code"],
            "ID token": issued["id_token"],
            "access token": issued["access_token"],
        }
        workspace = hub.container.identity.installed_workspace_id()
        stored = repr(hub.container.store.query(f"WS#{workspace}", limit=1000).items)
    # The state and nonce travel in the redirect to the provider, where the spec puts them; nowhere else.
    bodies = "\n".join(answer.text for answer in outcome.answers)
    assert [name for name, value in secrets_seen.items() if value in bodies] == []
    server_side = [r for r in caplog.records if not r.name.startswith(("httpx", "httpcore"))]
    printed = capfd.readouterr()
    logged = "\n".join(f"{r.getMessage()} {r.args!r}" for r in server_side) + printed.out + printed.err
    assert "approved a client" in logged, "the flow logs what happened"
    assert [name for name, value in secrets_seen.items() if value in logged] == []
    assert [name for name, value in secrets_seen.items() if value in stored] == [], "only digests and sealed values"
