"""Changing what already exists, by clicking in a real browser (Debian's headless ``chromium`` over the DevTools
protocol) against the app ``mcpbridge serve`` runs on real HTTP: an endpoint's scope, rate limit, sign-in and the
external tools it publishes (npm ``@modelcontextprotocol/server-everything``'s ``echo``), and a knowledge base's
name, description and language. Every change goes through the REST API, which then reports it; a refused change is
shown by its field and the REST API reports nothing changed. axe-core finds no serious or critical violation on
either page at desktop and phone widths.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.node import ensure_node_modules
from tests.functional.test_console_browser import (
    axe_violations,
    js,
    page_tab,
    press,
    replace_text,
    shoot,
    text,
    until,
)
from tests.functional.test_console_operator import accessible, shown, sign_in_at
from tests.support.chromium import BROWSER, Chromium, chromium
from tests.support.console_hub import ConsoleHub, console_hub

pytestmark = pytest.mark.skipif(
    BROWSER is None, reason="no Chromium on this machine (Debian: apt-get install chromium)"
)


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[ConsoleHub]:
    with console_hub(tmp_path / "hub") as running:
        yield running


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Chromium]:
    with chromium(tmp_path / "profile") as running:
        yield running


def axe_source() -> str:
    return (ensure_node_modules() / "axe-core" / "axe.min.js").read_text(encoding="utf-8")


def test_an_endpoint_edited_on_its_page_publishes_echo(hub: ConsoleHub, browser: Chromium) -> None:
    source = axe_source()
    checked: dict[str, list[dict[str, Any]]] = {}
    with hub.api() as rest:
        kb_id = rest.post("/api/v1/knowledge-bases", json={"name": "Handbook"}).json()["id"]
        made = rest.post("/api/v1/mcp-services", json={"name": "everything", "url": hub.everything.url})
        assert made.status_code == 201, made.text
        service_id = made.json()["id"]
        agent = rest.post("/api/v1/agents", json={"name": "front desk"})
        assert agent.status_code == 201, agent.text
        agent_id = agent.json()["id"]
        created = rest.post("/api/v1/mcp-endpoints", json={"name": "Cursor", "tools": ["search_knowledge"]})
        assert created.status_code == 201, created.text
        endpoint_id = created.json()["id"]
        before = rest.get(f"/api/v1/mcp-endpoints/{endpoint_id}").json()
    assert before["services"] == []
    tab = page_tab(browser)
    page = f"/console/endpoints/{endpoint_id}"
    sign_in_at(tab, hub, page)
    service = f'#edit fieldset[data-service="{service_id}"]'
    echo, every = f'{service} input[data-tool="echo"]', f'{service} input[data-tool="*"]'
    until(tab, browser, shown("#edit") + f" && !!document.querySelector({json.dumps(echo)})", "the settings form")
    assert js(tab, "document.getElementById('ed-name').value") == "Cursor"
    assert js(tab, "document.getElementById('ed-agent').value") == ""
    agents = js(tab, "[...document.getElementById('ed-agent').options].map(o => [o.value, o.text])")
    assert agents == [["", "None"], [agent_id, "front desk"]]
    assert js(tab, "document.getElementById('ed-rate').value") == "60"
    assert js(tab, "document.querySelector('#ed-tool-search_knowledge').checked")
    ticked = f"[...document.querySelectorAll({json.dumps(service + ' input[data-tool]:checked')})].length"
    assert js(tab, ticked) == 0
    offered = js(
        tab, f"[...document.querySelectorAll({json.dumps(service + ' input[data-tool]')})].map(b => b.dataset.tool)"
    )
    assert {"*", "echo"} <= set(offered)  # the service's own tools, listed by the REST API
    assert len(offered) > 3

    # Bad input: no name, then a rate limit out of range, each refused by its field, and nothing changes.
    replace_text(tab, "#ed-name", " ")
    press(tab, echo)
    press(tab, "#edit button[type=submit]")
    until(tab, browser, "!!document.getElementById('ed-name-error').innerText", "the name's error")
    assert js(tab, "document.getElementById('ed-name').getAttribute('aria-invalid')") == "true"
    replace_text(tab, "#ed-name", "Cursor team")
    replace_text(tab, "#ed-rate", "7000")
    press(tab, "#edit button[type=submit]")
    until(tab, browser, "!!document.getElementById('ed-rate-error').innerText", "the rate limit's error")
    assert "1 to 6000" in text(tab, "#ed-rate-error")
    assert js(tab, "document.getElementById('ed-rate').getAttribute('aria-invalid')") == "true"
    assert text(tab, "#ed-name-error") == ""
    checked["endpoint, refused"] = axe_violations(tab, source)
    with hub.api() as rest:
        assert rest.get(f"/api/v1/mcp-endpoints/{endpoint_id}").json() == before

    # Refused by the REST API ("*" stands alone): its reason shown by the services' field, and nothing changes.
    replace_text(tab, "#ed-rate", "120")
    press(tab, every)
    press(tab, "#edit button[type=submit]")
    until(tab, browser, "!!document.getElementById('ed-services-error').innerText", "the services' refusal")
    assert "stands alone" in text(tab, "#ed-services-error")
    assert text(tab, "#ed-rate-error") == ""
    checked["endpoint, refused by the API"] = axe_violations(tab, source)
    with hub.api() as rest:
        assert rest.get(f"/api/v1/mcp-endpoints/{endpoint_id}").json() == before

    # The edit: a new name, description and default agent, one knowledge base, a new rate limit, token sign-in only,
    # echo published and searched.
    press(tab, every)
    replace_text(tab, "#ed-description", "The team's handbook and echo")
    js(tab, f"document.getElementById('ed-agent').value = {json.dumps(agent_id)}")
    press(tab, f'#edit input[name=kb][value="{kb_id}"]')
    js(tab, "document.getElementById('ed-auth').value = 'static'")
    js(tab, "document.getElementById('ed-mode').value = 'search'")
    press(tab, "#edit button[type=submit]")
    until(tab, browser, "document.getElementById('status').innerText === 'Saved.'", "the save")
    assert text(tab, "#edit-error") == ""
    with hub.api() as rest:
        after = rest.get(f"/api/v1/mcp-endpoints/{endpoint_id}").json()
    assert (after["name"], after["description"]) == ("Cursor team", "The team's handbook and echo")
    assert after["default_agent_id"] == agent_id
    assert after["services"] == [{"service_id": service_id, "tools": ["echo"]}]
    assert after["knowledge_base_ids"] == [kb_id]
    assert after["rate_limit_per_minute"] == 120
    assert after["auth_mode"] == "static"
    assert after["external_tool_mode"] == "search"
    assert after["tools"] == before["tools"]
    facts = text(tab, "#facts")
    assert f"{service_id}: echo (searched)" in facts
    assert "Handbook" in facts
    assert "120 calls per minute" in facts
    assert agent_id in facts
    assert text(tab, "#title") == "Cursor team"
    accessible(tab, source, checked, "endpoint, edited")
    shoot(tab, "console4-endpoint")

    # Cleared again: no default agent.
    js(tab, "document.getElementById('ed-agent').value = ''")
    press(tab, "#edit button[type=submit]")
    until(tab, browser, "document.getElementById('facts').innerText.includes('none (the built-in answer)')", "clear")
    with hub.api() as rest:
        assert rest.get(f"/api/v1/mcp-endpoints/{endpoint_id}").json()["default_agent_id"] is None
    assert checked == {name: [] for name in checked}, json.dumps(checked, indent=1)


def test_a_knowledge_bases_settings_change_its_language(hub: ConsoleHub, browser: Chromium) -> None:
    source = axe_source()
    checked: dict[str, list[dict[str, Any]]] = {}
    with hub.api() as rest:
        kb_id = rest.post("/api/v1/knowledge-bases", json={"name": "Handbook", "description": "How"}).json()["id"]
        before = rest.get(f"/api/v1/knowledge-bases/{kb_id}").json()
    assert before["language"] == "auto"
    tab = page_tab(browser)
    sign_in_at(tab, hub, f"/console/kbs/{kb_id}")
    until(tab, browser, shown("#settings-place"), "the settings")
    press(tab, "#settings-place summary")
    until(tab, browser, "document.getElementById('settings-place').open", "the settings opened")
    assert js(tab, "document.getElementById('kb-set-name').value") == "Handbook"
    assert js(tab, "document.getElementById('kb-set-language').value") == "auto"
    with hub.api() as rest:  # the select offers what the REST API lists, no copy of it
        languages = rest.get("/api/v1/knowledge/languages").json()["languages"]
    assert js(tab, "[...document.getElementById('kb-set-language').options].map(o => o.value)") == languages

    # Bad input: no name is refused by its field, and nothing changes.
    js(tab, "document.getElementById('kb-set-name').value = '  '")
    js(tab, "document.getElementById('kb-set-language').value = 'french'")
    press(tab, "#settings button[type=submit]")
    until(tab, browser, "!!document.getElementById('kb-set-name-error').innerText", "the name's error")
    assert js(tab, "document.getElementById('kb-set-name').getAttribute('aria-invalid')") == "true"
    checked["knowledge base, refused"] = axe_violations(tab, source)
    with hub.api() as rest:
        assert rest.get(f"/api/v1/knowledge-bases/{kb_id}").json()["language"] == "auto"

    replace_text(tab, "#kb-set-name", "Manuel")
    press(tab, "#settings button[type=submit]")
    until(tab, browser, "document.getElementById('status').innerText === 'Settings saved.'", "the save")
    with hub.api() as rest:
        after = rest.get(f"/api/v1/knowledge-bases/{kb_id}").json()
    assert (after["name"], after["description"], after["language"]) == ("Manuel", "How", "french")
    assert text(tab, "#title") == "Manuel"
    assert "french" in text(tab, "#facts")
    assert js(tab, "document.getElementById('kb-set-name').getAttribute('aria-invalid')") == "false"
    accessible(tab, source, checked, "knowledge base, settings")
    assert checked == {name: [] for name in checked}, json.dumps(checked, indent=1)
