"""The consent page with sign-in through the operator's OpenID Connect provider, in headless Chromium with page
scripts off, on both deployments: the "Sign in with ..." page, the provider (over https; the browser pins its
certificate) and back, the "Signed in as ..." consent page, Allow. The page's ``form-action`` policy must let the
sign-in form go to the provider, and the answer to the client. Screenshots in ``/tmp/oauth-shots/``."""

from __future__ import annotations

import html
from collections.abc import Iterator

import pytest

from tests.support.chromium import BROWSER, Tab
from tests.support.consent_browser import Scene, authorization, document_response, scene_of, shot
from tests.support.oauth_flow import close_clients, mcp_post, query_of
from tests.support.oidc_provider import Person
from tests.support.oidc_sign_in import PROVIDER_NAME, Provider, hub_signing_in, served_provider

pytestmark = pytest.mark.skipif(
    BROWSER is None, reason="no Chromium on this machine (Debian: apt-get install chromium)"
)

BACKENDS = ["local", "aws"]


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Provider]:
    with served_provider(tmp_path_factory.mktemp("provider")) as served:
        yield served


@pytest.fixture(scope="module", params=BACKENDS)
def scene(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, provider: Provider
) -> Iterator[Scene]:
    backend = str(request.param)
    with (
        pytest.MonkeyPatch.context() as monkeypatch,
        hub_signing_in(
            backend, provider, tmp_path_factory.mktemp(backend), monkeypatch, match="subject", provision=True
        ) as hub,
        scene_of(backend, hub, tmp_path_factory.mktemp("profile"), trusted=(provider.cert,)) as built,
    ):
        yield built


@pytest.fixture
def tab(scene: Scene) -> Iterator[Tab]:
    opened = scene.browser.tab()
    yield opened
    opened.close()
    close_clients()


def test_sign_in_with_the_operators_provider(scene: Scene, tab: Tab, provider: Provider) -> None:
    provider.op.person = Person("subject-ada", "ada@example.com", "Ada Lovelace")
    flow = authorization(scene)
    tab.navigate(flow.url)
    page = html.unescape(tab.html())
    assert f"Sign in with {PROVIDER_NAME}" in page
    assert 'name="api_key"' not in page
    headers = {k.lower(): v for k, v in document_response(tab, flow.url.split("?")[0])["headers"].items()}
    assert provider.op.issuer in headers["content-security-policy"], "form-action lets the form go there"
    shot(scene, tab, "8-sign-in-with-provider")

    tab.click('button[value="sign_in"]')
    assert any(r["url"].startswith(f"{provider.op.issuer}/authorize?") for r in tab.requests())
    signed_in = html.unescape(tab.html())
    assert "Signed in as" in signed_in
    assert "Signed in as ada@example.com" in signed_in.replace("<strong>", "").replace("</strong>", "")
    assert tab.url().startswith(flow.client.metadata["authorization_endpoint"])
    shot(scene, tab, "9-signed-in-consent")

    tab.click('button[value="approve"]')
    returned = query_of(tab.url())
    assert returned["state"] == flow.state
    exchanged = flow.client.exchange(returned["code"], flow.verifier)
    assert exchanged.status_code == 200, exchanged.text
    assert mcp_post(flow.client.endpoint_url, exchanged.json()["access_token"]).status_code == 200
    provider.op.person = None
