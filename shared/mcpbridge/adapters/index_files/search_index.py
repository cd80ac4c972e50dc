"""``ports.SearchIndex`` over index files, one per knowledge base.

``FileSearchIndex`` fans a query out to the files of the selected knowledge bases and merges the hits. Where the
files live is the job of an ``IndexFiles`` provider: a directory (embedded mode) or S3 with a version pointer
(``adapters.aws.s3_search_index``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol, TypeVar

from mcpbridge.adapters.index_files.kb_index import KbIndexFile
from mcpbridge.domain.knowledge import Chunk, Hit, IndexAnalysis

_T = TypeVar("_T")


class IndexFiles(Protocol):
    """Where each knowledge base's index file is, for reading and for writing."""

    def reading(self, kb_id: str) -> AbstractContextManager[KbIndexFile | None]:
        """The current file, or None when the knowledge base has no index yet."""
        ...

    def writing(self, kb_id: str) -> AbstractContextManager[KbIndexFile]:
        """A file to change; the changes are published when the block exits without an error."""
        ...

    def drop(self, kb_id: str) -> None: ...

    def close(self) -> None: ...


class DirectoryIndexFiles:
    """Index files in a directory (``<root>/<kb_id>.sqlite3``); SQLite serialises writers itself."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._open: dict[str, KbIndexFile] = {}
        self._lock = threading.Lock()

    def _path(self, kb_id: str) -> Path:
        if not kb_id or "/" in kb_id or kb_id.startswith("."):
            raise ValueError(f"invalid knowledge base id {kb_id!r}")
        return self._root / f"{kb_id}.sqlite3"

    def _file(self, kb_id: str, *, create: bool) -> KbIndexFile | None:
        with self._lock:
            index = self._open.get(kb_id)
            if index is not None:
                return index
            path = self._path(kb_id)
            if not create and not path.exists():
                return None
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            index = self._open[kb_id] = KbIndexFile(path)
            return index

    @contextlib.contextmanager
    def reading(self, kb_id: str) -> Iterator[KbIndexFile | None]:
        yield self._file(kb_id, create=False)

    @contextlib.contextmanager
    def writing(self, kb_id: str) -> Iterator[KbIndexFile]:
        index = self._file(kb_id, create=True)
        assert index is not None
        yield index

    def drop(self, kb_id: str) -> None:
        with self._lock:
            index = self._open.pop(kb_id, None)
        if index is not None:
            index.close()
        path = self._path(kb_id)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)

    def close(self) -> None:
        with self._lock:
            for index in self._open.values():
                index.close()
            self._open.clear()


class FileSearchIndex:
    """``ports.SearchIndex``: per-KB files, queried one by one and merged by score."""

    def __init__(self, files: IndexFiles) -> None:
        self._files = files

    def _read(self, kb_id: str, query: Callable[[KbIndexFile], _T], empty: _T) -> _T:
        with self._files.reading(kb_id) as index:
            return empty if index is None else query(index)

    def _merge(self, kb_ids: Collection[str], query: Callable[[KbIndexFile], list[Hit]], limit: int) -> list[Hit]:
        hits: list[Hit] = []
        for kb_id in sorted(set(kb_ids)):
            hits += self._read(kb_id, query, [])
        hits.sort(key=lambda h: (-h.score, h.chunk.id))
        return hits[:limit]

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
        with self._files.writing(kb_id) as index:
            index.replace_document(document_id, chunks, vectors, embedder_name, language=language)

    def analysis(self, kb_id: str) -> IndexAnalysis | None:
        return self._read(kb_id, lambda i: i.analysis(), None)

    def reanalyse(self, kb_id: str, language: str, progress: Callable[[int, int], None] | None = None) -> None:
        with self._files.reading(kb_id) as current:
            if current is None or not current.analysis().needs_reanalysis(language):
                return
        # One writing block: on S3 the whole re-analysis is one new version, published when it is complete.
        with self._files.writing(kb_id) as index:
            index.reanalyse(language, progress=progress)

    def delete_document(self, kb_id: str, document_id: str) -> None:
        with self._files.reading(kb_id) as current:
            if current is None:
                return
        with self._files.writing(kb_id) as index:
            index.delete_document(document_id)

    def delete_knowledge_base(self, kb_id: str) -> None:
        self._files.drop(kb_id)

    def keyword(
        self, kb_ids: Collection[str], query: str, *, document_ids: Collection[str] | None = None, limit: int = 10
    ) -> list[Hit]:
        return self._merge(kb_ids, lambda i: i.keyword(query, document_ids=document_ids, limit=limit), limit)

    def semantic(
        self,
        kb_ids: Collection[str],
        vector: Sequence[float],
        *,
        document_ids: Collection[str] | None = None,
        limit: int = 10,
    ) -> list[Hit]:
        return self._merge(kb_ids, lambda i: i.semantic(vector, document_ids=document_ids, limit=limit), limit)

    def chunks(self, kb_id: str, document_id: str, *, offset: int = 0, limit: int | None = None) -> list[Chunk]:
        return self._read(kb_id, lambda i: i.chunks(document_id, offset=offset, limit=limit), [])

    def count(self, kb_id: str, document_id: str) -> int:
        return self._read(kb_id, lambda i: i.count(document_id), 0)

    def chunk_at_line(self, kb_id: str, document_id: str, line: int) -> Chunk | None:
        return self._read(kb_id, lambda i: i.chunk_at_line(document_id, line), None)

    def candidates(
        self,
        kb_ids: Collection[str],
        words: Sequence[str],
        *,
        document_ids: Collection[str] | None = None,
        limit: int = 30,
    ) -> list[Chunk]:
        found: list[Chunk] = []
        for kb_id in sorted(set(kb_ids)):
            found += self._read(kb_id, lambda i: i.candidates(words, document_ids=document_ids, limit=limit), [])
            if len(found) >= limit:
                break
        return found[:limit]

    def has_vectors(self, kb_id: str) -> bool:
        return self._read(kb_id, lambda i: i.has_vectors(), False)

    # What a migration to another engine reads (``adapters.lance.builds.LegacyIndex``).

    def document_ids(self, kb_id: str) -> list[str]:
        return self._read(kb_id, lambda i: i.document_ids(), [])

    def export(self, kb_id: str, document_id: str) -> tuple[list[Chunk], list[list[float]] | None, str | None]:
        """The document's chunks in reading order, their vectors (None unless every chunk has one) and embedder."""

        def read(index: KbIndexFile) -> tuple[list[Chunk], list[list[float]] | None, str | None]:
            vectors = index.vectors_of(document_id)
            chunks = index.chunks(document_id)
            if vectors is None or len(vectors[1]) != len(chunks):
                return chunks, None, None
            return chunks, vectors[1], vectors[0]

        nothing: tuple[list[Chunk], list[list[float]] | None, str | None] = ([], None, None)
        return self._read(kb_id, read, nothing)

    def embedder_of(self, kb_id: str) -> tuple[str, int] | None:
        def read(index: KbIndexFile) -> tuple[str, int] | None:
            name = index.embedder_name()
            for document_id in index.document_ids() if name else []:
                held = index.vectors_of(document_id)
                if held is not None:
                    return name or held[0], len(held[1][0])
            return None

        return self._read(kb_id, read, None)

    def close(self) -> None:
        self._files.close()
