"""Search index calls as JSON: what a function that needs the index sends to the search function, and what comes back.

A request is ``{"op": <name>, "args": {...}}``; a reply is ``{"result": ...}`` or ``{"error": {"kind", "message",
"code"}}``, ``kind`` being ``invalid`` (the caller's ``ValueError``, raised again as one) or ``unavailable``. Chunks,
hits and analyses travel as plain objects; vectors as lists of numbers.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, cast

from mcpbridge.domain.knowledge import Chunk, ChunkType, Hit, IndexAnalysis

OPS = frozenset(
    {
        "replace_document",
        "analysis",
        "reanalyse",
        "delete_document",
        "delete_knowledge_base",
        "keyword",
        "semantic",
        "chunks",
        "count",
        "chunk_at_line",
        "candidates",
        "has_vectors",
        "optimise",
        "migrate",
    }
)
"""Every operation the search function answers."""
ASYNC_OPS = frozenset({"optimise", "migrate", "reanalyse"})
"""Operations a caller does not wait for (background work)."""


def chunk_out(chunk: Chunk) -> dict[str, Any]:
    data = asdict(chunk)
    data["heading_path"] = list(chunk.heading_path)
    return data


def chunk_in(data: dict[str, Any]) -> Chunk:
    return Chunk(
        id=str(data["id"]),
        knowledge_base_id=str(data["knowledge_base_id"]),
        document_id=str(data["document_id"]),
        document_title=str(data["document_title"]),
        seq=int(data["seq"]),
        text=str(data["text"]),
        start_line=int(data["start_line"]),
        end_line=int(data["end_line"]),
        start_offset=int(data["start_offset"]),
        end_offset=int(data["end_offset"]),
        heading_path=tuple(str(h) for h in data.get("heading_path", ())),
        type=cast(ChunkType, data.get("type", "text")),
    )


def hit_out(hit: Hit) -> dict[str, Any]:
    return {"chunk": chunk_out(hit.chunk), "score": hit.score, "relevance": hit.relevance}


def hit_in(data: dict[str, Any]) -> Hit:
    relevance = data.get("relevance")
    return Hit(chunk_in(data["chunk"]), float(data["score"]), None if relevance is None else float(relevance))


def analysis_out(analysis: IndexAnalysis | None) -> dict[str, Any] | None:
    return None if analysis is None else asdict(analysis)


def analysis_in(data: dict[str, Any] | None) -> IndexAnalysis | None:
    return None if data is None else IndexAnalysis(**data)
