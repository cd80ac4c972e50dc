"""The console in a real browser (Debian's headless ``chromium`` over the DevTools protocol, page scripts on), served
by the app ``mcpbridge serve`` runs, over real HTTP on 127.0.0.1, with the in-process workflow and a real MCP server
whose ``echo`` tool needs an approval.

An approver signs in, sees an agent's paused call appear in the inbox (polled, no reload), approves it with changed
arguments (a change the tool's schema refuses is shown by the field first, and nothing is sent), and the call's page
shows the result of the changed arguments, which is what the tool ran. A key without ``approve_calls`` sees no approve
button and its approval is refused. The pages' CSP is enforced by the browser: an injected inline script does not run.
axe-core finds no serious or critical violation on any page. The same pages also load from the template's Lambda
functions behind an emulated API Gateway, on moto.

Screenshots of the inbox and of a call's page at 1280 and 360 px wide go to the test's tmp dir, and to
``$MCPBRIDGE_CONSOLE_SHOTS`` too when it names a folder.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest
from mcp import types
from mcp.server.lowlevel import Server
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from mcpbridge.bootstrap import Container
from mcpbridge.domain import credentials
from mcpbridge.domain.identity import Scope as KeyScope
from mcpbridge.http.apps import create_combined_app
from mcpbridge.identity.accounts import _api_key_item
from mcpbridge.outbound.policy import EgressPolicy
from tests.conformance.node import ensure_node_modules
from tests.support.chromium import BROWSER, BrowserError, Chromium, Tab, chromium
from tests.support.everything import handle_stateless, serve
from tests.support.live_server import live_server
from tests.support.local_calls import wait_for_call
from tests.support.oauth_flow import lambda_hub
from tests.support.readiness import Worker, wait_until

pytestmark = pytest.mark.skipif(
    BROWSER is None, reason="no Chromium on this machine (Debian: apt-get install chromium)"
)

SERVICES = "/api/v1/mcp-services"
CALLS = "/api/v1/agent/tool-calls"
WIDTHS = {"desktop": (1280, 900, False), "phone": (360, 740, True)}
FINAL = ("completed", "failed", "rejected", "cancelled", "uncertain")


class Upstream:
    """An MCP server with one tool, ``echo`` (text in, the same text out), that records what it ran."""

    def __init__(self) -> None:
        self.ran: list[dict[str, Any]] = []
        echo = types.Tool(
            name="echo",
            description="Echo text back",
            input_schema={
                "type": "object",
                "properties": {"text": {"type": "string", "minLength": 1}},
                "required": ["text"],
                "additionalProperties": False,
            },
        )

        async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
            return types.ListToolsResult(tools=[copy.deepcopy(echo)])

        async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            arguments = dict(params.arguments or {})
            self.ran.append(arguments)
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=f"Echo: {arguments['text']}")],
                structured_content={"echoed": arguments["text"]},
            )

        self.server: Server[Any] = Server("pages", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await handle_stateless(self.server, scope, receive, send)


@dataclass
class Hub:
    base: str
    container: Container
    upstream: Upstream
    approver_key: str
    agent_key: str
    bystander_key: str
    """An admin key of a third user with call_tools but without approve_calls."""
    tool_ref: str

    def api(self, key: str) -> httpx.Client:
        return httpx.Client(base_url=self.base, headers={"Authorization": f"Bearer {key}"}, timeout=60)

    def pause_a_call(self, text: str) -> str:
        """An agent's call of ``echo`` that waits for an approval; its id."""
        with self.api(self.agent_key) as agent:
            answered = agent.post(CALLS, json={"tool_ref": self.tool_ref, "arguments": {"text": text}})
        assert answered.status_code == 202, answered.text
        assert answered.json()["status"] == "awaiting_approval"
        return str(answered.json()["pending_id"])

    def call(self, call_id: str) -> dict[str, Any]:
        with self.api(self.approver_key) as approver:
            answered = approver.get(f"{CALLS}/{call_id}")
        assert answered.status_code == 200, answered.text
        body: dict[str, Any] = answered.json()
        return body


def _key(container: Container, user: str, role: Literal["viewer", "admin"], capabilities: set[str]) -> str:
    workspace_id = container.identity.installed_workspace_id()
    assert workspace_id is not None
    issued = credentials.issue(credentials.API_KEY_PREFIX)
    scope = KeyScope(capabilities=frozenset(capabilities))
    container.store.put(
        _api_key_item(workspace_id, f"key_{user}", f"usr_{user}", user, role, scope, issued, "2027-01-01T00:00:00Z")
    )
    return issued.plaintext


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[Hub]:
    from mcpbridge.settings import Settings

    container = Container(Settings(data_dir=tmp_path / "data"), egress=EgressPolicy(["127.0.0.1"]))
    upstream = Upstream()
    try:
        approver_key = container.identity.initialize().api_key
        assert approver_key is not None
        agent_key = _key(container, "agent", "viewer", {"call_tools"})
        bystander_key = _key(container, "carol", "admin", {"call_tools", "read"})
        with serve(upstream, lifespan="off") as upstream_base, live_server(create_combined_app(container)) as base:
            with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {approver_key}"}) as admin:
                created = admin.post(SERVICES, json={"name": "pages", "url": f"{upstream_base}/mcp"})
                assert created.status_code == 201, created.text
                service = created.json()["id"]
                assert admin.post(f"{SERVICES}/{service}/metadata/refresh").status_code == 200
                policy = admin.put(f"{SERVICES}/{service}/tool-approvals/echo", json={"require_approval": True})
                assert policy.status_code == 200, policy.text
            with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {agent_key}"}) as agent:
                described = agent.get(
                    "/api/v1/agent/tools/describe", params={"service_id": service, "tool_name": "echo"}
                )
                assert described.status_code == 200, described.text
            yield Hub(base, container, upstream, approver_key, agent_key, bystander_key, described.json()["tool_ref"])
    finally:
        container.workflow.close()  # type: ignore[attr-defined]
        container.close()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Chromium]:
    with chromium(tmp_path / "profile") as running:
        yield running


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    return tmp_path / "screens"


# ------------------------------------------------------------------------------------------------ driving a page


def page_tab(browser: Chromium) -> Tab:
    tab = browser.tab()
    tab.send("Emulation.setScriptExecutionDisabled", {"value": False})  # the console is its scripts
    resize(tab, "desktop")
    return tab


def resize(tab: Tab, width: str) -> None:
    wide, high, mobile = WIDTHS[width]
    tab.send(
        "Emulation.setDeviceMetricsOverride", {"width": wide, "height": high, "deviceScaleFactor": 1, "mobile": mobile}
    )


def shoot(tab: Tab, stem: str) -> None:
    """Screenshots at 1280 and 360 px, ``<stem>-<width>.png``, into ``$MCPBRIDGE_CONSOLE_SHOTS`` when it names a
    folder; the tab is left at desktop width."""
    folder = os.environ.get("MCPBRIDGE_CONSOLE_SHOTS")
    if not folder:
        return
    for width in WIDTHS:
        resize(tab, width)
        tab.settle(0.6)
        tab.screenshot(Path(folder) / f"{stem}-{WIDTHS[width][0]}.png")
    resize(tab, "desktop")


def js(tab: Tab, expression: str) -> Any:
    answer = tab.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
    assert "exceptionDetails" not in answer, answer["exceptionDetails"]
    return answer["result"].get("value")


def text(tab: Tab, selector: str = "body") -> str:
    return str(js(tab, f"document.querySelector({json.dumps(selector)})?.innerText ?? ''"))


def until(tab: Tab, browser: Chromium, expression: str, what: str) -> None:
    """Until ``expression`` is true in the page, for as long as the browser works (the page polls every 5 s)."""

    def ready() -> bool:
        tab.settle(0.2)
        try:
            return bool(js(tab, expression))
        except (AssertionError, BrowserError):  # a page being replaced has no context to evaluate in
            return False

    worker = Worker.process("the browser", browser._process, lambda: text(tab))
    wait_until(ready, worker, what=what)


def press(tab: Tab, selector: str) -> None:
    """Click the element's centre with the mouse, as a person does (the page stays: no load awaited)."""
    node = tab.node(selector)
    tab.send("DOM.scrollIntoViewIfNeeded", {"nodeId": node})
    quad = tab.send("DOM.getBoxModel", {"nodeId": node})["model"]["content"]
    x, y = sum(quad[0::2]) / 4, sum(quad[1::2]) / 4
    for kind in ("mousePressed", "mouseReleased"):
        tab.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1})


def replace_text(tab: Tab, selector: str, value: str) -> None:
    tab.send("DOM.focus", {"nodeId": tab.node(selector)})
    js(tab, f"document.querySelector({json.dumps(selector)}).select()")
    tab.send("Input.insertText", {"text": value})


def sign_in(tab: Tab, hub: Hub, key: str, page: str = "/console") -> None:
    tab.navigate(f"{hub.base}{page}")
    assert tab.url().startswith(f"{hub.base}/console/signin?next="), tab.url()
    tab.type_into("#api-key", key)
    tab.click("#sign-in button[type=submit]")
    assert tab.url() == f"{hub.base}{page}", tab.url()


def sign_out(tab: Tab) -> None:
    tab.click("#sign-out")
    assert tab.url().endswith("/console/signin"), tab.url()


def photograph(tab: Tab, shots: Path, name: str) -> None:
    """The page at both widths (the layout settles between them), kept in ``shots`` (and the shared folder)."""
    for width in WIDTHS:
        resize(tab, width)
        tab.settle(0.5)
        shot = tab.screenshot(shots / f"{name}-{WIDTHS[width][0]}.png")
        assert shot.stat().st_size > 5000, shot
        folder = os.environ.get("MCPBRIDGE_CONSOLE_SHOTS")
        if folder:
            Path(folder).mkdir(parents=True, exist_ok=True)
            shutil.copy(shot, Path(folder) / shot.name)
    resize(tab, "desktop")


def card(call_id: str) -> str:
    return f'[data-call="{call_id}"]'


# ------------------------------------------------------------------------------------------------ the tests


def test_an_approver_approves_a_paused_call_with_changed_arguments(hub: Hub, browser: Chromium, shots: Path) -> None:
    tab = page_tab(browser)
    tab.navigate(f"{hub.base}/console/signin")
    photograph(tab, shots, "signin")
    sign_in(tab, hub, hub.approver_key)
    until(tab, browser, "document.getElementById('status').innerText.startsWith('Nothing waits')", "an empty inbox")
    assert "admin" in text(tab, "#who")

    # The agent's call arrives while the page is open: the inbox shows it without a reload.
    call_id = hub.pause_a_call("hello from the agent")
    until(tab, browser, f"!!document.querySelector('{card(call_id)}')", "the paused call in the inbox")
    shown = text(tab, card(call_id))
    assert "echo" in shown
    assert "pages" in shown
    assert "usr_agent" in shown  # the user the call is for
    assert '"text": "hello from the agent"' in shown  # the arguments, pretty JSON
    assert "Expires" in shown
    assert "1 call waits in this workspace" in text(tab, "#status")
    photograph(tab, shots, "inbox")

    # A change the tool's schema refuses is shown by the field, and nothing is sent.
    press(tab, f'{card(call_id)} button[data-action="modify"]')
    until(tab, browser, f"!document.querySelector('{card(call_id)} form.modify').hidden", "the arguments' field")
    field = f"#args-{call_id}"
    replace_text(tab, field, '{"text": 42, "extra": true}')
    press(tab, f"{card(call_id)} form.modify button[type=submit]")
    until(tab, browser, f"!!document.querySelector('#args-error-{call_id} li')", "the field's errors")
    errors = text(tab, f"#args-error-{call_id}")
    assert "text: must be string" in errors
    assert "extra: is not an argument of this tool" in errors
    assert js(tab, f"document.querySelector('{field}').getAttribute('aria-invalid')") == "true"
    replace_text(tab, field, "{not json")
    press(tab, f"{card(call_id)} form.modify button[type=submit]")
    until(tab, browser, f"document.querySelector('#args-error-{call_id}').innerText.includes('Not valid JSON')", "")
    assert hub.call(call_id)["status"] == "awaiting_approval"

    replace_text(tab, field, '{"text": "changed by the approver"}')
    press(tab, f"{card(call_id)} form.modify button[type=submit]")
    until(tab, browser, f"document.querySelector('{card(call_id)}').dataset.resolved === 'approve'", "the approval")
    assert "Approved with your arguments" in text(tab, f"{card(call_id)} .outcome")

    # The call ran with the approver's arguments; its page shows the result and both sets of arguments.
    def final() -> dict[str, Any] | None:
        call = hub.call(call_id)
        return call if call["status"] in FINAL else None

    done = wait_for_call(call_id, final, what="its result")
    assert done["status"] == "completed", done
    assert done["result"]["structuredContent"] == {"echoed": "changed by the approver"}
    assert done["original_arguments"] == {"text": "hello from the agent"}
    assert hub.upstream.ran == [{"text": "changed by the approver"}]
    tab.navigate(f"{hub.base}/console/approvals/{call_id}")
    until(tab, browser, "document.getElementById('status').innerText.includes('completed')", "the call's outcome")
    page = text(tab, "#call")
    assert "changed by the approver" in page
    assert "approve with changed arguments by usr_" in page
    assert "hello from the agent" in page  # what the caller sent, beside it
    assert js(tab, "document.querySelectorAll('#call button').length") == 0
    photograph(tab, shots, "call-completed")

    # The inbox no longer lists it.
    tab.navigate(f"{hub.base}/console")
    until(tab, browser, "document.getElementById('status').innerText.startsWith('Nothing waits')", "an empty inbox")

    # The history lists it, with its approval.
    tab.navigate(f"{hub.base}/console/calls")
    until(tab, browser, "document.querySelectorAll('#rows tr').length === 1", "the call in the history")
    row = text(tab, "#rows tr")
    assert "echo" in row
    assert "completed" in row
    assert "approve (changed) by usr_" in row
    photograph(tab, shots, "calls")


def test_a_waiting_calls_page_rejects_it_with_a_reason(hub: Hub, browser: Chromium, shots: Path) -> None:
    call_id = hub.pause_a_call("delete everything")
    tab = page_tab(browser)
    sign_in(tab, hub, hub.approver_key, page=f"/console/approvals/{call_id}")  # the link a pause carries
    until(tab, browser, f"!!document.querySelector('{card(call_id)} button[data-action=approve]')", "the actions")
    photograph(tab, shots, "call-waiting")
    press(tab, f'{card(call_id)} button[data-action="reject"]')
    press(tab, f"{card(call_id)} form.reject button[type=submit]")
    until(tab, browser, f"!!document.querySelector('#reason-error-{call_id}').innerText", "the missing reason")
    assert hub.call(call_id)["status"] == "awaiting_approval"
    tab.type_into(f"#reason-{call_id}", "not on a Friday")
    press(tab, f"{card(call_id)} form.reject button[type=submit]")
    until(tab, browser, "document.getElementById('status').innerText.includes('rejected')", "the rejection")
    assert "not on a Friday" in text(tab, "#call")
    rejected = hub.call(call_id)
    assert rejected["status"] == "rejected"
    assert rejected["error"] == {"code": "rejected", "message": "not on a Friday"}
    assert hub.upstream.ran == []


def test_a_key_without_approve_calls_sees_no_approve_button_and_cannot_approve(hub: Hub, browser: Chromium) -> None:
    call_id = hub.pause_a_call("for the approvers only")
    tab = page_tab(browser)
    sign_in(tab, hub, hub.bystander_key)
    until(tab, browser, "document.getElementById('status').innerText.startsWith('Nothing waits for you')", "")
    assert not js(tab, "!!document.querySelector('button[data-action]')")
    tab.navigate(f"{hub.base}/console/approvals/{call_id}")
    until(tab, browser, "document.getElementById('status').innerText.includes('waits')", "the call")
    assert "Only the user this call is for" in text(tab, "#call")
    assert not js(tab, "!!document.querySelector('button[data-action]')")
    # The REST API refuses that key's approval whatever a page shows, and the call still waits.
    with hub.api(hub.bystander_key) as bystander:
        refused = bystander.post(f"/api/v1/agent/tool-approvals/{call_id}", json={"decision": "approve"})
    assert refused.status_code == 403, refused.text
    assert refused.json()["code"] == "user_mismatch"
    assert hub.call(call_id)["status"] == "awaiting_approval"
    sign_out(tab)
    tab.navigate(f"{hub.base}/console")
    assert tab.url().startswith(f"{hub.base}/console/signin"), "signed out: the inbox needs a sign-in again"


def test_a_link_from_another_site_leads_a_signed_in_person_to_the_call(hub: Hub, tmp_path: Path) -> None:
    """The cookie is SameSite=Strict, so a link followed from another site (a chat, a mail) arrives without it: the
    server sends the browser to the sign-in page, whose own request has the cookie and goes on to the link."""
    call_id = hub.pause_a_call("from a chat message")
    target = f"{hub.base}/console/approvals/{call_id}"

    async def chat(request: Request) -> HTMLResponse:
        return HTMLResponse(f'<!doctype html><title>Chat</title><a id="go" href="{target}">Approve the call</a>')

    with (
        live_server(Starlette(routes=[Route("/", chat)])) as chat_base,
        chromium(tmp_path / "chat-profile", names=("chat.test",)) as browser,
    ):
        tab = page_tab(browser)
        sign_in(tab, hub, hub.approver_key)
        tab.navigate(chat_base.replace("127.0.0.1", "chat.test") + "/")
        tab.click("#go")
        until(tab, browser, f"!!document.querySelector('{card(call_id)} button[data-action=approve]')", "the call")
        assert tab.url() == target
        redirects = [
            e["params"]["redirectResponse"]
            for e in tab.seen
            if e["method"] == "Network.requestWillBeSent" and "redirectResponse" in e["params"]
        ]
        # The link's own request came without the cookie: sent to sign in, then on by the page's script.
        assert [r["status"] for r in redirects if r["url"] == target] == [303]
        assert any(r["url"].startswith(f"{hub.base}/console/signin?next=") for r in tab.responses())


def test_the_browser_enforces_the_csp_on_an_injected_inline_script(hub: Hub, browser: Chromium) -> None:
    tab = page_tab(browser)
    sign_in(tab, hub, hub.approver_key)
    until(tab, browser, "document.getElementById('status').innerText.startsWith('Nothing waits')", "the inbox")
    js(
        tab,
        "window.violations = []; document.addEventListener('securitypolicyviolation', e => "
        "window.violations.push(e.violatedDirective)); const s = document.createElement('script'); "
        "s.textContent = 'window.injected = true'; document.body.append(s); "
        "const d = document.createElement('div'); d.setAttribute('onclick', 'window.injected = true'); "
        "document.body.append(d); d.click();",
    )
    until(tab, browser, "window.violations.length >= 2", "the CSP's reports")
    assert js(tab, "window.injected === undefined")
    assert {str(v).split(" ")[0] for v in js(tab, "window.violations")} <= {"script-src-elem", "script-src-attr"}
    assert any("Content Security Policy" in message for message in tab.messages()), tab.messages()


def axe_violations(tab: Tab, source: str) -> list[dict[str, Any]]:
    """axe-core's serious and critical violations on the page as it is now (axe injected through DevTools: the
    page's CSP rightly refuses any other way in)."""
    if not js(tab, "typeof window.axe === 'object'"):
        js(tab, source)
    found = js(
        tab,
        "axe.run(document, {resultTypes: ['violations']}).then(r => r.violations"
        ".filter(v => ['serious', 'critical'].includes(v.impact))"
        ".map(v => ({id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map(n => n.target.join(' '))})))",
    )
    return list(found)


def test_every_page_has_no_serious_accessibility_violation(hub: Hub, browser: Chromium) -> None:
    source = (ensure_node_modules() / "axe-core" / "axe.min.js").read_text(encoding="utf-8")
    call_id = hub.pause_a_call("check me")
    tab = page_tab(browser)
    checked: dict[str, list[dict[str, Any]]] = {}

    tab.navigate(f"{hub.base}/console/signin")
    checked["sign-in"] = axe_violations(tab, source)
    press(tab, "#sign-in button[type=submit]")  # empty: the error shown by the field
    until(tab, browser, "!!document.getElementById('key-error').innerText", "the field's error")
    checked["sign-in, refused"] = axe_violations(tab, source)

    sign_in(tab, hub, hub.approver_key)
    until(tab, browser, f"!!document.querySelector('{card(call_id)}')", "the paused call")
    for width in WIDTHS:
        resize(tab, width)
        tab.settle(0.3)
        checked[f"inbox, {width}"] = axe_violations(tab, source)
    resize(tab, "desktop")
    press(tab, f'{card(call_id)} button[data-action="modify"]')
    replace_text(tab, f"#args-{call_id}", '{"text": ""}')
    press(tab, f"{card(call_id)} form.modify button[type=submit]")
    until(tab, browser, f"!!document.querySelector('#args-error-{call_id} li')", "the field's errors")
    checked["inbox, arguments refused"] = axe_violations(tab, source)

    tab.navigate(f"{hub.base}/console/approvals/{call_id}")
    until(tab, browser, f"!!document.querySelector('{card(call_id)} button[data-action=approve]')", "the actions")
    checked["call, waiting"] = axe_violations(tab, source)
    press(tab, f'{card(call_id)} button[data-action="approve"]')
    until(tab, browser, "document.getElementById('status').innerText.includes('completed')", "the call's outcome")
    checked["call, completed"] = axe_violations(tab, source)

    tab.navigate(f"{hub.base}/console/calls")
    until(tab, browser, "document.querySelectorAll('#rows tr').length > 0", "the calls")
    checked["calls"] = axe_violations(tab, source)

    tab.navigate(f"{hub.base}/console/workspaces")  # the operator's key: the platform's workspaces
    until(tab, browser, "document.getElementById('status').innerText.includes('workspace')", "the workspaces")
    checked["workspaces"] = axe_violations(tab, source)
    assert checked == {page: [] for page in checked}, json.dumps(checked, indent=1)


def test_the_console_on_aws_through_api_gateway(monkeypatch: pytest.MonkeyPatch, browser: Chromium) -> None:
    """The same pages from the template's functions (state in moto): sign in, the inbox and the history load through
    the admin API function, signing out ends it."""
    with lambda_hub(monkeypatch) as aws:
        tab = page_tab(browser)
        tab.navigate(f"{aws.base_url}/")
        assert tab.url() == f"{aws.base_url}/console/signin?next=/console"
        tab.type_into("#api-key", aws.admin_key)
        tab.click("#sign-in button[type=submit]")
        assert tab.url() == f"{aws.base_url}/console"
        until(tab, browser, "document.getElementById('status').innerText.startsWith('Nothing waits')", "the inbox")
        assert "approver" in text(tab, "#who")
        tab.navigate(f"{aws.base_url}/console/calls")
        until(tab, browser, "document.getElementById('status').innerText === 'No call matches.'", "the history")
        sign_out(tab)
        tab.navigate(f"{aws.base_url}/console/calls")
        assert tab.url().startswith(f"{aws.base_url}/console/signin")
