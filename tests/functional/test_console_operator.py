"""An operator's day in the console, all by clicking in a real browser (Debian's headless ``chromium`` over the
DevTools protocol), against the app ``mcpbridge serve`` runs on real HTTP, with npm
``@modelcontextprotocol/server-everything`` over Streamable HTTP as the external service.

Sign in; create a knowledge base; upload two documents (one Chinese) with their progress shown, and see them indexed;
search both; publish an endpoint over the knowledge base and copy its Cursor config, whose token then works on the
MCP endpoint; register server-everything, test it, and set ``echo`` to require an approval, which the REST API then
reports. axe-core finds no serious or critical violation on any of these pages at desktop and phone widths, and the
Tab key walks every control of a page in order with a visible focus ring.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conformance.node import ensure_node_modules
from tests.functional.test_console_browser import WIDTHS, axe_violations, js, page_tab, press, resize, text, until
from tests.support.chromium import BROWSER, Chromium, Tab, chromium
from tests.support.console_hub import ConsoleHub, console_hub

pytestmark = pytest.mark.skipif(
    BROWSER is None, reason="no Chromium on this machine (Debian: apt-get install chromium)"
)

HANDBOOK = "# Handbook\n\nRotate the refresh tokens every day.\n\nDeploy with `make deploy`.\n"
CHINESE = "# 部署指南\n\n使用 mcpbridge serve 在本机运行。\n\n发布端点之后，把配置复制到 Cursor。\n"


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[ConsoleHub]:
    with console_hub(tmp_path / "hub") as running:
        yield running


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Chromium]:
    with chromium(tmp_path / "profile") as running:
        yield running


def sign_in_at(tab: Tab, hub: ConsoleHub, page: str) -> None:
    tab.navigate(f"{hub.base}{page}")
    assert tab.url().startswith(f"{hub.base}/console/signin?next="), tab.url()
    tab.type_into("#api-key", hub.admin_key)
    tab.click("#sign-in button[type=submit]")
    assert tab.url() == f"{hub.base}{page}", tab.url()


def shown(selector: str) -> str:
    return f"!!document.querySelector({json.dumps(selector)}) && !document.querySelector({json.dumps(selector)}).hidden"


def accessible(tab: Tab, source: str, checked: dict[str, list[dict[str, Any]]], name: str) -> None:
    for width in WIDTHS:
        resize(tab, width)
        tab.settle(0.3)
        checked[f"{name}, {width}"] = axe_violations(tab, source)
    resize(tab, "desktop")


def mcp_initialize(url: str, token: str) -> httpx.Response:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
    return httpx.post(url, json=body, headers=headers, timeout=60)


def test_an_operators_day_by_clicking(hub: ConsoleHub, browser: Chromium, tmp_path: Path) -> None:
    source = (ensure_node_modules() / "axe-core" / "axe.min.js").read_text(encoding="utf-8")
    checked: dict[str, list[dict[str, Any]]] = {}
    tab = page_tab(browser)

    # Sign in at the knowledge bases' page; none yet.
    sign_in_at(tab, hub, "/console/kbs")
    until(tab, browser, "document.getElementById('status').innerText === 'No knowledge base yet.'", "the empty list")
    # Bad input: a nameless knowledge base is refused by its field, and nothing is created.
    press(tab, "#create button[type=submit]")
    until(tab, browser, "!!document.getElementById('kb-name-error').innerText", "the name's error")
    assert js(tab, "document.getElementById('kb-name').getAttribute('aria-invalid')") == "true"
    checked["kbs, refused"] = axe_violations(tab, source)
    with hub.api() as rest:
        assert rest.get("/api/v1/knowledge-bases").json()["items"] == []

    # Create one: its page opens.
    tab.type_into("#kb-name", "Handbook")
    tab.type_into("#kb-description", "How we run things")
    tab.click("#create button[type=submit]")
    assert tab.url().startswith(f"{hub.base}/console/kbs/kb_"), tab.url()
    kb_id = tab.url().rsplit("/", 1)[1]
    until(tab, browser, "document.getElementById('title').innerText === 'Handbook'", "the knowledge base's page")
    until(tab, browser, "document.getElementById('docs-status').innerText === 'No document yet.'", "no document")

    # Upload two files at once, one of them Chinese: each shows its progress, then both are indexed.
    files = tmp_path / "files"
    files.mkdir()
    (files / "handbook.md").write_text(HANDBOOK, encoding="utf-8")
    (files / "部署指南.md").write_text(CHINESE, encoding="utf-8")
    tab.send(
        "DOM.setFileInputFiles",
        {"files": [str(files / "handbook.md"), str(files / "部署指南.md")], "nodeId": tab.node("#file")},
    )
    press(tab, "#upload button[type=submit]")
    until(tab, browser, "document.querySelectorAll('#uploads li[data-done]').length === 2", "both uploads")
    assert js(tab, "[...document.querySelectorAll('#uploads progress')].map(p => p.value)") == [100, 100]
    assert "uploaded" in text(tab, "#uploads")
    until(
        tab,
        browser,
        "document.querySelectorAll('#docs tr[data-status=completed]').length === 2",
        "both documents indexed (the page follows them)",
    )
    docs = text(tab, "#docs")
    assert "handbook" in docs
    assert "部署指南" in docs

    # Search, in Chinese then in English: hits with their document, lines and score.
    tab.type_into("#q", "部署")
    tab.send("DOM.focus", {"nodeId": tab.node("#mode")})
    js(tab, "document.getElementById('mode').value = 'keyword'")
    press(tab, "#search button[type=submit]")
    until(tab, browser, "document.querySelectorAll('#hits li').length > 0", "the Chinese hits")
    first = text(tab, "#hits li")
    assert "部署指南" in first
    assert "lines " in first
    assert "score " in first
    js(tab, "document.getElementById('q').select()")
    tab.send("Input.insertText", {"text": "refresh tokens"})
    press(tab, "#search button[type=submit]")
    until(tab, browser, "document.querySelector('#hits li')?.innerText.includes('handbook')", "the English hit")
    assert "Rotate the refresh tokens" in text(tab, "#hits")
    accessible(tab, source, checked, "knowledge base")

    tab.navigate(f"{hub.base}/console/kbs")
    until(tab, browser, "document.querySelectorAll('#rows tr').length === 1", "the knowledge base listed")
    assert "2" in text(tab, f'#rows tr[data-kb="{kb_id}"]')
    accessible(tab, source, checked, "knowledge bases")

    # Publish an endpoint over that knowledge base, then copy its Cursor config.
    tab.navigate(f"{hub.base}/console/endpoints")
    until(tab, browser, shown("#publish") + " && !!document.querySelector('#ep-tools input')", "the publish form")
    tab.type_into("#ep-name", "Cursor handbook")
    press(tab, f'input[name=kb][value="{kb_id}"]')
    assert js(tab, "document.querySelector('#tool-search_knowledge').checked"), "the default tools come ticked"
    press(tab, "#publish button[type=submit]")
    until(tab, browser, shown("#issued"), "the new endpoint's token and configs")
    cursor = json.loads(text(tab, "#copy-cursor"))
    ((server_name, server),) = cursor["mcpServers"].items()
    assert server_name == "cursor-handbook"
    token = server["headers"]["Authorization"].removeprefix("Bearer ")
    assert token.startswith("mcp_")
    assert text(tab, "#copy-token") == token
    assert "claude mcp add --transport http cursor-handbook" in text(tab, "#copy-claude")
    browser.send(
        "Browser.grantPermissions",
        {"origin": hub.base, "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]},
    )
    tab.send("Emulation.setFocusEmulationEnabled", {"enabled": True})  # the clipboard serves a focused page only
    press(tab, '[data-copy="copy-cursor"]')
    until(tab, browser, "document.getElementById('copy-cursor-status').innerText === 'Copied.'", "the copy")
    assert json.loads(js(tab, "navigator.clipboard.readText()")) == cursor, "the clipboard holds the Cursor config"
    # The token copied works on the MCP endpoint.
    answered = mcp_initialize(server["url"], token)
    assert answered.status_code == 200, answered.text
    assert answered.json()["result"]["serverInfo"]["name"]
    with hub.api() as rest:
        (endpoint,) = rest.get("/api/v1/mcp-endpoints").json()["items"]
    assert endpoint["knowledge_base_ids"] == [kb_id]
    assert token not in json.dumps(endpoint)
    accessible(tab, source, checked, "endpoints, just published")

    # Its own page: the token is never shown again, the knowledge base by name.
    tab.navigate(f"{hub.base}/console/endpoints/{endpoint['id']}")
    until(tab, browser, "document.getElementById('title').innerText === 'Cursor handbook'", "the endpoint's page")
    until(tab, browser, "!!document.getElementById('grants-status').innerText", "its sign-ins")
    assert "Handbook" in text(tab, "#facts")
    assert token not in js(tab, "document.documentElement.outerHTML")
    accessible(tab, source, checked, "endpoint")

    # Register server-everything over Streamable HTTP, test it, and make echo need an approval.
    tab.navigate(f"{hub.base}/console/services")
    until(tab, browser, shown("#register"), "the register form")
    tab.type_into("#sv-name", "everything")
    tab.type_into("#sv-url", hub.everything.url)
    tab.click("#register button[type=submit]")
    assert tab.url().startswith(f"{hub.base}/console/services/"), tab.url()
    service_id = tab.url().rsplit("/", 1)[1]
    until(tab, browser, "!!document.querySelector('#tools tr[data-tool=echo]')", "the service's tools")
    press(tab, "#test")
    until(tab, browser, "document.getElementById('verdict').innerText.startsWith('Works')", "the connection test")
    assert "tools" in text(tab, "#verdict-notes")
    echo = '#tools tr[data-tool=echo] input[data-policy="require_approval"]'
    assert js(tab, f"document.querySelector('{echo}').checked") is False
    press(tab, echo)
    until(
        tab,
        browser,
        "document.getElementById('tools-status').innerText === 'echo: enabled, needs an approval.'",
        "echo's policy saved",
    )
    with hub.api() as rest:
        policies = rest.get(f"/api/v1/mcp-services/{service_id}/tool-approvals").json()["items"]
    assert [(p["tool_name"], p["enabled"], p["require_approval"]) for p in policies] == [("echo", True, True)]
    accessible(tab, source, checked, "service")

    tab.navigate(f"{hub.base}/console/services")
    until(tab, browser, "document.querySelectorAll('#rows tr').length >= 1", "the service listed")
    assert "everything" in text(tab, "#rows")
    accessible(tab, source, checked, "services")

    tab.navigate(f"{hub.base}/console/people")
    until(tab, browser, "document.querySelectorAll('#keys tr').length >= 1", "the keys")
    accessible(tab, source, checked, "people")
    assert checked == {page: [] for page in checked}, json.dumps(checked, indent=1)


def test_tab_walks_every_control_in_order_with_a_visible_focus(hub: ConsoleHub, browser: Chromium) -> None:
    with hub.api() as rest:
        assert rest.post("/api/v1/knowledge-bases", json={"name": "Handbook"}).status_code == 201
    tab = page_tab(browser)
    sign_in_at(tab, hub, "/console/kbs")
    until(tab, browser, "document.querySelectorAll('#rows tr').length === 1", "the list")
    until(tab, browser, shown("#create"), "the create form")
    # Every control a person can reach, in the document's order, numbered; the walk must meet them in that order.
    count = js(
        tab,
        "(() => { const all = [...document.querySelectorAll('a[href], button, input, select, textarea, summary, "
        "[tabindex]')].filter(e => !e.disabled && e.tabIndex >= 0 && e.getClientRects().length && "
        "!e.closest('[hidden]')); all.forEach((e, i) => e.dataset.walk = String(i)); return all.length; })()",
    )
    assert count >= 14, count  # skip link, brand, 6 sections, sign out, the table, its link, 3 fields, the button
    js(tab, "document.activeElement.blur(); window.scrollTo(0, 0)")
    met: list[dict[str, Any]] = []
    for _ in range(count):
        for kind in ("keyDown", "keyUp"):
            tab.send(
                "Input.dispatchKeyEvent",
                {"type": kind, "key": "Tab", "code": "Tab", "windowsVirtualKeyCode": 9, "nativeVirtualKeyCode": 9},
            )
        met.append(
            js(
                tab,
                "(() => { const e = document.activeElement; const s = getComputedStyle(e); return {walk: "
                "e.dataset.walk ?? null, tag: e.tagName, text: (e.innerText || e.id || '').slice(0, 30), "
                "outline: s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) >= 2, "
                "ring: e.matches(':focus-visible')}; })()",
            )
        )
    assert [m["walk"] for m in met] == [str(i) for i in range(count)], json.dumps(met, indent=1, ensure_ascii=False)
    assert all(m["outline"] and m["ring"] for m in met), json.dumps(met, indent=1, ensure_ascii=False)


def test_a_viewer_key_is_offered_no_change_and_a_scoped_key_sees_only_its_bases(
    hub: ConsoleHub, browser: Chromium
) -> None:
    """The forms follow what the REST API lets the key do, and the API refuses the change whatever a page shows."""
    with hub.api() as rest:
        mine = rest.post("/api/v1/knowledge-bases", json={"name": "Mine"}).json()["id"]
        rest.post("/api/v1/knowledge-bases", json={"name": "Theirs"}).raise_for_status()
        service = rest.post("/api/v1/mcp-services", json={"name": "everything", "url": hub.everything.url}).json()
        made = rest.post(
            "/api/v1/api-keys",
            json={
                "name": "reader",
                "role": "viewer",
                "capabilities": ["read", "manage_channels", "manage_services"],  # a viewer: it reads them only
                "knowledge_base_ids": [mine],
            },
        )
        assert made.status_code == 201, made.text
    reader = made.json()["key"]
    tab = page_tab(browser)
    tab.navigate(f"{hub.base}/console/kbs")
    tab.type_into("#api-key", reader)
    tab.click("#sign-in button[type=submit]")
    until(tab, browser, "document.querySelectorAll('#rows tr').length === 1", "the one base it may read")
    assert "Mine" in text(tab, "#rows")
    assert "Theirs" not in text(tab, "main")
    assert js(tab, "document.getElementById('create').hidden")
    tab.navigate(f"{hub.base}/console/kbs/{mine}")
    until(tab, browser, "document.getElementById('docs-status').innerText === 'No document yet.'", "its page")
    assert js(tab, "document.getElementById('add').hidden"), "no upload for a read-only key"
    tab.navigate(f"{hub.base}/console/endpoints")
    until(tab, browser, "document.getElementById('status').innerText === 'No endpoint published yet.'", "the list")
    assert js(tab, "document.getElementById('publish').hidden")
    tab.navigate(f"{hub.base}/console/services/{service['id']}")
    until(tab, browser, "document.getElementById('title').innerText === 'everything'", "the service")
    assert js(tab, "document.getElementById('manage').hidden")
    # The REST API refuses what the page did not offer, and nothing changes.
    with hub.api(reader) as as_reader:
        refused = as_reader.put(
            f"/api/v1/mcp-services/{service['id']}/tool-approvals/echo", json={"require_approval": True}
        )
        assert refused.status_code == 403, refused.text
        assert as_reader.post("/api/v1/knowledge-bases", json={"name": "New"}).status_code == 403
    with hub.api() as rest:
        assert rest.get(f"/api/v1/mcp-services/{service['id']}/tool-approvals").json()["items"] == []
        assert sorted(kb["name"] for kb in rest.get("/api/v1/knowledge-bases").json()["items"]) == ["Mine", "Theirs"]
