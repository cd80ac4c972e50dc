"""Drafts searchable when asked: a draft is indexed apart from published documents, so REST search and grep find it
with ``include_drafts`` (marked ``document_status: draft``) and never otherwise, and an endpoint (search, grep,
``ask``) never does. On the embedded backend, on AWS (moto, the S3 index files) and on the Lance engine, with a
deterministic embedder so semantic and hybrid search run too."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from mcpbridge.bootstrap import Container
from mcpbridge.cli import main
from mcpbridge.http.apps import create_combined_app
from mcpbridge.knowledge.documents import drafts_index
from tests.functional.test_document_filing import client, container, kb
from tests.support.live_server import live_server

SEARCH = "/api/v1/knowledge/search"
GREP = "/api/v1/knowledge/grep"


# The three backends (SQLite + file indexes, DynamoDB + S3 on moto, Lance), the API client and a knowledge base.
__all__ = ["client", "container", "kb"]


def add(client: TestClient, kb: str, title: str, content: str, **filing: Any) -> dict[str, Any]:
    created = client.post(
        f"/api/v1/knowledge-bases/{kb}/documents", json={"title": title, "content": content, **filing}
    )
    assert created.status_code == 201, created.text
    document: dict[str, Any] = client.get(f"/api/v1/documents/{created.json()['id']}").json()
    return document


def found(client: TestClient, query: str, mode: str = "keyword", **extra: Any) -> list[tuple[str, str, str]]:
    """(title, document_status, knowledge_base_id) of each hit."""
    response = client.post(SEARCH, json={"query": query, "mode": mode, **extra})
    assert response.status_code == 200, response.text
    return [(h["document_title"], h["document_status"], h["knowledge_base_id"]) for h in response.json()["results"]]


def grepped(client: TestClient, pattern: str, **extra: Any) -> list[tuple[str, str]]:
    response = client.post(GREP, json={"pattern": pattern, **extra})
    assert response.status_code == 200, response.text
    return [(m["document_title"], m["document_status"]) for m in response.json()["matches"]]


def endpoint(client: TestClient) -> dict[str, Any]:
    created = client.post(
        "/api/v1/mcp-endpoints", json={"name": "e", "tools": ["search_knowledge", "grep_chunks", "ask"]}
    )
    assert created.status_code == 201, created.text
    body: dict[str, Any] = created.json()
    return body


def call(client: TestClient, target: dict[str, Any], name: str, **arguments: Any) -> dict[str, Any]:
    response = client.post(
        f"/mcp/{target['id']}",
        headers={
            "Authorization": f"Bearer {target['token']}",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-06-18",
        },
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}},
    )
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["result"]
    assert result.get("isError") is not True, result
    return result


def test_a_draft_is_found_only_when_asked(client: TestClient, kb: str) -> None:
    add(client, kb, "Live", "The cafeteria serves lunch from noon.")
    draft = add(client, kb, "Plan", "The zeppelin hangar opens next spring.", status="draft")
    assert (draft["status"], draft["parse_status"], draft["parse_error"]) == ("draft", "draft", None)

    assert found(client, "zeppelin") == []
    assert found(client, "zeppelin", include_drafts=False) == []
    assert [t for t, _, _ in found(client, "zeppelin hangar", "semantic")] in ([], ["Live"])
    assert grepped(client, "zeppelin\\s+hangar") == []

    assert found(client, "zeppelin", include_drafts=True) == [("Plan", "draft", kb)]
    for mode in ("semantic", "hybrid"):
        hits = found(client, "zeppelin hangar opens", mode, include_drafts=True)
        assert hits[0] == ("Plan", "draft", kb), (mode, hits)
    assert grepped(client, "zeppelin\\s+hangar", include_drafts=True) == [("Plan", "draft")]
    both = found(client, "cafeteria zeppelin", include_drafts=True)
    assert sorted(both) == [("Live", "published", kb), ("Plan", "draft", kb)]
    limited = found(client, "zeppelin", include_drafts=True, knowledge_ids=[draft["id"]])
    assert limited == [("Plan", "draft", kb)]
    assert found(client, "zeppelin", knowledge_ids=[draft["id"]]) == [], "naming a draft is not asking for drafts"


def test_an_endpoint_never_finds_a_draft(client: TestClient, kb: str) -> None:
    add(client, kb, "Live", "The cafeteria serves lunch from noon.")
    add(client, kb, "Plan", "The zeppelin hangar opens next spring.", status="draft")
    assert found(client, "zeppelin", include_drafts=True) == [("Plan", "draft", kb)], "indexed as a draft"
    mcp = endpoint(client)

    for mode in ("keyword", "semantic", "hybrid"):
        results = call(client, mcp, "search_knowledge", query="zeppelin hangar", mode=mode)["structuredContent"]
        assert "Plan" not in [r["document_title"] for r in results["results"]], mode
        assert "next spring" not in str(results)
    refused = client.post(
        f"/mcp/{mcp['id']}",
        headers={
            "Authorization": f"Bearer {mcp['token']}",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-06-18",
        },
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "search_knowledge", "arguments": {"query": "zeppelin", "include_drafts": True}},
        },
    ).json()
    assert "next spring" not in str(refused), "an endpoint has no way to ask for drafts"
    matches = call(client, mcp, "grep_chunks", pattern="zeppelin")["structuredContent"]
    assert "next spring" not in str(matches)
    answer = call(client, mcp, "ask", question="When does the zeppelin hangar open?")
    assert "next spring" not in str(answer)
    asked = client.post("/api/v1/knowledge/ask", json={"question": "When does the zeppelin hangar open?"})
    assert asked.status_code == 200, asked.text
    assert "next spring" not in asked.text, "ask reads published documents only"


def test_publishing_and_back_moves_a_document_between_the_indexes(client: TestClient, kb: str) -> None:
    draft = add(client, kb, "Plan", "The zeppelin hangar opens next spring.", status="draft")
    published = client.put(f"/api/v1/documents/{draft['id']}", json={"status": "published"})
    assert published.status_code == 200, published.text
    assert found(client, "zeppelin") == [("Plan", "published", kb)]
    assert found(client, "zeppelin", include_drafts=True) == [("Plan", "published", kb)], "once, as published"
    assert grepped(client, "zeppelin", include_drafts=True) == [("Plan", "published")]

    again = client.put(f"/api/v1/documents/{draft['id']}", json={"status": "draft", "content": "The airship dock."})
    assert again.status_code == 200, again.text
    assert found(client, "zeppelin", include_drafts=True) == [], "the published version left the index"
    assert found(client, "airship") == []
    assert found(client, "airship", include_drafts=True) == [("Plan", "draft", kb)], "the draft's new text"

    assert client.delete(f"/api/v1/documents/{draft['id']}").status_code == 204
    assert found(client, "airship", include_drafts=True) == [], "a deleted draft leaves the drafts' index"


def test_a_draft_that_cannot_be_parsed_stays_a_draft_and_says_why(client: TestClient, kb: str) -> None:
    upload = client.post(
        f"/api/v1/knowledge-bases/{kb}/documents/upload",
        files={"file": ("broken.pdf", b"%PDF-1.7 truncated, no objects", "application/pdf")},
        data={"status": "draft"},
    )
    assert upload.status_code == 201, upload.text
    document = client.get(f"/api/v1/documents/{upload.json()['id']}").json()
    assert document["parse_status"] == "draft"
    assert document["parse_error"].startswith("not searchable as a draft: "), document


@pytest.mark.parametrize(
    ("route", "body"),
    [
        (SEARCH, {"query": "zeppelin", "include_drafts": "yes"}),
        (SEARCH, {"query": "zeppelin", "include_drafts": 1}),
        (GREP, {"pattern": "zeppelin", "include_drafts": "true"}),
    ],
)
def test_include_drafts_must_be_a_boolean(client: TestClient, kb: str, route: str, body: dict[str, Any]) -> None:
    add(client, kb, "Plan", "The zeppelin hangar opens next spring.", status="draft")
    refused = client.post(route, json=body)
    assert refused.status_code == 422, refused.text
    assert refused.json()["code"] == "validation_failed"
    assert "include_drafts" in refused.text
    document = client.get(f"/api/v1/knowledge-bases/{kb}/documents", params={"status": "draft"}).json()["items"][0]
    assert document["status"] == "draft", "nothing changed"


def test_the_cli_searches_drafts_when_asked(
    client: TestClient,
    container: Container,
    kb: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    add(client, kb, "Plan", "The zeppelin hangar opens next spring.", status="draft")
    key = client.headers["Authorization"].removeprefix("Bearer ")
    with live_server(create_combined_app(container)) as url, monkeypatch.context() as patch:
        for name in list(os.environ):
            if name.startswith("MCPBRIDGE_"):
                patch.delenv(name)
        patch.setenv("MCPBRIDGE_URL", url)
        patch.setenv("MCPBRIDGE_API_KEY", key)
        patch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
        capsys.readouterr()
        assert main(["kb", "search", "zeppelin", "--mode", "keyword"]) == 0
        assert "Nothing found." in capsys.readouterr().out
        assert main(["kb", "search", "zeppelin", "--mode", "keyword", "--drafts"]) == 0
        shown = capsys.readouterr().out
    assert "1. Plan [draft]" in shown, shown
    assert "zeppelin hangar" in shown


def test_deleting_a_knowledge_base_removes_its_drafts_index(client: TestClient, container: Container, kb: str) -> None:
    add(client, kb, "Plan", "The zeppelin hangar opens next spring.", status="draft")
    assert container.search_index.analysis(drafts_index(kb)) is not None, "the drafts' index exists"
    assert client.delete(f"/api/v1/knowledge-bases/{kb}").status_code == 204
    assert container.search_index.analysis(drafts_index(kb)) is None
    assert container.search_index.keyword([drafts_index(kb)], "zeppelin") == []


def test_drafts_stored_before_drafts_were_indexed_are_indexed_when_first_asked_for(
    client: TestClient, container: Container, kb: str
) -> None:
    add(client, kb, "Live", "The cafeteria serves lunch from noon.")
    old = add(client, kb, "Plan", "The zeppelin hangar opens next spring.", status="draft")
    container.search_index.delete_knowledge_base(drafts_index(kb))  # as an earlier release left it: never parsed
    assert container.search_index.keyword([drafts_index(kb)], "zeppelin") == []

    response = client.post(SEARCH, json={"query": "zeppelin", "mode": "keyword", "include_drafts": True})
    assert response.status_code == 200, response.text
    body = response.json()
    assert any("1 draft(s) of Handbook" in notice for notice in body["notices"]), body["notices"]
    assert [(h["document_title"], h["document_status"]) for h in body["results"]] == [("Plan", "draft")]
    assert found(client, "zeppelin") == [], "still a draft to every default search"
    assert client.get(f"/api/v1/documents/{old['id']}").json()["parse_status"] == "draft"
    again = client.post(SEARCH, json={"query": "zeppelin", "mode": "keyword", "include_drafts": True}).json()
    assert not any("draft(s)" in notice for notice in again["notices"]), "once"
