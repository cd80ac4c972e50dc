"""The console's provider button in headless Chromium (Debian's ``chromium``): the sign-in page with the button
(axe-core: no serious or critical violation), a click, the provider over https (the browser pins its certificate)
and back, the inbox signed in as the user; and a person the workspace does not know, back on the sign-in page with
the reason shown by the button.

The session cookie is SameSite=Strict and the provider's redirect back comes from another site: the test shows the
person still lands signed in (the sign-in page's own request carries the cookie)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conformance.node import ensure_node_modules
from tests.functional.test_console_browser import axe_violations, js, page_tab, press, text, until
from tests.support.chromium import BROWSER, Chromium, chromium
from tests.support.oauth_flow import Hub, close_clients
from tests.support.oidc_provider import Person
from tests.support.oidc_sign_in import PROVIDER_NAME, Provider, hub_signing_in, served_provider

pytestmark = pytest.mark.skipif(
    BROWSER is None, reason="no Chromium on this machine (Debian: apt-get install chromium)"
)


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Provider]:
    with served_provider(tmp_path_factory.mktemp("provider")) as served:
        yield served


@pytest.fixture
def hub(provider: Provider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Hub]:
    with hub_signing_in("local", provider, tmp_path, monkeypatch, match="email") as served:
        provider.op.redirect_uris.append(f"{served.base_url}/console/oidc/callback")
        yield served
    provider.op.person = None
    close_clients()


@pytest.fixture
def browser(tmp_path: Path, provider: Provider) -> Iterator[Chromium]:
    with chromium(tmp_path / "profile", trusted=(provider.cert,)) as running:
        yield running


def test_the_provider_button_signs_a_known_person_in_and_refuses_a_stranger(
    hub: Hub, provider: Provider, browser: Chromium
) -> None:
    source = (ensure_node_modules() / "axe-core" / "axe.min.js").read_text(encoding="utf-8")
    user, _ = hub.user_with_key("Ada")
    with hub.api() as api:
        assert api.put(f"/api/v1/users/{user}/access", json={"email": "ada@example.com"}).status_code == 200
    checked = {}

    # A stranger: back on the sign-in page, the reason by the button, no session.
    provider.op.person = Person("subject-eve", "eve@example.com", "Eve")
    tab = page_tab(browser)
    tab.navigate(f"{hub.base_url}/console")
    assert tab.url().startswith(f"{hub.base_url}/console/signin?next="), tab.url()
    assert text(tab, "#oidc-button") == f"Sign in with {PROVIDER_NAME}"
    checked["sign-in with a provider"] = axe_violations(tab, source)
    press(tab, "#oidc-button")
    until(tab, browser, "!!document.getElementById('oidc-error')?.innerText", "the refusal on the sign-in page")
    assert "No user of this workspace signs in as you" in text(tab, "#oidc-error")
    assert any(r["url"].startswith(f"{provider.op.issuer}/authorize?") for r in tab.requests())
    checked["sign-in, refused by the provider's button"] = axe_violations(tab, source)
    assert js(tab, "fetch('/console/session').then(r => r.status)") == 401

    # Ada: the inbox, signed in as herself.
    provider.op.person = Person("subject-ada", "ada@example.com", "Ada L.")
    tab.navigate(f"{hub.base_url}/console/signin?next=%2Fconsole%2Fcalls")
    press(tab, "#oidc-button")
    until(tab, browser, "location.pathname === '/console/calls' && !!document.getElementById('who')?.innerText", "in")
    assert text(tab, "#who").startswith("Ada · ")
    session = js(tab, "fetch('/console/session').then(r => r.json())")
    assert (session["user_id"], session["signed_in_with"], session["role"]) == (user, "oidc", "viewer")
    assert checked == {page: [] for page in checked}, json.dumps(checked, indent=1)
