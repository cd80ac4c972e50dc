"""Documents: ``/api/v1/knowledge-bases/{kb_id}/documents`` (list, create from text or URL, upload a file in the
request), ``/api/v1/knowledge-bases/{kb_id}/documents/uploads`` and ``/api/v1/document-uploads/{id}/...`` (a large
file straight to the blob store, then ``complete``) and ``/api/v1/documents/{id}`` (get, read, update, delete).
Creating returns at once with ``parse_status: pending``; deleting removes the chunks in the background.
``/api/v1/documents/{id}/chunks/{chunk}`` deletes one chunk; ``/api/v1/documents/{id}/windows`` reads around
literal patterns."""

# Over 400 lines: every route of one resource, a document (its listing, creation, uploads, reads and changes).

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal

from anyio import to_thread
from fastapi import APIRouter, File, Form, Path, Query, Request, Response, UploadFile
from fastapi.responses import RedirectResponse
from pydantic import BaseModel, ConfigDict, Field, model_validator

from mcpbridge.domain.document_filing import Filing, Shelf
from mcpbridge.errors import InvalidInput, PayloadTooLarge
from mcpbridge.http.auth import CurrentPrincipal, knowledge_access, knowledge_write_access
from mcpbridge.http.deps import DocumentsDep, FileToolsDep, ReaderDep, UploadsDep
from mcpbridge.http.fields import DocumentId, KnowledgeBaseId, UploadId
from mcpbridge.http.openapi import problems
from mcpbridge.http.paging import cursor_query, limit_query, next_cursor_field, page_of
from mcpbridge.http.views import ChunkOut, DocumentOut, Timestamp
from mcpbridge.knowledge.image_reads import DocumentImageReads
from mcpbridge.ports import BlobLinks

router = APIRouter(prefix="/api/v1", tags=["documents"])


_TAGS_HELP = "At most 20, each 1 to 50 characters; duplicates (case-insensitively) are dropped."
_FOLDER_HELP = "A path like docs/spec (parts of 1 to 100 characters, neither . nor ..); empty: the root."


class DocumentIn(BaseModel):
    """Exactly one of ``content`` (Markdown or plain text) and ``url`` (fetched now, through the SSRF guard)."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [
                {"title": "Deployment guide", "content": "# Deploy\n\nRun `make deploy`.", "format": "markdown"}
            ]
        },
    )

    title: str = Field(min_length=1, max_length=255)
    content: str | None = None
    url: str | None = Field(default=None, max_length=2048)
    format: Literal["markdown", "text"] = "markdown"
    status: Literal["published", "draft"] = Field(
        default="published",
        description="published (default): searchable; draft: kept, found only by a search with include_drafts.",
    )
    tags: list[str] = Field(default_factory=list, description=_TAGS_HELP)
    folder: str = Field(default="", max_length=1000, description=_FOLDER_HELP)

    def filing(self) -> Filing:
        return Filing.of(status=self.status, tags=self.tags, folder=self.folder)

    @model_validator(mode="after")
    def _one_source(self) -> DocumentIn:
        if (self.content is None) == (self.url is None):
            raise ValueError("give either content or url")
        return self


class DocumentPatch(BaseModel):
    model_config = ConfigDict(
        extra="forbid", strict=True, json_schema_extra={"examples": [{"title": "Deployment guide (v2)"}]}
    )

    title: str | None = Field(default=None, min_length=1, max_length=255)
    content: str | None = None
    status: Literal["published", "draft"] | None = Field(
        default=None, description="published: search sees it; draft: only a search with include_drafts does."
    )
    tags: list[str] | None = Field(default=None, description=f"Replaces the tags. {_TAGS_HELP}")
    folder: str | None = Field(default=None, max_length=1000, description=_FOLDER_HELP)


class DocumentList(BaseModel):
    items: list[DocumentOut]
    next_cursor: str | None = next_cursor_field()


@router.get(
    "/knowledge-bases/{kb_id}/documents",
    operation_id="listDocuments",
    summary="List documents",
    responses=problems(400),
)
def list_documents(
    kb_id: KnowledgeBaseId,
    principal: CurrentPrincipal,
    documents: DocumentsDep,
    keyword: str | None = Query(
        default=None, max_length=255, description="Only the documents whose title contains this (case-insensitive)."
    ),
    status: Literal["published", "draft", "all"] = Query(
        default="published", description="published (default), draft, or all."
    ),
    tag: str | None = Query(
        default=None, max_length=50, description="Only documents with this tag (case-insensitive)."
    ),
    folder: str | None = Query(default=None, max_length=1000, description="Only documents in this folder (`` = root)."),
    subfolders: bool = Query(default=False, description="With folder: its subfolders' documents too."),
    limit: int = limit_query(),
    cursor: str | None = cursor_query(),
) -> DocumentList:
    """The documents of a knowledge base, newest first: the published ones unless `status` asks for drafts, optionally
    those whose title contains a keyword, with a tag, or in a folder."""
    shelf = Shelf.of(status=status, tag=tag, folder=folder, subfolders=subfolders)
    found, next_cursor = page_of(
        documents.matching(knowledge_access(principal, "read"), kb_id, keyword=keyword, shelf=shelf),
        key=lambda d: (d.id,),
        limit=limit,
        cursor=cursor,
        listing=f"knowledge-bases/{kb_id}/documents?keyword={(keyword or '').strip().casefold()}&{shelf}",
        descending=True,
    )
    return DocumentList(items=[DocumentOut.of(d) for d in found], next_cursor=next_cursor)


@router.post(
    "/knowledge-bases/{kb_id}/documents",
    operation_id="createDocument",
    summary="Create a document",
    status_code=201,
    responses=problems(409, 413, 502),
)
def create_document(
    kb_id: KnowledgeBaseId, body: DocumentIn, principal: CurrentPrincipal, documents: DocumentsDep
) -> DocumentOut:
    """From Markdown or plain text (`content`), or from a URL (`url`, fetched now through the SSRF guard). Answers at
    once with `parse_status: pending`; the document is searchable once it is `completed`."""
    access = knowledge_write_access(principal, "write")
    filing = body.filing()
    if body.url is not None:
        document = documents.create_from_url(access, kb_id, title=body.title, url=body.url, filing=filing)
    else:
        assert body.content is not None
        document = documents.create_from_text(
            access, kb_id, title=body.title, content=body.content, format=body.format, filing=filing
        )
    return DocumentOut.of(document)


@router.post(
    "/knowledge-bases/{kb_id}/documents/upload",
    operation_id="uploadDocument",
    summary="Upload a file as a document",
    status_code=201,
    responses=problems(400, 409, 413),
)
async def upload_document(
    kb_id: KnowledgeBaseId,
    principal: CurrentPrincipal,
    documents: DocumentsDep,
    file: Annotated[UploadFile, File(description="Markdown, text, HTML, PDF or an image (PNG, JPEG, GIF, WebP)")],
    title: Annotated[str | None, Form(max_length=255, description="The title; default: the file's name.")] = None,
    status: Annotated[
        Literal["published", "draft"],
        Form(description="published (default): indexed; draft: kept, found only by a search with include_drafts."),
    ] = "published",
    tags: Annotated[list[str] | None, Form(description=f"Repeat the field for each tag. {_TAGS_HELP}")] = None,
    folder: Annotated[str, Form(max_length=1000, description=_FOLDER_HELP)] = "",
) -> DocumentOut:
    """A Markdown, text, HTML, PDF or image (PNG, JPEG, GIF, WebP) file in the request itself
    (`multipart/form-data`), up to the per-request limit; larger files go through
    `POST /api/v1/knowledge-bases/{kb_id}/documents/uploads`."""
    access = knowledge_write_access(principal, "write")
    filing = Filing.of(status=status, tags=tags or [], folder=folder)
    limit = documents.max_request_bytes
    data = await file.read(limit + 1)
    if len(data) > limit:
        raise PayloadTooLarge(
            f"the file is larger than {limit} bytes, the most a request may carry: upload it instead "
            f"(POST /api/v1/knowledge-bases/{kb_id}/documents/uploads, up to {documents.max_bytes} bytes)",
            code="document_too_large",
            details={"limit_bytes": limit, "upload_limit_bytes": documents.max_bytes},
        )
    if not file.filename:
        raise InvalidInput("the upload has no file name", code="invalid_file")
    document = await to_thread.run_sync(
        lambda: documents.create_from_file(
            access,
            kb_id,
            title=title,
            filename=file.filename or "",
            content_type=file.content_type or "application/octet-stream",
            data=data,
            filing=filing,
        )
    )
    return DocumentOut.of(document)


class UploadIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [
                {
                    "filename": "handbook.pdf",
                    "content_type": "application/pdf",
                    "size_bytes": 20971520,
                    "title": "Handbook",
                }
            ]
        },
    )

    filename: str = Field(min_length=1, max_length=255)
    content_type: str = Field(min_length=3, max_length=255, pattern=r"^[\w.+-]+/[\w.+-]+$")
    size_bytes: int = Field(ge=1, description="The file's size; at most the per-document limit.")
    title: str | None = Field(default=None, min_length=1, max_length=255)
    status: Literal["published", "draft"] = Field(
        default="published",
        description="published (default): searchable; draft: kept, found only by a search with include_drafts.",
    )
    tags: list[str] = Field(default_factory=list, description=_TAGS_HELP)
    folder: str = Field(default="", max_length=1000, description=_FOLDER_HELP)


class UploadOut(BaseModel):
    """Post the file as an HTML form would (``multipart/form-data``): ``fields`` first, then the file as ``file``;
    then ``POST complete_url``."""

    upload_id: str
    document_id: str
    method: Literal["POST"] = "POST"
    url: str
    fields: dict[str, str]
    file_field: Literal["file"] = "file"
    max_bytes: int
    expires_at: Timestamp
    complete_url: str


@router.post(
    "/knowledge-bases/{kb_id}/documents/uploads",
    operation_id="startDocumentUpload",
    summary="Start a large upload",
    status_code=201,
    responses=problems(400, 413),
)
def start_upload(
    kb_id: KnowledgeBaseId, body: UploadIn, request: Request, principal: CurrentPrincipal, uploads: UploadsDep
) -> UploadOut:
    """A form to post a large file to (straight to S3 on AWS), up to the per-document limit: post `fields` then the
    file as `file` to `url`, then call `complete_url`."""
    access = knowledge_write_access(principal, "write")
    upload = uploads.start(
        access,
        kb_id,
        filename=body.filename,
        content_type=body.content_type,
        size_bytes=body.size_bytes,
        title=body.title,
        filing=Filing.of(status=body.status, tags=body.tags, folder=body.folder),
    )
    target = uploads.target(upload)
    if target is None:  # the embedded backend: the file comes to this server, authenticated by the token
        url = str(request.url_for("receive_upload", upload_id=upload.id))
        fields = {"workspace_id": upload.workspace_id, "token": upload.token}
    else:
        url, fields = target.url, target.fields
    return UploadOut(
        upload_id=upload.id,
        document_id=upload.document_id,
        url=url,
        fields=fields,
        max_bytes=upload.max_bytes,
        expires_at=datetime.fromtimestamp(int(upload.expires_at), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        complete_url=str(request.url_for("complete_upload", upload_id=upload.id)),
    )


@router.post(
    "/document-uploads/{upload_id}/content",
    operation_id="receiveDocumentUpload",
    summary="Receive an upload (embedded backend)",
    status_code=204,
    responses=problems(400, 404, 413),
)
async def receive_upload(
    upload_id: UploadId,
    uploads: UploadsDep,
    workspace_id: Annotated[str, Form(max_length=64, description="The `workspace_id` field of the upload's form.")],
    token: Annotated[str, Form(max_length=128, description="The `token` field of the upload's form (one use).")],
    file: Annotated[UploadFile, File(description="The file, last in the form.")],
) -> Response:
    """Where the embedded backend's upload form posts the file. No API key: the upload's one-time token, in the form,
    authenticates it."""
    data = await file.read(uploads.max_bytes + 1)
    await to_thread.run_sync(lambda: uploads.receive(workspace_id, upload_id, token, data))
    return Response(status_code=204)


@router.post(
    "/document-uploads/{upload_id}/complete",
    operation_id="completeDocumentUpload",
    summary="Complete a large upload",
    status_code=201,
    responses=problems(404, 409, 413),
)
def complete_upload(upload_id: UploadId, principal: CurrentPrincipal, uploads: UploadsDep) -> DocumentOut:
    """Makes a document of the uploaded file and starts its indexing (`parse_status: pending`), once."""
    return DocumentOut.of(uploads.complete(knowledge_write_access(principal, "write"), upload_id))


@router.get("/documents/{document_id}", operation_id="getDocument", summary="Get a document")
def get_document(
    document_id: DocumentId,
    principal: CurrentPrincipal,
    documents: DocumentsDep,
    include_content: bool = Query(default=False, description="Also return the document's indexed text."),
) -> DocumentOut:
    """A document's fields and status; with `include_content=true`, its indexed text too."""
    document = documents.get(knowledge_access(principal, "read"), document_id)
    return DocumentOut.of(document, documents.text(document) if include_content else None)


@router.put(
    "/documents/{document_id}", operation_id="updateDocument", summary="Update a document", responses=problems(409, 413)
)
def update_document(
    document_id: DocumentId, body: DocumentPatch, principal: CurrentPrincipal, documents: DocumentsDep
) -> DocumentOut:
    """A new title and/or new content (text documents), status, tags or folder. A new title, content or status
    re-indexes the document (a draft leaves the index, a published one enters it); tags and folder only refile it."""
    access = knowledge_write_access(principal, "write")
    return DocumentOut.of(
        documents.update(
            access,
            document_id,
            title=body.title,
            content=body.content,
            status=body.status,
            tags=body.tags,
            folder=body.folder,
        )
    )


@router.delete(
    "/documents/{document_id}/chunks/{chunk_id}",
    operation_id="deleteDocumentChunk",
    summary="Delete one chunk of a document",
    responses=problems(400, 404, 409),
)
def delete_chunk(
    document_id: DocumentId,
    chunk_id: Annotated[
        str, Path(max_length=200, description="The chunk's id (`doc_...#00003`, `#` as `%23`) or its number.")
    ],
    principal: CurrentPrincipal,
    documents: DocumentsDep,
) -> DocumentOut:
    """Removes one chunk of an indexed document: its text, keyword terms and vector from search, and its text from
    every read of the document (its lines are left blank, so line numbers hold). Indexing the same source again (a
    new title or status) leaves it out too; new content starts afresh. Answers the document with its new
    `chunk_count`."""
    return DocumentOut.of(documents.delete_chunk(knowledge_write_access(principal, "write"), document_id, chunk_id))


@router.delete(
    "/documents/{document_id}",
    operation_id="deleteDocument",
    summary="Delete a document",
    status_code=204,
    responses=problems(409),
)
def delete_document(document_id: DocumentId, principal: CurrentPrincipal, documents: DocumentsDep) -> Response:
    """The document goes at once; its chunks and files are removed in the background."""
    documents.delete(knowledge_write_access(principal, "write"), document_id)
    return Response(status_code=204)


class ReadChunkOut(ChunkOut):
    matched: bool


class ReadOut(BaseModel):
    document: DocumentOut
    chunks: list[ReadChunkOut]
    total_chunks: int
    next_offset: int | None
    truncated: bool
    query: str | None
    matches: int
    note: str | None


@router.get(
    "/documents/{document_id}/read", operation_id="readDocument", summary="Read a document", responses=problems(400)
)
def read_document(
    document_id: DocumentId,
    principal: CurrentPrincipal,
    reader: ReaderDep,
    offset: int = Query(
        default=0,
        ge=0,
        description="The first chunk to read, in reading order (a result's `offset`, or `next_offset`).",
    ),
    limit: int = Query(default=20, ge=1, le=100, description="How many chunks to read, 1 to 100 (default 20)."),
    query: str | None = Query(
        default=None,
        max_length=500,
        description="Read only the chunks containing every space-separated term, with one chunk of context each side.",
    ),
    line: int | None = Query(default=None, ge=1, description="Open at the chunk holding this line of the document."),
) -> ReadOut:
    """The document's chunks in reading order: a window of `limit` chunks from `offset` (continue with `next_offset`
    until it is null), the chunks containing every term of `query` with one chunk of context each side, or from a
    `line`. This is reading inside one document, not a list: it pages by `offset`, not by cursor."""
    result = reader.read(
        knowledge_access(principal, "read"), document_id, offset=offset, limit=limit, query=query, line=line
    )
    return ReadOut(
        document=DocumentOut.of(result.document),
        chunks=[ReadChunkOut(**ChunkOut.of(r.chunk).model_dump(), matched=r.matched) for r in result.chunks],
        total_chunks=result.total_chunks,
        next_offset=result.next_offset,
        truncated=result.truncated,
        query=result.query,
        matches=result.matches,
        note=result.note,
    )


class WindowLineOut(BaseModel):
    line: int
    text: str
    matched: bool


class WindowOut(BaseModel):
    start_line: int
    end_line: int
    patterns: list[str] = Field(description="The patterns found in this window's matching lines.")
    lines: list[WindowLineOut]


class WindowsOut(BaseModel):
    document: DocumentOut
    patterns: list[str]
    context_lines: int
    windows: list[WindowOut]
    matches: int = Field(description="Matching lines from from_line on, all of them (not only those returned).")
    truncated: bool
    next_line: int | None = Field(description="Where to continue (as from_line) when truncated.")
    note: str | None


@router.get(
    "/documents/{document_id}/windows",
    operation_id="readDocumentWindows",
    summary="Read a document around literal patterns",
    responses=problems(400, 404),
)
def read_windows(
    document_id: DocumentId,
    principal: CurrentPrincipal,
    documents: DocumentsDep,
    file_tools: FileToolsDep,
    pattern: Annotated[
        list[str],
        Query(description="A literal text, case-insensitive (repeat for several, 1 to 10); not a regex."),
    ],
    context_lines: int = Query(default=3, ge=0, le=50, description="Lines before and after each matching line."),
    from_line: int = Query(default=1, ge=1, description="Look from this line on (a previous answer's next_line)."),
) -> WindowsOut:
    """Windows of lines around every line holding any of the patterns, merged so that no line repeats, within an
    output budget (`truncated`, then continue with `from_line=next_line`)."""
    document = documents.get(knowledge_access(principal, "read"), document_id)
    result = file_tools.read_windows(document, pattern, context_lines=context_lines, from_line=from_line)
    return WindowsOut(
        document=DocumentOut.of(result.document),
        patterns=result.patterns,
        context_lines=result.context_lines,
        windows=[
            WindowOut(
                start_line=w.start_line,
                end_line=w.end_line,
                patterns=w.patterns,
                lines=[WindowLineOut(line=x.line, text=x.text, matched=x.matched) for x in w.lines],
            )
            for w in result.windows
        ],
        matches=result.matches,
        truncated=result.truncated,
        next_line=result.next_line,
        note=result.note,
    )


@router.get(
    "/documents/{document_id}/images/{version}/{n}",
    operation_id="getDocumentImage",
    summary="An image of a document",
    response_model=None,
    responses={
        200: {
            "description": "The image",
            "content": {t: {} for t in ("image/png", "image/jpeg", "image/gif", "image/webp")},
        },
        302: {"description": "To the image in the blob store (AWS: a presigned S3 GET, valid five minutes)"},
        **problems(404),
    },
)
async def get_document_image(
    document_id: DocumentId,
    version: Annotated[int, Path(ge=1, le=1_000_000_000, description="The document's indexed version.")],
    n: Annotated[int, Path(ge=0, le=10_000, description="The image's number in that version.")],
    principal: CurrentPrincipal,
    request: Request,
) -> Response:
    """The image an `href` of a REST search or ask result names, for a key whose scope reaches the document: 404
    for a document outside it, another version than the indexed one, or no such image."""
    container = request.app.state.container
    blobs = container.blobs
    reads = DocumentImageReads(
        container.documents, container.document_images, blobs, blobs if isinstance(blobs, BlobLinks) else None
    )
    access = knowledge_access(principal, "read")
    image = await to_thread.run_sync(reads.open, access, document_id, version, n)
    if image.url is not None:
        return RedirectResponse(image.url, status_code=302, headers={"Cache-Control": "no-store"})
    assert image.data is not None
    headers = {"Cache-Control": "private, no-store", "X-Content-Type-Options": "nosniff"}
    return Response(image.data, media_type=image.content_type, headers=headers)
