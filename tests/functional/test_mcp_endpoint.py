"""Published MCP endpoints through the official SDK client over real HTTP, in both protocol eras: the handshake era
(initialize, 2025-11-25) and the modern one (2026-07-28, no handshake). Plus raw JSON-RPC for 2025-03-26 and
2025-06-18, and every refusal the transport owes: token, rotation, disable, Host, Origin, hidden tools, rate limit."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from mcpbridge.bootstrap import Container
from mcpbridge.http.apps import create_combined_app
from mcpbridge.http.mcp.transport import TOOLS
from mcpbridge.settings import Settings
from tests.support.embedder import HashingEmbedder
from tests.support.live_server import live_server

ERAS = ["legacy", "2026-07-28"]
GUIDE = "\n\n".join(
    f"## Part {i}\n\n" + f"Walruses and seals share the ice in part {i}. Seal colony number {i} grows. " * 12
    for i in range(10)
)


@dataclass
class Hub:
    base_url: str
    admin_key: str
    container: Container
    kb_id: str
    other_kb_id: str
    document_id: str

    def api(self) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, headers={"Authorization": f"Bearer {self.admin_key}"}, timeout=30)

    def publish(self, **body: Any) -> dict[str, Any]:
        with self.api() as api:
            response = api.post("/api/v1/mcp-endpoints", json={"name": "Claude", **body})
        assert response.status_code == 201, response.text
        return response.json()  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    data_dir: Path = tmp_path_factory.mktemp("mcp") / "data"
    container = Container(Settings(data_dir=data_dir, jobs="inline"), embedder=HashingEmbedder(64))
    admin_key = container.identity.initialize().api_key
    assert admin_key is not None
    with live_server(create_combined_app(container)) as base_url:
        with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {admin_key}"}, timeout=30) as api:
            kb = api.post("/api/v1/knowledge-bases", json={"name": "Field notes"}).json()
            other = api.post("/api/v1/knowledge-bases", json={"name": "Private"}).json()
            document = api.post(
                f"/api/v1/knowledge-bases/{kb['id']}/documents",
                json={"title": "Arctic", "content": f"# Arctic\n\n{GUIDE}"},
            ).json()
            api.post(
                f"/api/v1/knowledge-bases/{other['id']}/documents",
                json={"title": "Secret", "content": "Walruses in the private base."},
            )
        yield Hub(base_url, admin_key, container, kb["id"], other["id"], document["id"])
    container.close()


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def session_call(url: str, token: str, mode: str, calls: list[tuple[str, dict[str, Any] | None]]) -> list[Any]:
    """Open one SDK client session and make ``calls``: ("list", None) lists tools, (name, args) calls a tool."""
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    results: list[Any] = []
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        for name, args in calls:
            if name == "list":
                results.append(await client.list_tools())
            else:
                results.append(await client.call_tool(name, args or {}))
    return results


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    text = result.content[0].text
    assert json.loads(text) == result.structured_content
    return result.structured_content  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------------------------------- the tools


@pytest.mark.parametrize("mode", ERAS)
def test_tools_search_read_grep_ask_over_both_eras(hub: Hub, mode: str) -> None:
    endpoint = hub.publish(
        knowledge_base_ids=[hub.kb_id],
        tools=["list_knowledge_bases", "search_knowledge", "grep_chunks", "list_documents", "read_document", "ask"],
    )
    url, token = endpoint["url"], endpoint["token"]
    listed, bases, found, grepped, docs, asked = run(
        session_call(
            url,
            token,
            mode,
            [
                ("list", None),
                ("list_knowledge_bases", {}),
                ("search_knowledge", {"query": "seal colony", "mode": "keyword", "limit": 3}),
                ("grep_chunks", {"pattern": r"colony\s+number\s+7"}),
                ("list_documents", {"knowledge_base_id": "FIELD NOTES"}),
                ("ask", {"question": "Where do walruses and seals share the ice?"}),
            ],
        )
    )
    names = [t.name for t in listed.tools]
    assert names == [
        "list_knowledge_bases",
        "search_knowledge",
        "grep_chunks",
        "list_documents",
        "read_document",
        "ask",
    ]
    annotations = {t.name: t.annotations for t in listed.tools}
    assert annotations["search_knowledge"].read_only_hint is True
    assert annotations["search_knowledge"].destructive_hint is False
    assert annotations["ask"].read_only_hint is False
    assert [kb["id"] for kb in structured(bases)["knowledge_bases"]] == [hub.kb_id], "scope hides the other base"
    hits = structured(found)["results"]
    assert hits
    assert all(h["knowledge_base_id"] == hub.kb_id for h in hits)
    assert hits[0]["start_line"] >= 1
    assert structured(grepped)["matches"][0]["lines"][0]["text"].count("number 7")
    assert structured(docs)["documents"][0]["id"] == hub.document_id
    answer = structured(asked)
    assert answer["references"]
    assert answer["session_id"]


@pytest.mark.parametrize("mode", ERAS)
def test_grep_chunks_names_what_re2_lacks_and_says_when_its_budget_ran_out(hub: Hub, mode: str) -> None:
    endpoint = hub.publish(knowledge_base_ids=[hub.kb_id], tools=["grep_chunks"])
    refused, heavy, plain = run(
        session_call(
            endpoint["url"],
            endpoint["token"],
            mode,
            [
                ("grep_chunks", {"pattern": r"seal(?=s)"}),
                # Every letter of every script, two hundred times: a program so big a search may scan little text.
                ("grep_chunks", {"pattern": r"seal\pL{200}"}),
                ("grep_chunks", {"pattern": r"colony\s+number\s+\d"}),
            ],
        )
    )
    assert refused.is_error
    error = json.loads(refused.content[0].text)["error"]
    assert error["code"] == "unsupported_pattern"
    assert "lookahead (?=" in error["message"]
    cut = structured(heavy)
    assert (cut["matches"], cut["truncated"]) == ([], True)
    assert "budget" in cut["notices"][0]
    whole = structured(plain)
    assert whole["matches"]
    assert (whole["truncated"], whole["notices"]) == (False, [])


@pytest.mark.parametrize("mode", ERAS)
def test_read_document_pages_to_the_end(hub: Hub, mode: str) -> None:
    endpoint = hub.publish(knowledge_base_ids=[hub.kb_id], tools=["read_document"])

    async def read_all() -> tuple[list[int], int]:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {endpoint['token']}"}, timeout=30)
        seen: list[int] = []
        total = 0
        offset: int | None = 0
        async with http, Client(streamable_http_client(endpoint["url"], http_client=http), mode=mode) as client:
            while offset is not None:
                page = structured(
                    await client.call_tool(
                        "read_document", {"document_id": hub.document_id, "offset": offset, "limit": 3}
                    )
                )
                seen += [c["offset"] for c in page["chunks"]]
                total = page["total_chunks"]
                offset = page["next_offset"]
        return seen, total

    seen, total = run(read_all())
    assert total >= 5
    assert seen == list(range(total))


@pytest.mark.parametrize("mode", ERAS)
def test_a_hidden_tool_is_refused_without_running(hub: Hub, mode: str) -> None:
    endpoint = hub.publish(knowledge_base_ids=[hub.kb_id], tools=["search_knowledge"])
    before = hub.container.documents.list_documents(_admin_access(hub), hub.kb_id).total

    async def call_hidden() -> Any:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {endpoint['token']}"}, timeout=30)
        async with http, Client(streamable_http_client(endpoint["url"], http_client=http), mode=mode) as client:
            try:
                return await client.call_tool("delete_document", {"document_id": hub.document_id})
            except MCPError as refused:
                return refused

    result = run(call_hidden())
    # An unknown tool is a protocol error, -32602, on every version (2024-11-05 on); a hidden tool is unknown alike.
    assert isinstance(result, MCPError)
    assert result.error.code == -32602
    assert "delete_document" in result.error.message
    after = hub.container.documents.list_documents(_admin_access(hub), hub.kb_id).total
    assert before == after


def _admin_access(hub: Hub) -> Any:
    from mcpbridge.domain.knowledge import KnowledgeAccess

    workspace = hub.container.identity.installed_workspace_id()
    assert workspace is not None
    return KnowledgeAccess(workspace)


def test_read_document_takes_the_document_id_that_search_results_give(hub: Hub) -> None:
    endpoint = hub.publish(knowledge_base_ids=[hub.kb_id], tools=["read_document", "search_knowledge"])
    found, by_former_name, both, neither, different = run(
        session_call(
            endpoint["url"],
            endpoint["token"],
            "legacy",
            [
                ("search_knowledge", {"query": "walruses", "mode": "keyword", "document_ids": [hub.document_id]}),
                ("read_document", {"knowledge_id": hub.document_id, "limit": 1}),
                ("read_document", {"document_id": hub.document_id, "knowledge_id": hub.document_id, "limit": 1}),
                ("read_document", {"limit": 1}),
                ("read_document", {"document_id": hub.document_id, "knowledge_id": "doc_other"}),
            ],
        )
    )
    hit = structured(found)["results"][0]
    assert hit["document_id"] == hub.document_id
    pages = [structured(r) for r in (by_former_name, both)]
    assert [p["document"]["id"] for p in pages] == [hub.document_id, hub.document_id]
    refusals = [json.loads(r.content[0].text)["error"] for r in (neither, different)]
    assert [e["code"] for e in refusals] == ["missing_argument", "invalid_argument"]
    assert "document_id is required" in refusals[0]["message"]
    assert "different documents" in refusals[1]["message"]
    read_schema = TOOLS["read_document"]["inputSchema"]
    assert read_schema["required"] == ["document_id"]
    assert "former name" in read_schema["properties"]["knowledge_id"]["description"]


def test_tool_errors_carry_a_code_and_a_hint(hub: Hub) -> None:
    endpoint = hub.publish(knowledge_base_ids=[hub.kb_id], tools=["read_document", "search_knowledge"])
    missing, foreign = run(
        session_call(
            endpoint["url"],
            endpoint["token"],
            "legacy",
            [
                ("read_document", {"document_id": "doc_missing"}),
                ("search_knowledge", {"query": "walruses", "knowledge_base_ids": ["Private"]}),
            ],
        )
    )
    for result in (missing, foreign):
        assert result.is_error
        error = json.loads(result.content[0].text)["error"]
        assert error["code"] in ("document_not_found", "kb_not_found")
        assert "list_knowledge_bases" in error["hint"]
        assert "Traceback" not in result.content[0].text


# ---------------------------------------------------------------------------------------------------- refusals


def _post(url: str, *, token: str | None = None, headers: dict[str, str] | None = None) -> httpx.Response:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    sent = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json", **(headers or {})}
    if token:
        sent["Authorization"] = f"Bearer {token}"
    return httpx.post(url, json=body, headers=sent, timeout=30)


def test_tokens_rotation_disable_and_delete_apply_on_the_next_request(hub: Hub) -> None:
    endpoint = hub.publish(knowledge_base_ids=[hub.kb_id], tools=["search_knowledge"])
    url, token = endpoint["url"], endpoint["token"]
    assert _post(url, token=token).status_code == 200
    missing = _post(url)
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"].startswith('Bearer realm="mcpbridge"')
    assert _post(url, token="mcp_" + "x" * 43).status_code == 401
    assert _post(f"{url}?token={token}").status_code == 401
    other = hub.publish(knowledge_base_ids=[hub.kb_id], tools=["search_knowledge"])
    assert _post(url, token=other["token"]).status_code == 401, "a token works only on its own endpoint"
    with hub.api() as api:
        rotated = api.post(f"/api/v1/mcp-endpoints/{endpoint['id']}/rotate-token").json()
        assert _post(url, token=token).status_code == 401
        assert _post(url, token=rotated["token"]).status_code == 200
        api.put(f"/api/v1/mcp-endpoints/{endpoint['id']}", json={"enabled": False})
        disabled = _post(url, token=rotated["token"])
        assert disabled.status_code == 403
        assert disabled.json()["code"] == "endpoint_disabled"
        api.delete(f"/api/v1/mcp-endpoints/{endpoint['id']}")
        assert _post(url, token=rotated["token"]).status_code == 401


def test_host_origin_and_method_checks(hub: Hub) -> None:
    endpoint = hub.publish(knowledge_base_ids=[hub.kb_id], tools=["search_knowledge"])
    url, token = endpoint["url"], endpoint["token"]
    assert _post(url, token=token, headers={"Host": "evil.example"}).status_code == 421
    assert _post(url, token=token, headers={"Host": "localhost:1234"}).status_code == 200
    foreign = _post(url, token=token, headers={"Origin": "https://evil.example"})
    assert foreign.status_code == 403
    assert foreign.json()["code"] == "origin_not_allowed"
    host = httpx.URL(url).netloc.decode()
    assert _post(url, token=token, headers={"Origin": f"http://{host}"}).status_code == 200, "same origin is fine"
    rebound = _post(url, token=token, headers={"Origin": f"http://{host}", "Host": "evil.example"})
    assert rebound.status_code == 421
    assert httpx.get(url, headers={"Authorization": f"Bearer {token}"}).status_code == 405


def test_a_browser_preflight_is_answered_for_allowed_origins_only(hub: Hub, monkeypatch: pytest.MonkeyPatch) -> None:
    endpoint = hub.publish(knowledge_base_ids=[hub.kb_id], tools=["search_knowledge"])
    url, token = endpoint["url"], endpoint["token"]
    allowed = "https://app.example"
    monkeypatch.setattr(
        hub.container, "settings", hub.container.settings.model_copy(update={"allowed_origins": [allowed]})
    )
    asked = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization, mcp-method"}
    preflight = httpx.options(url, headers={"Origin": allowed, **asked}, timeout=30)
    assert preflight.status_code == 204, preflight.text
    assert preflight.headers["access-control-allow-origin"] == allowed
    assert "POST" in preflight.headers["access-control-allow-methods"]
    assert {"authorization", "mcp-method", "mcp-name", "mcp-protocol-version"} <= {
        h.strip() for h in preflight.headers["access-control-allow-headers"].split(",")
    }
    for origin, method in (("https://evil.example", "POST"), (None, "POST"), (allowed, "PUT")):
        sent = {**asked, "Access-Control-Request-Method": method, **({"Origin": origin} if origin else {})}
        refused = httpx.options(url, headers=sent, timeout=30)
        assert refused.status_code == 403, (origin, method)
        assert "access-control-allow-origin" not in refused.headers
    answer = _post(url, token=token, headers={"Origin": allowed})
    assert answer.status_code == 200
    assert answer.headers["access-control-allow-origin"] == allowed, "the page may read the answer"
    assert "access-control-allow-origin" not in _post(url, token=token).headers


@pytest.mark.parametrize("version", ["2025-03-26", "2025-06-18", "2025-11-25"])
def test_handshake_versions_negotiate(hub: Hub, version: str) -> None:
    endpoint = hub.publish(knowledge_base_ids=[hub.kb_id], tools=["list_knowledge_bases"])
    headers = {"Authorization": f"Bearer {endpoint['token']}", "Accept": "application/json, text/event-stream"}
    init = httpx.post(
        endpoint["url"],
        headers=headers,
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
        },
    )
    assert init.status_code == 200, init.text
    assert init.headers["content-type"].startswith("application/json")
    result = init.json()["result"]
    assert result["protocolVersion"] == version
    assert "list_knowledge_bases" in result["instructions"]
    listed = httpx.post(
        endpoint["url"],
        headers={**headers, "MCP-Protocol-Version": version},
        json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    )
    assert [t["name"] for t in listed.json()["result"]["tools"]] == ["list_knowledge_bases"]


def test_rate_limit_is_exact_under_concurrent_calls(hub: Hub) -> None:
    endpoint = hub.publish(knowledge_base_ids=[hub.kb_id], tools=["list_knowledge_bases"], rate_limit_per_minute=5)
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "list_knowledge_bases", "arguments": {}},
    }
    headers = {
        "Authorization": f"Bearer {endpoint['token']}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
    }

    async def burst() -> list[dict[str, Any]]:
        async with httpx.AsyncClient(timeout=60) as client:
            responses = await asyncio.gather(
                *[client.post(endpoint["url"], json=body, headers=headers) for _ in range(20)]
            )
        return [r.json()["result"] for r in responses]

    results = run(burst())
    allowed = [r for r in results if not r.get("isError")]
    limited = [r for r in results if r.get("isError")]
    assert len(allowed) == 5
    assert all(json.loads(r["content"][0]["text"])["error"]["code"] == "rate_limited" for r in limited)
    listing = httpx.post(endpoint["url"], json={"jsonrpc": "2.0", "id": 9, "method": "tools/list"}, headers=headers)
    assert listing.status_code == 200, "only tools/call is limited"


def test_a_body_over_4_mib_is_refused_unread(hub: Hub) -> None:
    endpoint = hub.publish(knowledge_base_ids=[hub.kb_id], tools=["search_knowledge"])
    headers = {
        "Authorization": f"Bearer {endpoint['token']}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": "2025-11-25",
    }
    padding = "x" * (4 * 1024 * 1024)
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {"pad": padding}}})

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit holds as the body arrives
        data = body.encode()
        for start in range(0, len(data), 65536):
            yield data[start : start + 65536]

    declared = httpx.post(endpoint["url"], content=body.encode(), headers=headers, timeout=30)
    streamed = httpx.post(endpoint["url"], content=chunks(), headers=headers, timeout=30)
    for response in (declared, streamed):
        assert response.status_code == 413
        assert response.text == "Request body too large"
    small = httpx.post(endpoint["url"], json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=headers)
    assert small.status_code == 200
