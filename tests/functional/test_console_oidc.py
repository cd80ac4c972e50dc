"""Signing in to the console through the OpenID Connect provider, over real HTTP: ``serve``'s app on 127.0.0.1 and
the local test provider over HTTPS (``tests/support/oidc_provider.py``), a person's browser that keeps cookies.

The person acts as their own user (a viewer with the user's access): the calls waiting for them are in their inbox
and one is approved and runs; admin routes refuse them; removing or disabling the user ends the session at once; a
state of the endpoints' sign-in is refused at the console's callback and the reverse (and left usable where it
belongs); a person the workspace does not know is sent back to the sign-in page and nothing is written; without a
provider the button is absent and the routes answer 404. No cookie, state or code is in an answer's body or a log.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import httpx
import pytest

from mcpbridge.http.auth import CONSOLE_COOKIE
from mcpbridge.http.routes.oauth_server import RedactOAuthQueries
from tests.functional.test_console_browser import Upstream
from tests.support.everything import serve
from tests.support.local_calls import wait_for_call
from tests.support.oauth_flow import Browser, Hub, OAuthClient, browser_trusting, close_clients, hub_on, pkce, query_of
from tests.support.oidc_provider import Person
from tests.support.oidc_sign_in import PROVIDER_NAME, Provider, hub_signing_in, served_provider

SERVICES = "/api/v1/mcp-services"
CALLS = "/api/v1/agent/tool-calls"
FINAL = ("completed", "failed", "rejected", "cancelled", "uncertain")


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Provider]:
    with served_provider(tmp_path_factory.mktemp("tls")) as served:
        yield served


@pytest.fixture
def hub(provider: Provider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Hub]:
    provider.op.person, provider.op.signing_key = None, None
    with hub_signing_in("local", provider, tmp_path, monkeypatch, match="email") as served:
        provider.op.redirect_uris.append(f"{served.base_url}/console/oidc/callback")
        yield served
    close_clients()


@dataclass
class Signed:
    browser: Browser
    answers: list[httpx.Response]
    """Every answer on the way (the hub's and the provider's), in order."""
    secrets: list[str]
    """The values that must never be shown: the state, the code, the cookies."""


def ada(hub: Hub, provider: Provider) -> str:
    """A user Ada, known by her verified address; the provider signs her in."""
    user, _ = hub.user_with_key("Ada")
    with hub.api() as api:
        assert api.put(f"/api/v1/users/{user}/access", json={"email": "ada@example.com"}).status_code == 200
    provider.op.person = Person("subject-ada", "ada@example.com", "Ada L.")
    return user


def to_provider(hub: Hub, provider: Provider, browser: Browser, **query: str) -> httpx.Response:
    """The sign-in page's button (what its script navigates to), then the provider: its redirect back."""
    started = browser.http.get(f"{hub.base_url}/console/oidc/start", params={"next": "/console", **query})
    assert started.status_code == 303, started.text
    assert started.headers["location"].startswith(f"{provider.op.issuer}/authorize?")
    back = browser.http.get(started.headers["location"])
    assert back.status_code == 302, back.text
    return back


def sign_in(hub: Hub, provider: Provider, **query: str) -> Signed:
    browser = browser_trusting(provider.ca)
    back = to_provider(hub, provider, browser, **query)
    returned = query_of(back.headers["location"])
    assert back.headers["location"].startswith(f"{hub.base_url}/console/oidc/callback?")
    callback = browser.http.get(back.headers["location"])
    assert callback.status_code == 303, callback.text
    cookies = [value for name, value in browser.http.cookies.items() if name == CONSOLE_COOKIE]
    return Signed(browser, [back, callback], [returned["state"], returned["code"], *cookies])


def session_of(signed: Signed, hub: Hub) -> httpx.Response:
    return signed.browser.http.get(f"{hub.base_url}/console/session")


def never_shown(signed: Signed, answers: list[httpx.Response], caplog: pytest.LogCaptureFixture) -> None:
    # The server's own logs (this test's HTTP client logs the URLs it fetches, the provider's redirect included).
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith(("mcpbridge", "uvicorn")))
    assert "mcpbridge" in {r.name.partition(".")[0] for r in caplog.records}, "the server's logs were captured"
    for secret in signed.secrets:
        assert len(secret) > 16
        for answer in answers:
            assert secret not in answer.text, answer.request.url
        assert secret not in logged


# ----------------------------------------------------------------------------------------------- signing in


def test_a_person_signs_in_sees_their_waiting_call_and_approves_it(
    hub: Hub, provider: Provider, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    user = ada(hub, provider)
    with hub.api() as api:
        agent_key = api.post(
            f"/api/v1/users/{user}/api-keys",
            json={"name": "Ada's agent", "role": "viewer", "capabilities": ["call_tools"]},
        ).json()["key"]
    upstream = Upstream()
    with serve(upstream, lifespan="off") as upstream_base:
        with hub.api() as admin:
            service = admin.post(SERVICES, json={"name": "pages", "url": f"{upstream_base}/mcp"}).json()["id"]
            assert admin.post(f"{SERVICES}/{service}/metadata/refresh").status_code == 200
            approval = admin.put(f"{SERVICES}/{service}/tool-approvals/echo", json={"require_approval": True})
            assert approval.status_code == 200, approval.text
        with hub.api(agent_key) as agent:
            tool_ref = agent.get(
                "/api/v1/agent/tools/describe", params={"service_id": service, "tool_name": "echo"}
            ).json()["tool_ref"]
            paused = agent.post(CALLS, json={"tool_ref": tool_ref, "arguments": {"text": "hello"}})
        assert paused.status_code == 202, paused.text
        call_id = paused.json()["pending_id"]

        page = httpx.get(f"{hub.base_url}/console/signin")
        assert page.status_code == 200
        assert 'id="oidc-sign-in"' in page.text
        assert f"Sign in with {PROVIDER_NAME}" in page.text
        assert "Admin work still needs an admin API key" in page.text

        signed = sign_in(hub, provider)
        assert signed.answers[-1].headers["location"] == "/console/signin?next=%2Fconsole"
        session = session_of(signed, hub)
        assert session.status_code == 200, session.text
        shown = session.json()
        assert (shown["user_id"], shown["signed_in_with"], shown["role"]) == (user, "oidc", "viewer")
        assert shown["api_key_id"] == ""
        assert shown["can_call_tools"]
        assert not shown["can_approve_calls"]
        with hub.api() as admin:
            keys = admin.get("/api/v1/api-keys", params={"limit": 100}).json()["items"]
        assert sorted(key["name"] for key in keys if key["user_id"] == user) == ["Ada's agent", "Ada's key"], (
            "no key was minted"
        )

        http = signed.browser.http
        inbox = http.get(f"{hub.base_url}/api/v1/agent/pending")
        assert inbox.status_code == 200, inbox.text
        assert [(item["pending_id"], item["user_id"]) for item in inbox.json()["items"]] == [(call_id, user)]
        csrf = {"X-CSRF-Token": shown["csrf_token"]}
        no_csrf = http.post(f"{hub.base_url}/api/v1/agent/tool-approvals/{call_id}", json={"decision": "approve"})
        assert no_csrf.status_code == 403
        assert no_csrf.json()["code"] == "csrf_token_missing"
        approved = http.post(
            f"{hub.base_url}/api/v1/agent/tool-approvals/{call_id}", json={"decision": "approve"}, headers=csrf
        )
        assert approved.status_code == 200, approved.text

        def final() -> dict[str, Any] | None:
            with hub.api() as admin:
                call: dict[str, Any] = admin.get(f"{CALLS}/{call_id}").json()
            return call if call["status"] in FINAL else None

        assert wait_for_call(call_id, final, what="the approved call to finish")["status"] == "completed"
        assert upstream.ran == [{"text": "hello"}]
        never_shown(signed, [*signed.answers, page, session, inbox, approved], caplog)


def test_the_persons_principal_cannot_reach_admin_routes(hub: Hub, provider: Provider) -> None:
    ada(hub, provider)
    signed = sign_in(hub, provider)
    http, csrf = signed.browser.http, {"X-CSRF-Token": session_of(signed, hub).json()["csrf_token"]}
    for method, path, body in [
        ("GET", "/api/v1/users", None),
        ("POST", "/api/v1/users", {"name": "Mallory"}),
        ("POST", SERVICES, {"name": "x", "url": "https://example.com/mcp"}),
        ("GET", "/api/v1/workspaces", None),
    ]:
        answer = http.request(method, f"{hub.base_url}{path}", json=body, headers=csrf)
        assert answer.status_code == 403, (path, answer.text)
    with hub.api() as admin:
        assert [u["name"] for u in admin.get("/api/v1/users").json()["items"]] == ["admin", "Ada"]
        assert admin.get(SERVICES).json()["items"] == []


@pytest.mark.parametrize("how", ["disable", "delete"])
def test_a_user_removed_or_disabled_ends_their_session_at_once(hub: Hub, provider: Provider, how: str) -> None:
    user = ada(hub, provider)
    signed = sign_in(hub, provider)
    assert session_of(signed, hub).status_code == 200
    with hub.api() as admin:
        done = (
            admin.post(f"/api/v1/users/{user}/disable") if how == "disable" else admin.delete(f"/api/v1/users/{user}")
        )
    assert done.status_code in (200, 202, 204), done.text
    ended = session_of(signed, hub)
    assert ended.status_code == 401, ended.text
    assert ended.json()["code"] == "console_session_ended"
    inbox = signed.browser.http.get(f"{hub.base_url}/api/v1/agent/pending")
    assert inbox.status_code == 401, inbox.text


def test_signing_out_ends_the_session(hub: Hub, provider: Provider) -> None:
    ada(hub, provider)
    signed = sign_in(hub, provider)
    copied = dict(signed.browser.http.cookies.items())
    assert signed.browser.http.delete(f"{hub.base_url}/console/session").status_code == 204
    again = httpx.get(f"{hub.base_url}/console/session", cookies=copied)
    assert again.status_code == 401, again.text
    assert again.json()["code"] == "console_session_ended"


def test_another_workspace_by_name_and_unknown_people_or_workspaces_are_refused(hub: Hub, provider: Provider) -> None:
    ada(hub, provider)
    with hub.api() as admin:
        created = admin.post("/api/v1/workspaces", json={"name": "Research"})
        assert created.status_code == 201, created.text
        research = created.json()["id"]
    before = len(hub.container.store.query(f"WS#{research}", limit=500).items)

    # Ada is nobody in Research: back to the sign-in page with the reason, no session, nothing written.
    browser = browser_trusting(provider.ca)
    back = to_provider(hub, provider, browser, workspace="research")
    refused = browser.http.get(back.headers["location"])
    assert refused.status_code == 303
    assert refused.headers["location"] == "/console/signin?oidc_error=user_unknown"
    assert CONSOLE_COOKIE not in browser.http.cookies
    assert len(hub.container.store.query(f"WS#{research}", limit=500).items) == before

    unknown = browser.http.get(f"{hub.base_url}/console/oidc/start", params={"workspace": "Nowhere"})
    assert unknown.status_code == 303
    assert unknown.headers["location"].startswith("/console/signin?oidc_error=workspace_not_found")


def test_a_state_of_one_flow_is_refused_by_the_other_and_left_usable(hub: Hub, provider: Provider) -> None:
    user = ada(hub, provider)

    # The endpoints' state at the console's callback.
    client = OAuthClient(hub.publish()["url"])
    client.discover()
    assert client.register().status_code == 201
    endpoint_browser = browser_trusting(provider.ca)
    consent = endpoint_browser.open(client.metadata["authorization_endpoint"], **client.authorize_params(pkce()[1]))
    started = endpoint_browser.submit(consent, "sign_in")
    from_provider = endpoint_browser.http.get(started.headers["location"])
    endpoint_return = from_provider.headers["location"]
    assert endpoint_return.startswith(f"{hub.base_url}/oauth/oidc/callback?")
    returned = query_of(endpoint_return)
    at_console = endpoint_browser.http.get(f"{hub.base_url}/console/oidc/callback", params=returned)
    assert at_console.status_code == 303
    assert at_console.headers["location"] == "/console/signin?oidc_error=oidc_state_invalid"
    assert CONSOLE_COOKIE not in endpoint_browser.http.cookies
    where_it_belongs = endpoint_browser.http.get(endpoint_return)
    assert where_it_belongs.status_code == 303, where_it_belongs.text
    consent_page = endpoint_browser.http.get(urljoin(hub.base_url, where_it_belongs.headers["location"]))
    assert "Signed in as" in consent_page.text

    # The console's state at the endpoints' callback.
    console_browser = browser_trusting(provider.ca)
    console_return = to_provider(hub, provider, console_browser).headers["location"]
    at_endpoint = console_browser.http.get(f"{hub.base_url}/oauth/oidc/callback", params=query_of(console_return))
    assert at_endpoint.status_code == 400, at_endpoint.text
    assert CONSOLE_COOKIE not in console_browser.http.cookies
    assert console_browser.http.get(console_return).status_code == 303
    assert console_browser.http.get(f"{hub.base_url}/console/session").json()["user_id"] == user


def test_a_callback_link_from_another_browser_signs_nobody_in(hub: Hub, provider: Provider) -> None:
    ada(hub, provider)
    attacker = browser_trusting(provider.ca)
    link = to_provider(hub, provider, attacker).headers["location"]
    victim = browser_trusting(provider.ca)
    answer = victim.http.get(link)
    assert answer.status_code == 303
    assert answer.headers["location"] == "/console/signin?oidc_error=oidc_browser_mismatch"
    assert CONSOLE_COOKIE not in victim.http.cookies


def test_the_access_log_blanks_the_callbacks_query() -> None:
    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, "", 0, '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:1", "GET", "/console/oidc/callback?code=abc&state=def", "1.1", 303), None,
    )  # fmt: skip
    assert RedactOAuthQueries().filter(record)
    assert record.getMessage() == '127.0.0.1:1 - "GET /console/oidc/callback?[redacted] HTTP/1.1" 303'


def test_without_a_provider_no_button_and_404(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with hub_on("local", tmp_path, monkeypatch) as plain:
        page = httpx.get(f"{plain.base_url}/console/signin")
        assert page.status_code == 200
        assert 'id="api-key"' in page.text
        assert "oidc" not in page.text.lower()
        for path in ("/console/oidc/start", "/console/oidc/callback?state=x&code=y"):
            answer = httpx.get(f"{plain.base_url}{path}")
            assert answer.status_code == 404, answer.text
            assert answer.json()["code"] == "oidc_not_configured"


def test_on_aws_through_the_admin_function(
    provider: Provider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The same sign-in through the Lambda functions behind the emulated HTTP API (state in moto)."""
    caplog.set_level(logging.DEBUG)
    provider.op.person, provider.op.signing_key = None, None
    with hub_signing_in("aws", provider, tmp_path, monkeypatch, match="email") as aws:
        provider.op.redirect_uris.append(f"{aws.base_url}/console/oidc/callback")
        page = httpx.get(f"{aws.base_url}/console/signin")
        assert f"Sign in with {PROVIDER_NAME}" in page.text
        user = ada(aws, provider)
        signed = sign_in(aws, provider)
        session = session_of(signed, aws)
        assert session.status_code == 200, session.text
        assert (session.json()["user_id"], session.json()["signed_in_with"]) == (user, "oidc")
        refused = signed.browser.http.get(f"{aws.base_url}/api/v1/users")
        assert refused.status_code == 403, refused.text
        with aws.api() as admin:
            assert admin.post(f"/api/v1/users/{user}/disable").status_code == 200
        ended = session_of(signed, aws)
        assert ended.status_code == 401, ended.text
        never_shown(signed, [*signed.answers, page, session, refused, ended], caplog)
    close_clients()
