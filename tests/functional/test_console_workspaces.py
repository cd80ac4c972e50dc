"""The workspaces page (``/console/workspaces``) in a real browser (Debian's headless ``chromium`` over the DevTools
protocol) against the app ``mcpbridge serve`` runs on real HTTP: the platform admin lists, creates (the new
workspace's admin key shown once, and working), renames, disables, enables and deletes workspaces by clicking, each
change checked through the REST API; a refused name is shown by its field and creates nothing. Another workspace's
admin sees no link to the page, and on the page nothing but the refusal (the REST API refuses the list as before).
axe-core finds no serious or critical violation at desktop and phone widths.

Screenshots at 1280 and 360 px go to ``$MCPBRIDGE_CONSOLE_SHOTS`` when it names a folder.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conformance.node import ensure_node_modules
from tests.functional.test_console_browser import js, page_tab, press, replace_text, shoot, text, until
from tests.functional.test_console_operator import accessible, shown, sign_in_at
from tests.functional.test_console_settings import browser, hub
from tests.support.chromium import BROWSER, Chromium, Tab
from tests.support.console_hub import ConsoleHub

__all__ = ["browser", "hub"]  # the fixtures reused from test_console_settings

pytestmark = pytest.mark.skipif(
    BROWSER is None, reason="no Chromium on this machine (Debian: apt-get install chromium)"
)

PAGE = "/console/workspaces"
NAV_LINK = f'header nav a[href="{PAGE}"]'


def link_visible(tab: Tab) -> bool:
    return bool(js(tab, f"!!document.querySelector({json.dumps(NAV_LINK)})?.offsetParent"))


def card(workspace_id: str) -> str:
    return f'article[data-workspace="{workspace_id}"]'


def workspaces(hub: ConsoleHub) -> dict[str, dict[str, Any]]:
    with hub.api() as rest:
        listed = rest.get("/api/v1/workspaces", params={"limit": 100})
    assert listed.status_code == 200, listed.text
    return {w["id"]: w for w in listed.json()["items"]}


def test_a_platform_admin_manages_the_workspaces_by_clicking(hub: ConsoleHub, browser: Chromium) -> None:
    source = (ensure_node_modules() / "axe-core" / "axe.min.js").read_text(encoding="utf-8")
    checked: dict[str, list[dict[str, Any]]] = {}
    (platform_id,) = workspaces(hub)
    tab = page_tab(browser)
    sign_in_at(tab, hub, PAGE)
    until(tab, browser, shown("#create") + f" && !!document.querySelector('{card(platform_id)}')", "the list")
    assert link_visible(tab)
    assert js(tab, f"document.querySelector({json.dumps(NAV_LINK)}).getAttribute('aria-current')") == "page"
    own = text(tab, card(platform_id))
    assert "cannot be disabled nor deleted" in own
    assert js(tab, f"document.querySelector('{card(platform_id)} [data-delete]')") is None

    # Bad input: no name is refused by its field, and nothing is created.
    replace_text(tab, "#ws-name", "   ")
    press(tab, "#create button[type=submit]")
    until(tab, browser, "!!document.getElementById('ws-name-error').innerText", "the name's error")
    assert js(tab, "document.getElementById('ws-name').getAttribute('aria-invalid')") == "true"
    accessible(tab, source, checked, "workspaces, refused")
    assert list(workspaces(hub)) == [platform_id]

    # Refused by the REST API (a name longer than it allows): shown, and nothing is created.
    js(tab, "document.getElementById('ws-name').removeAttribute('maxlength')")
    replace_text(tab, "#ws-name", "x" * 300)
    press(tab, "#create button[type=submit]")
    until(tab, browser, "document.getElementById('ws-name-error').innerText.includes('255')", "the API's refusal")
    assert list(workspaces(hub)) == [platform_id]

    replace_text(tab, "#ws-name", "Acme")
    replace_text(tab, "#ws-admin", "acme-admin")
    press(tab, "#create button[type=submit]")
    until(tab, browser, shown("#new-workspace"), "the new workspace's key")
    (acme_id,) = set(workspaces(hub)) - {platform_id}
    key = str(js(tab, "document.getElementById('copy-workspace-key').innerText")).strip()
    assert key.startswith("sk_")
    with hub.api(key) as acme:
        me = acme.get("/api/v1/me")
        assert me.status_code == 200, me.text
        assert me.json()["workspace_id"] == acme_id
    until(tab, browser, f"!!document.querySelector('{card(acme_id)}')", "the new workspace's card")
    shoot(tab, "console4-workspaces")
    accessible(tab, source, checked, "workspaces, created")

    # Rename, disable (its key refused), enable (its key works again), delete.
    field = f"{card(acme_id)} input[type=text]"
    replace_text(tab, field, "Acme Corp")
    press(tab, f"{card(acme_id)} form[data-rename] button[type=submit]")
    until(tab, browser, f"document.querySelector('{card(acme_id)} h2').innerText === 'Acme Corp'", "the rename")
    assert workspaces(hub)[acme_id]["name"] == "Acme Corp"

    for _ in range(2):  # the first press asks, the second disables
        press(tab, f"{card(acme_id)} [data-disable]")
    until(tab, browser, f"!!document.querySelector('{card(acme_id)} [data-enable]')", "the disabled state")
    assert workspaces(hub)[acme_id]["status"] == "disabled"
    with hub.api(key) as acme:
        assert acme.get("/api/v1/me").status_code in (401, 403)
    press(tab, f"{card(acme_id)} [data-enable]")
    until(tab, browser, f"!!document.querySelector('{card(acme_id)} [data-disable]')", "the enabled state")
    assert workspaces(hub)[acme_id]["status"] == "active"
    with hub.api(key) as acme:
        assert acme.get("/api/v1/me").status_code == 200

    for _ in range(2):
        press(tab, f"{card(acme_id)} [data-delete]")
    until(tab, browser, f"!document.querySelector('{card(acme_id)} [data-delete]')", "the deletion")
    assert workspaces(hub).get(acme_id, {"status": "deleting"})["status"] == "deleting"
    assert checked == {name: [] for name in checked}, json.dumps(checked, indent=1)


def test_a_workspace_admin_sees_no_workspace(hub: ConsoleHub, browser: Chromium) -> None:
    source = (ensure_node_modules() / "axe-core" / "axe.min.js").read_text(encoding="utf-8")
    checked: dict[str, list[dict[str, Any]]] = {}
    with hub.api() as rest:
        made = rest.post("/api/v1/workspaces", json={"name": "Globex"})
        assert made.status_code == 201, made.text
        globex_key = made.json()["admin_api_key"]["key"]
    platform = [w for w in workspaces(hub).values() if w["name"] != "Globex"]
    with hub.api(globex_key) as globex:
        refused = globex.get("/api/v1/workspaces")
        assert refused.status_code == 403, refused.text
        assert refused.json()["code"] == "platform_admin_required"

    tab = page_tab(browser)
    tab.navigate(f"{hub.base}/console")
    tab.type_into("#api-key", globex_key)
    tab.click("#sign-in button[type=submit]")
    until(tab, browser, "!!document.getElementById('who').innerText", "the signed-in header")
    assert not link_visible(tab)
    assert js(tab, f"document.querySelector({json.dumps(NAV_LINK)}).closest('li').hidden") is True

    tab.navigate(f"{hub.base}{PAGE}")
    until(tab, browser, "!!document.getElementById('problem').innerText", "the refusal")
    assert "platform's admins" in text(tab, "#problem")
    assert not link_visible(tab)
    assert js(tab, "document.querySelectorAll('#workspaces > *').length") == 0
    assert js(tab, "document.getElementById('create').hidden") is True
    assert js(tab, "document.getElementById('new-workspace').hidden") is True
    body = text(tab)
    for workspace in platform:  # neither the platform's workspace's name nor its id
        assert workspace["id"] not in body
        assert workspace["name"] not in body
    shoot(tab, "console4-workspaces-refused")
    accessible(tab, source, checked, "workspaces, not a platform admin")
    assert checked == {name: [] for name in checked}, json.dumps(checked, indent=1)
