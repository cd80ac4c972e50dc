"""Large documents, uploaded straight to the blob store: no request carries their bytes through API Gateway and
Lambda (whose payload limit is 6 MB, about 4.4 MiB of file once base64-encoded).

1. ``start``: the caller names the file (name, type, size up to the per-document limit); an upload record is kept
   for :data:`UPLOAD_SECONDS` and a form to post the file to is returned: on S3 a presigned POST (S3 itself refuses
   another type, a larger file, another key, or a late one); on the embedded backend mcpbridge's own route, which
   the record's one-time token authenticates (:meth:`DocumentUploads.receive`).
2. The client posts the file there.
3. ``complete``: the size is checked where the file landed, the file is copied to the document's first source
   (inside the blob store), and the document is stored ``pending`` and its indexing submitted, in one transaction
   with the record's removal, so an upload completes once.

    WS#<ws> / UPLOAD#<id>    {knowledge_base_id, document_id, title, filename, content_type, token_sha256, expires_at}
    blobs: uploads/<ws>/<id> the uploaded file until it is completed (the bucket expires what is left after a day)
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Final

from mcpbridge.domain.document_filing import Filing
from mcpbridge.domain.ids import new_id
from mcpbridge.domain.items import Condition, Key, Remove
from mcpbridge.domain.knowledge import Document, KnowledgeAccess
from mcpbridge.errors import ConditionFailed, Conflict, InvalidInput, NotFound, PayloadTooLarge
from mcpbridge.knowledge.bases import KnowledgeBases
from mcpbridge.knowledge.documents import UNFILED, Documents, blob_key, clean_title
from mcpbridge.ports import Blobs, Clock, Store, UploadTarget

UPLOAD_SECONDS: Final = 3600
"""How long the form accepts the file, and then ``complete`` the upload."""
FILENAME_MAX: Final = 255


def upload_key(workspace_id: str, upload_id: str) -> Key:
    return Key(f"WS#{workspace_id}", f"UPLOAD#{upload_id}")


def upload_blob(workspace_id: str, upload_id: str) -> str:
    return f"uploads/{workspace_id}/{upload_id}"


@dataclass(frozen=True)
class Upload:
    id: str
    workspace_id: str
    knowledge_base_id: str
    document_id: str
    content_type: str
    max_bytes: int
    expires_at: float
    token: str
    """Authenticates the embedded backend's upload route (shown once, stored as its SHA-256)."""


class DocumentUploads:
    def __init__(self, store: Store, blobs: Blobs, clock: Clock, bases: KnowledgeBases, documents: Documents) -> None:
        self._store = store
        self._blobs = blobs
        self._clock = clock
        self._bases = bases
        self._documents = documents

    @property
    def max_bytes(self) -> int:
        return self._documents.max_bytes

    def start(
        self,
        access: KnowledgeAccess,
        kb_id: str,
        *,
        filename: str,
        content_type: str,
        size_bytes: int,
        title: str | None = None,
        filing: Filing = UNFILED,
    ) -> Upload:
        filename = filename.strip()
        if not filename or len(filename.encode()) > FILENAME_MAX or "/" in filename or "\\" in filename:
            raise InvalidInput(f"filename must be a file name of 1 to {FILENAME_MAX} bytes", code="invalid_file")
        title = clean_title(title or filename)
        limit = self._documents.max_bytes
        if size_bytes < 1:
            raise InvalidInput("the file is empty", code="document_empty")
        if size_bytes > limit:
            raise PayloadTooLarge(
                f"the document is {size_bytes} bytes; the limit is {limit}",
                code="document_too_large",
                details={"limit_bytes": limit},
            )
        if self._bases.owner_access(access, kb_id, write=True).workspace_id != access.workspace_id:
            raise InvalidInput(
                "files are uploaded to a workspace's own knowledge bases; add a document to a shared one as text or "
                "a URL",
                code="shared_kb_upload",
            )
        token = secrets.token_urlsafe(32)
        now = self._clock.now()
        upload = Upload(
            id=new_id("upl"),
            workspace_id=access.workspace_id,
            knowledge_base_id=kb_id,
            document_id=new_id("doc"),
            content_type=content_type,
            max_bytes=limit,
            expires_at=now + UPLOAD_SECONDS,
            token=token,
        )
        record = {
            **upload_key(access.workspace_id, upload.id).as_dict(),
            "id": upload.id,
            "workspace_id": access.workspace_id,
            "knowledge_base_id": kb_id,
            "document_id": upload.document_id,
            "title": title,
            "filename": filename,
            "content_type": content_type,
            "declared_bytes": size_bytes,
            "status": filing.status,
            "tags": list(filing.tags),
            "folder": filing.folder,
            "token_sha256": _sha256(token),
            "expires_at": int(upload.expires_at),
        }
        self._store.put(record, condition=Condition.absent("upload_new"))
        return upload

    def target(self, upload: Upload) -> UploadTarget | None:
        """The form the client posts the file to, or None where it goes to mcpbridge's own route."""
        return self._blobs.upload_target(
            upload_blob(upload.workspace_id, upload.id),
            content_type=upload.content_type,
            max_bytes=upload.max_bytes,
            expires_in=UPLOAD_SECONDS,
        )

    def receive(self, workspace_id: str, upload_id: str, token: str, data: bytes) -> None:
        """The embedded backend's form target: store the file of an open upload whose token this is."""
        record = self._store.get(upload_key(workspace_id, upload_id)) if upload_id.startswith("upl_") else None
        if record is None or not hmac.compare_digest(str(record["token_sha256"]), _sha256(token)):
            raise NotFound("no such upload (or it has expired)", code="upload_not_found")
        if len(data) > self._documents.max_bytes:
            raise PayloadTooLarge(
                f"the file is larger than {self._documents.max_bytes} bytes", code="document_too_large"
            )
        self._blobs.put(upload_blob(workspace_id, upload_id), data, content_type=str(record["content_type"]))

    def complete(self, access: KnowledgeAccess, upload_id: str) -> Document:
        """Turn the uploaded file into a document (``pending``, its indexing submitted); once per upload."""
        key = upload_key(access.workspace_id, upload_id)
        record = self._store.get(key) if upload_id.startswith("upl_") else None
        if record is None or not access.allows(str(record["knowledge_base_id"])):
            raise NotFound("no such upload (or it has expired, or was completed)", code="upload_not_found")
        uploaded = upload_blob(access.workspace_id, upload_id)
        size = self._blobs.size(uploaded)
        if size is None:
            raise Conflict(
                "nothing has been uploaded yet: post the file to the upload's form first", code="upload_missing"
            )
        limit = self._documents.max_bytes
        if size > limit:
            self._blobs.delete(uploaded)
            raise PayloadTooLarge(f"the uploaded file is {size} bytes; the limit is {limit}", code="document_too_large")
        if size == 0:
            raise InvalidInput("the uploaded file is empty", code="document_empty")
        kb_id, document_id = str(record["knowledge_base_id"]), str(record["document_id"])
        self._blobs.copy(uploaded, blob_key(access.workspace_id, document_id, 1, "source"))
        try:
            document = self._documents.register(
                access,
                kb_id,
                document_id,
                title=str(record["title"]),
                size=size,
                content_type=str(record["content_type"]),
                source="file",
                filename=str(record["filename"]),
                also=[Remove(key, Condition.exists("upload_open"))],
                filing=Filing(
                    status="draft" if record.get("status") == "draft" else "published",
                    tags=tuple(record.get("tags") or ()),
                    folder=str(record.get("folder") or ""),
                ),
            )
        except ConditionFailed:  # completed meanwhile by another request, which made the document
            raise NotFound("this upload was already completed", code="upload_not_found") from None
        self._blobs.delete(uploaded)
        return document


def _sha256(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()
