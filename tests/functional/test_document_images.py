"""Images in documents, on both backends: a PDF with an embedded diagram and a PNG screenshot are indexed with the
text Tesseract reads in them; keyword search finds it (``image_ocr`` chunks); ``ask`` keeps ``references[].images``,
which an endpoint's MCP result turns into a ``/r/<token>`` link that serves the image (``serve``: the bytes; AWS: a
redirect to a presigned S3 GET, followed here into moto's S3), and refuses it after expiry or once the endpoint's
scope no longer includes the document. Without an OCR engine the document is still indexed, and says why.

Text recognition is Tesseract on both backends here (the AWS backend's default, Textract, is not something moto
reads images with)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from fastapi.testclient import TestClient

from mcpbridge.bootstrap import Container
from mcpbridge.http.apps import create_combined_app
from mcpbridge.knowledge.images import manifest_blob
from tests.support.admin_api import admin_client
from tests.support.clock import FakeClock
from tests.support.containers import container_on
from tests.support.images import pdf_with_image, text_image

pytestmark = pytest.mark.skipif(
    shutil.which("tesseract") is None,
    reason="Tesseract is not installed (Debian: apt-get install tesseract-ocr; `make test` installs it as root)",
)

DIAGRAM = ["COOLANT PUMP FEEDS TURBINE", "Valve pressure limit 300 kPa"]
SCREENSHOT = ["Error 4711: gateway firmware outdated", "Press Update to install it"]
LINK_SECONDS = 600


@pytest.fixture(params=["local", "aws"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def container(backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: FakeClock) -> Iterator[Container]:
    # Tesseract on both backends: moto's Textract answers every image with the same canned blocks, so it reads no
    # text (the Textract adapter has its own test on moto, test_textract_ocr.py).
    settings = {
        "jobs": "inline",
        "embedding_provider": "none",
        "image_link_seconds": LINK_SECONDS,
        "ocr_engine": "tesseract",
    }
    with container_on(backend, tmp_path, monkeypatch, settings=settings, clock=clock) as built:
        yield built


@pytest.fixture
def client(container: Container) -> Iterator[TestClient]:
    with admin_client(container, "http://127.0.0.1") as test_client:
        yield test_client


def new_kb(client: TestClient, name: str) -> str:
    kb = client.post("/api/v1/knowledge-bases", json={"name": name})
    assert kb.status_code == 201, kb.text
    kb_id: str = kb.json()["id"]
    return kb_id


def upload(client: TestClient, kb_id: str, filename: str, data: bytes, content_type: str) -> dict[str, Any]:
    files = {"file": (filename, data, content_type)}
    created = client.post(f"/api/v1/knowledge-bases/{kb_id}/documents/upload", files=files)
    assert created.status_code == 201, created.text
    document = client.get(f"/api/v1/documents/{created.json()['id']}")
    assert document.status_code == 200, document.text
    body: dict[str, Any] = document.json()
    return body


def endpoint(client: TestClient, name: str, kb_ids: list[str]) -> dict[str, Any]:
    body = {"name": name, "tools": ["ask", "search_knowledge"], "knowledge_base_ids": kb_ids}
    created = client.post("/api/v1/mcp-endpoints", json=body)
    assert created.status_code == 201, created.text
    made: dict[str, Any] = created.json()
    return made


def mcp_call(client: TestClient, ep: dict[str, Any], tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    response = client.post(
        f"/mcp/{ep['id']}",
        headers={
            "Authorization": f"Bearer {ep['token']}",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-06-18",
        },
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}},
    )
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["result"]
    assert not result.get("isError"), result
    structured: dict[str, Any] = result["structuredContent"]
    return structured


def fetch(client: TestClient, link: str, backend: str) -> tuple[int, bytes, str]:
    """What a client gets from a link: the status, and the image (following the redirect to S3 on AWS)."""
    answer = client.get(link, headers={"Authorization": ""}, follow_redirects=False)
    if backend == "aws" and answer.status_code == 302:
        s3 = requests.get(answer.headers["location"], timeout=30)  # moto answers S3 requests inside mock_aws
        return s3.status_code, s3.content, s3.headers.get("content-type", "")
    return answer.status_code, answer.content, answer.headers.get("content-type", "")


@pytest.fixture
def indexed(client: TestClient) -> dict[str, Any]:
    kb_id = new_kb(client, "Plant manuals")
    jpeg = text_image(DIAGRAM, fmt="JPEG", frame=True)
    pdf = upload(
        client, kb_id, "cooling.pdf", pdf_with_image("Cooling system overview", jpeg, 1000, 260), "application/pdf"
    )
    png_bytes = text_image(SCREENSHOT)
    png = upload(client, kb_id, "screenshot.png", png_bytes, "image/png")
    return {"kb_id": kb_id, "pdf": pdf, "png": png, "png_bytes": png_bytes}


def test_the_text_in_images_is_indexed_and_found_by_keyword_search(client: TestClient, indexed: dict[str, Any]) -> None:
    for document in (indexed["pdf"], indexed["png"]):
        assert document["parse_status"] == "completed", document
        assert document["parse_error"] is None
        # Captions need a model that reads images; none is configured, and the document says so.
        assert any("captions skipped" in notice for notice in document["notices"]), document["notices"]
        assert not any("without text recognition" in notice for notice in document["notices"])

    found = client.post("/api/v1/knowledge/search", json={"query": "coolant turbine", "mode": "keyword"})
    assert found.status_code == 200, found.text
    results = found.json()["results"]
    assert results
    assert results[0]["document_id"] == indexed["pdf"]["id"]
    assert results[0]["chunk_type"] == "image_ocr"
    assert "COOLANT PUMP FEEDS TURBINE" in results[0]["text"]
    assert results[0]["heading_path"] == ["Image 1 (page 1)"]

    found = client.post("/api/v1/knowledge/search", json={"query": "gateway firmware outdated", "mode": "keyword"})
    results = found.json()["results"]
    assert results
    assert results[0]["document_id"] == indexed["png"]["id"]
    assert results[0]["chunk_type"] == "image_ocr"
    assert "4711" in results[0]["text"]

    # The page's own text stays a text chunk of the same document.
    found = client.post("/api/v1/knowledge/search", json={"query": "cooling system overview", "mode": "keyword"})
    assert next((r["document_id"], r["chunk_type"]) for r in found.json()["results"]) == (indexed["pdf"]["id"], "text")

    # The document's text, read like any other, ends with the image's section.
    read = client.get(f"/api/v1/documents/{indexed['pdf']['id']}", params={"include_content": "true"})
    assert "## Image 1 (page 1)\n\nCOOLANT PUMP FEEDS TURBINE" in read.json()["content"]


def test_ask_keeps_the_images_and_an_endpoint_links_them_for_its_caller(
    client: TestClient, container: Container, clock: FakeClock, backend: str, indexed: dict[str, Any]
) -> None:
    question = "gateway firmware outdated error"
    # REST: the stored form of the image, with its recognised text.
    rest = client.post("/api/v1/knowledge/ask", json={"question": question})
    assert rest.status_code == 200, rest.text
    with_images = [r for r in rest.json()["references"] if r["images"]]
    assert with_images
    assert with_images[0]["document_id"] == indexed["png"]["id"]
    image = with_images[0]["images"][0]
    assert image["url"] == f"resource://images/{indexed['png']['id']}/1/1"
    assert "gateway firmware outdated" in image["ocr_text"]
    assert image["content_type"] == "image/png"

    ep = endpoint(client, "Plant", [indexed["kb_id"]])
    answer = mcp_call(client, ep, "ask", {"question": question})
    linked = next(r for r in answer["references"] if r["images"])["images"][0]
    assert linked["url"].startswith("http://127.0.0.1/r/"), linked["url"]
    assert "gateway firmware outdated" in linked["ocr_text"]
    # The link serves the image to whoever holds it, without any other credential.
    status, data, content_type = fetch(client, linked["url"], backend)
    assert status == 200
    assert data == indexed["png_bytes"]
    assert content_type.startswith("image/png")
    # The stored session and document keep the resource:// form: asking again over REST shows it unchanged.
    again = client.post("/api/v1/knowledge/ask", json={"question": question})
    assert next(r for r in again.json()["references"] if r["images"])["images"][0]["url"].startswith("resource://")

    # Links are made per call: another call, another link.
    second = mcp_call(client, ep, "ask", {"question": question})
    relinked = next(r for r in second["references"] if r["images"])["images"][0]["url"]
    assert relinked != linked["url"]

    # Just before expiry it still works; after, it is refused.
    clock.advance(LINK_SECONDS - 5)
    assert fetch(client, linked["url"], backend)[0] == 200
    clock.advance(6)
    expired = client.get(linked["url"], follow_redirects=False)
    assert expired.status_code == 404
    assert expired.json()["code"] == "image_link_not_found"
    assert "expired" in expired.json()["detail"]
    # An unknown token is refused the same way.
    unknown = client.get("/r/" + "A" * 43, follow_redirects=False)
    assert unknown.status_code == 404
    assert unknown.json()["code"] == "image_link_not_found"


def test_a_link_is_refused_once_the_endpoint_scope_excludes_the_document(
    client: TestClient, backend: str, indexed: dict[str, Any]
) -> None:
    other_kb = new_kb(client, "Elsewhere")
    upload(client, other_kb, "notes.md", b"# Notes\n\nThe gateway firmware is kept elsewhere.\n", "text/markdown")
    ep = endpoint(client, "Plant", [indexed["kb_id"]])
    answer = mcp_call(client, ep, "ask", {"question": "gateway firmware outdated error"})
    link = next(r for r in answer["references"] if r["images"])["images"][0]["url"]
    assert fetch(client, link, backend)[0] == 200

    # An endpoint whose scope excludes the document never sees the image, let alone a link to it.
    narrow = endpoint(client, "Elsewhere only", [other_kb])
    elsewhere = mcp_call(client, narrow, "ask", {"question": "gateway firmware outdated error"})
    assert all(r["document_id"] != indexed["png"]["id"] for r in elsewhere["references"])
    assert all(not r["images"] for r in elsewhere["references"])

    # The endpoint that issued the link is narrowed to the other base: the link is refused at fetch.
    changed = client.put(f"/api/v1/mcp-endpoints/{ep['id']}", json={"knowledge_base_ids": [other_kb]})
    assert changed.status_code == 200, changed.text
    refused = client.get(link, follow_redirects=False)
    assert refused.status_code == 403
    assert refused.json()["code"] == "image_link_refused"
    # Widened back, the same link works again (its own time has not run out).
    client.put(f"/api/v1/mcp-endpoints/{ep['id']}", json={"knowledge_base_ids": [indexed["kb_id"]]})
    assert fetch(client, link, backend)[0] == 200
    # Deleted: refused.
    assert client.delete(f"/api/v1/mcp-endpoints/{ep['id']}").status_code == 204
    assert client.get(link, follow_redirects=False).status_code == 403


def test_deleting_a_document_removes_its_images(
    client: TestClient, container: Container, indexed: dict[str, Any]
) -> None:
    workspace_id = client.get("/api/v1/me").json()["workspace_id"]
    manifest = manifest_blob(workspace_id, indexed["png"]["id"], 1)
    assert container.blobs.get(manifest) is not None
    assert client.delete(f"/api/v1/documents/{indexed['png']['id']}").status_code in (200, 202, 204)
    assert container.blobs.get(manifest) is None


def test_an_endpoint_search_links_the_image_of_an_image_chunk(
    client: TestClient, backend: str, indexed: dict[str, Any]
) -> None:
    ep = endpoint(client, "Plant", [indexed["kb_id"]])
    found = mcp_call(client, ep, "search_knowledge", {"query": "coolant turbine", "mode": "keyword"})
    first = found["results"][0]
    assert (first["document_id"], first["chunk_type"]) == (indexed["pdf"]["id"], "image_ocr")
    image = first["images"][0]
    assert image["url"].startswith("http://127.0.0.1/r/")
    assert image["content_type"] == "image/jpeg"
    status, data, content_type = fetch(client, image["url"], backend)
    assert status == 200
    assert data.startswith(b"\xff\xd8\xff")
    assert content_type.startswith("image/jpeg")
    # Text chunks carry no images.
    text = mcp_call(client, ep, "search_knowledge", {"query": "cooling system overview", "mode": "keyword"})
    assert "images" not in text["results"][0]


def test_the_text_in_an_image_is_found_by_semantic_search(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.embedder import HashingEmbedder

    settings = {"jobs": "inline", "ocr_engine": "tesseract"}
    with (
        container_on(backend, tmp_path, monkeypatch, settings=settings, embedder=HashingEmbedder()) as container,
        TestClient(create_combined_app(container), base_url="http://127.0.0.1") as client,
    ):
        client.headers["Authorization"] = f"Bearer {container.identity.initialize().api_key}"
        kb_id = new_kb(client, "Shots")
        upload(client, kb_id, "notes.md", b"# Notes\n\nThe office plants are watered on Mondays.\n", "text/markdown")
        shot = upload(client, kb_id, "screenshot.png", text_image(SCREENSHOT), "image/png")
        found = client.post("/api/v1/knowledge/search", json={"query": "gateway firmware", "mode": "semantic"})
        assert found.status_code == 200, found.text
        first = found.json()["results"][0]
        assert (first["document_id"], first["chunk_type"]) == (shot["id"], "image_ocr")
