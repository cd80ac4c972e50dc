"""How people file documents: tags, a folder, and a status (published, or a draft found only when asked for).

Tags: at most 20, each 1 to 50 characters once trimmed, no control character; duplicates (case-insensitively) keep
the first spelling. A folder: a ``/``-separated path of at most 255 bytes (``docs/spec``), each part 1 to 100
characters and neither ``.`` nor ``..``; leading and trailing slashes are dropped, ``""`` is the root. A status:
``published`` (what search and endpoints see) or ``draft`` (kept, listed and searched only when asked for, never
through an endpoint).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal, get_args

from mcpbridge.domain.knowledge import Document
from mcpbridge.errors import InvalidInput

DocumentStatus = Literal["published", "draft"]
STATUSES: Final[tuple[DocumentStatus, ...]] = get_args(DocumentStatus)
MAX_TAGS: Final = 20
TAG_MAX_CHARS: Final = 50
FOLDER_MAX_BYTES: Final = 255
FOLDER_PART_MAX_CHARS: Final = 100


def _printable(text: str) -> bool:
    return all(ch.isprintable() for ch in text)


def clean_tags(tags: Iterable[str]) -> tuple[str, ...]:
    kept: dict[str, str] = {}
    for raw in tags:
        if not isinstance(raw, str):
            raise InvalidInput("tags must be strings", code="invalid_tags")
        tag = raw.strip()
        if not tag or len(tag) > TAG_MAX_CHARS or not _printable(tag):
            raise InvalidInput(
                f"tag {raw[:60]!r} must be 1 to {TAG_MAX_CHARS} printable characters once trimmed", code="invalid_tags"
            )
        kept.setdefault(tag.casefold(), tag)
    if len(kept) > MAX_TAGS:
        raise InvalidInput(f"a document has at most {MAX_TAGS} tags ({len(kept)} given)", code="invalid_tags")
    return tuple(kept.values())


def clean_folder(folder: str) -> str:
    path = folder.strip().strip("/")
    if not path:
        return ""
    parts = path.split("/")
    for part in parts:
        if not part.strip() or part.strip() in (".", "..") or len(part) > FOLDER_PART_MAX_CHARS or not _printable(part):
            raise InvalidInput(
                f"folder {folder[:80]!r} must be a path like docs/spec: parts of 1 to {FOLDER_PART_MAX_CHARS} "
                "printable characters, neither '.' nor '..', no empty part",
                code="invalid_folder",
            )
    cleaned = "/".join(part.strip() for part in parts)
    if len(cleaned.encode()) > FOLDER_MAX_BYTES:
        raise InvalidInput(f"folder is longer than {FOLDER_MAX_BYTES} bytes", code="invalid_folder")
    return cleaned


def clean_status(status: str) -> DocumentStatus:
    if status not in STATUSES:
        raise InvalidInput(f"status must be published or draft, not {status[:40]!r}", code="invalid_status")
    return status


def in_folder(document_folder: str, folder: str, *, subfolders: bool) -> bool:
    """Whether a document filed in ``document_folder`` is in ``folder`` (or below it, with ``subfolders``)."""
    if document_folder == folder:
        return True
    return subfolders and (folder == "" or document_folder.startswith(folder + "/"))


@dataclass(frozen=True)
class Filing:
    """Where a new document is filed and whether it is published."""

    status: DocumentStatus = "published"
    tags: tuple[str, ...] = ()
    folder: str = ""

    @classmethod
    def of(cls, *, status: str | None = None, tags: Iterable[str] | None = None, folder: str | None = None) -> Filing:
        return cls(
            clean_status(status) if status is not None else "published",
            clean_tags(tags) if tags is not None else (),
            clean_folder(folder) if folder is not None else "",
        )


@dataclass(frozen=True)
class Shelf:
    """Which documents a listing shows: by status (``published``, ``draft`` or ``all``), tag and folder."""

    status: str = "published"
    tag: str | None = None
    folder: str | None = None
    subfolders: bool = False

    @classmethod
    def of(
        cls, *, status: str | None = None, tag: str | None = None, folder: str | None = None, subfolders: bool = False
    ) -> Shelf:
        if status is not None and status != "all":
            clean_status(status)
        tag = clean_tags([tag])[0] if tag is not None and tag.strip() else None
        return cls(status or "published", tag, None if folder is None else clean_folder(folder), subfolders)

    def holds(self, document: Document) -> bool:
        if self.status != "all" and document.status != self.status:
            return False
        if self.tag is not None and self.tag.casefold() not in {t.casefold() for t in document.tags}:
            return False
        return self.folder is None or in_folder(document.folder, self.folder, subfolders=self.subfolders)


PUBLISHED: Final = Shelf()
