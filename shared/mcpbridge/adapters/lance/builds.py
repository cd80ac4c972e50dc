"""Copies that fill a new Lance dataset while searches keep reading the old index: a re-analysis (the knowledge base's
language or the analyser changed) and a migration from the SQLite file index.

Both keep the same record in the pointer (``building``: the new dataset, its language, the last document copied)
and the same rule for writes that happen meanwhile: a write goes to the old index first, then to the new dataset.
The copy reads a batch of documents from the old index, writes them to the new dataset in one commit, then reads
their stamps again (the write ids of their rows, or a digest of a file's chunks): a document that changed in between
is copied again, so the new dataset never keeps an older state than the old index. The copy resumes after the last
batch it recorded; the switch to the new dataset is one conditional write, and the old index is dropped after it
(a re-analysis' dataset after ``maintenance.GRACE_SECONDS``, for searches that opened it a moment ago).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from mcpbridge.adapters.lance.datasets import lance_errors
from mcpbridge.adapters.lance.pointers import (
    BUILDING_ATTRS,
    MIGRATING,
    READY,
    Building,
    Pointer,
    building_item,
    pointer_key,
)
from mcpbridge.adapters.lance.tables import CHUNK_COLUMNS, chunk_of, documents_filter, new_dataset_name
from mcpbridge.domain.items import AttrAbsent, Compare, Condition, Update, all_of, any_of
from mcpbridge.domain.knowledge import Chunk
from mcpbridge.domain.text_tokens import analyser_for
from mcpbridge.errors import ConditionFailed, Unavailable
from mcpbridge.ports import SearchIndex

if TYPE_CHECKING:
    from mcpbridge.adapters.lance.search_index import LanceSearchIndex

BATCH_DOCUMENTS = 200
ATTEMPTS = 5

Exported = tuple[list[Chunk], list[list[float]] | None, str | None]


class LegacyIndex(SearchIndex, Protocol):
    """The SQLite file index as a source to migrate from (``index_files.search_index.FileSearchIndex``)."""

    def document_ids(self, kb_id: str) -> list[str]: ...

    def export(self, kb_id: str, document_id: str) -> Exported:
        """The document's chunks in reading order, their vectors (or None) and the embedder that made them."""
        ...

    def embedder_of(self, kb_id: str) -> tuple[str, int] | None:
        """The embedder (name, dimension) of the knowledge base's vectors, None when it has none."""
        ...

    def close(self) -> None: ...


class _Source(Protocol):
    def document_ids(self) -> list[str]: ...

    def read(self, document_ids: Sequence[str]) -> dict[str, tuple[Exported, str]]:
        """Each document's content and stamp (documents without chunks are left out)."""
        ...


class _TableSource:
    """The knowledge base's current dataset."""

    def __init__(self, index: LanceSearchIndex, pointer: Pointer) -> None:
        self._index = index
        self._pointer = pointer

    def _dataset(self) -> Any:
        return self._index.datasets.reopen(self._pointer.table)

    def document_ids(self) -> list[str]:
        column = self._dataset().to_table(columns=["document_id"]).column("document_id")
        return sorted(set(column.to_pylist()))

    def read(self, document_ids: Sequence[str]) -> dict[str, tuple[Exported, str]]:
        dataset = self._dataset()
        columns = [*CHUNK_COLUMNS, "write_id", *(["vector"] if "vector" in dataset.schema.names else [])]
        rows = dataset.to_table(columns=columns, filter=documents_filter(document_ids)).to_pylist()
        by_document: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in rows:
            by_document[row["document_id"]].append(row)
        found: dict[str, tuple[Exported, str]] = {}
        for document_id, held in by_document.items():
            held.sort(key=lambda r: int(r["seq"]))
            chunks = [chunk_of(r, self._pointer.kb_id) for r in held]
            vectors = [r.get("vector") for r in held]
            complete = None if any(v is None for v in vectors) else [list(v) for v in vectors if v is not None]
            stamp = ",".join(sorted({str(r["write_id"]) for r in held}))
            found[document_id] = ((chunks, complete, self._pointer.embedder if complete else None), stamp)
        return found


class _FileSource:
    """The knowledge base's SQLite file index."""

    def __init__(self, legacy: LegacyIndex, kb_id: str) -> None:
        self._legacy = legacy
        self._kb_id = kb_id

    def document_ids(self) -> list[str]:
        return sorted(self._legacy.document_ids(self._kb_id))

    def read(self, document_ids: Sequence[str]) -> dict[str, tuple[Exported, str]]:
        found: dict[str, tuple[Exported, str]] = {}
        for document_id in document_ids:
            exported = self._legacy.export(self._kb_id, document_id)
            if exported[0]:
                found[document_id] = (exported, _digest(exported))
        return found


def _digest(exported: Exported) -> str:
    chunks, vectors, embedder = exported
    digest = hashlib.sha256(repr((chunks, embedder)).encode())
    for vector in vectors or []:
        digest.update(repr(vector).encode())
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------------- the copy


def _copy(
    index: LanceSearchIndex,
    pointer: Pointer,
    source: _Source,
    progress: Callable[[int, int], None] | None,
) -> Pointer:
    """Copy every document after ``building.after`` into ``building.table``; the pointer as last recorded."""
    building = pointer.building
    assert building is not None
    documents = source.document_ids()
    todo = [d for d in documents if d > building.after]
    done = len(documents) - len(todo)
    for start in range(0, len(todo), BATCH_DOCUMENTS):
        batch = todo[start : start + BATCH_DOCUMENTS]
        _copy_batch(index, pointer, source, batch)
        done += len(batch)
        pointer = _record(index, pointer, Building(building.table, building.language, batch[-1], building.source))
        if progress is not None:
            progress(done, len(documents))
    # Documents deleted from the old index since the copy began (their deletion reached both, or only the old one).
    kept = set(source.document_ids())
    copied = index.datasets.reopen(building.table).to_table(columns=["document_id"]).column("document_id")
    for gone in sorted(set(copied.to_pylist()) - kept):
        index.write_rows(pointer, building.table, building.language, gone, [], None, "")
    if progress is not None and not todo:
        progress(done, len(documents))
    return pointer


def _copy_batch(index: LanceSearchIndex, pointer: Pointer, source: _Source, batch: Sequence[str]) -> None:
    """One commit for the batch, then again for the documents that changed meanwhile (see the module docstring)."""
    building = pointer.building
    assert building is not None
    pending = list(batch)
    for _ in range(ATTEMPTS):
        read = source.read(pending)
        documents = []
        for document_id in pending:
            (chunks, vectors, embedder), stamp = read.get(document_id, (([], None, None), ""))
            # Vectors of another embedder than the knowledge base's are left out (its documents are re-embedded).
            kept = vectors if vectors is not None and embedder is not None and embedder == pointer.embedder else None
            documents.append((document_id, chunks, kept, stamp))
        index.write_documents(pointer, building.table, building.language, documents)
        again = source.read(pending)
        pending = [d for d in pending if (read.get(d) or (None, ""))[1] != (again.get(d) or (None, ""))[1]]
        if not pending:
            return
    raise Unavailable("documents kept changing while the index was copied; the job will resume", code="index_busy")


def _record(index: LanceSearchIndex, pointer: Pointer, building: Building) -> Pointer:
    mine = Condition("lance_build_mine", all_of(Compare("building_table", "=", building.table)))
    try:
        item = index.store.update(pointer_key(pointer.kb_id), Update(set=building_item(building)), condition=mine)
    except ConditionFailed:
        raise Unavailable("another build took over this index", code="search_index_busy") from None
    return Pointer.of(pointer.kb_id, item)


# ---------------------------------------------------------------------------------------------- re-analysis


def reanalyse(
    index: LanceSearchIndex, pointer: Pointer, language: str, progress: Callable[[int, int], None] | None
) -> None:
    target = analyser_for(language)
    building = pointer.building
    if building is None and pointer.analyser == target.id and pointer.language == target.language:
        return
    if building is None or building.language != target.language or building.source != "table":
        pointer = _start_build(index, pointer, target.language)
    with lance_errors("be re-analysed"):
        pointer = _copy(index, pointer, _TableSource(index, pointer), progress)
    _switch(index, pointer, target.language, target.id)


def _start_build(index: LanceSearchIndex, pointer: Pointer, language: str) -> Pointer:
    name = new_dataset_name(pointer.kb_id)
    dataset = index.datasets.get(pointer.table, pointer.writes)
    dimension = dataset.schema.field("vector").type.list_size if "vector" in dataset.schema.names else None
    index.datasets.create_empty(name, dimension)
    building = Building(name, language, "", "table")
    previous = pointer.building
    unchanged = (
        Condition("lance_build_none", any_of(AttrAbsent("building_table")))
        if previous is None
        else Condition("lance_build_same", all_of(Compare("building_table", "=", previous.table)))
    )
    changes: dict[str, Any] = building_item(building)
    if previous is not None:
        changes["retired"] = [*([n, w] for n, w in pointer.retired), [previous.table, index.clock.now()]]
    try:
        item = index.store.update(pointer_key(pointer.kb_id), Update(set=changes), condition=unchanged)
    except ConditionFailed:
        index.datasets.drop(name)
        raise Unavailable("another re-analysis took over this index", code="search_index_busy") from None
    return Pointer.of(pointer.kb_id, item)


def _switch(index: LanceSearchIndex, pointer: Pointer, language: str, analyser: str) -> None:
    building = pointer.building
    assert building is not None
    mine = Condition("lance_build_mine", all_of(Compare("building_table", "=", building.table)))
    retired = [*([n, w] for n, w in pointer.retired), [pointer.table, index.clock.now()]]
    update = Update(
        set={"table": building.table, "language": language, "analyser": analyser, "retired": retired, "state": READY},
        remove=list(BUILDING_ATTRS),
        add={"writes": 1},
    )
    try:
        index.store.update(pointer_key(pointer.kb_id), update, condition=mine)
    except ConditionFailed:
        raise Unavailable("another build took over this index", code="search_index_busy") from None


# ---------------------------------------------------------------------------------------------- migration


def migrate(index: LanceSearchIndex, kb_id: str, progress: Callable[[int, int], None] | None) -> bool:
    legacy = index.legacy
    if legacy is None:
        return False
    pointer = index.pointer(kb_id)
    if pointer is not None and pointer.searchable:
        if legacy.analysis(kb_id) is not None:
            legacy.delete_knowledge_base(kb_id)  # a write that raced the switch left the file behind
        return False
    if pointer is None:
        analysis = legacy.analysis(kb_id)
        if analysis is None:
            return False
        pointer = _start_migration(index, legacy, kb_id, analysis.reanalysing or analysis.language)
        if pointer is None:
            return False
    assert pointer.building is not None
    with lance_errors("be migrated"):
        pointer = _copy(index, pointer, _FileSource(legacy, kb_id), progress)
    analyser = analyser_for(pointer.building.language if pointer.building else None)
    _switch(index, pointer, analyser.language, analyser.id)
    legacy.delete_knowledge_base(kb_id)
    return True


def _start_migration(index: LanceSearchIndex, legacy: LegacyIndex, kb_id: str, language: str | None) -> Pointer | None:
    analyser = analyser_for(language)
    embedder, dimension = _legacy_embedder(legacy, kb_id)
    name = new_dataset_name(kb_id)
    with lance_errors("be migrated"):
        index.datasets.create_empty(name, dimension)
    building = Building(name, analyser.language, "", "files")
    item: dict[str, Any] = {
        **pointer_key(kb_id).as_dict(),
        "table": name,
        "state": MIGRATING,
        "language": analyser.language,
        "analyser": analyser.id,
        "writes": 0,
        **building_item(building),
    }
    if embedder is not None and dimension is not None:
        item |= {"embedder": embedder, "dimension": dimension}
    try:
        index.store.put(item, condition=Condition.absent("lance_index_new"))
    except ConditionFailed:
        index.datasets.drop(name)
        return index.pointer(kb_id)
    return Pointer.of(kb_id, item)


def _legacy_embedder(legacy: LegacyIndex, kb_id: str) -> tuple[str | None, int | None]:
    held = legacy.embedder_of(kb_id)
    return (None, None) if held is None else held
