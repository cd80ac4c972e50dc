"""The sign-in and consent page in a real browser: headless Chromium (Debian's ``chromium``), page scripts turned off,
driven by typing and mouse clicks over the DevTools protocol, on both deployments (the local app; the Lambda
functions behind the emulated HTTP API, state in moto).

It checks what only a browser can: the page works with no script at all (it has none; its CSP allows none), its
``form-action`` policy lets the answer's redirect through to the client, framing is refused by the browser itself
(``X-Frame-Options``, ``frame-ancestors``), a form posted from another site is refused and approves nothing. A
screenshot of every state is written to ``/tmp/oauth-shots/`` (``<backend>-<state>.png``).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from urllib.parse import quote, urlencode, urlsplit

import pytest

from tests.support.chromium import BROWSER, Tab
from tests.support.consent_browser import (
    HIDDEN,
    OTHER_SITE,
    Scene,
    authorization,
    document_response,
    scene_of,
    shot,
)
from tests.support.oauth_flow import close_clients, hub_on, lambda_hub, mcp_post, query_of

pytestmark = pytest.mark.skipif(
    BROWSER is None, reason="no Chromium on this machine (Debian: apt-get install chromium)"
)

BACKENDS = ["local", "aws"]


@pytest.fixture(scope="module", params=BACKENDS)
def scene(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    with pytest.MonkeyPatch.context() as monkeypatch:
        if request.param == "local":
            served = hub_on("local", tmp_path_factory.mktemp("local"), monkeypatch)
        else:
            served = lambda_hub(monkeypatch)
        with served as hub, scene_of(request.param, hub, tmp_path_factory.mktemp("profile")) as built:
            yield built


@pytest.fixture(autouse=True)
def _closed_clients() -> Iterator[None]:
    yield
    close_clients()


@pytest.fixture
def tab(scene: Scene) -> Iterator[Tab]:
    opened = scene.browser.tab()
    yield opened
    opened.close()


# ---------------------------------------------------------------------------------------------------- states


def test_sign_in_and_consent_without_javascript(scene: Scene, tab: Tab) -> None:
    flow = authorization(scene)
    tab.navigate(flow.url)
    page = tab.html()
    assert "Allow Field desktop to use Field notes?" in html.unescape(page)
    assert f"{scene.client_origin}/callback" in page, "where the answer goes is shown"
    assert "<script" not in page
    headers = {k.lower(): v for k, v in document_response(tab, flow.url.split("?")[0])["headers"].items()}
    assert headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert "script-src" not in headers["content-security-policy"], "default-src 'none': no script may run"
    shot(scene, tab, "1-sign-in")

    # A wrong key: the same page again, saying so, nothing approved.
    tab.type_into("#api_key", "sk_" + "w" * 43)
    tab.click('button[value="approve"]')
    assert 'role="alert"' in tab.html()
    assert document_response(tab, flow.url.split("?")[0])["status"] == 400
    shot(scene, tab, "2-wrong-key")

    tab.type_into("#api_key", scene.hub.admin_key)
    tab.click('button[value="approve"]')
    landed = tab.url()
    assert landed.startswith(f"{scene.client_origin}/callback?"), landed
    returned = query_of(landed)
    assert returned["state"] == flow.state
    assert returned["iss"] == flow.client.metadata["issuer"]
    shot(scene, tab, "3-approved")
    assert scene.hub.admin_key not in landed
    assert not any(scene.hub.admin_key in request.get("url", "") for request in tab.requests())

    exchanged = flow.client.exchange(returned["code"], flow.verifier)
    assert exchanged.status_code == 200, exchanged.text
    assert mcp_post(flow.client.endpoint_url, exchanged.json()["access_token"]).status_code == 200


def test_deny_returns_to_the_client_with_access_denied(scene: Scene, tab: Tab) -> None:
    flow = authorization(scene)
    tab.navigate(flow.url)
    tab.click('button[value="deny"]')
    landed = query_of(tab.url())
    assert landed["error"] == "access_denied"
    assert landed["state"] == flow.state
    assert "code" not in landed
    assert "an error: access_denied" in tab.html()
    shot(scene, tab, "4-denied")


def test_a_redirect_uri_not_registered_stays_on_an_error_page(scene: Scene, tab: Tab) -> None:
    flow = authorization(scene)
    elsewhere = flow.url.replace(quote(f"{scene.client_origin}/callback", safe=""), quote(f"{scene.other_site}/x"))
    assert elsewhere != flow.url
    tab.navigate(elsewhere)
    assert tab.url() == elsewhere, "not sent on to the unregistered URI"
    assert document_response(tab, elsewhere.split("?")[0])["status"] == 400
    assert "<form" not in tab.html()
    assert not any(urlsplit(r["url"]).hostname == OTHER_SITE for r in tab.requests())
    shot(scene, tab, "5-error")


def test_the_browser_refuses_to_frame_the_page(scene: Scene, tab: Tab) -> None:
    flow = authorization(scene)
    tab.navigate(f"{scene.other_site}/framing?{urlencode({'src': flow.url})}")
    tab.settle(1.0)
    framed = [
        e["params"]["requestId"]
        for e in tab.seen
        if e["method"] == "Network.requestWillBeSent" and e["params"]["request"]["url"] == flow.url
    ]
    assert framed, "the frame asked for the page"
    failed = {e["params"]["requestId"]: e["params"] for e in tab.seen if e["method"] == "Network.loadingFailed"}
    assert framed[-1] in failed, "and the browser did not load it"
    assert any("frame-ancestors 'none'" in message and "blocked" in message for message in tab.messages()), (
        tab.messages()
    )
    assert "Allow Field desktop" not in html.unescape(tab.html())
    shot(scene, tab, "6-framed")


def test_a_form_posted_from_another_site_approves_nothing(scene: Scene, tab: Tab) -> None:
    flow = authorization(scene)
    tab.navigate(flow.url)
    page = tab.html()
    fields = {name: html.unescape(value) for name, value in re.findall(HIDDEN, page)}
    assert set(fields) == {"consent", "csrf"}
    action = flow.client.metadata["authorization_endpoint"]
    forged = {"action": action, **fields, "decision": "approve", "api_key": scene.hub.admin_key}
    grants_before = len(scene.hub.items("OAGRANT#"))

    tab.navigate(f"{scene.other_site}/forged?{urlencode(forged)}")
    tab.click("#claim")
    refused = document_response(tab, action)
    assert refused["status"] == 403
    assert "not sent by the page mcpbridge showed you" in tab.html()
    assert not tab.url().startswith(scene.client_origin)
    assert len(scene.hub.items("OAGRANT#")) == grants_before
    shot(scene, tab, "7-cross-site-refused")
