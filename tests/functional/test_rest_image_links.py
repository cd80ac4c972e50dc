"""REST callers get usable image links too: a REST search hit on an image chunk and an ``ask`` reference read from
an image give the image's ``href`` (``/api/v1/documents/{id}/images/{version}/{n}``), which the same API key fetches
(``serve``: the bytes; AWS: a redirect to a presigned S3 GET, followed here into moto's S3). A key whose scope
excludes the document, another version, an unknown image or no key at all is refused. On both backends, with
Tesseract reading the images."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import requests
from fastapi.testclient import TestClient

from mcpbridge.bootstrap import Container
from mcpbridge.knowledge.images import manifest_blob
from tests.support.admin_api import admin_client
from tests.support.containers import container_on
from tests.support.images import text_image

pytestmark = pytest.mark.skipif(
    shutil.which("tesseract") is None,
    reason="Tesseract is not installed (Debian: apt-get install tesseract-ocr; `make test` installs it as root)",
)

SCREENSHOT = ["Error 4711: gateway firmware outdated", "Press Update to install it"]
QUESTION = "gateway firmware outdated error"


@pytest.fixture(params=["local", "aws"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def container(backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Container]:
    settings = {"jobs": "inline", "embedding_provider": "none", "ocr_engine": "tesseract"}
    with container_on(backend, tmp_path, monkeypatch, settings=settings) as built:
        yield built


@pytest.fixture
def client(container: Container) -> Iterator[TestClient]:
    with admin_client(container, "http://127.0.0.1") as test_client:
        yield test_client


@pytest.fixture
def indexed(client: TestClient) -> dict[str, Any]:
    kb = client.post("/api/v1/knowledge-bases", json={"name": "Support"})
    other = client.post("/api/v1/knowledge-bases", json={"name": "Elsewhere"})
    assert kb.status_code == other.status_code == 201, (kb.text, other.text)
    png = text_image(SCREENSHOT)
    created = client.post(
        f"/api/v1/knowledge-bases/{kb.json()['id']}/documents/upload",
        files={"file": ("screenshot.png", png, "image/png")},
    )
    assert created.status_code == 201, created.text
    document = client.get(f"/api/v1/documents/{created.json()['id']}").json()
    assert document["parse_status"] == "completed", document
    return {"kb": kb.json()["id"], "other": other.json()["id"], "document": document, "png": png}


def fetch(client: TestClient, href: str, backend: str, key: str | None = None) -> tuple[int, bytes, str]:
    """What a REST caller gets from an href with a key: the status and the image (the redirect followed on AWS)."""
    headers = {} if key is None else {"Authorization": f"Bearer {key}"}
    answer = client.get(href, headers=headers, follow_redirects=False)
    if backend == "aws" and answer.status_code == 302:
        s3 = requests.get(answer.headers["location"], timeout=30)  # moto answers S3 requests inside mock_aws
        return s3.status_code, s3.content, s3.headers.get("content-type", "")
    return answer.status_code, answer.content, answer.headers.get("content-type", "")


def key_for(client: TestClient, kb_ids: list[str]) -> str:
    made = client.post("/api/v1/api-keys", json={"name": "scoped", "role": "viewer", "knowledge_base_ids": kb_ids})
    assert made.status_code == 201, made.text
    return str(made.json()["key"])


def test_search_and_ask_give_an_href_the_key_fetches(client: TestClient, backend: str, indexed: dict[str, Any]) -> None:
    document, href = indexed["document"], f"/api/v1/documents/{indexed['document']['id']}/images/1/1"
    found = client.post("/api/v1/knowledge/search", json={"query": QUESTION, "mode": "keyword"})
    assert found.status_code == 200, found.text
    hit = found.json()["results"][0]
    assert (hit["document_id"], hit["chunk_type"]) == (document["id"], "image_ocr")
    (image,) = hit["images"]
    assert image["href"] == href
    assert image["url"] == f"resource://images/{document['id']}/1/1", "the stored form stays"
    assert "gateway firmware outdated" in image["ocr_text"]

    asked = client.post("/api/v1/knowledge/ask", json={"question": QUESTION})
    assert asked.status_code == 200, asked.text
    referenced = next(r for r in asked.json()["references"] if r["images"])["images"][0]
    assert referenced["href"] == href

    own_key = str(client.headers["Authorization"]).removeprefix("Bearer ")
    status, data, content_type = fetch(client, href, backend, own_key)
    assert (status, data) == (200, indexed["png"])
    assert content_type.startswith("image/png")
    scoped = key_for(client, [indexed["kb"]])
    assert fetch(client, href, backend, scoped)[:2] == (200, indexed["png"]), "a key scoped to its knowledge base"


def test_an_image_is_refused_outside_the_key_scope_and_for_bad_paths(
    client: TestClient, backend: str, indexed: dict[str, Any]
) -> None:
    doc_id = indexed["document"]["id"]
    href = f"/api/v1/documents/{doc_id}/images/1/1"
    elsewhere = key_for(client, [indexed["other"]])
    refused = client.get(href, headers={"Authorization": f"Bearer {elsewhere}"}, follow_redirects=False)
    assert refused.status_code == 404, refused.text
    assert refused.json()["code"] == "document_not_found"
    assert "location" not in refused.headers

    anonymous = client.get(href, headers={"Authorization": ""}, follow_redirects=False)
    assert anonymous.status_code == 401, anonymous.text

    for path, status, code in (
        (f"/api/v1/documents/{doc_id}/images/2/1", 404, "image_not_found"),
        (f"/api/v1/documents/{doc_id}/images/1/7", 404, "image_not_found"),
        (f"/api/v1/documents/{doc_id}/images/0/1", 422, "validation_failed"),
        (f"/api/v1/documents/{doc_id}/images/1/x", 422, "validation_failed"),
    ):
        answer = client.get(path, follow_redirects=False)
        assert answer.status_code == status, (path, answer.text)
        assert answer.json()["code"] == code, path
        assert "location" not in answer.headers

    # A new version is indexed: the old version's image is no longer served, the new one is.
    renamed = client.put(f"/api/v1/documents/{doc_id}", json={"title": "Screenshot, renamed"})
    assert renamed.status_code == 200, renamed.text
    assert client.get(href, follow_redirects=False).status_code == 404
    own_key = str(client.headers["Authorization"]).removeprefix("Bearer ")
    status, data, _ = fetch(client, f"/api/v1/documents/{doc_id}/images/2/1", backend, own_key)
    assert (status, data) == (200, indexed["png"])
    assert client.get(f"/api/v1/documents/{doc_id}").json()["version"] == 2, "nothing else changed"


def test_a_deleted_image_chunk_takes_its_recognised_text_everywhere(
    client: TestClient, container: Container, indexed: dict[str, Any]
) -> None:
    doc_id = indexed["document"]["id"]
    workspace = client.get("/api/v1/me").json()["workspace_id"]
    chunks = client.get(f"/api/v1/documents/{doc_id}/read").json()["chunks"]
    ocr = next(c for c in chunks if c["chunk_type"] == "image_ocr")
    deleted = client.delete(f"/api/v1/documents/{doc_id}/chunks/{quote(ocr['chunk_id'], safe='')}")
    assert deleted.status_code == 200, deleted.text

    def shown(version: int) -> dict[str, str]:
        manifest = container.blobs.get(manifest_blob(workspace, doc_id, version)) or b""
        content = client.get(f"/api/v1/documents/{doc_id}", params={"include_content": "true"})
        found = client.post("/api/v1/knowledge/search", json={"query": QUESTION, "mode": "keyword"})
        asked = client.post("/api/v1/knowledge/ask", json={"question": QUESTION})
        reads = {"manifest": manifest.decode(), "content": content.text, "search": found.text, "ask": asked.text}
        return {name: text for name, text in reads.items() if "firmware" in text.lower()}

    assert shown(1) == {}
    renamed = client.put(f"/api/v1/documents/{doc_id}", json={"title": "Screenshot, renamed"})
    assert renamed.status_code == 200, renamed.text
    again = client.get(f"/api/v1/documents/{doc_id}").json()
    assert (again["version"], again["parse_status"]) == (2, "completed"), again
    assert shown(2) == {}, "indexing the image again (text recognised anew) keeps it out"
