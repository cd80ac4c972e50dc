"""Images as documents and inside documents: PNG, JPEG, GIF and WebP uploads (by type, extension or bytes), the
images of a PDF's pages, and HTML's inline ``data:`` images (never a remote one); damaged or mislabelled images
are refused with a clear code."""

from __future__ import annotations

import base64
import io
import socket
from typing import Any

import pytest
from PIL import Image

from mcpbridge.errors import InvalidInput
from mcpbridge.knowledge.images import DocumentImages, manifest_blob
from mcpbridge.knowledge.parsing import MAX_IMAGES, parse_document
from tests.support.images import pdf_with_image, text_image


def image_bytes(fmt: str) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (40, 30), "white").save(out, format=fmt)
    return out.getvalue()


@pytest.mark.parametrize(
    ("fmt", "content_type", "filename"),
    [
        ("PNG", "image/png", "shot.png"),
        ("JPEG", "image/jpeg", "photo.jpg"),
        ("GIF", "image/gif", "anim.gif"),
        ("WEBP", "image/webp", "pic.webp"),
    ],
)
def test_an_image_is_a_document_with_one_image_by_type_extension_or_bytes(
    fmt: str, content_type: str, filename: str
) -> None:
    data = image_bytes(fmt)
    for kwargs in ({"content_type": content_type}, {"filename": filename}, {}, {"content_type": "text/plain"}):
        parsed = parse_document(data, **kwargs)
        assert parsed.text == ""
        assert [(i.content_type, i.data) for i in parsed.images] == [(content_type, data)], kwargs


def test_a_mislabelled_or_damaged_image_is_refused() -> None:
    with pytest.raises(InvalidInput) as mislabelled:
        parse_document(b"just some words", content_type="image/png")
    assert mislabelled.value.code == "unsupported_document_type"
    assert "not a PNG, JPEG, GIF or WebP image" in mislabelled.value.message
    with pytest.raises(InvalidInput) as damaged:
        parse_document(b"\x89PNG\r\n\x1a\n" + bytes(64), content_type="image/png")
    assert damaged.value.code == "document_unreadable"


def test_a_pdf_keeps_its_page_text_and_its_images_and_an_images_only_pdf_is_no_longer_empty() -> None:
    jpeg = text_image(["Diagram"], size=(400, 120), fmt="JPEG")
    parsed = parse_document(pdf_with_image("Overview", jpeg, 400, 120), filename="a.pdf")
    assert parsed.text == "## Page 1\n\nOverview\n"
    assert [(i.content_type, i.page) for i in parsed.images] == [("image/jpeg", 1)]
    with Image.open(io.BytesIO(parsed.images[0].data)) as extracted:
        assert extracted.size == (400, 120)
    scanned = parse_document(pdf_with_image("", jpeg, 400, 120), filename="scan.pdf")
    assert scanned.text == ""
    assert len(scanned.images) == 1


def test_html_keeps_inline_data_images_and_never_fetches_a_remote_one(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_network(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("parsing opened a network connection")

    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    png = image_bytes("PNG")
    inline = base64.b64encode(png).decode()
    html = (
        "<html><body><h1>Panel</h1><p>Front panel:</p>"
        f'<img alt="front panel" src="data:image/png;base64,{inline}">'
        '<img alt="remote" src="http://127.0.0.1:9/remote.png">'
        '<img src="data:image/png;base64,not-base64!!">'
        f'<img src="data:image/svg+xml;base64,{base64.b64encode(b"<svg/>").decode()}">'
        "</body></html>"
    ).encode()
    parsed = parse_document(html, content_type="text/html")
    assert [(i.content_type, i.alt, i.data) for i in parsed.images] == [("image/png", "front panel", png)]
    assert "front panel" in parsed.text
    assert "remote" in parsed.text


def test_images_past_the_limit_are_left_out_with_a_warning() -> None:
    inline = base64.b64encode(image_bytes("PNG")).decode()
    html = ("<p>x</p>" + f'<img src="data:image/png;base64,{inline}">' * (MAX_IMAGES + 3)).encode()
    parsed = parse_document(html, content_type="text/html")
    assert len(parsed.images) == MAX_IMAGES
    assert any(f"only the first {MAX_IMAGES}" in warning for warning in parsed.warnings)


class MemoryBlobs:
    def __init__(self) -> None:
        self.items: dict[str, bytes] = {}

    def put(self, key: str, data: bytes, *, content_type: str = "application/octet-stream") -> None:
        self.items[key] = data

    def get(self, key: str) -> bytes | None:
        return self.items.get(key)

    def delete(self, key: str) -> None:
        self.items.pop(key, None)

    def size(self, key: str) -> int | None:
        return None if key not in self.items else len(self.items[key])

    def copy(self, source: str, destination: str) -> None:
        self.items[destination] = self.items[source]

    def upload_target(self, key: str, *, content_type: str, max_bytes: int, expires_in: int) -> None:
        return None


class FailingOcr:
    name = "failing"

    def recognise(self, image: bytes) -> str:
        from mcpbridge.errors import UpstreamError

        raise UpstreamError("engine down", code="ocr_failed")


def test_without_an_engine_or_when_it_fails_images_are_kept_and_the_notices_say_why() -> None:
    parsed = parse_document(text_image(["Hello"]), content_type="image/png")
    blobs = MemoryBlobs()
    none = DocumentImages(None, blobs, None, ocr_unavailable="Tesseract is not installed", captions_unavailable="x")  # type: ignore[arg-type]
    indexed = none.index("ws", "doc_1", 1, parsed, 0)
    assert indexed.notices[0] == "1 image(s) indexed without text recognition: Tesseract is not installed"
    assert indexed.text == "## Image 1\n\n(no text recognised)\n"
    assert [d.type for d in indexed.drafts] == ["text"]
    assert manifest_blob("ws", "doc_1", 1) in blobs.items
    failing = DocumentImages(None, blobs, FailingOcr(), captions_unavailable="x")  # type: ignore[arg-type]
    indexed = failing.index("ws", "doc_1", 2, parsed, 0)
    assert "image 1: text recognition failed (ocr_failed); update the document to try again" in indexed.notices
