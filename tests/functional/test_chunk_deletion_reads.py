"""A chunk deleted one by one stays deleted wherever the document's text is read: the stored text
(``include_content``), ``read`` (by chunk, line and query), line windows, MCP ``read_document`` and resources, the
blobs themselves, and a new indexing of the same source (a new title or status). New content starts afresh. On the
embedded backend and on AWS (moto, the S3 index files)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from mcpbridge.bootstrap import Container
from mcpbridge.http.mcp.resources import document_uri
from mcpbridge.knowledge.documents import blob_key
from tests.support.admin_api import admin_client
from tests.support.containers import container_on
from tests.support.embedder import HashingEmbedder

QUERY = "bonobos"
GONE = "share food"
"""Words of the deleted chunk that no query below sends (answers echo their query)."""


@pytest.fixture(params=["local", "aws"])
def container(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Container]:
    settings: dict[str, Any] = {"jobs": "inline"}
    with container_on(request.param, tmp_path, monkeypatch, settings=settings, embedder=HashingEmbedder()) as built:
        yield built


@pytest.fixture
def client(container: Container) -> Iterator[TestClient]:
    with admin_client(container, "http://127.0.0.1") as test_client:
        yield test_client


@pytest.fixture
def kb(client: TestClient) -> str:
    created = client.post("/api/v1/knowledge-bases", json={"name": "Zoo"})
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


@pytest.fixture
def mcp(client: TestClient) -> dict[str, Any]:
    created = client.post("/api/v1/mcp-endpoints", json={"name": "e", "tools": ["read_document", "search_knowledge"]})
    assert created.status_code == 201, created.text
    body: dict[str, Any] = created.json()
    return body


def _section(name: str, sentence: str) -> str:
    return f"# {name}\n\n" + " ".join([sentence] * 8)


LONG = "\n\n".join(
    [
        _section("Aardvarks", "Aardvarks dig burrows with strong claws and eat termites at night."),
        _section("Bonobos", "Bonobos share food and live in the forests south of the Congo river."),
        _section("Capybaras", "Capybaras are the largest rodents and swim well in rivers and lakes."),
    ]
)


def rpc(client: TestClient, target: dict[str, Any], method: str, params: dict[str, Any]) -> dict[str, Any]:
    response = client.post(
        f"/mcp/{target['id']}",
        headers={
            "Authorization": f"Bearer {target['token']}",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-06-18",
        },
        json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert "result" in body, body
    result: dict[str, Any] = body["result"]
    return result


def document_of(client: TestClient, document_id: str) -> dict[str, Any]:
    response = client.get(f"/api/v1/documents/{document_id}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def every_read(
    client: TestClient, container: Container, mcp: dict[str, Any], document: dict[str, Any], lines: tuple[int, int]
) -> dict[str, str]:
    """What each read path shows of the document, by name (lines: where the deleted chunk was)."""
    doc_id, kb = document["id"], document["knowledge_base_id"]
    reads: dict[str, str] = {}

    def get(name: str, path: str, **params: Any) -> None:
        response = client.get(path, params=params)
        assert response.status_code == 200, (name, response.text)
        reads[name] = response.text

    get("content", f"/api/v1/documents/{doc_id}", include_content="true")
    get("read", f"/api/v1/documents/{doc_id}/read", limit=100)
    get("read at line", f"/api/v1/documents/{doc_id}/read", line=lines[0])
    get("read query", f"/api/v1/documents/{doc_id}/read", query=QUERY)
    get("windows", f"/api/v1/documents/{doc_id}/windows", pattern=[QUERY, "congo"])
    tool = rpc(client, mcp, "tools/call", {"name": "read_document", "arguments": {"document_id": doc_id}})
    reads["mcp read_document"] = str(tool)
    queried = {"document_id": doc_id, "query": QUERY}
    tool = rpc(client, mcp, "tools/call", {"name": "read_document", "arguments": queried})
    reads["mcp read_document query"] = str(tool)
    reads["resource"] = str(rpc(client, mcp, "resources/read", {"uri": document_uri(kb, doc_id)}))
    ranged = rpc(client, mcp, "resources/read", {"uri": document_uri(kb, doc_id, f"{lines[0]}-{lines[1]}")})
    reads["resource lines"] = str(ranged)
    version, workspace = int(document["version"]), client.get("/api/v1/me").json()["workspace_id"]
    for part in ("text", "source"):
        data = container.blobs.get(blob_key(workspace, doc_id, version, part))
        reads[f"{part} blob"] = "" if data is None else data.decode(errors="replace")
    found = client.post("/api/v1/knowledge/search", json={"query": "bonobos congo forests", "mode": "hybrid"})
    assert found.status_code == 200, found.text
    reads["search"] = str([hit["text"] for hit in found.json()["results"]])
    return reads


def leaks(reads: dict[str, str]) -> dict[str, str]:
    """The read paths that still show the deleted text, each with the text around it."""
    found = {}
    for name, text in reads.items():
        at = text.lower().find(GONE)
        if at >= 0:
            found[name] = text[max(at - 80, 0) : at + 80]
    return found


def chunk_with(client: TestClient, document: dict[str, Any], containing: str) -> dict[str, Any]:
    chunks = client.get(f"/api/v1/documents/{document['id']}/read", params={"limit": 100}).json()["chunks"]
    return dict(next(c for c in chunks if containing in c["text"]))


def delete_chunk(client: TestClient, document: dict[str, Any], chunk: dict[str, Any]) -> None:
    deleted = client.delete(f"/api/v1/documents/{document['id']}/chunks/{quote(chunk['chunk_id'], safe='')}")
    assert deleted.status_code == 200, deleted.text


def line_of(client: TestClient, document_id: str, pattern: str) -> int:
    windows = client.get(f"/api/v1/documents/{document_id}/windows", params={"pattern": [pattern]})
    assert windows.status_code == 200, windows.text
    body = windows.json()
    lines = [line["line"] for window in body["windows"] for line in window["lines"] if pattern in line["text"].lower()]
    assert lines, body
    return int(lines[0])


def test_a_deleted_chunk_is_in_no_read_of_the_document(
    client: TestClient, container: Container, kb: str, mcp: dict[str, Any]
) -> None:
    created = client.post(f"/api/v1/knowledge-bases/{kb}/documents", json={"title": "Animals", "content": LONG})
    assert created.status_code == 201, created.text
    document = document_of(client, created.json()["id"])
    capybaras_line = line_of(client, document["id"], "capybaras are")
    chunk = chunk_with(client, document, "Bonobos share")
    lines = (int(chunk["start_line"]), int(chunk["end_line"]))
    before = every_read(client, container, mcp, document, lines)
    assert set(leaks(before)) == set(before), "each read path shows the text before"

    delete_chunk(client, document, chunk)
    after = every_read(client, container, mcp, document_of(client, document["id"]), lines)
    assert leaks(after) == {}
    assert "capybaras are the largest" in after["content"].lower(), "the other chunks stay"
    assert line_of(client, document["id"], "capybaras are") == capybaras_line, "line numbers hold"

    # A new title indexes the same source again: the deletion holds.
    renamed = client.put(f"/api/v1/documents/{document['id']}", json={"title": "Animals, again"})
    assert renamed.status_code == 200, renamed.text
    again = document_of(client, document["id"])
    assert (again["version"], again["parse_status"]) == (2, "completed"), again
    assert again["chunk_count"] == document["chunk_count"] - 1
    reindexed = every_read(client, container, mcp, again, lines)
    assert leaks(reindexed) == {}
    assert line_of(client, document["id"], "capybaras are") == capybaras_line

    # New content is the caller's whole text: what it says is indexed, bonobos included.
    rewritten = client.put(f"/api/v1/documents/{document['id']}", json={"content": LONG})
    assert rewritten.status_code == 200, rewritten.text
    fresh = document_of(client, document["id"])
    assert fresh["chunk_count"] == document["chunk_count"]
    assert GONE in every_read(client, container, mcp, fresh, lines)["content"].lower()


def test_a_deleted_chunk_of_an_html_page_stays_out_when_it_is_indexed_again(
    client: TestClient, container: Container, kb: str, mcp: dict[str, Any]
) -> None:
    sections = "".join(
        f"<h1>{name}</h1><p>{' '.join([sentence] * 8)}</p>"
        for name, sentence in (
            ("Aardvarks", "Aardvarks dig burrows with strong claws and eat termites at night."),
            ("Bonobos", "Bonobos share food and live in the forests south of the Congo river."),
            ("Capybaras", "Capybaras are the largest rodents and swim well in rivers and lakes."),
        )
    )
    page = f"<html><head><title>Zoo</title></head><body>{sections}</body></html>".encode()
    upload = client.post(
        f"/api/v1/knowledge-bases/{kb}/documents/upload", files={"file": ("zoo.html", page, "text/html")}
    )
    assert upload.status_code == 201, upload.text
    document = document_of(client, upload.json()["id"])
    assert document["parse_status"] == "completed", document
    chunk = chunk_with(client, document, "Bonobos share")
    lines = (int(chunk["start_line"]), int(chunk["end_line"]))
    delete_chunk(client, document, chunk)

    reads = every_read(client, container, mcp, document_of(client, document["id"]), lines)
    reads.pop("source blob")  # the page as received: never shown, and kept out of every indexing (below)
    assert leaks(reads) == {}

    assert client.put(f"/api/v1/documents/{document['id']}", json={"status": "draft"}).status_code == 200
    assert client.put(f"/api/v1/documents/{document['id']}", json={"status": "published"}).status_code == 200
    again = document_of(client, document["id"])
    assert (again["version"], again["parse_status"]) == (3, "completed"), again
    reads = every_read(client, container, mcp, again, lines)
    reads.pop("source blob")
    assert leaks(reads) == {}
    drafts = client.post("/api/v1/knowledge/search", json={"query": QUERY, "mode": "keyword", "include_drafts": True})
    assert drafts.json()["results"] == []
    assert "capybaras are the largest" in reads["content"].lower()
