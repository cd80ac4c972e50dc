"""A published endpoint's documents as MCP resources, under one URI scheme.

``mcpbridge://kb/{kb_id}/documents/{document_id}``
    A document's text: its canonical text as indexed, whose lines are the ones search results and ``read_document``
    cite (1-based). ``resources/list`` lists one such resource per readable document in scope.
``mcpbridge://kb/{kb_id}/documents/{document_id}?lines={a}-{b}``
    Lines ``a`` to ``b`` of it (inclusive; ``a-`` runs to the end, ``a`` is one line). Template
    ``mcpbridge://kb/{kb_id}/documents/{document_id}{?lines}``.
``mcpbridge://kb/{kb_id}/documents?page={n}``
    A knowledge base's documents (JSON: id, title, URI, lines), :data:`LIST_PAGE_SIZE` a page, newest first.
    Template ``mcpbridge://kb/{kb_id}/documents{?page}``.

A read gives at most :data:`READ_MAX_CHARS` characters of text, cut at a line end: the content's ``_meta`` says which
lines it holds, whether it was cut and the URI of the next window. The scope is the request's: the endpoint's
knowledge bases, narrowed to an OAuth user's; a document outside it is never listed, and reading it is the
"resource not found" of the request's protocol version (-32602 from 2026-07-28, -32002 before, with the URI in
``data``), exactly as a document that does not exist, so that a caller learns nothing about it. A document not yet
indexed has no text, and is neither listed nor readable. Resources are offered where the endpoint's tools let its
callers read documents (``read_document``).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import parse_qs, quote, unquote, urlsplit

from mcpbridge.bootstrap import Container
from mcpbridge.domain.knowledge import Document, KnowledgeAccess, KnowledgeBase
from mcpbridge.errors import NotFound
from mcpbridge.http.mcp.jsonrpc import INVALID_PARAMS, JsonRpcError

SCHEME: Final = "mcpbridge"
LIST_PAGE_SIZE: Final = 100
"""Resources a ``resources/list`` page holds, and documents a knowledge base's list resource holds."""
READ_MAX_CHARS: Final = 200_000
"""At most this much text in one read (a document can hold 50 MB of text): whole lines, or a cut line alone."""
RESOURCE_NOT_FOUND_HANDSHAKE: Final = -32002
DOCUMENT_TEMPLATE: Final = f"{SCHEME}://kb/{{kb_id}}/documents/{{document_id}}{{?lines}}"
LIST_TEMPLATE: Final = f"{SCHEME}://kb/{{kb_id}}/documents{{?page}}"
DOCUMENT_META: Final = "mcpbridge/document"
WINDOW_META: Final = "mcpbridge/window"

TEMPLATES: Final = (
    {
        "uriTemplate": DOCUMENT_TEMPLATE,
        "name": "document-lines",
        "title": "Lines of a document",
        "description": "Lines a-b of a document (1-based, inclusive; 'a-' to the end), as search results cite them. "
        f"At most {READ_MAX_CHARS} characters a read: _meta['{WINDOW_META}'] names the next window.",
        "mimeType": "text/markdown",
    },
    {
        "uriTemplate": LIST_TEMPLATE,
        "name": "knowledge-base-documents",
        "title": "Documents of a knowledge base",
        "description": f"The documents of a knowledge base, newest first, {LIST_PAGE_SIZE} a page (page 1 first), "
        "with the URI of each.",
        "mimeType": "application/json",
    },
)


def document_uri(kb_id: str, document_id: str, lines: str | None = None) -> str:
    uri = f"{SCHEME}://kb/{quote(kb_id, safe='')}/documents/{quote(document_id, safe='')}"
    return uri if lines is None else f"{uri}?lines={lines}"


def list_uri(kb_id: str, page: int = 1) -> str:
    return f"{SCHEME}://kb/{quote(kb_id, safe='')}/documents?page={page}"


def not_found(uri: str, *, modern: bool) -> JsonRpcError:
    """The protocol version's "resource not found"."""
    return JsonRpcError(INVALID_PARAMS if modern else RESOURCE_NOT_FOUND_HANDSHAKE, "Resource not found", {"uri": uri})


def mime_type(document: Document) -> str:
    """The canonical text's type: plain text stays plain; everything else (Markdown, HTML, PDF) is Markdown."""
    return "text/plain" if document.content_type.lower().startswith("text/plain") else "text/markdown"


def document_meta(document: Document, kb: KnowledgeBase | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "document_id": document.id,
        "knowledge_base_id": document.knowledge_base_id,
        "title": document.title,
        "source": document.source,
        "url": document.url,
        "filename": document.filename,
        "content_type": document.content_type,
        "version": document.indexed_version,
        "line_count": document.line_count,
        "chunk_count": document.chunk_count,
        "created_at": document.created_at,
        "updated_at": document.updated_at,
    }
    if kb is not None:
        meta["knowledge_base_name"] = kb.name
    return meta


def as_resource(document: Document, kb: KnowledgeBase) -> dict[str, Any]:
    """A document as ``resources/list`` gives it."""
    return {
        "uri": document_uri(kb.id, document.id),
        "name": document.title,
        "title": document.title,
        "description": f"{document.line_count} lines, in knowledge base {kb.name!r}",
        "mimeType": mime_type(document),
        "annotations": {"lastModified": document.updated_at},
        "_meta": {DOCUMENT_META: document_meta(document, kb)},
    }


# ------------------------------------------------------------------------------------------------ URIs


@dataclass(frozen=True)
class Target:
    """What a URI of the scheme names: a document (with a line window or not), or a knowledge base's list."""

    kb_id: str
    document_id: str | None
    lines: tuple[int, int | None] | None = None
    page: int = 1


def parse_uri(uri: str, *, modern: bool) -> Target:
    """The URI's target; a URI outside the scheme is not found, a malformed query is -32602 naming the fault."""
    parts = urlsplit(uri)
    segments = parts.path.split("/")
    if parts.scheme != SCHEME or parts.netloc != "kb" or parts.fragment or len(segments) not in (3, 4):
        raise not_found(uri, modern=modern)
    _, kb_id, documents, *rest = (unquote(s) for s in segments)
    if documents != "documents" or not kb_id or (rest and not rest[0]):
        raise not_found(uri, modern=modern)
    try:
        query = parse_qs(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        raise JsonRpcError(INVALID_PARAMS, f"the URI's query is malformed: {parts.query!r}") from None
    allowed = {"lines"} if rest else {"page"}
    unknown = sorted(set(query) - allowed)
    if unknown or any(len(v) > 1 for v in query.values()):
        raise JsonRpcError(
            INVALID_PARAMS, f"the URI takes one {' or '.join(sorted(allowed))} query parameter at most, got {unknown}"
        )
    if rest:
        lines = query.get("lines")
        return Target(kb_id, rest[0], None if lines is None else parse_lines(lines[0]))
    page = query.get("page", ["1"])[0]
    if not _PAGE.fullmatch(page) or not 1 <= int(page) <= 1_000_000:
        raise JsonRpcError(INVALID_PARAMS, f"page must be a whole number from 1, got {page!r}")
    return Target(kb_id, None, page=int(page))


_LINES = re.compile(r"(?P<first>[0-9]{1,9})(?:(?P<dash>-)(?P<last>[0-9]{1,9})?)?", re.ASCII)
_PAGE = re.compile(r"[0-9]{1,7}", re.ASCII)


def parse_lines(text: str) -> tuple[int, int | None]:
    """``a-b``, ``a-`` or ``a`` (1-based, inclusive; ASCII digits) as (first, last or None for the end)."""
    found = _LINES.fullmatch(text)
    first = int(found["first"]) if found else 0
    last = int(found["last"]) if found and found["last"] else None
    if found is None or first < 1 or (last is not None and last < first):
        raise JsonRpcError(
            INVALID_PARAMS, f"lines must be a-b (1 <= a <= b), a- or a, got {text[:40]!r}", {"lines": text[:40]}
        )
    if not found["dash"]:
        return first, first
    return first, last


# ------------------------------------------------------------------------------------------------ reading


class Resources:
    """The resources of one request's scope."""

    def __init__(self, container: Container, access: KnowledgeAccess) -> None:
        self._container = container
        self._access = access

    def listing(self, cursor: str | None) -> dict[str, Any]:
        """One page of the readable documents in scope: knowledge bases by name, each one's documents newest first."""
        after = _decode_cursor(cursor) if cursor is not None else None
        bases = self._container.knowledge_bases.list_bases(self._access)
        ids = [kb.id for kb in bases]
        if after is not None and after[0] not in ids:
            raise JsonRpcError(INVALID_PARAMS, "the cursor's knowledge base is gone: list again from the start")
        resources: list[dict[str, Any]] = []
        for kb in bases[ids.index(after[0]) if after else 0 :]:
            for document in self._container.documents.matching(self._access, kb.id):
                if document.indexed_version is None or (after and kb.id == after[0] and document.id >= after[1]):
                    continue
                if len(resources) == LIST_PAGE_SIZE:
                    last = resources[-1]["_meta"][DOCUMENT_META]
                    return {
                        "resources": resources,
                        "nextCursor": _cursor(last["knowledge_base_id"], last["document_id"]),
                    }
                resources.append(as_resource(document, kb))
        return {"resources": resources}

    def document(self, kb_id: str, document_id: str) -> Document | None:
        """The document if it is in scope, in that knowledge base and readable; else None."""
        try:
            document = self._container.documents.get(self._access, document_id)
        except NotFound:
            return None
        if document.knowledge_base_id != kb_id or document.indexed_version is None or document.status != "published":
            return None  # a draft is not there for an endpoint
        return document

    def read(self, uri: str, *, modern: bool) -> dict[str, Any]:
        target = parse_uri(uri, modern=modern)
        if target.document_id is None:
            return {"contents": [self._read_list(uri, target, modern=modern)]}
        document = self.document(target.kb_id, target.document_id)
        text = None if document is None else self._container.documents.text(document)
        if document is None or text is None:
            raise not_found(uri, modern=modern)
        return {"contents": [window(uri, document, text, target.lines)]}

    def _read_list(self, uri: str, target: Target, *, modern: bool) -> dict[str, Any]:
        try:
            page = self._container.documents.list_documents(
                self._access, target.kb_id, page=target.page, page_size=LIST_PAGE_SIZE
            )
        except NotFound:
            raise not_found(uri, modern=modern) from None
        listing = {
            "knowledge_base_id": target.kb_id,
            "page": page.page,
            "total": page.total,
            "next_page": list_uri(target.kb_id, page.page + 1) if page.has_more else None,
            "documents": [
                {
                    "document_id": d.id,
                    "title": d.title,
                    "uri": document_uri(target.kb_id, d.id),
                    "line_count": d.line_count,
                    "parse_status": d.parse_status,
                    "updated_at": d.updated_at,
                }
                for d in page.items
            ],
        }
        text = json.dumps(listing, ensure_ascii=False)
        return {"uri": uri, "mimeType": "application/json", "text": text}


def window(uri: str, document: Document, text: str, lines: tuple[int, int | None] | None) -> dict[str, Any]:
    """The text content of a read: the lines asked for (all by default), cut to :data:`READ_MAX_CHARS`."""
    all_lines = text.split("\n")
    total = len(all_lines)
    first, last = lines or (1, None)
    if first > total:
        raise JsonRpcError(INVALID_PARAMS, f"the document has {total} lines; lines start at {first}", {"uri": uri})
    end = total if last is None else min(last, total)
    taken: list[str] = []
    size = 0
    for line in all_lines[first - 1 : end]:
        if size + len(line) + 1 > READ_MAX_CHARS:
            if not taken:
                taken.append(line[:READ_MAX_CHARS])
            break
        taken.append(line)
        size += len(line) + 1
    shown_last = first + len(taken) - 1
    cut = shown_last < end or (len(taken) == 1 and len(taken[0]) < len(all_lines[first - 1]))
    after = shown_last + 1 if shown_last < end else None
    meta = {
        "first_line": first,
        "last_line": shown_last,
        "total_lines": total,
        "truncated": cut,
        "max_chars": READ_MAX_CHARS,
        "next": document_uri(document.knowledge_base_id, document.id, f"{after}-{end}") if after else None,
    }
    return {
        "uri": uri,
        "mimeType": mime_type(document),
        "text": "\n".join(taken),
        "_meta": {DOCUMENT_META: document_meta(document), WINDOW_META: meta},
    }


def _cursor(kb_id: str, document_id: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([kb_id, document_id]).encode()).decode("ascii")


def _decode_cursor(cursor: str) -> tuple[str, str]:
    try:
        decoded = json.loads(base64.urlsafe_b64decode(cursor.encode("ascii")))
    except (ValueError, UnicodeError, binascii.Error):
        decoded = None
    if not (isinstance(decoded, list) and len(decoded) == 2 and all(isinstance(v, str) for v in decoded)):
        raise JsonRpcError(INVALID_PARAMS, "Invalid cursor: pass back the nextCursor of an earlier page unchanged")
    return decoded[0], decoded[1]
