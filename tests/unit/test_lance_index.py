"""What the Lance index does beyond the search index contract: its upkeep job (compaction that really deletes,
statistics), the migration of a knowledge base from the SQLite file index while searches go on, the jobs it asks
for, and the routing of a deployment's engine through bootstrap."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from mcpbridge.adapters.index_files.search_index import DirectoryIndexFiles, FileSearchIndex
from mcpbridge.adapters.lance.search_index import LanceSearchIndex
from mcpbridge.adapters.lance.tables import LanceLocation
from mcpbridge.adapters.local.sqlite import SqliteStore
from mcpbridge.bootstrap import Container
from mcpbridge.domain.knowledge import Chunk
from mcpbridge.settings import Settings
from tests.support.clock import FakeClock
from tests.support.embedder import HashingEmbedder

EMBEDDER = HashingEmbedder(16)


class RecordedJobs:
    def __init__(self) -> None:
        self.submitted: list[tuple[str, dict[str, str]]] = []

    def submit(self, kind: str, payload: dict[str, str]) -> None:
        self.submitted.append((kind, payload))


def chunks(document_id: str, *texts: str, kb_id: str = "kb_1") -> list[Chunk]:
    return [
        Chunk(
            id=Chunk.make_id(document_id, seq),
            knowledge_base_id=kb_id,
            document_id=document_id,
            document_title=f"Title of {document_id}",
            seq=seq,
            text=text,
            start_line=seq + 1,
            end_line=seq + 1,
            start_offset=0,
            end_offset=len(text),
        )
        for seq, text in enumerate(texts)
    ]


def write(index: object, document_id: str, *texts: str) -> None:
    parts = chunks(document_id, *texts)
    vectors = EMBEDDER.embed([c.text for c in parts], purpose="document")
    index.replace_document("kb_1", document_id, parts, vectors, EMBEDDER.name, language="english")  # type: ignore[attr-defined]


def words(index: object, query: str) -> set[str]:
    return {h.chunk.document_id for h in index.keyword(["kb_1"], query, limit=30)}  # type: ignore[attr-defined]


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    return SqliteStore(tmp_path / "store.sqlite3", FakeClock())


def lance(tmp_path: Path, store: SqliteStore, **kwargs: object) -> LanceSearchIndex:
    return LanceSearchIndex(store, LanceLocation.directory(tmp_path / "lance"), FakeClock(), **kwargs)  # type: ignore[arg-type]


def stored_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


def test_a_deleted_document_is_gone_from_storage_after_the_upkeep_job(tmp_path: Path, store: SqliteStore) -> None:
    index = lance(tmp_path, store)
    write(index, "doc_keep", "Walruses rest on the ice.")
    write(index, "doc_secret", "The vault code is zanzibarquux.")
    write(index, "doc_edited", "Draft mentions quokkaplatypus once.")
    for n in range(20):
        write(index, f"doc_{n}", f"Filler text number {n}.")
    index.optimise("kb_1", grace_seconds=0)  # one fragment now: the deletions below are a small part of it
    write(index, "doc_edited", "The final text says nothing of it.")
    index.delete_document("kb_1", "doc_secret")
    assert words(index, "zanzibarquux") == set()
    assert b"zanzibarquux" in stored_bytes(tmp_path / "lance")  # hidden, not yet removed
    index.optimise("kb_1", grace_seconds=0)
    stored = stored_bytes(tmp_path / "lance")
    assert b"zanzibarquux" not in stored
    assert b"quokkaplatypus" not in stored
    assert b"Walruses" in stored
    assert words(index, "walrus") == {"doc_keep"}
    assert words(index, "final") == {"doc_edited"}


def test_the_upkeep_job_writes_statistics_that_search_uses(tmp_path: Path, store: SqliteStore) -> None:
    index = lance(tmp_path, store)
    files = FileSearchIndex(DirectoryIndexFiles(tmp_path / "indexes"))
    for n in range(30):
        for each in (index, files):
            write(each, f"doc_{n:02d}", f"Common words in every chunk, and the rare word{n}.", "Oauth2 tokens rotate.")
    before = index.keyword(["kb_1"], "common rare word7", limit=3)
    index.optimise("kb_1", grace_seconds=0)
    pointer = index.pointer("kb_1")
    assert pointer is not None
    assert pointer.stats is not None
    assert pointer.optimised_writes == pointer.writes == 30
    after = index.keyword(["kb_1"], "common rare word7", limit=3)
    assert [h.chunk.id for h in after] == [h.chunk.id for h in before]
    assert [round(h.relevance or 0, 6) for h in after] == [round(h.relevance or 0, 6) for h in before]
    # Grep expands a prefix through the statistics' words.
    assert {c.document_id for c in index.candidates(["kb_1"], ["oauth", "tok"])} == {f"doc_{n:02d}" for n in range(30)}
    # Semantic relevance is known once the statistics hold the vectors' spread, and agrees with the file index's
    # (which computes it over every vector at each search).
    query = EMBEDDER.embed(["rare word7"], purpose="query")[0]
    top, exact = index.semantic(["kb_1"], query, limit=1)[0], files.semantic(["kb_1"], query, limit=1)[0]
    assert top.chunk.document_id == exact.chunk.document_id == "doc_07"
    assert top.relevance is not None
    assert exact.relevance is not None
    assert top.relevance == pytest.approx(exact.relevance, abs=0.02)


def test_writes_ask_for_upkeep_early_then_every_so_many_writes(tmp_path: Path, store: SqliteStore) -> None:
    jobs = RecordedJobs()
    index = lance(tmp_path, store, jobs=jobs, optimise_every=8)
    for n in range(17):
        write(index, f"doc_{n}", f"text {n}")
    asked = [n for n, (kind, payload) in enumerate(jobs.submitted) if kind == "optimise_index"]
    assert len(asked) == 5  # writes 1, 2, 4, then 8 and 16
    assert {payload["knowledge_base_id"] for _, payload in jobs.submitted} == {"kb_1"}


def test_a_file_indexed_knowledge_base_migrates_while_searches_go_on(tmp_path: Path, store: SqliteStore) -> None:
    files = FileSearchIndex(DirectoryIndexFiles(tmp_path / "indexes"))
    for n in range(450):  # more than two batches of the copy
        write(files, f"doc_{n:03d}", f"Walrus number {n} rests.", f"It eats clams{n}.")
    jobs = RecordedJobs()
    index = lance(tmp_path, store, jobs=jobs, legacy=files)
    vector = EMBEDDER.embed(["It eats clams300."], purpose="query")[0]
    nearest = [round(h.score, 5) for h in files.semantic(["kb_1"], vector, limit=5)]
    assert words(index, "clams7") == {"doc_007"}  # served by the file, and a migration is asked for
    assert jobs.submitted == [("migrate_index", {"knowledge_base_id": "kb_1"})]

    answers: list[set[str]] = []
    stop = threading.Event()

    def search() -> None:
        while not stop.is_set():
            answers.append(words(index, "clams449"))

    reader = threading.Thread(target=search)
    reader.start()
    progress: list[tuple[int, int]] = []
    original = index.write_documents
    writes_during = {"done": False}

    def write_rows_and_interfere(*args: object, **kwargs: object) -> bool:
        # Between the copy's read of its first batch and its write, a document changes and another is deleted
        # (in the file, then in the new dataset): the copy's older read must not win.
        if not writes_during["done"]:
            writes_during["done"] = True
            write(index, "doc_001", "Rewritten during the migration: narwhals.")
            index.delete_document("kb_1", "doc_002")
        return original(*args, **kwargs)  # type: ignore[arg-type]

    index.write_documents = write_rows_and_interfere  # type: ignore[method-assign]
    try:
        assert index.migrate("kb_1", lambda done, total: progress.append((done, total)))
    finally:
        stop.set()
        reader.join(30)
    assert all(found == {"doc_449"} for found in answers)  # every search answered, from one index or the other
    assert progress[-1] == (449, 449) or progress[-1][0] == progress[-1][1]
    pointer = index.pointer("kb_1")
    assert pointer is not None
    assert pointer.state == "ready"
    assert files.analysis("kb_1") is None  # the file is gone
    assert not list((tmp_path / "indexes").glob("kb_1*"))
    assert words(index, "narwhals") == {"doc_001"}
    assert words(index, "clams2") == set()
    assert index.count("kb_1", "doc_002") == 0
    assert words(index, "clams300") == {"doc_300"}
    assert [round(h.score, 5) for h in index.semantic(["kb_1"], vector, limit=5)] == nearest  # the same vectors
    assert index.has_vectors("kb_1")
    assert not index.migrate("kb_1")  # nothing left to do


def test_an_interrupted_migration_resumes_after_its_last_batch(tmp_path: Path, store: SqliteStore) -> None:
    files = FileSearchIndex(DirectoryIndexFiles(tmp_path / "indexes"))
    for n in range(450):
        write(files, f"doc_{n:03d}", f"Seal {n}.")
    index = lance(tmp_path, store, legacy=files)
    calls = {"n": 0}
    original = index.write_documents

    def fail_in_the_second_batch(*args: object, **kwargs: object) -> bool:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("the store went away")
        return original(*args, **kwargs)  # type: ignore[arg-type]

    index.write_documents = fail_in_the_second_batch  # type: ignore[method-assign]
    with pytest.raises(Exception, match="could not be migrated"):
        index.migrate("kb_1")
    pointer = index.pointer("kb_1")
    assert pointer is not None
    assert pointer.state == "migrating"
    assert pointer.building is not None
    assert pointer.building.after == "doc_199"
    assert words(index, "seal")  # still served by the file
    assert files.analysis("kb_1") is not None
    index.write_documents = original  # type: ignore[method-assign]
    copied: list[int] = []
    assert index.migrate("kb_1", lambda done, total: copied.append(done))
    assert copied[0] == 400  # it went on after the batches already recorded
    assert len(words(index, "seal")) == 30  # the limit
    assert index.count("kb_1", "doc_449") == 1


def test_bootstrap_chooses_the_engine_and_runs_its_jobs(tmp_path: Path) -> None:
    files = Container(Settings(data_dir=tmp_path / "a"))
    assert isinstance(files.search_index, FileSearchIndex)
    assert files.index_maintenance is None
    files.run_job("optimise_index", {"knowledge_base_id": "kb_1"})  # nothing to do, no error
    files.close()
    container = Container(Settings(data_dir=tmp_path / "b", search_engine="lance", jobs="inline"))
    index = container.search_index
    assert isinstance(index, LanceSearchIndex)
    assert container.index_maintenance is index
    write(index, "doc_1", "Walruses rest on the ice.")  # the first write asks for upkeep, run inline
    pointer = index.pointer("kb_1")
    assert pointer is not None
    assert pointer.stats is not None
    assert (tmp_path / "b" / "lance").is_dir()
    container.close()


def test_a_deleted_document_is_gone_from_s3_after_the_upkeep_job(tmp_path: Path, aws_credentials: None) -> None:
    # On S3 with the DynamoDB commit store (a moto server): the objects that held the deleted text are deleted, not
    # only unreferenced. The bucket is versioned as the template's is: the older versions they leave expire by the
    # bucket's lifecycle rule (NoncurrentVersionExpiration on lance/), which moto does not run.
    from tests.support.lance import create_lance_resources, moto_server

    with moto_server() as url:
        on_s3 = create_lance_resources(url, versioned=True)
        clock = FakeClock()
        index = LanceSearchIndex(on_s3.store(clock), on_s3.location, clock)
        try:
            write(index, "doc_keep", "Walruses rest on the ice.")
            write(index, "doc_secret", "The vault code is zanzibarquux.")
            index.optimise("kb_1", grace_seconds=0)
            index.delete_document("kb_1", "doc_secret")
            assert words(index, "zanzibarquux") == set()
            s3 = on_s3.client("s3")

            def current() -> bytes:
                keys = [
                    o["Key"]
                    for p in s3.get_paginator("list_objects_v2").paginate(Bucket=on_s3.bucket)
                    for o in p.get("Contents", [])
                ]
                return b"".join(s3.get_object(Bucket=on_s3.bucket, Key=k)["Body"].read() for k in keys)

            assert b"zanzibarquux" in current()  # hidden, not yet removed
            index.optimise("kb_1", grace_seconds=0)
            assert b"zanzibarquux" not in current()
            assert b"Walruses" in current()
            assert any(b"zanzibarquux" in body for body in on_s3.object_bytes())  # an older version, until it expires
            assert words(index, "walrus") == {"doc_keep"}
        finally:
            index.close()


def test_a_dataset_made_before_the_key_indexes_is_written_read_and_optimised(
    tmp_path: Path, store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcpbridge.adapters.lance import datasets

    monkeypatch.setattr(datasets, "KEY_INDEXES", ())  # as knowledge bases created before them were
    index = lance(tmp_path, store)
    write(index, "doc_a", "Walruses rest on the ice.", "They dive for clams.")
    write(index, "doc_b", "Narwhals carry a tusk.")
    monkeypatch.undo()
    pointer = index.pointer("kb_1")
    assert pointer is not None
    assert {i.name for i in index.dataset(pointer).describe_indices()} == {"terms_idx", "words_idx"}
    write(index, "doc_a", "Replaced: penguins.")
    index.delete_document("kb_1", "doc_b")
    index.optimise("kb_1", grace_seconds=0)
    assert words(index, "penguins") == {"doc_a"}
    assert words(index, "narwhals") == set()
    assert index.count("kb_1", "doc_a") == 1
    fresh = lance(tmp_path, store)
    write(fresh, "doc_c", "Seals bask.")
    assert words(fresh, "seals") == {"doc_c"}
    assert {i.name for i in fresh.dataset(fresh.pointer("kb_1")).describe_indices()} == {"terms_idx", "words_idx"}  # type: ignore[arg-type]


def test_a_file_indexed_knowledge_base_on_s3_migrates_to_lance_on_s3(
    tmp_path: Path, aws_credentials: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What a deployment does: the SQLite file in S3 behind its DynamoDB pointer, copied into Lance on S3 with its
    # commit store (a moto server), searches answering from the file until the switch; the file is then deleted.
    from mcpbridge.adapters.aws.s3_search_index import S3IndexFiles
    from mcpbridge.adapters.lance import builds
    from tests.support.lance import create_lance_resources, moto_server

    monkeypatch.setattr(builds, "BATCH_DOCUMENTS", 2)
    with moto_server() as url:
        on_s3 = create_lance_resources(url)
        clock = FakeClock()
        s3 = on_s3.client("s3")
        files = FileSearchIndex(S3IndexFiles(on_s3.store(clock), s3, on_s3.bucket, tmp_path / "cache", clock))
        for n in range(5):
            write(files, f"doc_{n}", f"Walrus number {n} eats clams{n}.")
        jobs = RecordedJobs()
        index = LanceSearchIndex(on_s3.store(clock), on_s3.location, clock, jobs=jobs, legacy=files)
        try:
            assert words(index, "clams3") == {"doc_3"}
            assert jobs.submitted == [("migrate_index", {"knowledge_base_id": "kb_1"})]
            during: list[set[str]] = []
            original = index.write_documents

            def search_between_batches(*args: object, **kwargs: object) -> bool:
                during.append(words(index, "walrus"))
                return original(*args, **kwargs)  # type: ignore[arg-type]

            index.write_documents = search_between_batches  # type: ignore[method-assign]
            assert index.migrate("kb_1")
            assert len(during) == 3  # three batches, a search answered before each from the file
            assert all(found == {f"doc_{n}" for n in range(5)} for found in during)
            pointer = index.pointer("kb_1")
            assert pointer is not None
            assert pointer.state == "ready"
            assert files.analysis("kb_1") is None
            assert s3.list_objects_v2(Bucket=on_s3.bucket, Prefix="indexes/").get("KeyCount", 0) == 0
            assert words(index, "walrus") == {f"doc_{n}" for n in range(5)}
            assert index.has_vectors("kb_1")
        finally:
            index.close()


def test_a_semantic_search_within_a_few_documents_finds_their_nearest_chunks(
    tmp_path: Path, store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With the vector index built, the chunks of a handful of documents sit in partitions far from the query: the
    # search must go on probing until it has found them (or every partition is probed), not stop at its usual
    # number of partitions and return what the filter left of those.
    from mcpbridge.adapters.lance import maintenance, search_index

    monkeypatch.setattr(maintenance, "VECTOR_INDEX_MIN_ROWS", 1000)
    monkeypatch.setattr(search_index, "NPROBES", 2)  # of ~15 partitions: few rows make few partitions
    index = lance(tmp_path, store)
    files = FileSearchIndex(DirectoryIndexFiles(tmp_path / "indexes"))
    rng = np.random.default_rng(7)
    write(index, "doc_0000", "The first document.")
    pointer = index.pointer("kb_1")
    assert pointer is not None
    batch = []
    for n in range(1, 400):
        parts = chunks(f"doc_{n:04d}", *(f"Chunk {seq} of document {n}." for seq in range(10)))
        vectors = rng.standard_normal((10, 16)).tolist()
        batch.append((f"doc_{n:04d}", parts, vectors, f"w{n}"))
        files.replace_document("kb_1", f"doc_{n:04d}", parts, vectors, EMBEDDER.name, language="english")
    index.write_documents(pointer, pointer.table, pointer.language, batch)
    index.optimise("kb_1", grace_seconds=0)
    dataset = index.dataset(index.pointer("kb_1"))  # type: ignore[arg-type]
    assert "vector" in {field for i in dataset.describe_indices() for field in i.field_names}
    within = ["doc_0011", "doc_0222"]
    for query in rng.standard_normal((8, 16)).tolist():
        found = index.semantic(["kb_1"], query, document_ids=within, limit=10)
        exact = files.semantic(["kb_1"], query, document_ids=within, limit=10)
        assert len(exact) == 10
        assert [h.chunk.id for h in found] == [h.chunk.id for h in exact]
