"""Documents: created from text, a URL or a file; indexed by a job that parses, chunks, embeds and indexes them.

    WS#<ws> / DOC#<doc>      the document; gsi1 = KBDOCS#<kb> / <doc> (listing), gsi2 = DOCS_PENDING#<shard> / <doc>
                             while it waits for indexing (so a restart can resume it; one of 16 shards, see
                             ``domain.shards``; items written before the shards sit in DOCS_PENDING, read too)
    WS#<ws> / DOCDEL#<doc>   a deleted document whose chunks and blobs its deletion job has yet to remove;
                             gsi2 = DOCS_DELETING#<shard> / <doc> (so a lost job is re-driven)
    blobs: documents/<ws>/<doc>/v<version>/source   the bytes as received
           documents/<ws>/<doc>/v<version>/text     the canonical text chunks and line numbers refer to

Creating or changing a document returns at once with ``parse_status: pending``; the job moves it to
``completed`` or ``failed`` (with the reason). Jobs carry the version they index, so a job for an older version
does nothing once a newer one exists. Deleting one returns at once too: the item goes in the request, its chunks
(a rewrite of the knowledge base's index) and blobs in a ``delete_document`` job. ``queued_at`` (epoch seconds) is
when its current job was submitted, for the sweep that re-drives jobs that never ended
(``knowledge.document_recovery``). A job that finds the knowledge base's index busy puts the document back to
``pending`` and raises, so the job runner tries it again later rather than failing the document.

A draft is parsed and indexed too, but in an index of its own (``drafts_index``), which only a search that asks for
drafts reads: published documents are all that every other read (default searches, endpoints, ``ask``) can reach,
since none of them ever names that index.
"""

# Over 400 lines: a document's whole life: create, fetch, parse, index, update, delete, resume.

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Final

from mcpbridge.domain.document_filing import PUBLISHED, Filing, Shelf, clean_folder, clean_status, clean_tags
from mcpbridge.domain.identity import timestamp
from mcpbridge.domain.ids import new_id
from mcpbridge.domain.items import Condition, Item, Key, Patch, Put, Remove, Update, WriteOp
from mcpbridge.domain.knowledge import Chunk, ChunkDraft, Document, DocumentFormat, KnowledgeAccess
from mcpbridge.domain.shards import list_partitions, shard_partition
from mcpbridge.errors import (
    ConditionFailed,
    Conflict,
    InvalidInput,
    MCPBridgeError,
    NotFound,
    PayloadTooLarge,
    Unavailable,
)
from mcpbridge.knowledge.bases import KnowledgeBases, kb_key
from mcpbridge.knowledge.chunking import chunk_document
from mcpbridge.knowledge.document_records import doc_key, reachable_document
from mcpbridge.knowledge.images import DocumentImages
from mcpbridge.knowledge.parsing import parse_document
from mcpbridge.observability import masked_url
from mcpbridge.outbound.policy import EgressPolicy
from mcpbridge.paging import every_item
from mcpbridge.ports import Blobs, Clock, Embedder, Jobs, SearchIndex, Store

log = logging.getLogger("mcpbridge.knowledge")

TITLE_MAX_BYTES = 255
PAGE_SIZE_DEFAULT = 20
PAGE_SIZE_MAX = 100
PENDING = "DOCS_PENDING"
DELETING = "DOCS_DELETING"
INDEX_CONTENTION = frozenset({"index_busy", "index_contention"})
"""Codes of ``Unavailable`` meaning another writer held the knowledge base's index: worth trying again later."""
DELETE_JOB = "delete_document"
DRAFTS_SUFFIX: Final = "-drafts"
_CONTENT_TYPES: dict[DocumentFormat, str] = {"markdown": "text/markdown", "text": "text/plain"}


def drafts_index(kb_id: str) -> str:
    """The index holding a knowledge base's drafts (its chunks carry this id as their knowledge base)."""
    return f"{kb_id}{DRAFTS_SUFFIX}"


def deletion_key(workspace_id: str, document_id: str) -> Key:
    return Key(f"WS#{workspace_id}", f"DOCDEL#{document_id}")


def blob_key(workspace_id: str, document_id: str, version: int, part: str) -> str:
    return f"documents/{workspace_id}/{document_id}/v{version}/{part}"


def clean_title(title: str | None) -> str:
    title = (title or "").strip()
    if not title:
        raise InvalidInput("title is required", code="invalid_title")
    if len(title.encode()) > TITLE_MAX_BYTES:
        raise InvalidInput(f"title is longer than {TITLE_MAX_BYTES} bytes", code="invalid_title")
    return title


UNFILED: Final = Filing()


@dataclass(frozen=True)
class DocumentPage:
    items: list[Document]
    total: int
    page: int
    page_size: int
    has_more: bool


class Documents:
    """Document lifecycle and the indexing job."""

    def __init__(
        self,
        store: Store,
        blobs: Blobs,
        index: SearchIndex,
        jobs: Jobs,
        clock: Clock,
        bases: KnowledgeBases,
        *,
        embedder: Embedder | None,
        egress: EgressPolicy,
        max_bytes: int,
        max_request_bytes: int | None = None,
        fetch_timeout: float,
        images: DocumentImages | None = None,
    ) -> None:
        """``max_bytes``: the largest document (uploaded straight to the blob store, or fetched from a URL);
        ``max_request_bytes``: the largest one sent inside a request (text, a file in the request), by default the
        same."""
        self._store = store
        self._blobs = blobs
        self._index = index
        self._jobs = jobs
        self._clock = clock
        self._bases = bases
        self._embedder = embedder
        self._egress = egress
        self._max_bytes = max_bytes
        self._max_request_bytes = max_bytes if max_request_bytes is None else min(max_request_bytes, max_bytes)
        self._fetch_timeout = fetch_timeout
        self._images = images

    @property
    def max_bytes(self) -> int:
        return self._max_bytes

    @property
    def max_request_bytes(self) -> int:
        return self._max_request_bytes

    # ------------------------------------------------------------------------------------------ create

    def create_from_text(
        self,
        access: KnowledgeAccess,
        kb_id: str,
        *,
        title: str,
        content: str,
        format: DocumentFormat = "markdown",
        filing: Filing = UNFILED,
    ) -> Document:
        title = clean_title(title)
        data = content.encode()
        if not content.strip():
            raise InvalidInput("content is empty", code="document_empty")
        self._check_request_size(len(data), kb_id)
        return self._create(
            access, kb_id, title=title, data=data, content_type=_CONTENT_TYPES[format], source="text", filing=filing
        )

    def create_from_url(
        self, access: KnowledgeAccess, kb_id: str, *, title: str, url: str, filing: Filing = UNFILED
    ) -> Document:
        title = clean_title(title)
        self._bases.owner_access(access, kb_id, write=True)
        # Fetched now, through the SSRF guard (every redirect and resolved address checked), so a refusal is
        # reported to the caller and nothing is stored. Imported here: httpx2 is ~50 ms of the MCP endpoint's cold
        # start, and only this operation needs it there.
        from mcpbridge.outbound.http import fetch

        fetched = fetch(url, policy=self._egress, timeout=self._fetch_timeout, max_bytes=self._max_bytes)
        self._check_size(len(fetched.content))
        return self._create(
            access,
            kb_id,
            title=title,
            data=fetched.content,
            content_type=fetched.content_type,
            source="url",
            # Kept as shown: a document is never fetched again, so a key in its query has no reason to be stored.
            url=masked_url(url),
            filing=filing,
        )

    def create_from_file(
        self,
        access: KnowledgeAccess,
        kb_id: str,
        *,
        title: str | None,
        filename: str,
        content_type: str,
        data: bytes,
        filing: Filing = UNFILED,
    ) -> Document:
        title = clean_title(title or filename)
        if not data:
            raise InvalidInput("the file is empty", code="document_empty")
        self._check_request_size(len(data), kb_id)
        return self._create(
            access,
            kb_id,
            title=title,
            data=data,
            content_type=content_type,
            source="file",
            filename=filename,
            filing=filing,
        )

    def _create(
        self,
        access: KnowledgeAccess,
        kb_id: str,
        *,
        title: str,
        data: bytes,
        content_type: str,
        source: str,
        url: str | None = None,
        filename: str | None = None,
        filing: Filing = UNFILED,
    ) -> Document:
        # Into a shared knowledge base (when its share allows writing), the document is its owner's.
        access = self._bases.owner_access(access, kb_id, write=True)
        document_id = new_id("doc")
        self._blobs.put(blob_key(access.workspace_id, document_id, 1, "source"), data, content_type=content_type)
        return self.register(
            access,
            kb_id,
            document_id,
            title=title,
            size=len(data),
            content_type=content_type,
            source=source,
            url=url,
            filename=filename,
            filing=filing,
        )

    def register(
        self,
        access: KnowledgeAccess,
        kb_id: str,
        document_id: str,
        *,
        title: str,
        size: int,
        content_type: str,
        source: str,
        url: str | None = None,
        filename: str | None = None,
        also: Sequence[WriteOp] = (),
        filing: Filing = UNFILED,
    ) -> Document:
        """Store a new document whose first source blob is already in place (with ``also`` in the same
        transaction), and submit its indexing. A lost condition of ``also`` propagates as ``ConditionFailed``."""
        now = timestamp(self._clock.now())
        item: Item = {
            **doc_key(access.workspace_id, document_id).as_dict(),
            "gsi1pk": f"KBDOCS#{kb_id}",
            "gsi1sk": document_id,
            "gsi2pk": shard_partition(PENDING, document_id),
            "gsi2sk": document_id,
            "id": document_id,
            "workspace_id": access.workspace_id,
            "knowledge_base_id": kb_id,
            "title": title,
            "source": source,
            "url": url,
            "filename": filename,
            "content_type": content_type,
            "size_bytes": size,
            "version": 1,
            "parse_status": "pending",
            "parse_error": None,
            "chunk_count": 0,
            "line_count": 0,
            "created_at": now,
            "updated_at": now,
            "indexed_at": None,
            "queued_at": self._clock.now(),
            "status": filing.status,
            "tags": list(filing.tags),
            "folder": filing.folder,
        }
        kb_count = Patch(
            kb_key(access.workspace_id, kb_id), Update(add={"document_count": 1}), Condition.exists("kb_exists")
        )
        try:
            # ``also`` first: when its condition is the one lost, that is the one reported.
            self._store.transact([*also, Put(item, Condition.absent("document_new")), kb_count])
        except ConditionFailed as lost:
            if lost.condition not in ("kb_exists", "document_new"):
                raise  # the caller's own condition: whoever won it owns the blob
            self._blobs.delete(blob_key(access.workspace_id, document_id, 1, "source"))
            raise NotFound(f"knowledge base {kb_id!r} was not found", code="kb_not_found") from None
        self.submit_indexing(access.workspace_id, document_id, 1)
        return _document_of(item)

    def _check_size(self, size: int) -> None:
        if size > self._max_bytes:
            raise PayloadTooLarge(
                f"the document is {size} bytes; the limit is {self._max_bytes}",
                code="document_too_large",
                details={"limit_bytes": self._max_bytes},
            )

    def _check_request_size(self, size: int, kb_id: str) -> None:
        """Documents sent inside a request: a smaller limit (API Gateway and Lambda cap a request's size); larger
        ones are uploaded straight to the blob store."""
        if size > self._max_request_bytes:
            raise PayloadTooLarge(
                f"the document is {size} bytes; one sent in the request may have at most {self._max_request_bytes}: "
                f"upload it instead (POST /api/v1/knowledge-bases/{kb_id}/documents/uploads, up to {self._max_bytes})",
                code="document_too_large",
                details={"limit_bytes": self._max_request_bytes, "upload_limit_bytes": self._max_bytes},
            )

    def submit_indexing(self, workspace_id: str, document_id: str, version: int) -> None:
        self._jobs.submit(
            "index_document", {"workspace_id": workspace_id, "document_id": document_id, "version": str(version)}
        )

    # ------------------------------------------------------------------------------------------ read

    def get(self, access: KnowledgeAccess, document_id: str) -> Document:
        """A document of a knowledge base ``access`` reaches: the workspace's own, or one shared with it (a caller not
        limited to some knowledge bases names the document, so every share of its workspace counts)."""
        item = reachable_document(self._store, access, document_id)
        if item is None:
            raise NotFound(f"document {document_id!r} was not found", code="document_not_found")
        return _document_of(item)

    def text(self, document: Document) -> str | None:
        """The canonical text of an indexed document (None before its first successful indexing)."""
        if document.indexed_version is None:
            return None
        data = self._blobs.get(blob_key(document.workspace_id, document.id, document.indexed_version, "text"))
        return None if data is None else data.decode()

    def list_documents(
        self,
        access: KnowledgeAccess,
        kb_id: str,
        *,
        keyword: str | None = None,
        page: int = 1,
        page_size: int = PAGE_SIZE_DEFAULT,
        shelf: Shelf = PUBLISHED,
    ) -> DocumentPage:
        page = max(page, 1)
        page_size = PAGE_SIZE_DEFAULT if page_size < 1 else min(page_size, PAGE_SIZE_MAX)
        found = self.matching(access, kb_id, keyword=keyword, shelf=shelf)
        start = (page - 1) * page_size
        return DocumentPage(
            items=found[start : start + page_size],
            total=len(found),
            page=page,
            page_size=page_size,
            has_more=start + page_size < len(found),
        )

    def matching(
        self,
        access: KnowledgeAccess,
        kb_id: str,
        *,
        keyword: str | None = None,
        shelf: Shelf = PUBLISHED,
    ) -> list[Document]:
        """Every document of the knowledge base whose title contains ``keyword`` (case-insensitive) and that
        ``shelf`` selects (published ones by default), newest first."""
        owner = self._bases.get(access, kb_id).workspace_id
        wanted = (keyword or "").strip().casefold()
        found = [d for d in self._all_of_kb(kb_id) if d.workspace_id == owner and shelf.holds(d)]
        if wanted:
            found = [d for d in found if wanted in d.title.casefold()]
        found.sort(key=lambda d: d.id, reverse=True)  # ids are time-ordered
        return found

    def index_unindexed_drafts(self, workspace_id: str, kb_id: str) -> int:
        """Submit indexing for the knowledge base's drafts stored before drafts were indexed (kept, never parsed):
        the drafts' index then holds them. Returns how many."""
        waiting = [
            d
            for d in self._all_of_kb(kb_id)
            if d.workspace_id == workspace_id and d.parse_status == "draft" and d.parse_error is None
        ]
        for document in waiting:
            self.submit_indexing(workspace_id, document.id, document.version)
        return len(waiting)

    def _all_of_kb(self, kb_id: str) -> list[Document]:
        return [_document_of(i) for i in every_item(self._store, f"KBDOCS#{kb_id}", index="gsi1", page_size=500)]

    # ------------------------------------------------------------------------------------------ change

    def update(
        self,
        access: KnowledgeAccess,
        document_id: str,
        *,
        title: str | None = None,
        content: str | None = None,
        status: str | None = None,
        tags: Sequence[str] | None = None,
        folder: str | None = None,
    ) -> Document:
        """Change the title and/or the content (text documents), the status, tags or folder. A new title, content
        or status re-indexes the document (a draft leaves the index, a published one enters it); tags and folder
        alone change only how it is filed."""
        current = self.get(access, document_id)
        access = self._bases.owner_access(access, current.knowledge_base_id, write=True)
        if all(given is None for given in (title, content, status, tags, folder)):
            raise InvalidInput("give a new title, content, status, tags or folder", code="nothing_to_update")
        changes = _filing_changes(status, tags, folder)
        if title is not None:
            changes["title"] = clean_title(title)
        if content is None and title is None and changes.get("status", current.status) == current.status:
            return self._refile(access, current, changes)
        version = current.version + 1
        if content is not None:
            if not content.strip():
                raise InvalidInput("content is empty", code="document_empty")
            data = content.encode()
            self._check_request_size(len(data), current.knowledge_base_id)
            content_type = current.content_type if current.source == "text" else "text/markdown"
            # New content is the caller's whole text: chunks deleted from the old one no longer apply.
            changes |= {"size_bytes": len(data), "content_type": content_type, "source": "text", "removed_chunks": []}
            self._blobs.put(
                blob_key(access.workspace_id, document_id, version, "source"), data, content_type=content_type
            )
        else:  # the same source, copied inside the blob store (it may be far larger than a request)
            source = blob_key(access.workspace_id, document_id, current.version, "source")
            target = blob_key(access.workspace_id, document_id, version, "source")
            if self._blobs.size(source) is None:  # lost: the new version fails to index, saying so
                self._blobs.put(target, b"", content_type=current.content_type)
            else:
                self._blobs.copy(source, target)
        changes |= {
            "version": version,
            "parse_status": "pending",
            "parse_error": None,
            "updated_at": timestamp(self._clock.now()),
            "gsi2pk": shard_partition(PENDING, document_id),
            "gsi2sk": document_id,
            "queued_at": self._clock.now(),
        }
        try:
            item = self._store.update(
                doc_key(access.workspace_id, document_id),
                Update(set=changes),
                condition=Condition.equals("document_version", "version", current.version),
            )
        except ConditionFailed:
            self._blobs.delete(blob_key(access.workspace_id, document_id, version, "source"))
            raise NotFound(
                f"document {document_id!r} changed or was deleted meanwhile; retry", code="document_conflict"
            ) from None
        self.submit_indexing(access.workspace_id, document_id, version)
        return _document_of(item)

    def _refile(self, access: KnowledgeAccess, current: Document, changes: dict[str, object]) -> Document:
        """Tags and folder: the item only, nothing re-indexed."""
        changes["updated_at"] = timestamp(self._clock.now())
        try:
            item = self._store.update(
                doc_key(access.workspace_id, current.id),
                Update(set=changes),
                condition=Condition.equals("document_version", "version", current.version),
            )
        except ConditionFailed:
            raise NotFound(
                f"document {current.id!r} changed or was deleted meanwhile; retry", code="document_conflict"
            ) from None
        return _document_of(item)

    def delete(self, access: KnowledgeAccess, document_id: str) -> Document:
        """Remove the document now; its chunks (a rewrite of the index) and blobs go in a ``delete_document`` job,
        which a marker item (in the same transaction) lets the sweep re-drive if the job is lost."""
        current = self.get(access, document_id)
        access = self._bases.owner_access(access, current.knowledge_base_id, write=True)
        workspace_id, kb_id = access.workspace_id, current.knowledge_base_id
        marker: Item = {
            **deletion_key(workspace_id, document_id).as_dict(),
            "gsi2pk": shard_partition(DELETING, document_id),
            "gsi2sk": document_id,
            "workspace_id": workspace_id,
            "knowledge_base_id": kb_id,
            "document_id": document_id,
            "version": current.version,
            "queued_at": self._clock.now(),
        }
        try:
            self._store.transact(
                [
                    Remove(doc_key(workspace_id, document_id), Condition.exists("document_exists")),
                    Patch(
                        kb_key(workspace_id, kb_id), Update(add={"document_count": -1}), Condition.exists("kb_exists")
                    ),
                    Put(marker),
                ]
            )
        except ConditionFailed as lost:
            if lost.condition == "document_exists":
                raise NotFound(f"document {document_id!r} was not found", code="document_not_found") from None
            return current  # the knowledge base is being deleted: its purge removes the rest
        self.submit_deletion(marker)
        return current

    def delete_chunk(self, access: KnowledgeAccess, document_id: str, chunk_id: str) -> Document:
        """Remove one chunk of an indexed document: its text, its terms in the keyword index and its vector (the
        document's other chunks are indexed again, their vectors made anew, so every engine does it the same way),
        and its text from the stored text every read shows (its lines left blank, so line numbers hold). The chunk's
        digest is kept on the document, so indexing it again (a new title or status) leaves it out too; new content
        starts afresh. ``chunk_id``: the chunk's id (``<document>#00003``) or its number."""
        current = self.get(access, document_id)
        access = self._bases.owner_access(access, current.knowledge_base_id, write=True)
        seq = _chunk_seq(document_id, chunk_id)
        if current.parse_status != "completed" or current.indexed_version != current.version:
            raise Conflict(
                f"document {document_id!r} is {current.parse_status}: a chunk can be deleted once it is indexed",
                code="document_not_indexed",
            )
        kb_id = current.knowledge_base_id
        chunks = self._index.chunks(kb_id, document_id)
        deleted = next((chunk for chunk in chunks if chunk.seq == seq), None)
        if deleted is None:
            raise NotFound(
                f"chunk {chunk_id[:120]!r} of document {document_id!r} was not found", code="chunk_not_found"
            )
        text_key = blob_key(access.workspace_id, document_id, current.version, "text")
        stored = self._blobs.get(text_key)
        text, shift = blank_span(stored.decode(), deleted.start_offset, deleted.text) if stored else ("", 0)
        remaining = [
            replace(chunk, start_offset=chunk.start_offset - shift, end_offset=chunk.end_offset - shift)
            if chunk.start_offset >= deleted.end_offset
            else chunk
            for chunk in chunks
            if chunk.seq != seq
        ]
        vectors = None
        if self._embedder is not None and remaining and self._index.has_vectors(kb_id):
            vectors = self._embed([chunk.text for chunk in remaining])
        embedder_name = self._embedder.name if vectors is not None and self._embedder is not None else None
        language = self._bases.language_of(access.workspace_id, kb_id)
        self._index.replace_document(kb_id, document_id, remaining, vectors, embedder_name, language=language)
        if stored is not None:
            self._blobs.put(text_key, text.encode(), content_type="text/markdown")
        self._blank_source(current, deleted)
        if self._images is not None:
            self._images.forget_text(access.workspace_id, document_id, current.version, deleted)
        try:
            item = self._store.update(
                doc_key(access.workspace_id, document_id),
                Update(
                    set={
                        "chunk_count": len(remaining),
                        "removed_chunks": [*current.removed_chunks, chunk_digest(deleted.text)],
                        "updated_at": timestamp(self._clock.now()),
                    }
                ),
                condition=Condition.equals("document_version", "version", current.version),
            )
        except ConditionFailed:
            raise Conflict(
                f"document {document_id!r} changed meanwhile (it is indexed again in full); retry",
                code="document_conflict",
            ) from None
        log.info("deleted chunk %s of document %s", seq, document_id)
        return _document_of(item)

    def _blank_source(self, document: Document, deleted: Chunk) -> None:
        """A source that is the stored text itself (Markdown or plain text sent as is) loses the chunk's text too;
        another (PDF, HTML, an image) is never shown, and indexing it again drops the chunk by its digest."""
        key = blob_key(document.workspace_id, document.id, document.version, "source")
        data = self._blobs.get(key)
        if data is None:
            return
        try:
            source = data.decode()
        except UnicodeDecodeError:
            return
        blanked, shift = blank_span(source, deleted.start_offset, deleted.text)
        if shift:
            self._blobs.put(key, blanked.encode(), content_type=document.content_type)

    def submit_deletion(self, marker: Item) -> None:
        """Submit the ``delete_document`` job of a deletion marker."""
        payload = {name: str(marker[name]) for name in ("workspace_id", "knowledge_base_id", "document_id", "version")}
        self._jobs.submit(DELETE_JOB, payload)

    def run_deletion(self, workspace_id: str, kb_id: str, document_id: str, version: int) -> None:
        """Remove a deleted document's chunks and blobs, then its marker; safe to run twice."""
        self._index.delete_document(kb_id, document_id)
        self._index.delete_document(drafts_index(kb_id), document_id)
        for number in range(1, version + 1):
            for part in ("source", "text"):
                self._blobs.delete(blob_key(workspace_id, document_id, number, part))
            if self._images is not None:
                self._images.delete(workspace_id, document_id, number)
        self._store.delete(deletion_key(workspace_id, document_id))

    def _delete_blobs(self, document: Document) -> None:
        for version in range(1, document.version + 1):
            for part in ("source", "text"):
                self._blobs.delete(blob_key(document.workspace_id, document.id, version, part))
            if self._images is not None:
                self._images.delete(document.workspace_id, document.id, version)

    # ------------------------------------------------------------------------------------------ jobs

    def run_indexing(self, workspace_id: str, document_id: str, version: int) -> None:
        """Parse, chunk, embed and index one version of a document; safe to run twice."""
        key = doc_key(workspace_id, document_id)
        try:
            item = self._store.update(
                key,
                Update(set={"parse_status": "processing"}),
                condition=Condition.equals("document_version", "version", version),
            )
        except ConditionFailed:
            return  # deleted, or superseded by a newer version with its own job
        document = _document_of(item)
        if document.status == "draft":
            self._index_draft(key, document, version)
            return
        try:
            chunks, vectors, line_count, text, notices = self._prepare(document)
            self._blobs.put(
                blob_key(workspace_id, document_id, version, "text"), text.encode(), content_type="text/markdown"
            )
            embedder_name = self._embedder.name if self._embedder is not None and vectors is not None else None
            language = self._bases.language_of(workspace_id, document.knowledge_base_id)
            self._index.replace_document(
                document.knowledge_base_id, document_id, chunks, vectors, embedder_name, language=language
            )
            self._index.delete_document(drafts_index(document.knowledge_base_id), document_id)  # a draft no more
            self._reanalyse_if_stale(workspace_id, document.knowledge_base_id, language)
        except Unavailable as exc:
            if exc.code not in INDEX_CONTENTION:
                self._finish(key, version, failed=exc.message)
                return
            self._back_to_pending(key, version)
            raise
        except MCPBridgeError as exc:
            self._finish(key, version, failed=exc.message)
            return
        except ValueError as exc:
            self._finish(key, version, failed=str(exc))
            return
        except Exception:
            log.exception("indexing document %s failed", document_id)
            self._finish(key, version, failed="internal error while indexing; update the document to retry")
            return
        finished = self._finish(key, version, chunk_count=len(chunks), line_count=line_count, notices=notices)
        if not finished and not self._store.get(key):
            # Deleted while it was indexed: its deletion job may have run before these chunks went in.
            self._index.delete_document(document.knowledge_base_id, document_id)

    def _back_to_pending(self, key: Key, version: int) -> None:
        """Another writer held the index: back to pending, and the job runner tries again later (with backoff)."""
        with contextlib.suppress(ConditionFailed):
            self._store.update(
                key,
                Update(set={"parse_status": "pending"}),
                condition=Condition.equals("document_version", "version", version),
            )

    def _index_draft(self, key: Key, document: Document, version: int) -> None:
        """A draft: its chunks in the drafts' index only (those of a version published before leave the main one),
        so a search that asks for drafts finds it and nothing else does. A draft that cannot be parsed stays a draft,
        its ``parse_error`` saying why no search finds it."""
        kb_id, drafts = document.knowledge_base_id, drafts_index(document.knowledge_base_id)
        problem: str | None = None
        try:
            prepared, vectors, _, _, _ = self._prepare(document)
            chunks = [replace(chunk, knowledge_base_id=drafts) for chunk in prepared]
            embedder_name = self._embedder.name if self._embedder is not None and vectors is not None else None
            language = self._bases.language_of(document.workspace_id, kb_id)
            self._index.delete_document(kb_id, document.id)
            if chunks:
                self._index.replace_document(drafts, document.id, chunks, vectors, embedder_name, language=language)
            else:
                self._index.delete_document(drafts, document.id)
        except Unavailable as exc:
            if exc.code in INDEX_CONTENTION:
                self._back_to_pending(key, version)
                raise
            problem = exc.message
        except MCPBridgeError as exc:
            problem = exc.message
        except ValueError as exc:
            problem = str(exc)
        if problem is not None:
            self._index.delete_document(kb_id, document.id)
            self._index.delete_document(drafts, document.id)
        try:
            self._store.update(
                key,
                Update(
                    set={
                        "parse_status": "draft",
                        "parse_error": None if problem is None else f"not searchable as a draft: {problem}",
                        "chunk_count": 0,
                        "updated_at": timestamp(self._clock.now()),
                    },
                    remove=["gsi2pk", "gsi2sk", "queued_at"],
                ),
                condition=Condition.equals("document_version", "version", version),
            )
        except ConditionFailed:
            if not self._store.get(key):
                self._index.delete_document(drafts, document.id)  # deleted meanwhile: its deletion job may be done

    def _prepare(self, document: Document) -> tuple[list[Chunk], list[list[float]] | None, int, str, list[str]]:
        data = self._blobs.get(blob_key(document.workspace_id, document.id, document.version, "source"))
        if data is None:
            raise InvalidInput("the document's source is missing", code="document_source_missing")
        parsed = parse_document(data, content_type=document.content_type, filename=document.filename)
        drafts = chunk_document(parsed.text, format=parsed.format) if parsed.text.strip() else []
        text, notices = parsed.text, []
        if parsed.images and self._images is None and not drafts:
            raise InvalidInput("images are not read here", code="unsupported_document_type")
        if parsed.images and self._images is not None:
            indexed = self._images.index(document.workspace_id, document.id, document.version, parsed, len(drafts))
            text, notices = indexed.text, indexed.notices
            drafts += indexed.drafts
        if document.removed_chunks:
            drafts, text, removed = _without_removed(drafts, text, frozenset(document.removed_chunks))
            for draft in removed:
                if self._images is not None:
                    self._images.forget_text(document.workspace_id, document.id, document.version, draft)
        chunks = [
            Chunk(
                id=Chunk.make_id(document.id, d.seq),
                knowledge_base_id=document.knowledge_base_id,
                document_id=document.id,
                document_title=document.title,
                seq=d.seq,
                text=d.text,
                start_line=d.start_line,
                end_line=d.end_line,
                start_offset=d.start_offset,
                end_offset=d.end_offset,
                heading_path=d.heading_path,
                type=d.type,
            )
            for d in drafts
        ]
        vectors = self._embed([c.text for c in chunks]) if self._embedder is not None and chunks else None
        return chunks, vectors, text.count("\n") + 1, text, notices

    def _embed(self, texts: Sequence[str]) -> list[list[float]]:
        assert self._embedder is not None
        try:
            return self._embedder.embed(texts, purpose="document")
        except MCPBridgeError as exc:
            raise type(exc)(f"the embedding provider failed: {exc.message}", code=exc.code) from exc

    def _finish(
        self,
        key: Key,
        version: int,
        *,
        failed: str | None = None,
        chunk_count: int = 0,
        line_count: int = 0,
        notices: Sequence[str] = (),
    ) -> bool:
        """Record the job's outcome; False when the document changed or went meanwhile."""
        now = timestamp(self._clock.now())
        changes: dict[str, object] = {"updated_at": now}
        if failed is None:
            changes |= {
                "parse_status": "completed",
                "parse_error": None,
                "chunk_count": chunk_count,
                "line_count": line_count,
                "indexed_at": now,
                "indexed_version": version,
                "notices": list(notices),
            }
        else:
            changes |= {"parse_status": "failed", "parse_error": failed}
        # Losing means a newer version superseded this one while it was indexed (its own job owns the status), or
        # the document was deleted.
        try:
            self._store.update(
                key,
                Update(set=changes, remove=["gsi2pk", "gsi2sk", "queued_at"]),
                condition=Condition.equals("document_version", "version", version),
            )
        except ConditionFailed:
            return False
        return True

    def _reanalyse_if_stale(self, workspace_id: str, kb_id: str, language: str | None) -> None:
        """An index analysed for another language, or by an older release, is re-analysed in the background."""
        analysis = self._index.analysis(kb_id)
        if language is not None and analysis is not None and analysis.needs_reanalysis(language):
            self._bases.request_reanalysis(workspace_id, kb_id, language)

    def run_reanalysis(self, workspace_id: str, kb_id: str, language: str) -> None:
        """Re-analyse a knowledge base's keyword index for ``language``, recording progress on the knowledge base;
        nothing when its language changed since (the newer job does it) or it was deleted. Safe to run twice."""
        if self._bases.language_of(workspace_id, kb_id) != language:
            return

        def progress(done: int, total: int) -> None:
            self._bases.record_reanalysis(workspace_id, kb_id, language, done, total)

        if self._index.analysis(drafts_index(kb_id)) is not None:
            self._index.reanalyse(drafts_index(kb_id), language)
        self._index.reanalyse(kb_id, language, progress)
        self._bases.finish_reanalysis(workspace_id, kb_id, language)

    def resume_pending(self) -> int:
        """Submit a job for every document still waiting for indexing (after a restart). Returns how many."""
        submitted = 0
        for item in self._pending():
            self.submit_indexing(item["workspace_id"], item["id"], int(item["version"]))
            submitted += 1
        return submitted

    def _pending(self) -> Iterator[Item]:
        """Index entries of the documents waiting for indexing, every shard (they may lag the items a moment)."""
        for partition in list_partitions(PENDING):
            yield from every_item(self._store, partition, index="gsi2")

    def purge_knowledge_base(self, workspace_id: str, kb_id: str) -> None:
        """Delete the documents, wiki pages and index of a deleted knowledge base; safe to run twice."""
        for document in self._all_of_kb(kb_id):
            if document.workspace_id != workspace_id:
                continue
            self._store.delete(doc_key(workspace_id, document.id))
            self._delete_blobs(document)
        for item in list(every_item(self._store, f"KB#{kb_id}", sk_prefix="WIKI#")):
            self._store.delete(Key(item["pk"], item["sk"]))
        self._index.delete_knowledge_base(kb_id)
        self._index.delete_knowledge_base(drafts_index(kb_id))


def _filing_changes(status: str | None, tags: Sequence[str] | None, folder: str | None) -> dict[str, object]:
    changes: dict[str, object] = {}
    if tags is not None:
        changes["tags"] = list(clean_tags(tags))
    if folder is not None:
        changes["folder"] = clean_folder(folder)
    if status is not None:
        changes["status"] = clean_status(status)
    return changes


def chunk_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def blank_span(text: str, start: int, chunk_text: str) -> tuple[str, int]:
    """``text`` with ``chunk_text`` (found at ``start``, else its first occurrence) reduced to its line breaks, so
    the lines around it keep their numbers; and how many characters went. Unchanged (0) when it is not there."""
    if text[start : start + len(chunk_text)] != chunk_text:
        start = text.find(chunk_text) if chunk_text else -1
        if start < 0:
            return text, 0
    kept = "\n" * chunk_text.count("\n")
    return text[:start] + kept + text[start + len(chunk_text) :], len(chunk_text) - len(kept)


def _without_removed(
    drafts: list[ChunkDraft], text: str, removed: frozenset[str]
) -> tuple[list[ChunkDraft], str, list[ChunkDraft]]:
    """The chunks of a new indexing without those deleted one by one, the text without theirs (offsets of the
    chunks after each one moved back), and the chunks left out."""
    kept: list[ChunkDraft] = []
    left_out: list[ChunkDraft] = []
    shift = 0
    for draft in sorted(drafts, key=lambda d: d.start_offset):
        if chunk_digest(draft.text) in removed:
            text, gone = blank_span(text, draft.start_offset - shift, draft.text)
            shift += gone
            left_out.append(draft)
            continue
        kept.append(replace(draft, start_offset=draft.start_offset - shift, end_offset=draft.end_offset - shift))
    return sorted(kept, key=lambda d: d.seq), text, left_out


def _chunk_seq(document_id: str, chunk_id: str) -> int:
    """A chunk's number from its id (``<document>#00003``) or the number itself."""
    text = chunk_id.strip()
    owner, hash_sign, number = text.rpartition("#")
    if hash_sign and owner != document_id:
        raise InvalidInput(f"chunk {text[:120]!r} is not a chunk of document {document_id!r}", code="invalid_chunk_id")
    digits = number if hash_sign else text
    if not digits.isascii() or not digits.isdigit() or len(digits) > 9:
        raise InvalidInput(
            f"chunk_id must be a chunk's id (<document id>#00003) or its number, not {text[:120]!r}",
            code="invalid_chunk_id",
        )
    return int(digits)


def _document_of(item: Item) -> Document:
    return Document(
        id=item["id"],
        workspace_id=item["workspace_id"],
        knowledge_base_id=item["knowledge_base_id"],
        title=item["title"],
        source=item["source"],
        url=item.get("url"),
        filename=item.get("filename"),
        content_type=item["content_type"],
        size_bytes=int(item["size_bytes"]),
        version=int(item["version"]),
        parse_status=item["parse_status"],
        parse_error=item.get("parse_error"),
        chunk_count=int(item.get("chunk_count", 0)),
        line_count=int(item.get("line_count", 0)),
        created_at=item["created_at"],
        updated_at=item["updated_at"],
        indexed_at=item.get("indexed_at"),
        indexed_version=item.get("indexed_version"),
        notices=tuple(item.get("notices") or ()),
        status=str(item.get("status") or "published"),
        tags=tuple(item.get("tags") or ()),
        folder=str(item.get("folder") or ""),
        removed_chunks=tuple(item.get("removed_chunks") or ()),
    )
