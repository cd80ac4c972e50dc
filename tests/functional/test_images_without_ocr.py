"""Where no OCR engine is available an image is still a document: indexed without its text, the document's
``notices`` saying why, never a failure (both backends, OCR turned off; and what ``auto`` does without Tesseract)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from mcpbridge.adapters.local import tesseract_ocr
from mcpbridge.bootstrap import Container
from mcpbridge.http.apps import create_combined_app
from mcpbridge.knowledge.parsing import parse_document
from mcpbridge.settings import Settings
from tests.support.containers import container_on
from tests.support.images import text_image


@pytest.mark.parametrize("backend", ["local", "aws"])
def test_an_image_is_indexed_without_text_and_says_why(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = {"jobs": "inline", "embedding_provider": "none", "ocr_engine": "none"}
    with (
        container_on(backend, tmp_path, monkeypatch, settings=settings) as container,
        TestClient(create_combined_app(container), base_url="http://127.0.0.1") as client,
    ):
        client.headers["Authorization"] = f"Bearer {container.identity.initialize().api_key}"
        kb = client.post("/api/v1/knowledge-bases", json={"name": "Shots"}).json()
        files = {"file": ("shot.png", text_image(["Invoice overdue"]), "image/png")}
        created = client.post(f"/api/v1/knowledge-bases/{kb['id']}/documents/upload", files=files)
        assert created.status_code == 201, created.text
        document = client.get(f"/api/v1/documents/{created.json()['id']}", params={"include_content": "true"}).json()
        assert document["parse_status"] == "completed", document
        assert document["notices"][0] == (
            "1 image(s) indexed without text recognition: text recognition is turned off (MCPBRIDGE_OCR_ENGINE=none)"
        )
        assert document["content"] == "## Image 1\n\n(no text recognised)\n"
        found = client.post("/api/v1/knowledge/search", json={"query": "invoice overdue", "mode": "keyword"}).json()
        assert found["results"] == []


def test_auto_without_tesseract_says_it_is_not_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tesseract_ocr.shutil, "which", lambda name: None)
    container = Container(Settings(data_dir=tmp_path / "data", ocr_engine="auto"))
    try:
        assert container.ocr is None
        images = container.document_images
        assert images.ocr_name is None
        parsed = parse_document(text_image(["x"]), content_type="image/png")
        notices = images.index("ws", "doc_1", 1, parsed, 0).notices
        assert "Tesseract is not installed (Debian: apt-get install tesseract-ocr" in notices[0]
    finally:
        container.close()
