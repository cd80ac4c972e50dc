"""Lance datasets by name: opened lazily, kept open, reopened when the knowledge base's pointer says they changed.

A handle is reused while the pointer's ``writes`` counter is the one it was opened at: a search then costs no
commit-store or manifest read (Lance caches the manifest and the index pages it has read in the shared session).
Writes go through Lance's own commits (a DynamoDB commit store on S3), retried on conflicts with concurrent writes.
Every Lance or object-store failure becomes ``errors.Unavailable``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa

from mcpbridge.adapters.lance.tables import CHUNK_FIELDS, LanceLocation, vector_field
from mcpbridge.errors import Unavailable

if TYPE_CHECKING:
    import lance

# Each text column's inverted index: whitespace tokens as written (the terms are analysed before they get here).
FTS_PARAMS: dict[str, Any] = {
    "base_tokenizer": "whitespace",
    "lower_case": False,
    "stem": False,
    "remove_stop_words": False,
    "ascii_folding": False,
    "with_position": False,
    "max_token_length": None,
}
TEXT_INDEXES = ("terms", "words")
KEY_INDEXES = ("id", "document_id")
METADATA_CACHE_BYTES = 64 * 1024 * 1024
INDEX_CACHE_BYTES = 256 * 1024 * 1024


def _lance() -> Any:
    try:
        import lance
    except ImportError as exc:  # pragma: no cover - the extra is a deployment's choice
        raise Unavailable(
            "the Lance search engine is not installed: pip install 'mcpbridge[lance]'", code="search_index_unavailable"
        ) from exc
    return lance


@contextlib.contextmanager
def lance_errors(what: str) -> Iterator[None]:
    """Lance's and the object store's failures as ``Unavailable`` (``ValueError`` of our own checks passes)."""
    try:
        yield
    except (OSError, RuntimeError) as exc:
        raise Unavailable(f"the search index could not {what}: {type(exc).__name__}", code="index_unavailable") from exc


class Datasets:
    """Open datasets of one location, shared by the threads of a process."""

    def __init__(self, location: LanceLocation) -> None:
        self._location = location
        self._lock = threading.Lock()
        self._open: dict[str, tuple[int, Any]] = {}
        self._session: Any = None

    @property
    def location(self) -> LanceLocation:
        return self._location

    def _shared_session(self) -> Any:
        with self._lock:
            if self._session is None:
                self._session = _lance().Session(
                    index_cache_size_bytes=INDEX_CACHE_BYTES, metadata_cache_size_bytes=METADATA_CACHE_BYTES
                )
            return self._session

    def get(self, name: str, writes: int) -> lance.LanceDataset:
        """The dataset as of at least ``writes`` (the pointer's counter read just before)."""
        with self._lock:
            held = self._open.get(name)
        if held is not None and held[0] >= writes:
            return cast("lance.LanceDataset", held[1])
        with lance_errors("open the index"):
            dataset = _lance().dataset(
                self._location.uri(name), storage_options=self._location.options, session=self._shared_session()
            )
        with self._lock:
            current = self._open.get(name)
            if current is None or current[0] < writes:
                self._open[name] = (writes, dataset)
        return cast("lance.LanceDataset", dataset)

    def create(self, name: str, rows: pa.Table) -> lance.LanceDataset:
        """A new dataset holding ``rows``, with its inverted indexes."""
        with lance_errors("create the index"):
            dataset = _lance().write_dataset(
                rows,
                self._location.uri(name),
                mode="create",
                storage_options=self._location.options,
                session=self._shared_session(),
            )
            for column in TEXT_INDEXES:
                dataset.create_scalar_index(column, index_type="INVERTED", name=f"{column}_idx", **FTS_PARAMS)
            # A write matches its rows by id and scopes its deletions by document: both through a B-tree, not a scan.
            for column in KEY_INDEXES:
                dataset.create_scalar_index(column, index_type="BTREE", name=f"{column}_idx")
        return cast("lance.LanceDataset", dataset)

    def create_plain(self, name: str, rows: pa.Table) -> lance.LanceDataset:
        """A new dataset holding ``rows``, without indexes."""
        with lance_errors("create a dataset"):
            return cast(
                "lance.LanceDataset",
                _lance().write_dataset(
                    rows,
                    self._location.uri(name),
                    mode="create",
                    storage_options=self._location.options,
                    session=self._shared_session(),
                ),
            )

    def reopen(self, name: str) -> lance.LanceDataset:
        """The dataset's latest version, whatever handle is cached."""
        with self._lock:
            held = self._open.pop(name, None)
        return self.get(name, held[0] if held else 0)

    def create_empty(self, name: str, dimension: int | None) -> lance.LanceDataset:
        fields = [*CHUNK_FIELDS, *([] if dimension is None else [vector_field(dimension)])]
        return self.create(name, pa.schema(fields).empty_table())

    def drop(self, name: str) -> None:
        with self._lock:
            self._open.pop(name, None)
        with lance_errors("drop an index"):
            _lance().LanceDataset.drop(
                self._location.uri(name), storage_options=self._location.options, ignore_not_found=True
            )

    def forget(self, name: str) -> None:
        with self._lock:
            self._open.pop(name, None)

    def close(self) -> None:
        with self._lock:
            self._open.clear()
