"""Yuxi's file tools: ``read_document`` around several literal patterns, answered as non-overlapping windows of
lines (bounded, continued with ``from_line``), and documents found by file name across the knowledge bases in scope;
REST and MCP, both backends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from mcpbridge.bootstrap import Container
from mcpbridge.errors import InvalidInput
from mcpbridge.knowledge.line_windows import windows_of
from tests.support.admin_api import admin_client
from tests.support.containers import container_on


@pytest.fixture(params=["local", "aws"])
def container(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Container]:
    with container_on(request.param, tmp_path, monkeypatch, settings={"jobs": "inline"}) as built:
        yield built


@pytest.fixture
def client(container: Container) -> Iterator[TestClient]:
    with admin_client(container, "http://127.0.0.1") as test_client:
        yield test_client


def kb(client: TestClient, name: str) -> str:
    created = client.post("/api/v1/knowledge-bases", json={"name": name})
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


def upload(client: TestClient, kb_id: str, filename: str, text: str, **form: Any) -> str:
    uploaded = client.post(
        f"/api/v1/knowledge-bases/{kb_id}/documents/upload",
        data=form,
        files={"file": (filename, text.encode(), "text/plain")},
    )
    assert uploaded.status_code == 201, uploaded.text
    return str(uploaded.json()["id"])


def endpoint(client: TestClient, **fields: Any) -> dict[str, Any]:
    created = client.post(
        "/api/v1/mcp-endpoints", json={"name": "e", "tools": ["read_document", "find_documents"], **fields}
    )
    assert created.status_code == 201, created.text
    body: dict[str, Any] = created.json()
    return body


def call(client: TestClient, target: dict[str, Any], tool: str, **arguments: Any) -> dict[str, Any]:
    response = client.post(
        f"/mcp/{target['id']}",
        headers={
            "Authorization": f"Bearer {target['token']}",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-06-18",
        },
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}},
    )
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["result"]
    return result


def log_text(lines: int, marks: dict[int, str]) -> str:
    """``lines`` lines, line n saying ``entry n``, with ``marks`` appended to some of them."""
    return "\n".join(f"entry {n}" + (f" {marks[n]}" if n in marks else "") for n in range(1, lines + 1))


# ---------------------------------------------------------------------------------------------------- windows


def test_several_patterns_answer_merged_windows_of_lines(client: TestClient) -> None:
    doc = upload(client, kb(client, "Logs"), "server.log", log_text(60, {10: "ALPHA", 13: "omega", 40: "Alpha"}))
    mcp = endpoint(client)
    result = call(client, mcp, "read_document", document_id=doc, patterns=["alpha", "OMEGA", "alpha "], context_lines=2)
    assert result.get("isError") is not True, result
    body = result["structuredContent"]
    assert body["patterns"] == ["alpha", "OMEGA"], "trimmed and de-duplicated case-insensitively"
    spans = [(w["start_line"], w["end_line"]) for w in body["windows"]]
    assert spans == [(8, 15), (38, 42)], "10 and 13 overlap: one window; no line twice"
    first = body["windows"][0]
    assert [x["line"] for x in first["lines"] if x["matched"]] == [10, 13]
    assert first["lines"][2] == {"line": 10, "text": "entry 10 ALPHA", "matched": True}
    assert first["patterns"] == ["alpha", "OMEGA"]
    assert body["windows"][1]["patterns"] == ["alpha"]
    assert (body["matches"], body["truncated"], body["next_line"]) == (3, False, None)

    rest = client.get(
        f"/api/v1/documents/{doc}/windows", params={"pattern": ["alpha", "OMEGA"], "context_lines": 2}
    ).json()
    assert [(w["start_line"], w["end_line"]) for w in rest["windows"]] == spans


def test_many_matches_are_bounded_and_continue_from_next_line(client: TestClient) -> None:
    marks = dict.fromkeys(range(5, 400, 10), "needle")  # 40 matches, far apart
    doc = upload(client, kb(client, "Logs"), "big.log", log_text(400, marks))
    seen: list[int] = []
    from_line = 1
    pages = 0
    while True:
        page = client.get(
            f"/api/v1/documents/{doc}/windows",
            params={"pattern": "needle", "context_lines": 1, "from_line": from_line},
        )
        assert page.status_code == 200, page.text
        body = page.json()
        assert len(body["windows"]) <= 20
        seen += [x["line"] for w in body["windows"] for x in w["lines"] if x["matched"]]
        pages += 1
        if not body["truncated"]:
            assert body["next_line"] is None
            break
        assert body["next_line"] > from_line
        from_line = body["next_line"]
    assert pages == 2
    assert seen == sorted(marks), "every match once, in order, none skipped"


def test_bad_patterns_are_refused_naming_them(client: TestClient) -> None:
    doc = upload(client, kb(client, "Logs"), "server.log", log_text(5, {2: "alpha"}))
    mcp = endpoint(client)
    for patterns in ([], ["  "], [f"p{i}" for i in range(11)], ["x" * 201], "alpha\nbeta"):
        refused = call(client, mcp, "read_document", document_id=doc, patterns=patterns)
        assert refused["isError"] is True, patterns
        assert refused["structuredContent"]["error"]["code"] == "invalid_patterns"
        assert "pattern" in refused["structuredContent"]["error"]["message"]
    too_many = client.get(f"/api/v1/documents/{doc}/windows", params={"pattern": [f"p{i}" for i in range(11)]})
    assert too_many.status_code == 400
    assert too_many.json()["code"] == "invalid_patterns"
    assert client.get(f"/api/v1/documents/{doc}/windows").status_code == 422, "pattern is required"
    wide = client.get(f"/api/v1/documents/{doc}/windows", params={"pattern": "alpha", "context_lines": 51})
    assert wide.status_code == 422


def test_the_budget_never_drops_a_line_silently() -> None:
    lines = ["short hit", "x" * 100, "another hit"]
    windows, matches, truncated, next_line = windows_of(lines, ["hit"], context_lines=0, byte_budget=50)
    assert [(w.start_line, w.end_line) for w in windows] == [(1, 1), (3, 3)]
    assert (matches, truncated, next_line) == (2, False, None)
    # One window too large alone (line 2, a long context line, joins both): it starts at its first match, stops
    # before what does not fit, and the next answer goes on from there.
    windows, _, truncated, next_line = windows_of(lines, ["hit"], context_lines=1, byte_budget=50)
    assert ([(w.start_line, w.end_line) for w in windows], truncated, next_line) == ([(1, 1)], True, 2)
    windows, _, truncated, next_line = windows_of(lines, ["hit"], context_lines=1, byte_budget=50, from_line=2)
    assert ([(w.start_line, w.end_line) for w in windows], truncated, next_line) == ([(3, 3)], False, None)
    with pytest.raises(InvalidInput, match="line 2 is longer than the 50-byte output budget"):
        windows_of(["ok", "x" * 100 + " hit"], ["hit"], context_lines=0, byte_budget=50)
    # Budget reached after a window: the next one starts the next answer.
    windows, _, truncated, next_line = windows_of(
        ["hit " + "y" * 30, "z", "hit " + "w" * 30], ["hit"], context_lines=0, byte_budget=50
    )
    assert ([w.start_line for w in windows], truncated, next_line) == ([1], True, 3)


# ---------------------------------------------------------------------------------------------------- by name


def test_documents_are_found_by_file_name_across_the_bases_in_scope(client: TestClient) -> None:
    specs, archive = kb(client, "Specs"), kb(client, "Archive")
    exact = upload(client, specs, "design.md", "The design.")
    prefix = upload(client, specs, "design-review.md", "The review.")
    contains = upload(client, archive, "old-design.txt", "Old.")
    upload(client, archive, "design-draft.md", "Unfinished.", status="draft")
    upload(client, archive, "budget.md", "Money.")

    found = client.get("/api/v1/knowledge/documents", params={"name": "DESIGN.md"}).json()
    assert [d["id"] for d in found["items"]] == [exact]
    assert found["items"][0]["match"] == "exact"
    assert found["items"][0]["knowledge_base_name"] == "Specs"
    broad = client.get("/api/v1/knowledge/documents", params={"name": "design"}).json()
    # Prefix matches by name (design-review.md sorts before design.md), then those containing it; no draft.
    assert [d["id"] for d in broad["items"]] == [prefix, exact, contains]
    assert [d["match"] for d in broad["items"]] == ["prefix", "prefix", "contains"]
    one = client.get("/api/v1/knowledge/documents", params={"name": "design", "limit": 2}).json()
    assert [d["id"] for d in one["items"]] == [prefix, exact]
    rest = client.get(
        "/api/v1/knowledge/documents", params={"name": "design", "limit": 2, "cursor": one["next_cursor"]}
    )
    assert [d["id"] for d in rest.json()["items"]] == [contains]
    assert rest.json()["next_cursor"] is None
    only = client.get("/api/v1/knowledge/documents", params={"name": "design", "knowledge_base_ids": "archive"}).json()
    assert [d["id"] for d in only["items"]] == [contains]

    scoped = endpoint(client, knowledge_base_ids=[specs])
    names = call(client, scoped, "find_documents", name="design")["structuredContent"]
    assert (names["total"], names["has_more"]) == (2, False)
    first = call(client, scoped, "find_documents", name="design", limit=1)["structuredContent"]
    assert (len(first["documents"]), first["total"], first["has_more"]) == (1, 2, True)
    assert [d["id"] for d in names["documents"]] == [prefix, exact]
    refused = call(client, scoped, "find_documents", name="design", knowledge_base_ids=["Archive"])
    assert refused["isError"] is True
    assert refused["structuredContent"]["error"]["code"] == "kb_not_found"
    for bad in ("", "   ", "x" * 256):
        empty = call(client, scoped, "find_documents", name=bad)
        assert empty["isError"] is True
        assert empty["structuredContent"]["error"]["code"] == "invalid_name"
    assert client.get("/api/v1/knowledge/documents", params={"name": ""}).status_code == 422
