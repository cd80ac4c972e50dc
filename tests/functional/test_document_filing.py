"""Documents people organise: tags, folders, draft and published status (search and endpoints see published
documents only; a draft is kept out of the index until it is published), metadata-only reads, and deleting one
chunk (its text, keyword terms and vector leave the index). On the embedded backend, on AWS (moto, the S3 index
files) and on the Lance engine, with a deterministic embedder so semantic search runs too."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from mcpbridge.bootstrap import Container
from mcpbridge.cli import main
from mcpbridge.http.apps import create_combined_app
from tests.support.admin_api import admin_client
from tests.support.containers import container_on
from tests.support.embedder import HashingEmbedder
from tests.support.live_server import live_server

SEARCH = "/api/v1/knowledge/search"


@pytest.fixture(params=["local", "aws", "lance"])
def container(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Container]:
    backend = "aws" if request.param == "aws" else "local"
    settings: dict[str, Any] = {"jobs": "inline"}
    if request.param == "lance":
        settings["search_engine"] = "lance"
    with container_on(backend, tmp_path, monkeypatch, settings=settings, embedder=HashingEmbedder()) as built:
        yield built


@pytest.fixture
def client(container: Container) -> Iterator[TestClient]:
    with admin_client(container, "http://127.0.0.1") as test_client:
        yield test_client


@pytest.fixture
def kb(client: TestClient) -> str:
    created = client.post("/api/v1/knowledge-bases", json={"name": "Handbook"})
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


def add(client: TestClient, kb: str, title: str, content: str, **filing: Any) -> dict[str, Any]:
    created = client.post(
        f"/api/v1/knowledge-bases/{kb}/documents", json={"title": title, "content": content, **filing}
    )
    assert created.status_code == 201, created.text
    document = client.get(f"/api/v1/documents/{created.json()['id']}").json()
    assert document["parse_status"] in ("completed", "draft"), document
    return dict(document)


def titles(client: TestClient, query: str, mode: str = "keyword") -> list[str]:
    found = client.post(SEARCH, json={"query": query, "mode": mode})
    assert found.status_code == 200, found.text
    return [hit["document_title"] for hit in found.json()["results"]]


def listed(client: TestClient, kb: str, **params: Any) -> list[str]:
    response = client.get(f"/api/v1/knowledge-bases/{kb}/documents", params=params)
    assert response.status_code == 200, response.text
    return sorted(d["title"] for d in response.json()["items"])


def endpoint(client: TestClient) -> dict[str, Any]:
    created = client.post(
        "/api/v1/mcp-endpoints",
        json={"name": "e", "tools": ["search_knowledge", "list_documents", "read_document", "update_document"]},
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
    return result


# ---------------------------------------------------------------------------------------------------- drafts


def test_a_draft_is_invisible_to_search_until_published(client: TestClient, kb: str) -> None:
    add(client, kb, "Live", "The cafeteria serves lunch from noon.")
    draft = add(client, kb, "Plan", "The zeppelin hangar opens next spring.", status="draft")
    assert draft["status"] == "draft"
    assert draft["parse_status"] == "draft"
    assert draft["chunk_count"] == 0

    assert titles(client, "zeppelin") == []
    assert titles(client, "zeppelin hangar", "semantic") in ([], ["Live"]), "never the draft"
    assert listed(client, kb) == ["Live"], "a listing shows published documents unless asked"
    assert listed(client, kb, status="draft") == ["Plan"]
    assert listed(client, kb, status="all") == ["Live", "Plan"]
    mcp = endpoint(client)
    assert call(client, mcp, "search_knowledge", query="zeppelin", mode="keyword")["structuredContent"]["results"] == []
    documents = call(client, mcp, "list_documents", knowledge_base_id=kb)["structuredContent"]["documents"]
    assert [d["title"] for d in documents] == ["Live"]
    hidden = call(client, mcp, "read_document", document_id=draft["id"])
    assert hidden["isError"] is True
    assert hidden["structuredContent"]["error"]["code"] == "document_not_found"

    published = client.put(f"/api/v1/documents/{draft['id']}", json={"status": "published"})
    assert published.status_code == 200, published.text
    assert titles(client, "zeppelin") == ["Plan"]
    assert client.get(f"/api/v1/documents/{draft['id']}").json()["parse_status"] == "completed"
    assert call(client, mcp, "read_document", document_id=draft["id"]).get("isError") is not True

    # Back to draft (through the endpoint's write tool): out of search at once.
    back = call(client, mcp, "update_document", document_id=draft["id"], status="draft")
    assert back.get("isError") is not True, back
    assert titles(client, "zeppelin") == []
    assert titles(client, "zeppelin hangar", "semantic") in ([], ["Live"])


def test_a_new_upload_is_published_unless_it_says_draft(client: TestClient, kb: str) -> None:
    uploaded = client.post(
        f"/api/v1/knowledge-bases/{kb}/documents/upload",
        files={"file": ("notes.md", b"Quokkas live on Rottnest island.", "text/markdown")},
    )
    assert uploaded.status_code == 201, uploaded.text
    assert uploaded.json()["status"] == "published"
    assert titles(client, "quokkas") == ["notes.md"]


# ---------------------------------------------------------------------------------------------------- tags, folders


def test_tags_and_folders_file_documents_without_reindexing_them(client: TestClient, kb: str) -> None:
    spec = add(client, kb, "Spec", "Design of the ledger.", tags=["Design", "ledger", "design "], folder="/docs/spec/")
    assert spec["tags"] == ["Design", "ledger"], "trimmed, duplicates dropped case-insensitively"
    assert spec["folder"] == "docs/spec"
    add(client, kb, "Guide", "How to use the ledger.", tags=["howto"], folder="docs")
    add(client, kb, "Readme", "Start here.")

    assert listed(client, kb, tag="DESIGN") == ["Spec"]
    assert listed(client, kb, folder="docs") == ["Guide"]
    assert listed(client, kb, folder="docs", subfolders=True) == ["Guide", "Spec"]
    assert listed(client, kb, folder="") == ["Readme"]
    mcp = endpoint(client)
    found = call(client, mcp, "list_documents", knowledge_base_id=kb, folder="docs", subfolders=True, tag="ledger")
    assert [d["title"] for d in found["structuredContent"]["documents"]] == ["Spec"]

    refiled = client.put(f"/api/v1/documents/{spec['id']}", json={"tags": ["archive"], "folder": "old"})
    assert refiled.status_code == 200, refiled.text
    body = refiled.json()
    assert (body["tags"], body["folder"]) == (["archive"], "old")
    assert body["version"] == spec["version"], "filing is not a new version"
    assert body["parse_status"] == "completed"
    assert sorted(titles(client, "ledger")) == ["Guide", "Spec"], "still searchable"


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"tags": ["x" * 51]}, "invalid_tags"),
        ({"tags": [" "]}, "invalid_tags"),
        ({"tags": [f"t{i}" for i in range(21)]}, "invalid_tags"),
        ({"folder": "docs/../secrets"}, "invalid_folder"),
        ({"folder": "docs//spec"}, "invalid_folder"),
    ],
)
def test_bad_filing_is_refused_naming_it_and_changes_nothing(
    client: TestClient, kb: str, fields: dict[str, Any], code: str
) -> None:
    document = add(client, kb, "Spec", "Design of the ledger.", tags=["design"], folder="docs")
    refused = client.post(
        f"/api/v1/knowledge-bases/{kb}/documents", json={"title": "New", "content": "Some text.", **fields}
    )
    assert refused.status_code == 400, refused.text
    assert refused.json()["code"] == code
    assert next(iter(fields)).rstrip("s") in refused.json()["detail"]
    changed = client.put(f"/api/v1/documents/{document['id']}", json=fields)
    assert changed.status_code == 400, changed.text
    assert changed.json()["code"] == code
    assert listed(client, kb, status="all") == ["Spec"], "nothing was created"
    assert client.get(f"/api/v1/documents/{document['id']}").json() == document, "nothing was changed"


def test_an_unknown_status_is_refused(client: TestClient, kb: str) -> None:
    document = add(client, kb, "Spec", "Design of the ledger.")
    for response in (
        client.post(
            f"/api/v1/knowledge-bases/{kb}/documents", json={"title": "N", "content": "x", "status": "archived"}
        ),
        client.put(f"/api/v1/documents/{document['id']}", json={"status": "archived"}),
        client.get(f"/api/v1/knowledge-bases/{kb}/documents", params={"status": "archived"}),
    ):
        assert response.status_code == 422, response.text
        assert "status" in str(response.json()["errors"])
    mcp = endpoint(client)
    refused = call(client, mcp, "update_document", document_id=document["id"], status="archived")
    assert refused["structuredContent"]["error"]["code"] == "invalid_status"
    assert client.get(f"/api/v1/documents/{document['id']}").json() == document


def test_metadata_only_reads(client: TestClient, kb: str) -> None:
    document = add(client, kb, "Spec", "Design of the ledger.", tags=["design"], folder="docs")
    rest = client.get(f"/api/v1/documents/{document['id']}").json()
    assert rest["content"] is None
    assert rest["tags"] == ["design"]
    mcp = endpoint(client)
    read = call(client, mcp, "read_document", document_id=document["id"], metadata_only=True)["structuredContent"]
    assert read["metadata_only"] is True
    assert read["document"]["tags"] == ["design"]
    assert read["document"]["folder"] == "docs"
    assert "chunks" not in read


# ---------------------------------------------------------------------------------------------------- one chunk


def _section(name: str, sentence: str) -> str:
    return f"# {name}\n\n" + " ".join([sentence] * 8)


LONG = "\n\n".join(
    [
        _section("Aardvarks", "Aardvarks dig burrows with strong claws and eat termites at night."),
        _section("Bonobos", "Bonobos share food and live in the forests south of the Congo river."),
        _section("Capybaras", "Capybaras are the largest rodents and swim well in rivers and lakes."),
    ]
)


def test_deleting_one_chunk_removes_it_from_every_kind_of_search(client: TestClient, kb: str) -> None:
    document = add(client, kb, "Animals", LONG)
    assert document["chunk_count"] >= 3, document
    chunks = client.get(f"/api/v1/documents/{document['id']}/read").json()["chunks"]
    bonobos = next(c for c in chunks if "Bonobos share" in c["text"])
    assert titles(client, "bonobos") == ["Animals"]

    deleted = client.delete(f"/api/v1/documents/{document['id']}/chunks/{quote(bonobos['chunk_id'], safe='')}")
    assert deleted.status_code == 200, deleted.text
    assert deleted.json()["chunk_count"] == document["chunk_count"] - 1

    assert titles(client, "bonobos") == [], "the keyword index forgot it"
    semantic = client.post(SEARCH, json={"query": "Bonobos share food forests Congo", "mode": "semantic"}).json()
    assert all("Bonobos" not in hit["text"] for hit in semantic["results"]), "its vector went too"
    assert semantic["results"], "the other chunks keep their vectors"
    grep = client.post("/api/v1/knowledge/grep", json={"pattern": "bonobos?"}).json()
    assert grep["matches"] == []
    assert titles(client, "capybaras") == ["Animals"], "the other chunks stay"
    left = client.get(f"/api/v1/documents/{document['id']}/read").json()
    assert left["total_chunks"] == document["chunk_count"] - 1
    assert all("Bonobos" not in c["text"] for c in left["chunks"])

    again = client.delete(f"/api/v1/documents/{document['id']}/chunks/{quote(bonobos['chunk_id'], safe='')}")
    assert again.status_code == 404, again.text
    assert again.json()["code"] == "chunk_not_found"


def test_a_bad_chunk_is_refused_and_nothing_changes(client: TestClient, kb: str) -> None:
    document = add(client, kb, "Animals", LONG)
    other = add(client, kb, "Other", "Dolphins sleep with one eye open.")
    for chunk_id, status, code in (
        ("not-a-chunk", 400, "invalid_chunk_id"),
        (quote(f"{other['id']}#00000", safe=""), 400, "invalid_chunk_id"),
        ("999", 404, "chunk_not_found"),
    ):
        refused = client.delete(f"/api/v1/documents/{document['id']}/chunks/{chunk_id}")
        assert refused.status_code == status, refused.text
        assert refused.json()["code"] == code
    assert client.get(f"/api/v1/documents/{document['id']}").json() == document
    assert titles(client, "bonobos") == ["Animals"]
    draft = add(client, kb, "Draft", "Echidnas lay eggs.", status="draft")
    refused = client.delete(f"/api/v1/documents/{draft['id']}/chunks/0")
    assert refused.status_code == 409, refused.text
    assert refused.json()["code"] == "document_not_indexed"


def test_an_upload_files_its_document(client: TestClient, kb: str) -> None:
    uploaded = client.post(
        f"/api/v1/knowledge-bases/{kb}/documents/upload",
        data={"status": "draft", "tags": ["notes", "fauna"], "folder": "field/2026"},
        files={"file": ("notes.md", b"Wombats dig burrows.", "text/markdown")},
    )
    assert uploaded.status_code == 201, uploaded.text
    body = uploaded.json()
    assert (body["status"], body["tags"], body["folder"]) == ("draft", ["notes", "fauna"], "field/2026")
    assert titles(client, "wombats") == []
    refused = client.post(
        f"/api/v1/knowledge-bases/{kb}/documents/upload",
        data={"folder": "../up"},
        files={"file": ("bad.md", b"Wombats again.", "text/markdown")},
    )
    assert refused.status_code == 400, refused.text
    assert refused.json()["code"] == "invalid_folder"
    assert listed(client, kb, status="all") == ["notes.md"]


# ---------------------------------------------------------------------------------------------------- CLI


def run_cli(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, env: dict[str, str], *args: str
) -> Any:
    capsys.readouterr()
    with monkeypatch.context() as patch:
        for name in list(os.environ):
            if name.startswith("MCPBRIDGE_"):
                patch.delenv(name)
        for name, value in env.items():
            patch.setenv(name, value)
        code = main([*args, "--json"])
    out = capsys.readouterr()
    assert code == 0, out
    return json.loads(out.out)


def test_the_cli_files_documents_and_deletes_a_chunk(
    client: TestClient,
    container: Container,
    kb: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    document = add(client, kb, "Animals", LONG)
    key = client.headers["Authorization"].removeprefix("Bearer ")
    with live_server(create_combined_app(container)) as url:
        env = {"MCPBRIDGE_URL": url, "MCPBRIDGE_API_KEY": key, "XDG_CONFIG_HOME": str(tmp_path / "config")}
        filed = run_cli(capsys, monkeypatch, env, "kb", "file", document["id"], "--tag", "zoo", "--folder", "docs")
        assert (filed["tags"], filed["folder"]) == (["zoo"], "docs")
        found = run_cli(capsys, monkeypatch, env, "kb", "documents", kb, "--tag", "ZOO", "--folder", "docs")
        assert [d["id"] for d in found["items"]] == [document["id"]]
        seq = next(
            c["chunk_id"].rpartition("#")[2]
            for c in client.get(f"/api/v1/documents/{document['id']}/read").json()["chunks"]
            if "Bonobos share" in c["text"]
        )
        after = run_cli(capsys, monkeypatch, env, "kb", "delete-chunk", document["id"], str(int(seq)))
        assert after["chunk_count"] == document["chunk_count"] - 1
        assert titles(client, "bonobos") == []
        run_cli(capsys, monkeypatch, env, "kb", "file", document["id"], "--status", "draft")
        assert run_cli(capsys, monkeypatch, env, "kb", "documents", kb)["items"] == []
        drafts = run_cli(capsys, monkeypatch, env, "kb", "documents", kb, "--status", "draft")
        assert [d["id"] for d in drafts["items"]] == [document["id"]]
        assert titles(client, "capybaras") == []
        source = tmp_path / "okapis.md"
        source.write_text("Okapis are related to giraffes.")
        added = run_cli(
            capsys,
            monkeypatch,
            env,
            "kb",
            "add",
            kb,
            str(source),
            "--draft",
            "--tag",
            "zoo",
            "--tag",
            "forest",
            "--folder",
            "docs/zoo",
        )
        (item,) = added["items"]
        assert (item["status"], item["parse_status"], item["tags"], item["folder"]) == (
            "draft",
            "draft",
            ["zoo", "forest"],
            "docs/zoo",
        )
        assert titles(client, "okapis") == []


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
    return body


def test_a_document_made_draft_again_is_no_resource_of_an_endpoint(client: TestClient, kb: str) -> None:
    document = add(client, kb, "Plan", "The zeppelin hangar opens next spring.")
    mcp = endpoint(client)
    uri = f"mcpbridge://kb/{kb}/documents/{document['id']}"
    assert "zeppelin" in rpc(client, mcp, "resources/read", {"uri": uri})["result"]["contents"][0]["text"]
    assert client.put(f"/api/v1/documents/{document['id']}", json={"status": "draft"}).status_code == 200
    listed_uris = [r["uri"] for r in rpc(client, mcp, "resources/list", {})["result"]["resources"]]
    assert uri not in listed_uris
    assert "error" in rpc(client, mcp, "resources/read", {"uri": uri}), "its text, still stored, is not served"
    prompt = rpc(
        client, mcp, "prompts/get", {"name": "summarise_document", "arguments": {"document_id": document["id"]}}
    )
    assert "error" in prompt


def test_a_large_upload_files_its_document_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through ``/documents/uploads`` (the form, then ``complete``), on the embedded backend where the file comes to
    mcpbridge itself (the S3 form is the same record: see test_document_uploads)."""
    with container_on("local", tmp_path, monkeypatch, settings={"jobs": "inline"}) as container:
        app = create_combined_app(container)
        with TestClient(app, raise_server_exceptions=False) as client:
            client.headers["Authorization"] = f"Bearer {container.identity.initialize().api_key}"
            kb_id = client.post("/api/v1/knowledge-bases", json={"name": "Handbook"}).json()["id"]
            data = b"Narwhals have one long tusk."
            body = {"filename": "narwhals.md", "content_type": "text/markdown", "size_bytes": len(data)}
            refused = client.post(
                f"/api/v1/knowledge-bases/{kb_id}/documents/uploads", json={**body, "tags": ["x" * 51]}
            )
            assert refused.status_code == 400, refused.text
            assert refused.json()["code"] == "invalid_tags"
            started = client.post(
                f"/api/v1/knowledge-bases/{kb_id}/documents/uploads",
                json={**body, "status": "draft", "tags": ["sea"], "folder": "fauna"},
            )
            assert started.status_code == 201, started.text
            form = started.json()
            posted = client.post(form["url"], data=form["fields"], files={"file": ("upload", data, "text/markdown")})
            assert posted.status_code in (200, 201, 204), posted.text
            document = client.post(form["complete_url"].removeprefix("http://testserver")).json()
            assert (document["status"], document["tags"], document["folder"]) == ("draft", ["sea"], "fauna")
            found = client.post(SEARCH, json={"query": "narwhals", "mode": "keyword"}).json()
            assert found["results"] == []
