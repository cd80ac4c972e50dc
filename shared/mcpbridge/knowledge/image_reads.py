"""Images of documents read with an API key: ``GET /api/v1/documents/{document}/images/{version}/{n}``.

The REST counterpart of an MCP result's ``/r/<token>`` links (``publishing.image_links``): REST search and ``ask``
results give each image's ``href``, this route, which the caller fetches with the same key. The key's scope is
checked at every fetch (a document outside it is not found), only the indexed version's images are served, and the
answer is the image itself (``serve``) or a redirect to a presigned blob-store GET valid for at most five minutes
(AWS).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from mcpbridge.domain.knowledge import KnowledgeAccess
from mcpbridge.errors import NotFound
from mcpbridge.knowledge.documents import Documents
from mcpbridge.knowledge.images import RESOURCE_PREFIX, DocumentImages, ImageRef, image_blob
from mcpbridge.ports import BlobLinks, Blobs

REDIRECT_SECONDS: Final = 300


def image_href(ref: ImageRef) -> str:
    """The route that serves ``ref`` to an API key (relative to the API's base URL)."""
    return f"/api/v1/documents/{ref.document_id}/images/{ref.version}/{ref.n}"


def href_of(url: str) -> str | None:
    """The route of an image from its stored ``resource://images/<document>/<version>/<n>`` URL (None for another
    URL)."""
    if not url.startswith(RESOURCE_PREFIX):
        return None
    parts = url.removeprefix(RESOURCE_PREFIX).split("/")
    if len(parts) != 3 or not all(parts) or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    return f"/api/v1/documents/{parts[0]}/images/{int(parts[1])}/{int(parts[2])}"


@dataclass(frozen=True)
class ImageRead:
    """An image as the route answers it: a redirect (``url``) or the bytes."""

    content_type: str
    url: str | None = None
    data: bytes | None = None


class DocumentImageReads:
    def __init__(self, documents: Documents, images: DocumentImages, blobs: Blobs, links: BlobLinks | None) -> None:
        self._documents = documents
        self._images = images
        self._blobs = blobs
        self._links = links

    def open(self, access: KnowledgeAccess, document_id: str, version: int, n: int) -> ImageRead:
        """Image ``n`` of the document's indexed ``version``; ``NotFound`` for a document outside the key's scope,
        another version, or no such image."""
        document = self._documents.get(access, document_id)
        missing = NotFound(
            f"document {document_id!r} has no image {n} in version {version} (only its indexed version's are served)",
            code="image_not_found",
        )
        if document.indexed_version != version:
            raise missing
        stored = next((i for i in self._images.manifest(document.workspace_id, document_id, version) if i.n == n), None)
        if stored is None:
            raise missing
        # A shared knowledge base's images are kept in its owner's workspace.
        key = image_blob(document.workspace_id, document_id, version, n, stored.content_type)
        if self._links is not None:
            url = self._links.download_url(key, expires_in=REDIRECT_SECONDS, content_type=stored.content_type)
            return ImageRead(stored.content_type, url=url)
        data = self._blobs.get(key)
        if data is None:
            raise missing
        return ImageRead(stored.content_type, data=data)
