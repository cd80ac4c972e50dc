"""Images of documents: kept beside the document's source, their text recognised, and indexed as chunks.

When a document is indexed, each image its parser found (``ParsedDocument.images``) is

1. stored as a blob beside the document's source: ``documents/<ws>/<doc>/v<version>/images/<n>.<ext>``;
2. read by the OCR engine (``ports.Ocr``: Tesseract locally, Amazon Textract on AWS); GIF and WebP are turned into
   PNG first, since Textract reads PNG and JPEG only;
3. appended to the document's canonical text as a ``## Image <n>`` section (page and alternative text in its
   heading, then the recognised text), which becomes one chunk of type ``image_ocr`` when text was recognised:
   searched by keyword and by vector like any other chunk, opened by ``read_document`` at its lines;
4. captioned by the configured model when it reads images (``llm_vision``; ``ports.ImageDescriber``): a
   ``## Image <n>, caption`` section after it, one chunk of type ``image_caption``.

What could not be done is said in the document's ``notices``, and the document is still indexed: no OCR engine
configured or installed, an image the engine refused, captions without a model that reads images. The images of
one version are listed in ``documents/<ws>/<doc>/v<version>/images.json`` (number, type, page, alternative text,
recognised text), which ``ask`` reads to put ``references[].images`` on the references of image chunks.
"""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final

from mcpbridge.domain.knowledge import Chunk, ChunkDraft, ChunkType, KnowledgeAccess, ParsedDocument, ParsedImage
from mcpbridge.errors import InvalidInput, MCPBridgeError
from mcpbridge.knowledge.document_records import reachable_document
from mcpbridge.ports import Blobs, ImageDescriber, Ocr, Store

log = logging.getLogger("mcpbridge.knowledge")

MIN_SIDE: Final = 16
"""Images narrower or shorter than this (pixels: rules, bullets, spacers) are kept but not read."""
OCR_TEXT_MAX: Final = 20_000
CAPTION_MAX: Final = 2_000
CAPTION_INSTRUCTION: Final = (
    "Describe this image from a document in two or three sentences, for someone searching the document: what it "
    "shows (a diagram, a chart, a screenshot, a photo) and what it says. Answer with the description only."
)
"""Characters of recognised text kept per image."""
_EXTENSIONS: Final = {"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "image/webp": "webp"}
_HEADING = re.compile(r"^Image (\d+)\b")
RESOURCE_PREFIX: Final = "resource://images/"
"""The stored form of an image's URL (``resource://images/<document>/<version>/<n>``): turned into a time-limited
link (``/r/<token>``) in MCP tool results, never rewritten where it is stored."""


def _documents_prefix(workspace_id: str, document_id: str, version: int) -> str:
    return f"documents/{workspace_id}/{document_id}/v{version}"


def image_blob(workspace_id: str, document_id: str, version: int, n: int, content_type: str) -> str:
    return f"{_documents_prefix(workspace_id, document_id, version)}/images/{n}.{_EXTENSIONS.get(content_type, 'bin')}"


def manifest_blob(workspace_id: str, document_id: str, version: int) -> str:
    return f"{_documents_prefix(workspace_id, document_id, version)}/images.json"


@dataclass(frozen=True)
class StoredImage:
    """An image of an indexed document version, as its manifest lists it."""

    n: int
    content_type: str
    page: int | None
    alt: str
    ocr_text: str
    caption: str = ""

    def as_dict(self) -> dict[str, object]:
        return dict(vars(self))


@dataclass(frozen=True)
class ImageRef:
    """An image a reference points to: ``url`` is the stored ``resource://`` form until an edge links it."""

    document_id: str
    version: int
    n: int
    content_type: str
    url: str
    caption: str
    ocr_text: str


@dataclass(frozen=True)
class ImagesIndexed:
    text: str
    """The canonical text: the document's own, then one section per image."""
    drafts: list[ChunkDraft]
    """The chunks of the image sections (seq continuing from the document's own)."""
    notices: list[str]


class DocumentImages:
    """Stores, reads and indexes the images of documents; finds the images of image chunks."""

    def __init__(
        self,
        store: Store,
        blobs: Blobs,
        ocr: Ocr | None,
        *,
        ocr_unavailable: str | None = None,
        describer: ImageDescriber | None = None,
        captions_unavailable: str = "",
    ) -> None:
        """``ocr_unavailable``: why there is no OCR engine (said in each document with images);
        ``describer``: the model that captions images, if any (else ``captions_unavailable`` says why not)."""
        self._store = store
        self._blobs = blobs
        self._ocr = ocr
        self._ocr_unavailable = ocr_unavailable or "no OCR engine is configured"
        self._describer = describer
        self._captions_unavailable = captions_unavailable or "no model that reads images is configured"

    @property
    def ocr_name(self) -> str | None:
        return None if self._ocr is None else self._ocr.name

    def index(
        self, workspace_id: str, document_id: str, version: int, parsed: ParsedDocument, next_seq: int
    ) -> ImagesIndexed:
        """Store and read the images of ``parsed``; their sections follow the document's own text."""
        stored: list[StoredImage] = []
        notices: list[str] = []
        for n, image in enumerate(parsed.images, start=1):
            self._blobs.put(
                image_blob(workspace_id, document_id, version, n, image.content_type),
                image.data,
                content_type=image.content_type,
            )
            readable = self._readable(n, image, notices)
            text = self._recognise(n, readable, notices)
            caption = self._caption(n, readable, notices)
            stored.append(StoredImage(n, image.content_type, image.page, image.alt, text, caption))
        if parsed.images:
            if self._ocr is None:
                notices.insert(
                    0, f"{len(parsed.images)} image(s) indexed without text recognition: {self._ocr_unavailable}"
                )
            if self._describer is None:
                notices.append(f"image captions skipped: {self._captions_unavailable}")
        manifest = json.dumps([s.as_dict() for s in stored], ensure_ascii=False).encode()
        self._blobs.put(manifest_blob(workspace_id, document_id, version), manifest, content_type="application/json")
        text, drafts = _with_image_sections(parsed.text, stored, next_seq)
        return ImagesIndexed(text, drafts, notices)

    def _readable(self, n: int, image: ParsedImage, notices: list[str]) -> tuple[bytes, str] | None:
        if self._ocr is None and self._describer is None:
            return None
        try:
            return ocr_input(image)
        except InvalidInput as exc:
            notices.append(f"image {n}: not read ({exc.message})")
            return None

    def _caption(self, n: int, readable: tuple[bytes, str] | None, notices: list[str]) -> str:
        if self._describer is None or readable is None:
            return ""
        try:
            caption = self._describer.describe_image(readable[0], readable[1], instruction=CAPTION_INSTRUCTION)
        except MCPBridgeError as exc:
            log.warning("the caption of image %d failed: %s", n, exc.code)
            notices.append(f"image {n}: no caption ({exc.code}); update the document to try again")
            return ""
        return " ".join(caption.split())[:CAPTION_MAX]

    def _recognise(self, n: int, readable: tuple[bytes, str] | None, notices: list[str]) -> str:
        if self._ocr is None or readable is None:
            return ""
        try:
            text = self._ocr.recognise(readable[0])
        except InvalidInput as exc:
            notices.append(f"image {n}: no text recognition ({exc.message})")
            return ""
        except MCPBridgeError as exc:
            # The engine failed (Textract throttled or down): the document is indexed without this image's text,
            # and says so; updating it indexes it again.
            log.warning("text recognition of image %d failed: %s", n, exc.code)
            notices.append(f"image {n}: text recognition failed ({exc.code}); update the document to try again")
            return ""
        return _clean(text)[:OCR_TEXT_MAX]

    def images_of(self, access: KnowledgeAccess, chunk: Chunk) -> list[ImageRef]:
        """The image an ``image_ocr``/``image_caption`` chunk was made from, in the document's indexed version (none
        for other chunks, or for a document ``access`` no longer reaches: a share withdrawn meanwhile)."""
        if chunk.type not in ("image_ocr", "image_caption") or not chunk.heading_path:
            return []
        match = _HEADING.match(chunk.heading_path[-1])
        if match is None:
            return []
        item = reachable_document(self._store, access, chunk.document_id)
        version = None if item is None else item.get("indexed_version")
        if version is None or item is None or item.get("knowledge_base_id") != chunk.knowledge_base_id:
            return []
        version = int(version)
        workspace_id = str(item["workspace_id"])
        n = int(match.group(1))
        for image in self.manifest(workspace_id, chunk.document_id, version):
            if image.n == n:
                url = f"{RESOURCE_PREFIX}{chunk.document_id}/{version}/{n}"
                return [ImageRef(chunk.document_id, version, n, image.content_type, url, image.caption, image.ocr_text)]
        return []

    def manifest(self, workspace_id: str, document_id: str, version: int) -> list[StoredImage]:
        data = self._blobs.get(manifest_blob(workspace_id, document_id, version))
        if data is None:
            return []
        return [StoredImage(**entry) for entry in json.loads(data)]

    def forget_text(self, workspace_id: str, document_id: str, version: int, chunk: ChunkDraft | Chunk) -> None:
        """An image chunk deleted one by one: its text (the recognised text, or the caption) leaves the manifest,
        so no reference to the image shows it again. Nothing for another chunk."""
        match = _HEADING.match(chunk.heading_path[-1]) if chunk.heading_path else None
        if chunk.type not in ("image_ocr", "image_caption") or match is None:
            return
        n, recognised = int(match.group(1)), chunk.type == "image_ocr"
        images = self.manifest(workspace_id, document_id, version)
        if not any(image.n == n for image in images):
            return
        kept = [
            image if image.n != n else replace(image, ocr_text="") if recognised else replace(image, caption="")
            for image in images
        ]
        manifest = json.dumps([image.as_dict() for image in kept], ensure_ascii=False).encode()
        self._blobs.put(manifest_blob(workspace_id, document_id, version), manifest, content_type="application/json")

    def delete(self, workspace_id: str, document_id: str, version: int) -> None:
        """Remove the images of one version of a document (safe to run twice)."""
        for image in self.manifest(workspace_id, document_id, version):
            self._blobs.delete(image_blob(workspace_id, document_id, version, image.n, image.content_type))
        self._blobs.delete(manifest_blob(workspace_id, document_id, version))


def ocr_input(image: ParsedImage) -> tuple[bytes, str] | None:
    """The image as PNG or JPEG bytes an engine reads, with their type; None when it is too small to hold text."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(image.data)) as opened:
            if opened.width < MIN_SIDE or opened.height < MIN_SIDE:
                return None
            if image.content_type in ("image/png", "image/jpeg"):
                return image.data, image.content_type
            opened.seek(0)  # a GIF's first frame
            out = io.BytesIO()
            opened.convert("RGB").save(out, format="PNG")
            return out.getvalue(), "image/png"
    except Exception as exc:  # Pillow signals unreadable images with several exception types
        raise InvalidInput("the image could not be read", code="image_unreadable") from exc


def _clean(text: str) -> str:
    lines = [" ".join(line.split()) for line in text.replace("\r", "\n").splitlines()]
    return "\n".join(line for line in lines if line).strip()


def _heading(image: StoredImage) -> str:
    heading = f"Image {image.n}"
    if image.page is not None:
        heading += f" (page {image.page})"
    if image.alt:
        heading += f": {' '.join(image.alt.split())[:200]}"
    return heading


def _with_image_sections(text: str, images: Sequence[StoredImage], next_seq: int) -> tuple[str, list[ChunkDraft]]:
    """The document's text followed by one section per image, and a chunk per image section."""
    drafts: list[ChunkDraft] = []
    out = text
    for image in images:
        if out and not out.endswith("\n"):
            out += "\n"
        if out:
            out += "\n"
        heading = _heading(image)
        parts: list[tuple[str, str, ChunkType]] = [
            (heading, image.ocr_text or "(no text recognised)", "image_ocr" if image.ocr_text else "text")
        ]
        if image.caption:
            parts.append((f"{heading}, caption", image.caption, "image_caption"))
        for number, (title, body, kind) in enumerate(parts):
            if number:
                out += "\n"
            section = f"## {title}\n\n{body}\n"
            start_offset = len(out)
            start_line = out.count("\n") + 1
            out += section
            drafts.append(
                ChunkDraft(
                    seq=next_seq + len(drafts),
                    text=section.rstrip("\n"),
                    start_line=start_line,
                    end_line=start_line + section.count("\n") - 1,
                    start_offset=start_offset,
                    end_offset=start_offset + len(section) - 1,
                    heading_path=(title,),
                    type=kind,
                )
            )
    return out, drafts
