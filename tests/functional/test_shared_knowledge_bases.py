"""Knowledge bases shared across workspaces, on both backends, through the combined app served on 127.0.0.1: the
owner's admin shares a knowledge base with another workspace; that workspace's endpoint reaches it through the
official MCP SDK client (list, search, read, ask, resources) and its keys through REST; a withdrawn share refuses
every one of those at once, endpoints that still list the knowledge base included; a third workspace never sees it;
refused requests change nothing.

Workspace A is the install's (its admin key is the hub's), B and C are made by the platform admin (the same key).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcpbridge.cli import main
from mcpbridge.http.mcp.resources import document_uri
from mcpbridge.knowledge.document_records import doc_key
from mcpbridge.knowledge.share_records import owner_share_key, received_share_key
from tests.support.oauth_flow import Hub, hub_on

KBS = "/api/v1/knowledge-bases"
SHARED = "/api/v1/shared-knowledge-bases"
HANDBOOK = "# Walruses\n\nWalruses haul out on the pack ice in late spring.\n\nTheir tusks grow all their lives.\n"
PLANS = "# Plans\n\nThe narwhal expedition leaves in March.\n"


@dataclass
class World:
    hub: Hub
    a_id: str
    b_id: str
    c_id: str
    b_admin: str
    c_admin: str
    handbook: str
    """A's knowledge base that the tests share."""
    plans: str
    """A's other knowledge base, never shared."""
    walruses: str
    narwhals: str
    b_notes: str

    def call(self, method: str, path: str, key: str, **kwargs: Any) -> httpx.Response:
        with self.hub.api(key) as api:
            return api.request(method, path, **kwargs)

    def ok(self, method: str, path: str, key: str, status: int = 200, **kwargs: Any) -> Any:
        answer = self.call(method, path, key, **kwargs)
        assert answer.status_code == status, f"{method} {path}: {answer.text}"
        return answer.json() if answer.content else None

    def share(self, workspace_id: str, permission: str = "read") -> dict[str, Any]:
        path = f"{KBS}/{self.handbook}/shares/{workspace_id}"
        body: dict[str, Any] = self.ok("PUT", path, self.hub.admin_key, json={"permission": permission})
        return body

    def shares(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.ok("GET", f"{KBS}/{self.handbook}/shares", self.hub.admin_key)["items"]
        return items


def problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["code"] == code, response.text
    return body


@pytest.fixture(params=["local", "aws"])
def world(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    with hub_on(request.param, tmp_path, monkeypatch) as hub:
        made = [hub.post("/api/v1/workspaces", {"name": name}) for name in ("Beta", "Gamma")]
        handbook = hub.post(KBS, {"name": "Polar handbook"})["id"]
        plans = hub.post(KBS, {"name": "Expedition plans"})["id"]
        walruses = hub.post(f"{KBS}/{handbook}/documents", {"title": "Walruses", "content": HANDBOOK})["id"]
        narwhals = hub.post(f"{KBS}/{plans}/documents", {"title": "Narwhals", "content": PLANS})["id"]
        b_admin = made[0]["admin_api_key"]["key"]
        b_notes = hub.post(KBS, {"name": "Beta notes"}, key=b_admin)["id"]
        hub.post(f"{KBS}/{b_notes}/documents", {"title": "Seals", "content": "Seals rest on the ice too."}, key=b_admin)
        a_id = hub.container.identity.installed_workspace_id()
        assert a_id is not None
        yield World(
            hub,
            a_id,
            made[0]["id"],
            made[1]["id"],
            b_admin,
            made[1]["admin_api_key"]["key"],
            handbook,
            plans,
            walruses,
            narwhals,
            b_notes,
        )


# ---------------------------------------------------------------------------------------------------- MCP


async def _session(url: str, token: str, work: Any) -> Any:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    async with http, Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
        return await work(client)


def session(endpoint: dict[str, Any], work: Any) -> Any:
    return asyncio.run(_session(endpoint["url"], endpoint["token"], work))


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    body: dict[str, Any] = result.structured_content
    assert json.loads(result.content[0].text) == body
    return body


def refused(result: Any, code: str) -> None:
    assert result.is_error, result.content
    assert json.loads(result.content[0].text)["error"]["code"] == code, result.content


def test_an_endpoint_of_the_workspace_shared_with_reads_the_base_until_the_share_is_withdrawn(world: World) -> None:
    share = world.share(world.b_id)
    assert (share["workspace_id"], share["permission"], share["knowledge_base_id"]) == (
        world.b_id,
        "read",
        world.handbook,
    )
    endpoint = world.ok(
        "POST",
        "/api/v1/mcp-endpoints",
        world.b_admin,
        201,
        json={"name": "Polar desk", "knowledge_base_ids": [world.handbook, world.b_notes]},
    )
    handbook_uri = document_uri(world.handbook, world.walruses)

    async def reads(client: Client) -> dict[str, Any]:
        return {
            "shared": structured(await client.call_tool("list_shared_knowledge_bases", {})),
            "bases": structured(await client.call_tool("list_knowledge_bases", {})),
            "search": structured(await client.call_tool("search_knowledge", {"query": "walruses tusks"})),
            "read": structured(await client.call_tool("read_document", {"document_id": world.walruses})),
            "listed": structured(await client.call_tool("list_documents", {"knowledge_base_id": "polar HANDBOOK"})),
            "ask": structured(await client.call_tool("ask", {"question": "When do walruses haul out?"})),
            "resources": [str(r.uri) for r in (await client.list_resources()).resources],
            "resource": (await client.read_resource(handbook_uri)).contents[0].model_dump().get("text", ""),
            "outside": await client.call_tool("read_document", {"document_id": world.narwhals}),
            "other_base": await client.call_tool("list_documents", {"knowledge_base_id": world.plans}),
        }

    seen = session(endpoint, reads)
    (shared,) = seen["shared"]["knowledge_bases"]
    assert (shared["id"], shared["owner_workspace_id"], shared["permission"]) == (world.handbook, world.a_id, "read")
    assert {kb["id"] for kb in seen["bases"]["knowledge_bases"]} == {world.handbook, world.b_notes}
    hits = seen["search"]["results"]
    assert hits[0]["document_id"] == world.walruses
    assert hits[0]["knowledge_base_id"] == world.handbook
    assert "tusks grow" in " ".join(chunk["text"] for chunk in seen["read"]["chunks"])
    assert [d["id"] for d in seen["listed"]["documents"]] == [world.walruses]
    assert world.walruses in {ref["document_id"] for ref in seen["ask"]["references"]}
    assert handbook_uri in seen["resources"]
    assert not any(world.plans in uri for uri in seen["resources"])
    assert "haul out on the pack ice in late spring" in seen["resource"]
    # A's other knowledge base and its documents do not exist for B: the same answer as an unknown id.
    refused(seen["outside"], "document_not_found")
    refused(seen["other_base"], "kb_not_found")

    world.ok("DELETE", f"{KBS}/{world.handbook}/shares/{world.b_id}", world.hub.admin_key, 204)

    async def after(client: Client) -> dict[str, Any]:
        return {
            "shared": structured(await client.call_tool("list_shared_knowledge_bases", {})),
            "bases": structured(await client.call_tool("list_knowledge_bases", {})),
            "search": await client.call_tool(
                "search_knowledge", {"query": "walruses", "knowledge_base_ids": [world.handbook]}
            ),
            "everywhere": structured(await client.call_tool("search_knowledge", {"query": "walruses tusks"})),
            "read": await client.call_tool("read_document", {"document_id": world.walruses}),
            "ask": await client.call_tool("ask", {"question": "walruses?", "knowledge_base_ids": [world.handbook]}),
            "resources": [str(r.uri) for r in (await client.list_resources()).resources],
        }

    gone = session(endpoint, after)
    assert gone["shared"]["knowledge_bases"] == []
    assert {kb["id"] for kb in gone["bases"]["knowledge_bases"]} == {world.b_notes}
    refused(gone["search"], "kb_not_found")
    assert all(hit["knowledge_base_id"] == world.b_notes for hit in gone["everywhere"]["results"])
    refused(gone["read"], "document_not_found")
    refused(gone["ask"], "kb_not_found")
    assert handbook_uri not in gone["resources"]
    # The endpoint still lists the knowledge base in its scope: the share, read anew, decides.
    stored = world.ok("GET", f"/api/v1/mcp-endpoints/{endpoint['id']}", world.b_admin)
    assert world.handbook in stored["knowledge_base_ids"]
    assert world.shares() == []


def test_write_permission_adds_documents_into_the_owners_workspace(world: World) -> None:
    world.share(world.b_id, "read")
    endpoint = world.ok(
        "POST",
        "/api/v1/mcp-endpoints",
        world.b_admin,
        201,
        json={"name": "Writer", "knowledge_base_ids": [world.handbook], "tools": ["add_document", "list_documents"]},
    )
    new = {"knowledge_base_id": world.handbook, "title": "Seals", "content": "Seals share the floes with walruses."}

    async def add(client: Client) -> Any:
        return await client.call_tool("add_document", new)

    refused(session(endpoint, add), "kb_share_read_only")
    titles = [d["title"] for d in world.ok("GET", f"{KBS}/{world.handbook}/documents", world.hub.admin_key)["items"]]
    assert titles == ["Walruses"], "a read-only share adds nothing"

    assert world.share(world.b_id, "write")["permission"] == "write"
    added = structured(session(endpoint, add))["document"]
    owned = world.ok("GET", f"/api/v1/documents/{added['id']}", world.hub.admin_key)
    assert owned["knowledge_base_id"] == world.handbook
    store = world.hub.container.store
    assert store.get(doc_key(world.a_id, added["id"])) is not None
    assert store.get(doc_key(world.b_id, added["id"])) is None
    # B's own REST key reaches it through the share too, and loses it with the share.
    world.ok("GET", f"/api/v1/documents/{added['id']}", world.b_admin)
    world.ok("DELETE", f"{KBS}/{world.handbook}/shares/{world.b_id}", world.hub.admin_key, 204)
    problem(world.call("GET", f"/api/v1/documents/{added['id']}", world.b_admin), 404, "document_not_found")


# ---------------------------------------------------------------------------------------------------- REST


def test_keys_of_the_workspace_shared_with_search_and_read_and_a_third_workspace_sees_nothing(world: World) -> None:
    world.share(world.b_id)
    # B's unrestricted admin key: its own knowledge bases by default, the shared one when it names it.
    assert [kb["id"] for kb in world.ok("GET", KBS, world.b_admin)["items"]] == [world.b_notes]
    shared = world.ok("GET", SHARED, world.b_admin)["items"]
    assert [(s["id"], s["owner_workspace_id"], s["permission"]) for s in shared] == [
        (world.handbook, world.a_id, "read")
    ]
    search = {"query": "walruses", "knowledge_base_ids": [world.handbook]}
    hits = world.ok("POST", "/api/v1/knowledge/search", world.b_admin, json=search)["results"]
    assert {h["document_id"] for h in hits} == {world.walruses}
    assert world.ok("GET", f"/api/v1/documents/{world.walruses}", world.b_admin)["title"] == "Walruses"
    assert world.ok("GET", f"{KBS}/{world.handbook}", world.b_admin)["name"] == "Polar handbook"
    # A B key limited to the shared knowledge base searches it by default.
    user = world.ok("POST", "/api/v1/users", world.b_admin, 201, json={"name": "Bo"})
    bo = world.ok(
        "POST",
        f"/api/v1/users/{user['id']}/api-keys",
        world.b_admin,
        201,
        json={"name": "Bo's key", "role": "viewer", "knowledge_base_ids": [world.handbook]},
    )["key"]
    hits = world.ok("POST", "/api/v1/knowledge/search", bo, json={"query": "walruses"})["results"]
    assert {h["knowledge_base_id"] for h in hits} == {world.handbook}
    # A's other knowledge base and its documents do not exist for B.
    problem(world.call("GET", f"{KBS}/{world.plans}", world.b_admin), 404, "kb_not_found")
    problem(world.call("GET", f"/api/v1/documents/{world.narwhals}", world.b_admin), 404, "document_not_found")
    other = {"query": "narwhal", "knowledge_base_ids": [world.plans]}
    problem(world.call("POST", "/api/v1/knowledge/search", world.b_admin, json=other), 404, "kb_not_found")

    # C, shared nothing: the shared knowledge base is as unknown as any other id.
    assert world.ok("GET", SHARED, world.c_admin)["items"] == []
    problem(world.call("GET", f"{KBS}/{world.handbook}", world.c_admin), 404, "kb_not_found")
    problem(world.call("GET", f"/api/v1/documents/{world.walruses}", world.c_admin), 404, "document_not_found")
    problem(world.call("POST", "/api/v1/knowledge/search", world.c_admin, json=search), 404, "kb_not_found")
    scoped = {"name": "Grab", "knowledge_base_ids": [world.handbook]}
    problem(world.call("POST", "/api/v1/mcp-endpoints", world.c_admin, json=scoped), 404, "kb_not_found")
    assert world.ok("GET", "/api/v1/mcp-endpoints", world.c_admin)["items"] == []


def test_a_shared_bases_drafts_stay_its_owners(world: World) -> None:
    """Drafts are searched only when asked, and never those of a base another workspace shares: they are its
    owner's work in progress."""
    world.share(world.b_id)
    draft = {"title": "Molt", "content": "Walruses molt their draft skin each summer.", "status": "draft"}
    world.ok("POST", f"{KBS}/{world.handbook}/documents", world.hub.admin_key, 201, json=draft)
    asked = {"query": "molt", "mode": "keyword", "knowledge_base_ids": [world.handbook], "include_drafts": True}
    owner = world.ok("POST", "/api/v1/knowledge/search", world.hub.admin_key, json=asked)["results"]
    assert [h["document_status"] for h in owner] == ["draft"], "the owner finds its draft when it asks"
    assert world.ok("POST", "/api/v1/knowledge/search", world.b_admin, json=asked)["results"] == []


def test_refused_share_requests_change_nothing(world: World) -> None:
    world.share(world.b_id)
    before = world.shares()
    admin = world.hub.admin_key
    path = f"{KBS}/{world.handbook}/shares"

    # Unknown workspace, malformed id, its own workspace, a bad permission.
    problem(world.call("PUT", f"{path}/ws_0000000000000000000000000", admin, json={}), 404, "workspace_not_found")
    problem(world.call("PUT", f"{path}/nonsense", admin, json={}), 404, "workspace_not_found")
    problem(world.call("PUT", f"{path}/{world.a_id}", admin, json={}), 400, "share_with_self")
    problem(world.call("PUT", f"{path}/{world.c_id}", admin, json={"permission": "owner"}), 422, "validation_failed")
    # A knowledge base the caller does not own: B's, named by A's admin.
    problem(world.call("PUT", f"{KBS}/{world.b_notes}/shares/{world.c_id}", admin, json={}), 404, "kb_not_found")
    # B's admin may neither share on, list, change nor withdraw A's share.
    for method, route, body in (
        ("PUT", f"{path}/{world.c_id}", {"permission": "read"}),
        ("PUT", f"{path}/{world.b_id}", {"permission": "write"}),
        ("GET", path, None),
        ("DELETE", f"{path}/{world.b_id}", None),
    ):
        kwargs = {} if body is None else {"json": body}
        problem(world.call(method, route, world.b_admin, **kwargs), 404, "kb_not_found")
    # Withdrawing a share that does not exist.
    problem(world.call("DELETE", f"{path}/{world.c_id}", admin), 404, "share_not_found")
    # A viewer of A may not share.
    _, viewer = world.hub.user_with_key("Vi")
    problem(world.call("PUT", f"{path}/{world.c_id}", viewer, json={}), 403, "admin_required")
    # A key limited to some knowledge bases may not share them.
    _, narrow = world.hub.user_with_key("Ad", role="admin", knowledge_base_ids=[world.handbook])
    problem(world.call("PUT", f"{path}/{world.c_id}", narrow, json={}), 403, "scope_exceeded")

    # Through a read-only share B changes nothing of A's: not the knowledge base, its documents or its wiki.
    b = world.b_admin
    problem(world.call("PUT", f"{KBS}/{world.handbook}", b, json={"name": "Mine now"}), 404, "kb_not_found")
    problem(world.call("DELETE", f"{KBS}/{world.handbook}", b), 404, "kb_not_found")
    problem(world.call("DELETE", f"/api/v1/documents/{world.walruses}", b), 403, "kb_share_read_only")
    update = {"title": "Renamed"}
    problem(world.call("PUT", f"/api/v1/documents/{world.walruses}", b, json=update), 403, "kb_share_read_only")
    added = {"title": "More", "content": "More walruses."}
    problem(world.call("POST", f"{KBS}/{world.handbook}/documents", b, json=added), 403, "kb_share_read_only")
    page = {"slug": "walrus", "type": "concept", "title": "Walrus", "content": "A walrus."}
    problem(world.call("POST", f"{KBS}/{world.handbook}/wiki/pages", b, json=page), 404, "kb_not_found")
    kb = world.ok("GET", f"{KBS}/{world.handbook}", world.hub.admin_key)
    assert (kb["name"], kb["document_count"], kb["wiki_page_count"]) == ("Polar handbook", 1, 0)
    assert world.ok("GET", f"/api/v1/documents/{world.walruses}", world.hub.admin_key)["title"] == "Walruses"

    assert world.shares() == before
    assert [s["permission"] for s in world.ok("GET", SHARED, world.b_admin)["items"]] == ["read"]
    assert world.ok("GET", SHARED, world.c_admin)["items"] == []


# ---------------------------------------------------------------------------------------------------- CLI


def cli(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, env: dict[str, str], *args: str
) -> tuple[int, str]:
    """``mcpbridge <args> --json`` against the hub: its exit status and what it printed."""
    capsys.readouterr()
    with monkeypatch.context() as patch:
        for name in list(os.environ):
            if name.startswith("MCPBRIDGE_"):
                patch.delenv(name)
        for name, value in env.items():
            patch.setenv(name, value)
        code = main([*args, "--json"])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_the_cli_shares_lists_and_withdraws(
    world: World, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = str(tmp_path / "config")
    owner = {"MCPBRIDGE_URL": world.hub.base_url, "MCPBRIDGE_API_KEY": world.hub.admin_key, "XDG_CONFIG_HOME": config}
    beta = {**owner, "MCPBRIDGE_API_KEY": world.b_admin}

    code, out = cli(capsys, monkeypatch, owner, "kb", "share", "polar handbook", world.b_id, "--permission", "write")
    assert code == 0, out
    assert json.loads(out)["permission"] == "write"
    code, out = cli(capsys, monkeypatch, owner, "kb", "shares", "Polar handbook")
    assert [(s["workspace_id"], s["permission"]) for s in json.loads(out)["items"]] == [(world.b_id, "write")]
    code, out = cli(capsys, monkeypatch, beta, "kb", "shared")
    assert [s["id"] for s in json.loads(out)["items"]] == [world.handbook]

    # Refused: B withdrawing A's share, A sharing with a workspace that does not exist; nothing changes.
    code, out = cli(capsys, monkeypatch, beta, "kb", "unshare", world.handbook, world.b_id)
    assert code == 1
    assert "not found" in out
    code, out = cli(capsys, monkeypatch, owner, "kb", "share", "polar handbook", "ws_0000000000000000000000000")
    assert code == 1
    assert "workspace" in out
    assert [s["workspace_id"] for s in world.shares()] == [world.b_id]

    code, out = cli(capsys, monkeypatch, owner, "kb", "unshare", "polar handbook", world.b_id)
    assert code == 0, out
    assert world.shares() == []
    code, out = cli(capsys, monkeypatch, beta, "kb", "shared")
    assert json.loads(out)["items"] == []


def test_deleting_the_base_or_a_workspace_takes_its_shares_with_it(world: World) -> None:
    world.share(world.b_id)
    world.share(world.c_id, "write")
    store = world.hub.container.store
    # The platform admin deletes C: its share goes from A's list too, B's stays.
    world.ok("DELETE", f"/api/v1/workspaces/{world.c_id}", world.hub.admin_key, 202)
    assert [s["workspace_id"] for s in world.shares()] == [world.b_id]
    assert store.get(owner_share_key(world.a_id, world.handbook, world.c_id)) is None
    # A deletes the knowledge base: nothing is shared with B any more, and no record of it is left on B's side.
    world.ok("DELETE", f"{KBS}/{world.handbook}", world.hub.admin_key, 204)
    assert world.ok("GET", SHARED, world.b_admin)["items"] == []
    assert store.get(received_share_key(world.b_id, world.handbook)) is None


def test_an_endpoint_without_a_scope_reaches_a_shared_base_only_by_naming_it(world: World) -> None:
    world.share(world.b_id)
    endpoint = world.ok("POST", "/api/v1/mcp-endpoints", world.b_admin, 201, json={"name": "Everything of Beta"})

    async def reads(client: Client) -> dict[str, Any]:
        named = {"query": "walruses", "knowledge_base_ids": ["Polar handbook"]}
        return {
            "shared": structured(await client.call_tool("list_shared_knowledge_bases", {})),
            "bases": structured(await client.call_tool("list_knowledge_bases", {})),
            "default": structured(await client.call_tool("search_knowledge", {"query": "walruses tusks"})),
            "named": structured(await client.call_tool("search_knowledge", named)),
        }

    seen = session(endpoint, reads)
    (shared,) = seen["shared"]["knowledge_bases"]
    assert (shared["id"], shared["searched_by_default"]) == (world.handbook, False)
    assert [kb["id"] for kb in seen["bases"]["knowledge_bases"]] == [world.b_notes]
    assert all(hit["knowledge_base_id"] == world.b_notes for hit in seen["default"]["results"])
    assert {hit["document_id"] for hit in seen["named"]["results"]} == {world.walruses}
