"""The search function's side of ``domain.index_wire``: one request, answered by the search index it holds.

Requests come from mcpbridge's own functions (through ``adapters.aws.lambda_search_index``), never from the
internet; they are still checked: an unknown operation or malformed arguments get an ``invalid`` error, and nothing
in a reply carries more than the index itself would return.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from mcpbridge.domain.index_wire import OPS, analysis_out, chunk_in, chunk_out, hit_out
from mcpbridge.errors import MCPBridgeError
from mcpbridge.ports import Blobs, IndexMaintenance, SearchIndex


def answer(
    index: SearchIndex, maintenance: IndexMaintenance | None, blobs: Blobs, request: dict[str, Any]
) -> dict[str, Any]:
    """``{"result": ...}`` or ``{"error": {...}}`` for one request (a large one is staged in ``blobs``)."""
    try:
        if "request_key" in request:
            key = str(request["request_key"])
            if not key.startswith("index-requests/"):
                raise ValueError("a staged request lives under index-requests/")
            data = blobs.get(key)
            if data is None:
                raise ValueError("the staged request is gone")
            blobs.delete(key)
            request = json.loads(data)
        op = request.get("op")
        if op not in OPS:
            raise ValueError(f"unknown search index operation {op!r}")
        args = request.get("args")
        if not isinstance(args, dict):
            raise ValueError("args must be an object")
        return {"result": _run(index, maintenance, str(op), args)}
    except (ValueError, TypeError, KeyError) as exc:
        return {"error": {"kind": "invalid", "message": str(exc)[:2000], "code": "invalid_input"}}
    except MCPBridgeError as exc:
        return {"error": {"kind": "unavailable", "message": exc.message[:2000], "code": exc.code}}


def _run(index: SearchIndex, maintenance: IndexMaintenance | None, op: str, a: dict[str, Any]) -> Any:
    documents = a.get("document_ids")
    limit = 10 if a.get("limit") is None else int(a["limit"])
    readers: dict[str, Callable[[], Any]] = {
        "analysis": lambda: analysis_out(index.analysis(a["kb_id"])),
        "keyword": lambda: [
            hit_out(h) for h in index.keyword(a["kb_ids"], str(a["query"]), document_ids=documents, limit=limit)
        ],
        "semantic": lambda: [
            hit_out(h)
            for h in index.semantic(a["kb_ids"], [float(x) for x in a["vector"]], document_ids=documents, limit=limit)
        ],
        "chunks": lambda: [
            chunk_out(c)
            for c in index.chunks(a["kb_id"], a["document_id"], offset=int(a.get("offset", 0)), limit=a.get("limit"))
        ],
        "count": lambda: index.count(a["kb_id"], a["document_id"]),
        "chunk_at_line": lambda: _maybe_chunk(index, a),
        "candidates": lambda: [
            chunk_out(c) for c in index.candidates(a["kb_ids"], a["words"], document_ids=documents, limit=limit)
        ],
        "has_vectors": lambda: index.has_vectors(a["kb_id"]),
    }
    if op in readers:
        return readers[op]()
    if op == "replace_document":
        chunks = [chunk_in(c) for c in a["chunks"]]
        index.replace_document(
            a["kb_id"], a["document_id"], chunks, a.get("vectors"), a.get("embedder_name"), language=a.get("language")
        )
    elif op == "reanalyse":
        seen: list[list[int]] = []
        index.reanalyse(a["kb_id"], a["language"], lambda done, total: seen.append([done, total]))
        return seen[-1] if seen else None
    elif op == "delete_document":
        index.delete_document(a["kb_id"], a["document_id"])
    elif op == "delete_knowledge_base":
        index.delete_knowledge_base(a["kb_id"])
    elif maintenance is not None and op == "optimise":
        maintenance.optimise(a["kb_id"])
    elif maintenance is not None and op == "migrate":
        return maintenance.migrate(a["kb_id"])
    return None


def _maybe_chunk(index: SearchIndex, a: dict[str, Any]) -> dict[str, Any] | None:
    chunk = index.chunk_at_line(a["kb_id"], a["document_id"], int(a["line"]))
    return None if chunk is None else chunk_out(chunk)
