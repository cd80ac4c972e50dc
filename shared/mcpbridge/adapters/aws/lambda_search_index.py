"""``ports.SearchIndex`` as calls to the search function (``functions/search_index``): the functions behind the API
and the indexer stay small zip packages with SnapStart, and only the search function carries the search engine
(a container image: Lance and Arrow do not fit Lambda's 250 MB).

Each call is one synchronous invocation (``domain.index_wire``) with a deadline (``read_timeout``); a request larger
than ``INLINE_BYTES`` (a long document's chunks and vectors) is staged in the blob store and the invocation names
it. The search function's ``invalid`` errors are raised here as ``ValueError``, anything else as
``errors.Unavailable``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Collection, Sequence
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from mcpbridge.domain.index_wire import analysis_in, chunk_in, chunk_out, hit_in
from mcpbridge.domain.knowledge import Chunk, Hit, IndexAnalysis
from mcpbridge.errors import Unavailable
from mcpbridge.ports import Blobs

INLINE_BYTES = 5 * 1024 * 1024


class LambdaSearchIndex:
    """``ports.SearchIndex`` and ``ports.IndexMaintenance`` through the search function."""

    def __init__(self, client: Any, function_name: str, blobs: Blobs) -> None:
        self._client = client
        self._function = function_name
        self._blobs = blobs

    def _call(self, op: str, args: dict[str, Any], *, wait: bool = True) -> Any:
        body = json.dumps({"op": op, "args": args}).encode()
        staged = None
        if len(body) > INLINE_BYTES:
            staged = f"index-requests/{uuid.uuid4().hex}.json"
            self._blobs.put(staged, body, content_type="application/json")
            body = json.dumps({"request_key": staged}).encode()
        try:
            response = self._client.invoke(
                FunctionName=self._function, InvocationType="RequestResponse" if wait else "Event", Payload=body
            )
            if not wait:
                return None
            reply = json.loads(response["Payload"].read() or b"null")
        except (ClientError, BotoCoreError, ValueError) as exc:
            if staged is not None:
                self._blobs.delete(staged)
            raise Unavailable("the search function could not be reached", code="search_index_unavailable") from exc
        if response.get("FunctionError") or not isinstance(reply, dict):
            raise Unavailable("the search function failed", code="search_index_unavailable")
        error = reply.get("error")
        if error:
            if error.get("kind") == "invalid":
                raise ValueError(str(error.get("message", "invalid search index request")))
            raise Unavailable(str(error.get("message", "search index error")), code=str(error.get("code")))
        return reply.get("result")

    @staticmethod
    def _documents(document_ids: Collection[str] | None) -> list[str] | None:
        if isinstance(document_ids, str):
            raise TypeError("document_ids must be a collection of ids, not one string")
        return None if document_ids is None else sorted(set(document_ids))

    def replace_document(
        self,
        kb_id: str,
        document_id: str,
        chunks: Sequence[Chunk],
        vectors: Sequence[Sequence[float]] | None,
        embedder_name: str | None,
        *,
        language: str | None = None,
    ) -> None:
        args = {
            "kb_id": kb_id,
            "document_id": document_id,
            "chunks": [chunk_out(c) for c in chunks],
            "vectors": None if vectors is None else [list(map(float, v)) for v in vectors],
            "embedder_name": embedder_name,
            "language": language,
        }
        self._call("replace_document", args)

    def analysis(self, kb_id: str) -> IndexAnalysis | None:
        return analysis_in(self._call("analysis", {"kb_id": kb_id}))

    def reanalyse(self, kb_id: str, language: str, progress: Callable[[int, int], None] | None = None) -> None:
        last = self._call("reanalyse", {"kb_id": kb_id, "language": language})
        if progress is not None and last:
            progress(int(last[0]), int(last[1]))  # the search function ran it: its last figures

    def delete_document(self, kb_id: str, document_id: str) -> None:
        self._call("delete_document", {"kb_id": kb_id, "document_id": document_id})

    def delete_knowledge_base(self, kb_id: str) -> None:
        self._call("delete_knowledge_base", {"kb_id": kb_id})

    def keyword(
        self, kb_ids: Collection[str], query: str, *, document_ids: Collection[str] | None = None, limit: int = 10
    ) -> list[Hit]:
        args = {"kb_ids": sorted(set(kb_ids)), "query": query, "document_ids": self._documents(document_ids)}
        return [hit_in(h) for h in self._call("keyword", {**args, "limit": limit})]

    def semantic(
        self,
        kb_ids: Collection[str],
        vector: Sequence[float],
        *,
        document_ids: Collection[str] | None = None,
        limit: int = 10,
    ) -> list[Hit]:
        args = {"kb_ids": sorted(set(kb_ids)), "vector": [float(x) for x in vector], "limit": limit}
        return [hit_in(h) for h in self._call("semantic", {**args, "document_ids": self._documents(document_ids)})]

    def chunks(self, kb_id: str, document_id: str, *, offset: int = 0, limit: int | None = None) -> list[Chunk]:
        args = {"kb_id": kb_id, "document_id": document_id, "offset": offset, "limit": limit}
        return [chunk_in(c) for c in self._call("chunks", args)]

    def count(self, kb_id: str, document_id: str) -> int:
        return int(self._call("count", {"kb_id": kb_id, "document_id": document_id}))

    def chunk_at_line(self, kb_id: str, document_id: str, line: int) -> Chunk | None:
        found = self._call("chunk_at_line", {"kb_id": kb_id, "document_id": document_id, "line": line})
        return None if found is None else chunk_in(found)

    def candidates(
        self,
        kb_ids: Collection[str],
        words: Sequence[str],
        *,
        document_ids: Collection[str] | None = None,
        limit: int = 30,
    ) -> list[Chunk]:
        args = {"kb_ids": sorted(set(kb_ids)), "words": list(words), "limit": limit}
        return [chunk_in(c) for c in self._call("candidates", {**args, "document_ids": self._documents(document_ids)})]

    def has_vectors(self, kb_id: str) -> bool:
        return bool(self._call("has_vectors", {"kb_id": kb_id}))

    def optimise(self, kb_id: str) -> None:
        self._call("optimise", {"kb_id": kb_id})

    def migrate(self, kb_id: str) -> bool:
        return bool(self._call("migrate", {"kb_id": kb_id}))

    def close(self) -> None:
        """Nothing held open here."""
