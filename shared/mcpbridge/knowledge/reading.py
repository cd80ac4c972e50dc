"""Reading a document: pages of chunks in reading order, or only the chunks matching a query, or from a line.

An output byte budget bounds every answer. It may cut a page short, but never silently: ``truncated`` is set and
``next_offset`` says where to continue. A single chunk larger than the whole budget is still returned whole (a
reader could not get past it otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass

from mcpbridge.domain.knowledge import Chunk, Document, KnowledgeAccess
from mcpbridge.errors import InvalidInput
from mcpbridge.knowledge.documents import Documents
from mcpbridge.ports import SearchIndex

LIMIT_DEFAULT = 20
LIMIT_MAX = 100
MAX_MATCHES = 20
BYTE_BUDGET = 64 * 1024


@dataclass(frozen=True)
class ReadChunk:
    chunk: Chunk
    matched: bool = False
    """In query mode: True for a matching chunk, False for a context chunk beside one."""


@dataclass(frozen=True)
class ReadResult:
    document: Document
    chunks: list[ReadChunk]
    total_chunks: int
    next_offset: int | None
    truncated: bool
    query: str | None = None
    matches: int = 0
    note: str | None = None


class DocumentReader:
    def __init__(self, documents: Documents, index: SearchIndex, *, byte_budget: int = BYTE_BUDGET) -> None:
        self._documents = documents
        self._index = index
        self._budget = byte_budget

    def read(
        self,
        access: KnowledgeAccess,
        document_id: str,
        *,
        offset: int = 0,
        limit: int = LIMIT_DEFAULT,
        query: str | None = None,
        line: int | None = None,
    ) -> ReadResult:
        document = self._documents.get(access, (document_id or "").strip())
        offset = max(offset, 0)
        limit = LIMIT_DEFAULT if limit < 1 else min(limit, LIMIT_MAX)
        kb_id = document.knowledge_base_id
        total = self._index.count(kb_id, document.id)
        if document.indexed_version is None:
            note = (
                f"the document is not searchable yet (parse_status {document.parse_status}"
                + (f": {document.parse_error}" if document.parse_error else "")
                + ")"
            )
            return ReadResult(document, [], 0, None, False, note=note)
        if query is not None and query.strip():
            return self._read_matches(document, query.strip(), offset, total)
        if line is not None:
            if line < 1:
                raise InvalidInput("line numbers start at 1", code="invalid_line")
            at = self._index.chunk_at_line(kb_id, document.id, line)
            if at is None:
                return ReadResult(document, [], total, None, False, note=f"the document has no line {line}")
            offset = at.seq
        chunks = self._index.chunks(kb_id, document.id, offset=offset, limit=limit)
        kept = self._within_budget(chunks)
        truncated = len(kept) < len(chunks)
        after = offset + len(kept)
        return ReadResult(
            document,
            [ReadChunk(c) for c in kept],
            total,
            next_offset=after if after < total else None,
            truncated=truncated,
        )

    def _read_matches(self, document: Document, query: str, offset: int, total: int) -> ReadResult:
        """Chunks holding every term (case-insensitive), each with one chunk of context on both sides; ranges
        that touch are merged. ``offset`` skips that many matches (for paging through more than 20)."""
        terms = [t.casefold() for t in query.split()]
        every = self._index.chunks(document.knowledge_base_id, document.id)
        hits = [c.seq for c in every if all(t in c.text.casefold() for t in terms)]
        page = hits[offset : offset + MAX_MATCHES]
        wanted: set[int] = set()
        for seq in page:
            wanted.update(s for s in (seq - 1, seq, seq + 1) if 0 <= s < len(every))
        matched = set(page)
        selected = [ReadChunk(every[s], matched=s in matched) for s in sorted(wanted)]
        kept = self._within_budget([r.chunk for r in selected])
        truncated = len(kept) < len(selected)
        # Continue after the last match whose chunk fit; more matches beyond this page also mean more to read.
        shown_matches = [s for s in page if s <= kept[-1].seq] if kept else []
        next_match = offset + len(shown_matches)
        more = next_match < len(hits)
        return ReadResult(
            document,
            selected[: len(kept)],
            total,
            next_offset=next_match if more else None,
            truncated=truncated,
            query=query,
            matches=len(hits),
        )

    def _within_budget(self, chunks: list[Chunk]) -> list[Chunk]:
        kept: list[Chunk] = []
        used = 0
        for chunk in chunks:
            size = len(chunk.text.encode())
            if kept and used + size > self._budget:
                break
            kept.append(chunk)
            used += size
        return kept
