"""Knowledge bases, documents, search, reading, wiki and answers through the REST API, on both backends.

Indexing runs inline here (``jobs=inline``) so each request's effect is visible to the next; the thread-pool
path is exercised through ``serve`` in test_serve_knowledge.py.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from mcpbridge.bootstrap import Container
from mcpbridge.domain.knowledge import IndexAnalysis, KnowledgeAccess
from mcpbridge.http.apps import create_combined_app
from mcpbridge.settings import Settings
from tests.support.containers import container_on
from tests.support.embedder import HashingEmbedder

GUIDE = """# Deployment guide

mcpbridge runs on AWS Lambda behind API Gateway. Each function imports only what it needs, and the core package
ships as a layer shared by every function of the stack, so that a deployment stays small and quick to start.

## Secrets

Secrets are sealed with KMS envelope encryption before they reach DynamoDB.
Rotation of the data key happens every five minutes. The encryption context binds each ciphertext to the
workspace, the kind of secret and the row it belongs to, so a sealed value copied elsewhere does not open.

## Tokens

OAuth refresh tokens are refreshed under a lease so a rotating refresh token is used once. Instances that lose
the race for the lease wait for the winner and then reuse the token it stored, instead of refreshing again.
"""

CHINESE = """# 知识库指南

知识库用于存储文档。每个文档被切分成多个片段，便于检索。

## 检索

混合检索结合关键词检索与语义检索。
"""


@pytest.fixture(params=["local", "aws"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def container(backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Container]:
    settings = {"jobs": "inline", "max_document_bytes": 64 * 1024}
    with container_on(backend, tmp_path, monkeypatch, settings=settings, embedder=HashingEmbedder(64)) as built:
        yield built


@pytest.fixture
def client(container: Container) -> Iterator[TestClient]:
    with TestClient(create_combined_app(container), raise_server_exceptions=False) as test_client:
        key = container.identity.initialize().api_key
        test_client.headers["Authorization"] = f"Bearer {key}"
        yield test_client


def problem(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["code"] == code, body
    return body


def make_kb(client: TestClient, name: str = "Guides") -> dict[str, Any]:
    response = client.post("/api/v1/knowledge-bases", json={"name": name, "description": f"{name} for tests"})
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def add_doc(client: TestClient, kb_id: str, title: str, content: str) -> dict[str, Any]:
    response = client.post(f"/api/v1/knowledge-bases/{kb_id}/documents", json={"title": title, "content": content})
    assert response.status_code == 201, response.text
    created = response.json()
    assert created["parse_status"] == "pending"
    document = client.get(f"/api/v1/documents/{created['id']}").json()
    assert document["parse_status"] == "completed", document
    return document  # type: ignore[no-any-return]


def search(client: TestClient, query: str, **body: Any) -> Any:
    return client.post("/api/v1/knowledge/search", json={"query": query, **body})


def doc_count(client: TestClient, kb_id: str) -> int:
    listed = client.get(f"/api/v1/knowledge-bases/{kb_id}/documents", params={"limit": 200}).json()
    assert listed["next_cursor"] is None
    return len(listed["items"])


# ---------------------------------------------------------------------------------------------------- bases


def test_knowledge_base_lifecycle_and_unique_names(client: TestClient) -> None:
    kb = make_kb(client, "Guides")
    assert kb["capabilities"] == ["keyword", "semantic"]
    problem(client.post("/api/v1/knowledge-bases", json={"name": "  gUIDES "}), 409, "kb_name_taken")
    other = make_kb(client, "Runbooks")
    problem(client.put(f"/api/v1/knowledge-bases/{other['id']}", json={"name": "guides"}), 409, "kb_name_taken")
    renamed = client.put(f"/api/v1/knowledge-bases/{other['id']}", json={"name": "Playbooks"})
    assert renamed.json()["name"] == "Playbooks"
    assert make_kb(client, "Runbooks")["name"] == "Runbooks", "a renamed base frees its old name"
    assert [kb["name"] for kb in client.get("/api/v1/knowledge-bases").json()["items"]] == [
        "Guides",
        "Playbooks",
        "Runbooks",
    ]
    assert client.delete(f"/api/v1/knowledge-bases/{kb['id']}").status_code == 204
    problem(client.get(f"/api/v1/knowledge-bases/{kb['id']}"), 404, "kb_not_found")
    assert make_kb(client, "guides")["name"] == "guides", "a deleted base frees its name"


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"name": ""}, 422, "validation_failed"),
        ({"name": 7}, 422, "validation_failed"),
        ({"name": "x", "colour": "red"}, 422, "validation_failed"),
        ({"name": "   "}, 400, "invalid_name"),
    ],
)
def test_bad_knowledge_base_input_changes_nothing(
    client: TestClient, body: dict[str, Any], status: int, code: str
) -> None:
    problem(client.post("/api/v1/knowledge-bases", json=body), status, code)
    assert client.get("/api/v1/knowledge-bases").json() == {"items": [], "next_cursor": None}


def test_the_languages_listed_are_those_a_knowledge_base_takes(client: TestClient) -> None:
    """Every language listed is accepted by create and update (and analysed as such); a language not listed is
    refused. The console's select is filled from this list."""
    listed = client.get("/api/v1/knowledge/languages")
    assert listed.status_code == 200, listed.text
    body = listed.json()
    assert body["default"] == "auto"
    assert body["languages"][:2] == ["auto", "none"]
    assert {"english", "french", "german", "russian"} <= set(body["languages"])
    kb = make_kb(client)
    for language in body["languages"]:
        changed = client.put(f"/api/v1/knowledge-bases/{kb['id']}", json={"language": language})
        assert changed.status_code == 200, (language, changed.text)
        assert changed.json()["language"] == language
    refused = client.put(f"/api/v1/knowledge-bases/{kb['id']}", json={"language": "klingon"})
    assert refused.status_code == 400, refused.text
    assert client.get(f"/api/v1/knowledge-bases/{kb['id']}").json()["language"] == body["languages"][-1]
    anonymous = client.get("/api/v1/knowledge/languages", headers={"Authorization": ""})
    assert anonymous.status_code == 401, anonymous.text


def test_unknown_knowledge_base_is_404_everywhere(client: TestClient) -> None:
    problem(client.get("/api/v1/knowledge-bases/kb_missing"), 404, "kb_not_found")
    problem(
        client.post("/api/v1/knowledge-bases/kb_missing/documents", json={"title": "t", "content": "c"}),
        404,
        "kb_not_found",
    )
    problem(client.get("/api/v1/knowledge-bases/kb_missing/documents"), 404, "kb_not_found")
    problem(search(client, "x", knowledge_base_ids=["kb_missing"]), 404, "kb_not_found")


# ---------------------------------------------------------------------------------------------------- documents


def test_english_and_chinese_documents_become_searchable(client: TestClient) -> None:
    kb = make_kb(client)
    guide = add_doc(client, kb["id"], "Deployment guide", GUIDE)
    chinese = add_doc(client, kb["id"], "知识库指南", CHINESE)
    assert guide["chunk_count"] >= 2
    english = search(client, "envelope encryption", mode="keyword").json()
    assert english["mode"] == "keyword"
    top = english["results"][0]
    assert top["document_id"] == guide["id"]
    assert top["heading_path"] == ["Deployment guide", "Secrets"]
    assert "envelope encryption" in top["text"]
    assert top["start_line"] <= 7 <= top["end_line"]
    for query in ("检索", "混合检索", "文档"):
        hits = search(client, query, mode="keyword").json()["results"]
        assert hits, query
        assert hits[0]["document_id"] == chinese["id"], query


def test_a_document_filter_restricts_results_and_never_widens(client: TestClient) -> None:
    kb = make_kb(client)
    other_kb = make_kb(client, "Other")
    guide = add_doc(client, kb["id"], "Deployment guide", GUIDE)
    second = add_doc(client, kb["id"], "Tokens again", "Refresh tokens and leases, again: lease tokens refresh.")
    foreign = add_doc(client, other_kb["id"], "Foreign", "refresh tokens in another base")
    hits = search(client, "refresh tokens", mode="keyword", knowledge_ids=[f"  {guide['id']} ", guide["id"]]).json()
    assert {h["document_id"] for h in hits["results"]} == {guide["id"]}
    assert second["id"] not in {h["document_id"] for h in hits["results"]}
    problem(search(client, "tokens", knowledge_ids=["doc_unknown"]), 404, "document_not_found")
    problem(
        search(client, "tokens", knowledge_base_ids=[kb["id"]], knowledge_ids=[foreign["id"]]),
        400,
        "document_out_of_scope",
    )
    problem(search(client, "tokens", knowledge_ids=[]), 400, "invalid_knowledge_ids")
    problem(search(client, "tokens", knowledge_ids=["  "]), 400, "invalid_knowledge_ids")
    by_name = search(client, "refresh", mode="keyword", knowledge_base_ids=["OTHER"]).json()["results"]
    assert {h["document_id"] for h in by_name} == {foreign["id"]}


def test_semantic_and_hybrid_with_an_embedder(client: TestClient) -> None:
    kb = make_kb(client)
    guide = add_doc(client, kb["id"], "Deployment guide", GUIDE)
    add_doc(client, kb["id"], "Cooking", "Pasta needs salted boiling water and ten minutes.")
    semantic = search(client, "how are secrets sealed with kms", mode="semantic").json()
    assert semantic["mode"] == "semantic"
    assert semantic["results"][0]["document_id"] == guide["id"]
    hybrid = search(client, "kms envelope encryption").json()
    assert hybrid["mode"] == "hybrid"
    assert hybrid["notices"] == []
    assert hybrid["results"][0]["document_id"] == guide["id"]


def test_a_query_that_embeds_to_nothing_is_answered_with_a_notice(client: TestClient) -> None:
    kb = make_kb(client)
    add_doc(client, kb["id"], "Deployment guide", GUIDE)
    for mode in ("semantic", "hybrid"):
        answered = search(client, "\u001b", mode=mode)  # no word the embedder can place: a zero vector
        assert answered.status_code == 200, answered.text
        assert answered.json()["results"] == []
        assert any("no usable embedding" in n for n in answered.json()["notices"])
    asked = client.post("/api/v1/knowledge/ask", json={"question": "\u001b"})
    assert asked.status_code == 200, asked.text


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"title": "", "content": "x"}, 422, "validation_failed"),
        ({"title": "   ", "content": "x"}, 400, "invalid_title"),
        ({"title": "t"}, 422, "validation_failed"),
        ({"title": "t", "content": "x", "url": "https://example.com/"}, 422, "validation_failed"),
        ({"title": "t", "content": 5}, 422, "validation_failed"),
        ({"title": "t", "content": "   \n "}, 400, "document_empty"),
        ({"title": "t", "content": "x" * (64 * 1024 + 1)}, 413, "document_too_large"),
    ],
)
def test_bad_document_input_changes_nothing(client: TestClient, body: dict[str, Any], status: int, code: str) -> None:
    kb = make_kb(client)
    problem(client.post(f"/api/v1/knowledge-bases/{kb['id']}/documents", json=body), status, code)
    assert doc_count(client, kb["id"]) == 0
    assert client.get(f"/api/v1/knowledge-bases/{kb['id']}").json()["document_count"] == 0


def test_listing_documents_pages_and_filters(client: TestClient) -> None:
    kb = make_kb(client)
    for i in range(5):
        add_doc(client, kb["id"], f"Note {i}" if i % 2 else f"Memo {i}", f"body {i}")
    url = f"/api/v1/knowledge-bases/{kb['id']}/documents"
    seen, cursor, pages = [], None, 0
    while True:
        page = client.get(url, params={"limit": 2, **({"cursor": cursor} if cursor else {})}).json()
        seen += [d["title"] for d in page["items"]]
        pages, cursor = pages + 1, page["next_cursor"]
        if cursor is None:
            break
        if pages == 1:  # a document added between two pages is not shown in a later one, nor pushes one out
            add_doc(client, kb["id"], "Late", "body")
    assert seen == ["Memo 4", "Note 3", "Memo 2", "Note 1", "Memo 0"]  # newest first
    assert pages == 3
    notes = client.get(url, params={"keyword": "NOTE"}).json()
    assert [d["title"] for d in notes["items"]] == ["Note 3", "Note 1"]
    problem(client.get(url, params={"limit": 500}), 422, "validation_failed")
    problem(client.get(url, params={"cursor": "bogus"}), 400, "invalid_cursor")
    other = client.get(url, params={"keyword": "note", "limit": 1}).json()["next_cursor"]
    problem(client.get(url, params={"cursor": other}), 400, "invalid_cursor")  # another listing's cursor


def test_updating_reindexes_and_deleting_removes(client: TestClient) -> None:
    kb = make_kb(client)
    document = add_doc(client, kb["id"], "Deployment guide", GUIDE)
    changed = client.put(f"/api/v1/documents/{document['id']}", json={"content": "Completely new text about zebras."})
    assert changed.json()["parse_status"] == "pending"
    after = client.get(f"/api/v1/documents/{document['id']}?include_content=true").json()
    assert (after["parse_status"], after["version"]) == ("completed", 2)
    assert after["content"] == "Completely new text about zebras."
    assert search(client, "envelope", mode="keyword").json()["results"] == []
    assert search(client, "zebras", mode="keyword").json()["results"][0]["document_id"] == document["id"]
    assert client.delete(f"/api/v1/documents/{document['id']}").status_code == 204
    problem(client.get(f"/api/v1/documents/{document['id']}"), 404, "document_not_found")
    assert search(client, "zebras", mode="keyword").json()["results"] == []
    assert client.get(f"/api/v1/knowledge-bases/{kb['id']}").json()["document_count"] == 0


def test_deleting_a_knowledge_base_purges_its_documents(client: TestClient) -> None:
    kb = make_kb(client)
    document = add_doc(client, kb["id"], "Deployment guide", GUIDE)
    assert client.delete(f"/api/v1/knowledge-bases/{kb['id']}").status_code == 204
    problem(client.get(f"/api/v1/documents/{document['id']}"), 404, "document_not_found")
    fresh = make_kb(client, "Guides")
    assert search(client, "envelope", mode="keyword", knowledge_base_ids=[fresh["id"]]).json()["results"] == []


def test_uploading_html_and_markdown_files(client: TestClient) -> None:
    kb = make_kb(client)
    html = (
        b"<html><head><title>Ops</title><script>alert(1)</script></head>"
        b"<body><h1>Runbook</h1><p>Restart the indexer.</p></body></html>"
    )
    response = client.post(
        f"/api/v1/knowledge-bases/{kb['id']}/documents/upload",
        files={"file": ("runbook.html", html, "text/html")},
        data={"title": "Runbook"},
    )
    assert response.status_code == 201, response.text
    document = client.get(f"/api/v1/documents/{response.json()['id']}?include_content=true").json()
    assert document["parse_status"] == "completed", document
    assert "alert" not in document["content"]
    hit = search(client, "restart indexer", mode="keyword").json()["results"][0]
    assert hit["heading_path"] == ["Runbook"]
    binary = client.post(
        f"/api/v1/knowledge-bases/{kb['id']}/documents/upload",
        files={"file": ("photo.png", b"\x89PNG\r\n\x1a\n" + bytes(64), "image/png")},
    )
    failed = client.get(f"/api/v1/documents/{binary.json()['id']}").json()
    assert failed["parse_status"] == "failed"
    assert failed["parse_error"]


# ---------------------------------------------------------------------------------------------------- read / grep


def test_reading_pages_to_the_end_and_by_query_and_line(client: TestClient) -> None:
    kb = make_kb(client)
    sections = "\n\n".join(f"## Section {i}\n\n" + f"Paragraph {i} talks about topic{i}. " * 40 for i in range(12))
    document = add_doc(client, kb["id"], "Long", f"# Long\n\n{sections}")
    total = document["chunk_count"]
    assert total >= 12
    seen: list[int] = []
    offset: int | None = 0
    while offset is not None:
        page = client.get(f"/api/v1/documents/{document['id']}/read?offset={offset}&limit=5").json()
        seen += [c["offset"] for c in page["chunks"]]
        offset = page["next_offset"]
    assert seen == list(range(total))
    matched = client.get(f"/api/v1/documents/{document['id']}/read?query=topic7").json()
    assert [c["matched"] for c in matched["chunks"]].count(True) >= 1
    assert all("topic7" in c["text"] for c in matched["chunks"] if c["matched"])
    assert len(matched["chunks"]) <= 3 * matched["matches"]
    target = next(c for c in matched["chunks"] if c["matched"])
    at_line = client.get(f"/api/v1/documents/{document['id']}/read?line={target['start_line']}&limit=1").json()
    assert at_line["chunks"][0]["chunk_id"] == target["chunk_id"]


def test_grep_validates_with_the_regex(client: TestClient) -> None:
    kb = make_kb(client)
    add_doc(client, kb["id"], "Deployment guide", GUIDE)
    found = client.post("/api/v1/knowledge/grep", json={"pattern": r"refresh\s+tokens?"}).json()["matches"]
    assert found
    assert any("refresh token" in line["text"].lower() for m in found for line in m["lines"])
    assert found[0]["lines"][0]["line"] >= 13
    problem(client.post("/api/v1/knowledge/grep", json={"pattern": r"^\d+$"}), 400, "pattern_without_words")
    problem(client.post("/api/v1/knowledge/grep", json={"pattern": "refresh("}), 400, "invalid_pattern")


@pytest.mark.parametrize(
    ("pattern", "construct", "named"),
    [
        (r"(refresh)\s+\1", "backreference", r"a backreference (\1)"),
        (r"refresh(?=\s+tokens)", "lookahead", "a lookahead (?="),
        (r"(?<=OAuth )refresh", "lookbehind", "a lookbehind (?<="),
        (r"(?>refresh|re)\s+tokens", "atomic_group", "an atomic group (?>"),
        (r"refresh\s++tokens", "possessive_quantifier", "a possessive quantifier (++)"),
        (r"(OAuth )?(?(1)refresh|lease)", "conditional", "a conditional (?("),
    ],
)
def test_grep_refuses_what_re2_lacks_by_name(client: TestClient, pattern: str, construct: str, named: str) -> None:
    kb = make_kb(client)
    add_doc(client, kb["id"], "Deployment guide", GUIDE)
    body = problem(client.post("/api/v1/knowledge/grep", json={"pattern": pattern}), 400, "unsupported_pattern")
    assert body["details"] == {"construct": construct}
    assert named in body["detail"]


def test_grep_runs_re2_case_insensitive_across_lines_with_its_bounds(client: TestClient) -> None:
    kb = make_kb(client)
    add_doc(client, kb["id"], "Deployment guide", GUIDE)
    grep = "/api/v1/knowledge/grep"
    across = client.post(grep, json={"pattern": r"CORE\s+package\s+ships"}).json()
    # A match may span lines; the line where it starts is reported.
    assert [line["text"] for m in across["matches"] for line in m["lines"]] == [GUIDE.split("\n")[2]]
    assert (across["truncated"], across["notices"]) == (False, [])
    letters = client.post(grep, json={"pattern": r"rotation\s\pL+\s\pL+"}).json()["matches"]
    assert any("Rotation of the data key" in line["text"] for m in letters for line in m["lines"])
    problem(client.post(grep, json={"pattern": r"refresh(a{1000}){1000}"}), 400, "pattern_too_large")
    problem(client.post(grep, json={"pattern": r"refresh\pL{1000}"}), 400, "pattern_too_large")
    problem(client.post(grep, json={"pattern": "refresh" + "a" * 494}), 422, "validation_failed")


# ---------------------------------------------------------------------------------------------------- wiki / ask


def test_wiki_pages_search_read_and_index(client: TestClient) -> None:
    kb = make_kb(client)
    page = {
        "slug": "concept/rag",
        "type": "concept",
        "title": "Retrieval-augmented generation",
        "content": "RAG = retrieval + generation. See [[entity/bm25]].",
    }
    assert client.post(f"/api/v1/knowledge-bases/{kb['id']}/wiki/pages", json=page).status_code == 201
    other = {"slug": "entity/bm25", "type": "entity", "title": "BM25", "content": "A ranking function (a+b)."}
    assert client.post(f"/api/v1/knowledge-bases/{kb['id']}/wiki/pages", json=other).status_code == 201
    problem(client.post(f"/api/v1/knowledge-bases/{kb['id']}/wiki/pages", json=page), 409, "page_exists")
    problem(
        client.post(f"/api/v1/knowledge-bases/{kb['id']}/wiki/pages", json={**page, "slug": "Bad Slug!"}),
        400,
        "invalid_slug",
    )
    assert "wiki" in client.get(f"/api/v1/knowledge-bases/{kb['id']}").json()["capabilities"]
    read = client.get(f"/api/v1/knowledge-bases/{kb['id']}/wiki/pages/concept/rag").json()
    assert read["links"] == ["entity/bm25"]
    regex = client.post("/api/v1/wiki/search", json={"query": "retriev(al|e)"}).json()
    assert [m["slug"] for m in regex] == ["concept/rag"]
    literal = client.post("/api/v1/wiki/search", json={"query": "(a+b"}).json()
    assert [m["slug"] for m in literal] == ["entity/bm25"], "an invalid regex is matched literally"
    problem(client.post("/api/v1/wiki/search", json={"query": "(a+b", "regex": True}), 400, "invalid_pattern")
    assert client.post("/api/v1/wiki/search", json={"query": "a+b", "regex": False}).json()[0]["slug"] == "entity/bm25"
    index = client.get(f"/api/v1/knowledge-bases/{kb['id']}/wiki").json()
    assert [g["type"] for g in index["groups"]] == ["concept", "entity"]


def test_ask_answers_extractively_with_references_and_sessions(client: TestClient) -> None:
    kb = make_kb(client)
    guide = add_doc(client, kb["id"], "Deployment guide", GUIDE)
    first = client.post("/api/v1/knowledge/ask", json={"question": "How are secrets sealed?"}).json()
    assert first["mode"] == "extractive"
    assert "extractive" in first["answer"].lower()
    assert first["references"][0]["document_id"] == guide["id"]
    assert any("language model" in n for n in first["notices"])
    follow = client.post("/api/v1/knowledge/ask", json={"question": "and rotation?", "session_id": first["session_id"]})
    assert follow.json()["session_id"] == first["session_id"]
    problem(
        client.post("/api/v1/knowledge/ask", json={"question": "x", "session_id": "ses_unknown"}),
        404,
        "session_not_found",
    )


def test_wiki_search_refuses_regex_only_constructs_and_keeps_its_literal_fallback(client: TestClient) -> None:
    kb = make_kb(client)
    page = {"slug": "guide/cpp", "type": "guide", "title": "Languages", "content": "C++ and C# notes\nsee (a+b)"}
    assert client.post(f"/api/v1/knowledge-bases/{kb['id']}/wiki/pages", json=page).status_code == 201
    search = "/api/v1/wiki/search"
    literal = client.post(search, json={"query": "C++"})
    assert [m["lines"] for m in literal.json()] == [[{"line": 1, "text": "C++ and C# notes"}]]
    assert "mcpbridge-search-truncated" not in literal.headers
    body = problem(client.post(search, json={"query": "notes(?=!)"}), 400, "unsupported_pattern")
    assert "lookahead (?=" in body["detail"]
    problem(client.post(search, json={"query": r"(see)\s\1"}), 400, "unsupported_pattern")
    body = problem(client.post(search, json={"query": "C++", "regex": True}), 400, "unsupported_pattern")
    assert body["details"] == {"construct": "possessive_quantifier"}
    problem(client.post(search, json={"query": r"a{1001}"}), 400, "pattern_too_large")
    assert [m["slug"] for m in client.post(search, json={"query": r"^see \(\pL\+b\)$"}).json()] == ["guide/cpp"]


def test_wiki_search_says_when_its_scan_budget_ran_out(client: TestClient) -> None:
    kb = make_kb(client, "Notes — été")  # named in the header, which must stay ASCII
    content = "\n".join(f"line {i} of a long page about leases" for i in range(600))
    for slug in ("note/a", "note/b"):
        page = {"slug": slug, "type": "note", "title": slug, "content": content}
        assert client.post(f"/api/v1/knowledge-bases/{kb['id']}/wiki/pages", json=page).status_code == 201
    # A program this big (every letter of every script, a hundred times) may scan only a few KiB per search.
    heavy = client.post("/api/v1/wiki/search", json={"query": r"leases\pL{100}"})
    assert heavy.status_code == 200, heavy.text
    assert heavy.json() == []
    notice = heavy.headers["mcpbridge-search-truncated"]
    assert "budget" in notice
    assert notice.isascii()
    light = client.post("/api/v1/wiki/search", json={"query": r"line 599 of"})
    assert [m["slug"] for m in light.json()] == ["note/a", "note/b"]
    assert "mcpbridge-search-truncated" not in light.headers


# ---------------------------------------------------------------------------------------------------- languages

FRENCH = "# Écurie\n\nLes chevaux mangeaient du foin dans l'écurie.\n"


class HeldJobs:
    """Jobs run inline, except re-analyses, which wait until the test releases them."""

    def __init__(self) -> None:
        self.run: Any = None
        self.held: list[tuple[str, dict[str, str]]] = []

    def submit(self, kind: str, payload: dict[str, str]) -> None:
        if kind == "reanalyse_index":
            self.held.append((kind, payload))
        else:
            self.run(kind, payload)

    def release(self) -> None:
        held, self.held = self.held, []
        for kind, payload in held:
            self.run(kind, payload)


@pytest.fixture
def held(backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[TestClient, HeldJobs]]:
    jobs = HeldJobs()
    with container_on(backend, tmp_path, monkeypatch, jobs=jobs) as built:
        jobs.run = built.run_job
        with TestClient(create_combined_app(built), raise_server_exceptions=False) as test_client:
            test_client.headers["Authorization"] = f"Bearer {built.identity.initialize().api_key}"
            yield test_client, jobs


def test_a_knowledge_base_language_decides_how_keyword_search_reads_it(client: TestClient) -> None:
    created = client.post("/api/v1/knowledge-bases", json={"name": "Écuries", "language": "French"})
    assert created.status_code == 201, created.text
    kb = created.json()
    assert (kb["language"], kb["reanalysis"]) == ("french", None)
    assert make_kb(client, "Default")["language"] == "auto"
    doc = add_doc(client, kb["id"], "Écurie", FRENCH)
    hits = search(client, "cheval manger", mode="keyword", knowledge_base_ids=[kb["id"]]).json()["results"]
    assert [h["document_id"] for h in hits] == [doc["id"]]


def test_an_unknown_language_is_refused_and_changes_nothing(client: TestClient) -> None:
    problem(client.post("/api/v1/knowledge-bases", json={"name": "x", "language": "klingon"}), 400, "invalid_language")
    assert client.get("/api/v1/knowledge-bases").json() == {"items": [], "next_cursor": None}
    kb = make_kb(client)
    problem(client.put(f"/api/v1/knowledge-bases/{kb['id']}", json={"language": "klingon"}), 400, "invalid_language")
    assert client.get(f"/api/v1/knowledge-bases/{kb['id']}").json()["language"] == "auto"


def test_changing_the_language_reanalyses_the_index_in_the_background(held: tuple[TestClient, HeldJobs]) -> None:
    client, jobs = held
    kb = make_kb(client)
    doc = add_doc(client, kb["id"], "Écurie", FRENCH)
    assert search(client, "cheval", mode="keyword").json()["results"] == []  # English rules: chevaux is not cheval

    changed = client.put(f"/api/v1/knowledge-bases/{kb['id']}", json={"language": "french"})
    assert changed.status_code == 200, changed.text
    assert changed.json()["language"] == "french"
    assert changed.json()["reanalysis"] == {"language": "french", "done": 0, "total": 0}
    assert search(client, "chevaux", mode="keyword").json()["results"], "search goes on meanwhile"
    client.put(f"/api/v1/knowledge-bases/{kb['id']}", json={"language": "french"})
    assert len(jobs.held) == 1, "asking again while it runs starts nothing"

    jobs.release()
    after = client.get(f"/api/v1/knowledge-bases/{kb['id']}").json()
    assert (after["language"], after["reanalysis"]) == ("french", None)
    assert [h["document_id"] for h in search(client, "cheval", mode="keyword").json()["results"]] == [doc["id"]]


def test_an_index_of_an_older_release_is_reanalysed_when_first_searched(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", jobs="inline")
    first = Container(settings)
    access = KnowledgeAccess(first.identity.initialize().workspace_id)
    kb = first.knowledge_bases.create(access, name="Old")
    first.documents.create_from_text(access, kb.id, title="Walruses", content="Walruses haul out on the ice.")
    first.close()
    conn = sqlite3.connect(settings.indexes_dir / f"{kb.id}.sqlite3")  # what schema 1 had: surface words only
    with conn:
        conn.execute("DROP TABLE chunks_stems_a")
        conn.execute("DROP TABLE chunks_stems_b")
        conn.execute("DELETE FROM meta WHERE key IN ('analyser', 'language', 'stems', 'chunk_count')")
        conn.execute("UPDATE meta SET value = 1 WHERE key = 'schema_version'")
    conn.close()

    upgraded = Container(settings)
    try:
        search = upgraded.knowledge_search
        scope = search.scope(access)
        # The first search still runs on the words as written, and starts the re-analysis (inline here).
        assert search.search(scope, "walruses", mode="keyword").hits
        assert upgraded.search_index.analysis(kb.id) == IndexAnalysis("auto", up_to_date=True)
        assert [h.chunk.document_title for h in search.search(scope, "walrus", mode="keyword").hits] == ["Walruses"]
        assert upgraded.knowledge_bases.get(access, kb.id).reanalysis is None
    finally:
        upgraded.close()


# ---------------------------------------------------------------------------------------------------- relevance


@pytest.fixture
def keyword_only(backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    settings = {"jobs": "inline"}
    with (
        container_on(backend, tmp_path, monkeypatch, settings=settings, embedder=None) as built,
        TestClient(create_combined_app(built), raise_server_exceptions=False) as test_client,
    ):
        test_client.headers["Authorization"] = f"Bearer {built.identity.initialize().api_key}"
        yield test_client


FAQ = """# Frequently asked questions

## What is this site?

This is the help centre. Here you can find what people ask us most often, and how to do what they ask.

## How do I do what I want to do?

Tell us what you want and what you did, and when it was, and what happened then.
"""


def test_an_answer_says_when_nothing_relevant_is_found(keyword_only: TestClient) -> None:
    client = keyword_only
    kb = make_kb(client)
    add_doc(client, kb["id"], "Deployment guide", GUIDE)
    add_doc(client, kb["id"], "FAQ", FAQ)
    asked = client.post("/api/v1/knowledge/ask", json={"question": "What is the capital of France?"}).json()
    assert asked["references"] == []
    assert "nothing relevant found" in asked["answer"].lower()
    # Stop words neither rank the FAQ above the right section nor make it relevant.
    secrets = client.post("/api/v1/knowledge/ask", json={"question": "How do I seal the secrets?"}).json()
    assert [r["document_title"] for r in secrets["references"]][:1] == ["Deployment guide"]
    assert "Secrets are sealed" in secrets["references"][0]["excerpt"]
    weak = search(client, "sealed pineapples in Lisbon harbour", mode="keyword").json()
    assert weak["results"], "the closest matches are still shown..."
    assert any("nothing relevant found" in n for n in weak["notices"]), "... and said to be only that"


def test_a_follow_up_uses_the_earlier_turn_only_when_it_relates_to_it(keyword_only: TestClient) -> None:
    client = keyword_only
    kb = make_kb(client)
    add_doc(client, kb["id"], "Deployment guide", GUIDE)
    first = client.post("/api/v1/knowledge/ask", json={"question": "How are secrets sealed?"}).json()
    session = first["session_id"]
    follow = client.post("/api/v1/knowledge/ask", json={"question": "and the rotation?", "session_id": session}).json()
    assert any("Rotation of the data key" in r["excerpt"] for r in follow["references"])
    assert not any("answered on its own" in n for n in follow["notices"])
    unrelated = client.post(
        "/api/v1/knowledge/ask", json={"question": "What is the capital of France?", "session_id": session}
    ).json()
    assert unrelated["references"] == [], "the earlier question about secrets does not leak into this one"
    assert any("answered on its own" in n for n in unrelated["notices"])
