"""Screenshots of every page of the console at 1280 and 360 px wide, with data in them, for people to look at (not a
test: nothing here asserts how a page looks).

    .venv/bin/python -m tests.functional.console_screens [folder]     (default: ./console-screens)

It runs the app ``mcpbridge serve`` runs, with server-everything beside it, fills it through the REST API (a
knowledge base with two documents, one Chinese; an endpoint; the service with ``echo`` needing an approval; an agent's
call waiting for it; a group, rules naming it, a webhook), signs in with Debian's headless ``chromium`` and saves
``<page>-<width>.png`` in the folder.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from tests.functional.test_console_browser import WIDTHS, js, page_tab, resize
from tests.support.chromium import Tab, chromium
from tests.support.console_hub import ConsoleHub, console_hub

HANDBOOK = "# Handbook\n\nRotate the refresh tokens every day.\n\nDeploy with `make deploy`.\n"
CHINESE = "# 部署指南\n\n使用 mcpbridge serve 在本机运行。\n\n发布端点之后，把配置复制到 Cursor。\n"


def fill(hub: ConsoleHub) -> dict[str, str]:
    """What the pages show, made through the REST API; the ids of the things that have a page."""
    with hub.api() as rest:
        kb = rest.post("/api/v1/knowledge-bases", json={"name": "Handbook", "description": "How we run things"})
        kb_id = kb.json()["id"]
        for title, content in (("Handbook", HANDBOOK), ("部署指南", CHINESE)):
            added = rest.post(f"/api/v1/knowledge-bases/{kb_id}/documents", json={"title": title, "content": content})
            added.raise_for_status()
        endpoint = rest.post(
            "/api/v1/mcp-endpoints", json={"name": "Cursor handbook", "knowledge_base_ids": [kb_id]}
        ).json()
        service = rest.post("/api/v1/mcp-services", json={"name": "everything", "url": hub.everything.url}).json()
        rest.post(f"/api/v1/mcp-services/{service['id']}/metadata/refresh").raise_for_status()
        rest.put(f"/api/v1/mcp-services/{service['id']}/tool-approvals/echo", json={"require_approval": True})
        agent = rest.post(
            "/api/v1/api-keys", json={"name": "agent", "role": "viewer", "capabilities": ["call_tools"]}
        ).json()
        for _ in range(60):  # the documents are indexed in the background
            documents = rest.get(f"/api/v1/knowledge-bases/{kb_id}/documents").json()["items"]
            if all(d["parse_status"] in ("completed", "failed") for d in documents):
                break
            time.sleep(0.5)
    with hub.api(agent["key"]) as caller:
        described = caller.get(
            "/api/v1/agent/tools/describe", params={"service_id": service["id"], "tool_name": "echo"}
        ).json()
        paused = caller.post(
            "/api/v1/agent/tool-calls", json={"tool_ref": described["tool_ref"], "arguments": {"message": "hello"}}
        ).json()
    with hub.api() as rest:  # a group, the rules naming it, a webhook (its deliveries: the call above waiting)
        alice = rest.post("/api/v1/users", json={"name": "alice"}).json()["id"]
        finance = {"name": "finance", "description": "Approves refunds", "members": [alice]}
        rest.post("/api/v1/groups", json=finance).raise_for_status()
        rules = [
            {"id": "no-env", "outcome": "deny", "reason": "no environment dumps", "match": {"tools": ["printEnv"]}},
            {
                "id": "big-sums",
                "outcome": "ask",
                "match": {"tools": ["add"], "arguments": [{"path": "$.a", "op": "gt", "value": 1000}]},
                "approvers": {"groups": ["finance"], "required": 1},
            },
        ]
        body = {"expected_version": 0, "mode": "enforce", "default": "allow", "rules": rules}
        rest.put("/api/v1/policy-rules", json=body).raise_for_status()
        hook = {"url": f"{hub.base}/hooks/approvers", "description": "approvers' channel"}
        rest.post("/api/v1/webhooks", json=hook).raise_for_status()
    return {"kb": kb_id, "endpoint": endpoint["id"], "service": service["id"], "call": paused["pending_id"]}


def shoot(tab: Tab, folder: Path, name: str) -> None:
    for width in WIDTHS:
        resize(tab, width)
        tab.settle(0.6)
        tab.screenshot(folder / f"{name}-{WIDTHS[width][0]}.png")
    resize(tab, "desktop")


def main(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work, console_hub(Path(work) / "hub") as hub:
        ids = fill(hub)
        with chromium(Path(work) / "profile") as browser:
            tab = page_tab(browser)
            tab.navigate(f"{hub.base}/console/signin")
            shoot(tab, folder, "signin")
            tab.type_into("#api-key", hub.admin_key)
            tab.click("#sign-in button[type=submit]")
            pages = {
                "inbox": "/console",
                "call": f"/console/approvals/{ids['call']}",
                "calls": "/console/calls",
                "kbs": "/console/kbs",
                "kb": f"/console/kbs/{ids['kb']}",
                "endpoints": "/console/endpoints",
                "endpoint": f"/console/endpoints/{ids['endpoint']}",
                "services": "/console/services",
                "service": f"/console/services/{ids['service']}",
                "people": "/console/people",
                "quarantine": "/console/quarantine",
                "rules": "/console/rules",
                "groups": "/console/groups",
                "webhooks": "/console/webhooks",
                "workspaces": "/console/workspaces",
            }
            for name, path in pages.items():
                tab.navigate(hub.base + path)
                tab.settle(1.5)
                if name == "kb":  # a search, to show its hits
                    js(tab, "document.getElementById('q').value = '部署'")
                    js(tab, "document.querySelector('#search button[type=submit]').click()")
                    tab.settle(1.5)
                if name == "webhooks":  # its deliveries' log
                    js(tab, "document.querySelector('button[data-log]')?.click()")
                    tab.settle(1.5)
                shoot(tab, folder, name)
                print(f"{name}: {folder / name}-*.png")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("console-screens"))
