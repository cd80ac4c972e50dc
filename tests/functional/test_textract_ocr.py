"""Amazon Textract as the AWS backend's OCR engine (``ocr_engine=auto``), on moto.

What moto can show, and what it cannot: moto's ``DetectDocumentText`` does not read the image; it answers every
call with the blocks its backend holds (``TextractBackend.BLOCKS``, set here to what Textract would answer). So these
tests hold the wiring (the indexer's container picks Textract on AWS, sends the image's bytes, turns LINE blocks into
the image's text, indexes it as an ``image_ocr`` chunk, found by keyword search) and the answer's parsing; the quality
of the recognition is Textract's, seen only against AWS itself."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from moto.textract.models import TextractBackend

from mcpbridge.adapters.aws.textract_ocr import TextractOcr, lines_of
from mcpbridge.bootstrap import Container
from mcpbridge.http.apps import create_combined_app
from tests.support.containers import container_on
from tests.support.images import text_image

LINES = ["Hydraulic pressure gauge", "Maximum 250 bar"]
BLOCKS: list[dict[str, Any]] = [
    {"BlockType": "PAGE", "Id": "p"},
    *({"BlockType": "LINE", "Id": f"l{n}", "Text": text} for n, text in enumerate(LINES)),
    {"BlockType": "WORD", "Id": "w", "Text": "Hydraulic"},
]


@pytest.fixture
def container(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Container]:
    monkeypatch.setattr(TextractBackend, "BLOCKS", BLOCKS)
    settings = {"jobs": "inline", "embedding_provider": "none"}
    with container_on("aws", tmp_path, monkeypatch, settings=settings) as built:
        yield built


def test_the_aws_backend_reads_images_with_textract(container: Container) -> None:
    assert isinstance(container.ocr, TextractOcr)
    assert container.ocr.recognise(text_image(["anything"])) == "Hydraulic pressure gauge\nMaximum 250 bar"

    with TestClient(create_combined_app(container), base_url="http://127.0.0.1") as client:
        client.headers["Authorization"] = f"Bearer {container.identity.initialize().api_key}"
        kb = client.post("/api/v1/knowledge-bases", json={"name": "Gauges"}).json()
        files = {"file": ("gauge.png", text_image(["gauge"]), "image/png")}
        created = client.post(f"/api/v1/knowledge-bases/{kb['id']}/documents/upload", files=files)
        assert created.status_code == 201, created.text
        document = client.get(f"/api/v1/documents/{created.json()['id']}").json()
        assert document["parse_status"] == "completed", document
        found = client.post("/api/v1/knowledge/search", json={"query": "hydraulic gauge", "mode": "keyword"}).json()
        assert [(r["document_id"], r["chunk_type"]) for r in found["results"]] == [(document["id"], "image_ocr")]
        assert "Maximum 250 bar" in found["results"][0]["text"]


def test_only_line_blocks_make_the_text() -> None:
    assert lines_of({"Blocks": BLOCKS}) == "Hydraulic pressure gauge\nMaximum 250 bar"
    assert lines_of({}) == ""


def test_an_image_larger_than_textract_takes_is_refused_before_the_call() -> None:
    from mcpbridge.errors import InvalidInput

    class NoCalls:
        def detect_document_text(self, **kwargs: Any) -> None:
            raise AssertionError("Textract was called")

    with pytest.raises(InvalidInput) as refused:
        TextractOcr(NoCalls()).recognise(b"\x89PNG" + bytes(10 * 1024 * 1024))
    assert refused.value.code == "image_too_large"
