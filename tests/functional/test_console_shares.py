"""Knowledge bases shared across workspaces in the console, by clicking in a real browser (Debian's headless
``chromium`` over the DevTools protocol) against the app ``mcpbridge serve`` runs on real HTTP: the owner's admin
shares a knowledge base with another workspace from its page and withdraws it; that workspace's admin sees it in its
list of knowledge bases, opens its page (which offers neither its settings, nor sharing, nor adding documents to a
read share) and adds it to an endpoint's scope. The REST API confirms every change; refused input is shown by its
field and changes nothing. axe-core finds no serious or critical violation on the new states at 1280 and 360 px.

Screenshots ``console-shares-<state>-<width>.png`` go into ``$MCPBRIDGE_CONSOLE_SHOTS`` when it names a folder.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.functional.test_console_browser import js, page_tab, press, replace_text, shoot, text, until
from tests.functional.test_console_operator import accessible, shown
from tests.functional.test_console_settings import axe_source, browser, hub
from tests.support.chromium import BROWSER, Chromium, Tab
from tests.support.console_hub import ConsoleHub

__all__ = ["browser", "hub"]  # the fixtures reused from test_console_settings

pytestmark = pytest.mark.skipif(
    BROWSER is None, reason="no Chromium on this machine (Debian: apt-get install chromium)"
)

KBS = "/api/v1/knowledge-bases"


def sign_in_as(tab: Tab, hub: ConsoleHub, key: str, page: str) -> None:
    tab.navigate(f"{hub.base}{page}")
    assert tab.url().startswith(f"{hub.base}/console/signin?next="), tab.url()
    tab.type_into("#api-key", key)
    tab.click("#sign-in button[type=submit]")
    assert tab.url() == f"{hub.base}{page}", tab.url()


def shares(hub: ConsoleHub, kb_id: str) -> list[dict[str, Any]]:
    with hub.api() as rest:
        listed = rest.get(f"{KBS}/{kb_id}/shares")
    assert listed.status_code == 200, listed.text
    items: list[dict[str, Any]] = listed.json()["items"]
    return items


def test_a_knowledge_base_shared_from_its_page_reaches_the_other_workspaces_console(
    hub: ConsoleHub, browser: Chromium
) -> None:
    source = axe_source()
    checked: dict[str, list[dict[str, Any]]] = {}
    with hub.api() as rest:
        beta = rest.post("/api/v1/workspaces", json={"name": "Beta"})
        assert beta.status_code == 201, beta.text
        b_id, b_admin = beta.json()["id"], beta.json()["admin_api_key"]["key"]
        kb_id = rest.post(KBS, json={"name": "Polar handbook", "description": "Walruses"}).json()["id"]
        own_id = rest.post(KBS, json={"name": "Expedition plans"}).json()["id"]
    a_id = hub.container.identity.installed_workspace_id()
    assert a_id is not None
    with hub.api(b_admin) as rest:
        b_kb = rest.post(KBS, json={"name": "Beta notes"}).json()["id"]
        made = rest.post("/api/v1/mcp-endpoints", json={"name": "Beta desk", "knowledge_base_ids": [b_kb]})
        assert made.status_code == 201, made.text
        endpoint_id = made.json()["id"]
        assert rest.get("/api/v1/shared-knowledge-bases").json()["items"] == []

    # The owner's admin on the knowledge base's page: not shared yet.
    tab = page_tab(browser)
    sign_in_as(tab, hub, hub.admin_key, f"/console/kbs/{kb_id}")
    until(tab, browser, shown("#sharing") + " && !!document.getElementById('shares-status').innerText", "sharing")
    assert "Not shared" in text(tab, "#shares-status")
    assert js(tab, "document.getElementById('shares').children.length") == 0
    accessible(tab, source, checked, "sharing, none")

    # Bad input, each refused by the workspace's field, and nothing shared: no id, its own workspace, an unknown one.
    press(tab, "#share button[type=submit]")
    until(tab, browser, "!!document.getElementById('share-workspace-error').innerText", "the missing id's error")
    assert js(tab, "document.getElementById('share-workspace').getAttribute('aria-invalid')") == "true"
    replace_text(tab, "#share-workspace", a_id)
    press(tab, "#share button[type=submit]")
    until(tab, browser, "document.getElementById('share-workspace-error').innerText.includes('own')", "own workspace")
    replace_text(tab, "#share-workspace", "ws_nosuchworkspace")
    press(tab, "#share button[type=submit]")
    until(tab, browser, "document.getElementById('share-workspace-error').innerText.includes('no such')", "unknown")
    assert text(tab, "#share-error") == ""
    assert js(tab, "document.getElementById('share-workspace').getAttribute('aria-invalid')") == "true"
    assert shares(hub, kb_id) == []
    accessible(tab, source, checked, "sharing, refused")
    shoot(tab, "console-shares-refused")

    # Shared with Beta, read only: the REST API lists it, and so does the page.
    replace_text(tab, "#share-workspace", b_id)
    js(tab, "document.getElementById('share-permission').value = 'read'")
    press(tab, "#share button[type=submit]")
    until(tab, browser, f"!!document.querySelector('#shares tr[data-share=\"{b_id}\"]')", "the share listed")
    assert text(tab, "#share-workspace-error") == ""
    assert [(s["workspace_id"], s["permission"]) for s in shares(hub, kb_id)] == [(b_id, "read")]
    assert b_id in text(tab, "#shares-status")
    row = text(tab, f'#shares tr[data-share="{b_id}"]')
    assert "read" in row
    accessible(tab, source, checked, "sharing, shared")
    shoot(tab, "console-shares-owner-shared")

    # Beta's admin: the base in its second list, with its owner and permission, linking to a page that works.
    press(tab, "#sign-out")
    until(tab, browser, "location.pathname === '/console/signin'", "signed out")
    sign_in_as(tab, hub, b_admin, "/console/kbs")
    shared_row = f'#shared-rows tr[data-shared-kb="{kb_id}"]'
    until(tab, browser, shown("#shared-table") + f" && !!document.querySelector({json.dumps(shared_row)})", "shared")
    listed = text(tab, shared_row)
    assert "Polar handbook" in listed
    assert a_id in listed
    assert "read only" in listed
    assert js(tab, "document.getElementById('shared-rows').children.length") == 1  # not A's other base
    assert js(tab, f"!!document.querySelector('#rows tr[data-kb=\"{b_kb}\"]')")  # its own, in the first list
    assert not js(tab, f"!!document.querySelector('#rows tr[data-kb=\"{kb_id}\"]')")
    accessible(tab, source, checked, "knowledge bases, shared with this workspace")
    shoot(tab, "console-shares-receiver-list")

    tab.click(f"{shared_row} a")
    assert tab.url() == f"{hub.base}/console/kbs/{kb_id}", tab.url()
    until(tab, browser, "document.getElementById('title').innerText === 'Polar handbook'", "the shared base's page")
    until(tab, browser, "document.getElementById('facts').innerText.includes('Shared by')", "whose it is")
    until(tab, browser, "!!document.getElementById('docs-status').innerText", "its documents")
    assert a_id in text(tab, "#facts")
    assert js(tab, "document.getElementById('settings-place').hidden")  # no rename
    assert js(tab, "document.getElementById('sharing').hidden")  # no sharing on
    assert js(tab, "document.getElementById('add').hidden")  # a read share: no documents added
    assert text(tab, "#problem") == ""
    accessible(tab, source, checked, "shared knowledge base, received")
    shoot(tab, "console-shares-receiver-kb")

    # Beta's endpoint: the shared base offered beside Beta's own, marked as shared, and added to its scope.
    tab.navigate(f"{hub.base}/console/endpoints/{endpoint_id}")
    box = f'#ed-kbs input[name=kb][value="{kb_id}"]'
    until(tab, browser, shown("#edit") + f" && !!document.querySelector({json.dumps(box)})", "the scope picker")
    offered = js(tab, "[...document.querySelectorAll('#ed-kbs input[name=kb]')].map(b => b.value)")
    assert sorted(offered) == sorted([b_kb, kb_id])  # not A's base that is not shared
    assert js(tab, f"document.querySelector({json.dumps(box)}).hasAttribute('data-shared')")
    assert not js(tab, f"document.querySelector('#ed-kbs input[value=\"{b_kb}\"]').hasAttribute('data-shared')")
    label = text(tab, f'#ed-kbs label[for="ed-kb-{kb_id}"]')
    assert "shared by" in label
    assert a_id in label
    press(tab, box)
    press(tab, "#edit button[type=submit]")
    until(tab, browser, "document.getElementById('status').innerText === 'Saved.'", "the save")
    with hub.api(b_admin) as rest:
        saved = rest.get(f"/api/v1/mcp-endpoints/{endpoint_id}").json()
    assert sorted(saved["knowledge_base_ids"]) == sorted([b_kb, kb_id])
    assert "Polar handbook" in text(tab, "#facts")
    accessible(tab, source, checked, "endpoint, shared base in scope")
    shoot(tab, "console-shares-receiver-endpoint")

    # The owner withdraws the share (asked twice): the REST API lists none, and Beta no longer sees it.
    press(tab, "#sign-out")
    until(tab, browser, "location.pathname === '/console/signin'", "signed out")
    sign_in_as(tab, hub, hub.admin_key, f"/console/kbs/{kb_id}")
    withdraw = f'#shares button[data-withdraw="{b_id}"]'
    until(tab, browser, f"!!document.querySelector({json.dumps(withdraw)})", "the share's button")
    press(tab, withdraw)
    until(tab, browser, f"document.querySelector({json.dumps(withdraw)}).dataset.armed === 'true'", "armed")
    assert shares(hub, kb_id) != []  # the first press only asks
    press(tab, withdraw)
    until(tab, browser, "document.getElementById('shares').children.length === 0", "the share gone")
    assert "withdrawn" in text(tab, "#shares-status")
    assert shares(hub, kb_id) == []
    with hub.api(b_admin) as rest:
        assert rest.get("/api/v1/shared-knowledge-bases").json()["items"] == []
        assert rest.get(f"{KBS}/{kb_id}").status_code == 404
    with hub.api() as rest:  # the owner's other base was never touched
        assert rest.get(f"{KBS}/{own_id}/shares").json()["items"] == []
    accessible(tab, source, checked, "sharing, withdrawn")
    shoot(tab, "console-shares-owner-withdrawn")
    assert checked == {name: [] for name in checked}, json.dumps(checked, indent=1)


def test_a_write_share_lets_the_receiver_add_documents_but_not_share_on(hub: ConsoleHub, browser: Chromium) -> None:
    with hub.api() as rest:
        beta = rest.post("/api/v1/workspaces", json={"name": "Beta"}).json()
        kb_id = rest.post(KBS, json={"name": "Polar handbook"}).json()["id"]
        shared = rest.put(f"{KBS}/{kb_id}/shares/{beta['id']}", json={"permission": "write"})
        assert shared.status_code == 200, shared.text
    tab = page_tab(browser)
    sign_in_as(tab, hub, beta["admin_api_key"]["key"], f"/console/kbs/{kb_id}")
    until(tab, browser, "document.getElementById('facts').innerText.includes('Shared by')", "whose it is")
    until(tab, browser, shown("#add"), "adding documents")
    assert js(tab, "document.getElementById('settings-place').hidden")
    assert js(tab, "document.getElementById('sharing').hidden")
    assert "write" in text(tab, "#facts")

    # A document added from the receiver's page goes into the shared base, which stays the owner's.
    press(tab, "#add details summary")
    replace_text(tab, "#doc-title", "Seals")
    replace_text(tab, "#doc-content", "Seals rest on the ice too.")
    press(tab, "#add-text button[type=submit]")
    until(tab, browser, "[...document.querySelectorAll('#docs tr')].some(r => r.innerText.includes('Seals'))", "added")
    assert text(tab, "#add-error") == ""
    with hub.api() as rest:
        documents = rest.get(f"{KBS}/{kb_id}/documents").json()["items"]
        assert [d["title"] for d in documents] == ["Seals"]


def test_a_key_that_may_not_share_sees_no_sharing(hub: ConsoleHub, browser: Chromium) -> None:
    with hub.api() as rest:
        kb_id = rest.post(KBS, json={"name": "Polar handbook"}).json()["id"]
        viewer = rest.post("/api/v1/api-keys", json={"name": "reader", "role": "viewer"})
        assert viewer.status_code == 201, viewer.text
        refused = httpx_status(hub, viewer.json()["key"], f"{KBS}/{kb_id}/shares")
    assert refused == 403  # the REST API's answer, which the page follows
    tab = page_tab(browser)
    sign_in_as(tab, hub, viewer.json()["key"], f"/console/kbs/{kb_id}")
    until(tab, browser, "!!document.getElementById('docs-status').innerText", "the documents")
    assert js(tab, "document.getElementById('sharing').hidden")
    assert "Shared by" not in text(tab, "#facts")
    assert text(tab, "#problem") == ""


def httpx_status(hub: ConsoleHub, key: str, path: str) -> int:
    with hub.api(key) as rest:
        return rest.get(path).status_code
