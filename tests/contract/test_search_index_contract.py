"""One contract for every search index: the SQLite file index in a directory (embedded) and in S3 behind a DynamoDB
version pointer and a writer lease (AWS, on moto), and the Lance index in a directory and on S3 with its DynamoDB
commit store (AWS, on a moto server). Each "instance" has its own cache and handles, as Lambda sandboxes do."""

from __future__ import annotations

import errno
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from mcpbridge.adapters.aws.dynamodb import DynamoStore
from mcpbridge.adapters.aws.lambda_search_index import LambdaSearchIndex
from mcpbridge.adapters.aws.s3_search_index import S3IndexFiles, lease_key, pointer_key
from mcpbridge.adapters.index_files.search_index import DirectoryIndexFiles, FileSearchIndex
from mcpbridge.adapters.lance.search_index import LanceSearchIndex
from mcpbridge.adapters.lance.tables import LanceLocation
from mcpbridge.adapters.local.files import FileBlobs
from mcpbridge.adapters.local.sqlite import SqliteStore
from mcpbridge.domain.knowledge import Chunk, Hit
from mcpbridge.domain.ranking import fuse
from mcpbridge.errors import Unavailable
from mcpbridge.knowledge.index_requests import answer
from mcpbridge.ports import SearchIndex
from tests.support.aws import create_aws_resources
from tests.support.clock import FakeClock
from tests.support.embedder import HashingEmbedder
from tests.support.lance import InProcessLambda, create_lance_resources, moto_server
from tests.support.moto_atomic import atomic_dynamodb

Instances = Callable[[], Any]
EMBEDDER = HashingEmbedder(16)
ENGINES = ["files-local", "files-aws", "lance-local", "lance-aws", "lance-remote"]


@pytest.fixture(params=ENGINES)
def instances(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Instances]:
    made: list[Any] = []
    clock = FakeClock()
    if request.param == "files-local":

        def local() -> FileSearchIndex:
            made.append(FileSearchIndex(DirectoryIndexFiles(tmp_path / "indexes")))
            return made[-1]

        yield local
    elif request.param == "files-aws":
        request.getfixturevalue("aws_credentials")
        with mock_aws(), atomic_dynamodb():
            resources = create_aws_resources(table_name="index-test")

            def aws() -> FileSearchIndex:
                store = DynamoStore(boto3.client("dynamodb", region_name="eu-west-1"), resources.table_name, clock)
                files = S3IndexFiles(
                    store,
                    boto3.client("s3", region_name="eu-west-1"),
                    resources.bucket_name,
                    tmp_path / f"cache-{len(made)}",
                    clock,
                )
                made.append(FileSearchIndex(files))
                return made[-1]

            yield aws
    elif request.param == "lance-local":
        store = SqliteStore(tmp_path / "store.sqlite3", clock)

        def lance_local() -> LanceSearchIndex:
            made.append(LanceSearchIndex(store, LanceLocation.directory(tmp_path / "lance"), clock))
            return made[-1]

        yield lance_local
    elif request.param == "lance-remote":
        # What the functions behind the API hold on AWS: calls to the search function, over JSON.
        store = SqliteStore(tmp_path / "store.sqlite3", clock)
        blobs = FileBlobs(tmp_path / "blobs")

        def lance_remote() -> LambdaSearchIndex:
            served = LanceSearchIndex(store, LanceLocation.directory(tmp_path / "lance"), clock)
            made.append(served)

            def handler(event: dict[str, Any], context: object) -> dict[str, Any]:
                return answer(served, served, blobs, event)

            return LambdaSearchIndex(InProcessLambda(handler), "search", blobs)

        yield lance_remote
    else:
        request.getfixturevalue("aws_credentials")
        with moto_server() as url:
            on_s3 = create_lance_resources(url)

            def lance_aws() -> LanceSearchIndex:
                made.append(LanceSearchIndex(on_s3.store(clock), on_s3.location, clock))
                return made[-1]

            yield lance_aws
            for index in made:
                index.close()
            made.clear()
    for index in made:
        index.close()


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


def index_document(index: SearchIndex, document_id: str, *texts: str) -> None:
    parts = chunks(document_id, *texts)
    vectors = EMBEDDER.embed([c.text for c in parts], purpose="document")
    index.replace_document("kb_1", document_id, parts, vectors, EMBEDDER.name)


def found(index: SearchIndex, query: str) -> set[str]:
    return {h.chunk.document_id for h in index.keyword(["kb_1"], query, limit=30)}


def test_a_knowledge_base_without_an_index_reads_as_empty(instances: Instances) -> None:
    index = instances()
    assert index.keyword(["kb_none"], "anything") == []
    assert index.semantic(["kb_none"], [0.0] * 16) == []
    assert index.chunks("kb_none", "doc") == []
    assert index.count("kb_none", "doc") == 0
    assert not index.has_vectors("kb_none")


def test_writes_of_one_instance_are_read_by_another(instances: Instances) -> None:
    writer, reader = instances(), instances()
    index_document(writer, "doc_a", "Walruses rest on the ice.", "They dive for clams.")
    assert found(reader, "walruses") == {"doc_a"}
    index_document(reader, "doc_b", "Narwhals carry a tusk.")
    assert found(writer, "narwhals") == {"doc_b"}
    assert [c.seq for c in writer.chunks("kb_1", "doc_a")] == [0, 1]
    semantic = reader.semantic(["kb_1"], EMBEDDER.embed(["clams dive"], purpose="query")[0], limit=1)
    assert semantic[0].chunk.id == Chunk.make_id("doc_a", 1)
    index_document(writer, "doc_a", "Replaced text about penguins.")
    assert found(reader, "walruses") == set()
    assert found(reader, "penguins") == {"doc_a"}
    writer.delete_document("kb_1", "doc_b")
    assert found(reader, "narwhals") == set()


def test_concurrent_writers_from_two_instances_lose_nothing(instances: Instances) -> None:
    first, second = instances(), instances()
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def write(index: SearchIndex, prefix: str) -> None:
        barrier.wait()
        try:
            for n in range(4):
                index_document(index, f"doc_{prefix}{n}", f"animal{prefix} number {n} swims")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(first, "x")), threading.Thread(target=write, args=(second, "y"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    reader = instances()
    assert found(reader, "animalx") == {f"doc_x{n}" for n in range(4)}
    assert found(reader, "animaly") == {f"doc_y{n}" for n in range(4)}


def test_dropping_a_knowledge_base_removes_its_index(instances: Instances) -> None:
    writer, reader = instances(), instances()
    index_document(writer, "doc_a", "Walruses rest on the ice.")
    assert found(reader, "walruses") == {"doc_a"}
    writer.delete_knowledge_base("kb_1")
    assert found(reader, "walruses") == set()
    index_document(writer, "doc_c", "A fresh start for seals.")
    assert found(reader, "seals") == {"doc_c"}


def test_s3_versions_advance_by_one_per_write(tmp_path: Path, aws_credentials: None) -> None:
    with mock_aws():
        resources = create_aws_resources(table_name="index-versions")
        clock = FakeClock()
        store = DynamoStore(boto3.client("dynamodb", region_name="eu-west-1"), resources.table_name, clock)
        s3 = boto3.client("s3", region_name="eu-west-1")
        files = S3IndexFiles(store, s3, resources.bucket_name, tmp_path / "cache", clock)
        index = FileSearchIndex(files)
        for n in range(4):
            index_document(index, f"doc_{n}", f"text {n}")
        pointer = store.get(pointer_key("kb_1"))
        assert pointer is not None
        assert pointer["version"] == 4
        keys = {o["Key"] for o in s3.list_objects_v2(Bucket=resources.bucket_name, Prefix="indexes/")["Contents"]}
        # The published version and the one before stay (a reader may still be fetching it); older ones go.
        assert keys == {pointer["object"], pointer["previous_object"]}
        assert pointer["object"].startswith("indexes/kb_1/v4-")
        index.close()


def test_an_s3_index_file_does_not_grow_past_its_limit_and_can_still_shrink(
    tmp_path: Path, aws_credentials: None
) -> None:
    with mock_aws():
        resources = create_aws_resources(table_name="index-limit")
        clock = FakeClock()
        store = DynamoStore(boto3.client("dynamodb", region_name="eu-west-1"), resources.table_name, clock)
        s3 = boto3.client("s3", region_name="eu-west-1")
        unlimited = FileSearchIndex(S3IndexFiles(store, s3, resources.bucket_name, tmp_path / "writer", clock))
        for n in range(3):
            index_document(unlimited, f"doc_{n}", *(f"walrus note {n} {i} " * 40 for i in range(20)))
        size = s3.head_object(Bucket=resources.bucket_name, Key=store.get(pointer_key("kb_1"))["object"])
        limit = size["ContentLength"] + 4096  # room for a small document, not for another large one
        files = S3IndexFiles(store, s3, resources.bucket_name, tmp_path / "limited", clock, max_file_bytes=limit)
        index = FileSearchIndex(files)
        published = store.get(pointer_key("kb_1"))
        with pytest.raises(Unavailable) as refused:
            index_document(index, "doc_big", *(f"seal story {i} " * 40 for i in range(40)))
        assert refused.value.code == "index_full"
        assert "SearchEngine=lance" in refused.value.message
        assert store.get(pointer_key("kb_1")) == published  # nothing published
        assert store.get(lease_key("kb_1")) is None  # the lease is released
        assert found(index, "seal") == set()
        index.delete_document("kb_1", "doc_0")  # past the limit or not, a deletion goes through
        assert found(index, "walrus") == {"doc_1", "doc_2"}
        index_document(index, "doc_small", "A seal.")  # and the room it made can be used
        assert found(index, "seal") == {"doc_small"}
        index.close()
        unlimited.close()


def test_an_index_file_that_does_not_fit_in_tmp_is_named_not_a_crash(tmp_path: Path) -> None:
    class FullDisk:
        def download_file(self, bucket: str, key: str, filename: str) -> None:
            Path(filename).write_bytes(b"partial")
            raise OSError(errno.ENOSPC, "No space left on device")

    clock = FakeClock()
    store = SqliteStore(tmp_path / "store.db", clock)
    store.put({**pointer_key("kb_1").as_dict(), "version": 1, "object": "indexes/kb_1/v1-abc.sqlite3"})
    files = S3IndexFiles(store, FullDisk(), "bucket", tmp_path / "cache", clock)  # type: ignore[arg-type]
    with pytest.raises(Unavailable) as refused, files.reading("kb_1"):
        pass
    assert refused.value.code == "index_too_large"
    assert "indexes/kb_1/v1-abc.sqlite3 does not fit in" in refused.value.message
    assert [p for p in (tmp_path / "cache").rglob("*") if p.is_file()] == []  # the partial download is gone
    store.close()


# ---------------------------------------------------------------------------------------------- the same behaviour

ENGLISH = {
    "doc_walrus": ["Walruses rest on the ice floes of the Arctic.", "A walrus dives for clams at night."],
    "doc_oauth": ["OAuth2 refresh tokens rotate on every use.", "The authorization server signs each token."],
    "doc_lambda": ["A Lambda function starts cold once, then stays warm.", "Cold starts import every module."],
}
CHINESE = {
    "doc_zh1": ["知识库检索支持中文分词和关键词搜索。", "向量检索找到语义相近的段落。"],
    "doc_zh2": ["数据库索引让查询更快。", "检索增强生成需要可靠的知识库。"],
}


def seeded(instances: Instances, *, language: str = "english") -> Any:
    index = instances()
    for document_id, texts in {**ENGLISH, **CHINESE}.items():
        parts = chunks(document_id, *texts)
        vectors = EMBEDDER.embed([c.text for c in parts], purpose="document")
        index.replace_document("kb_1", document_id, parts, vectors, EMBEDDER.name, language=language)
    return index


def ids(hits: list[Hit]) -> list[str]:
    return [h.chunk.id for h in hits]


def test_english_keywords_find_their_inflections_and_rank_every_term_first(instances: Instances) -> None:
    index = seeded(instances)
    assert set(ids(index.keyword(["kb_1"], "WALRUS", limit=5))) == {"doc_walrus#00000", "doc_walrus#00001"}
    hits = index.keyword(["kb_1"], "how do cold lambda functions start?", limit=5)
    assert hits[0].chunk.id == "doc_lambda#00000"
    # The chunk holding every term outranks chunks holding some, and says it holds most of the query.
    assert hits[0].score > 1.0 > hits[-1].score
    assert hits[0].relevance == pytest.approx(1.0)
    assert hits[-1].relevance is not None
    assert hits[-1].relevance < hits[0].relevance
    assert index.keyword(["kb_1"], "zebra quokka") == []


def test_chinese_keywords_match_inside_longer_words(instances: Instances) -> None:
    index = seeded(instances)
    assert {h.chunk.document_id for h in index.keyword(["kb_1"], "检索")} == {"doc_zh1", "doc_zh2"}
    assert ids(index.keyword(["kb_1"], "知识库检索", limit=1)) == ["doc_zh1#00000"]
    # A single character matches the words it starts.
    assert "doc_zh2#00000" in ids(index.keyword(["kb_1"], "数", limit=10))


def test_semantic_finds_the_nearest_chunk_and_refuses_bad_vectors(instances: Instances) -> None:
    index = seeded(instances)
    query = EMBEDDER.embed(["walrus dives for clams"], purpose="query")[0]
    hits = index.semantic(["kb_1"], query, limit=3)
    assert hits[0].chunk.id == "doc_walrus#00001"
    assert hits[0].score > hits[1].score >= hits[2].score
    with pytest.raises(ValueError, match="dimension"):
        index.semantic(["kb_1"], [1.0] * 8)
    with pytest.raises(ValueError, match="non-zero"):
        index.semantic(["kb_1"], [0.0] * 16)


def test_chunks_without_vectors_are_never_semantic_hits(instances: Instances) -> None:
    # A document written while no embedder was configured has no vectors; the others fill the limit.
    index = seeded(instances)
    parts = chunks("doc_plain", *(f"Walrus dives for clams, plain note {n}." for n in range(6)))
    index.replace_document("kb_1", "doc_plain", parts, None, None)
    query = EMBEDDER.embed(["walrus dives for clams"], purpose="query")[0]
    hits = index.semantic(["kb_1"], query, limit=8)
    assert len(hits) == 8
    assert "doc_plain" not in {h.chunk.document_id for h in hits}
    assert hits[0].chunk.id == "doc_walrus#00001"
    assert index.semantic(["kb_1"], query, document_ids=["doc_plain"]) == []
    assert {h.chunk.document_id for h in index.keyword(["kb_1"], "plain note")} == {"doc_plain"}


def test_hybrid_fuses_keyword_and_semantic_rankings(instances: Instances) -> None:
    index = seeded(instances)
    query = "refresh token rotation"
    keyword = index.keyword(["kb_1"], query, limit=5)
    semantic = index.semantic(["kb_1"], EMBEDDER.embed([query], purpose="query")[0], limit=5)
    fused = fuse(keyword, semantic, limit=3)
    assert fused[0].chunk.document_id == "doc_oauth"


def test_filters_apply_before_the_limit(instances: Instances) -> None:
    index = seeded(instances)
    only = {"doc_zh2", "doc_oauth"}
    assert {h.chunk.document_id for h in index.keyword(["kb_1"], "检索 token", document_ids=only, limit=1)} <= only
    assert ids(index.keyword(["kb_1"], "walrus", document_ids=["doc_oauth"])) == []
    vector = EMBEDDER.embed(["walrus dives for clams"], purpose="query")[0]
    hits = index.semantic(["kb_1"], vector, document_ids=["doc_lambda"], limit=1)
    assert [h.chunk.document_id for h in hits] == ["doc_lambda"]
    assert index.keyword(["kb_1"], "walrus", document_ids=[]) == []
    assert index.candidates(["kb_1"], ["walrus"], document_ids=["doc_oauth"]) == []


def test_reading_a_document_in_order_and_at_a_line(instances: Instances) -> None:
    index = seeded(instances)
    assert index.count("kb_1", "doc_oauth") == 2
    assert [c.seq for c in index.chunks("kb_1", "doc_oauth")] == [0, 1]
    assert [c.seq for c in index.chunks("kb_1", "doc_oauth", offset=1, limit=5)] == [1]
    first = index.chunks("kb_1", "doc_oauth")[0]
    assert (first.document_title, first.text, first.knowledge_base_id) == (
        "Title of doc_oauth",
        ENGLISH["doc_oauth"][0],
        "kb_1",
    )
    at = index.chunk_at_line("kb_1", "doc_oauth", 2)
    assert at is not None
    assert at.seq == 1
    assert index.chunk_at_line("kb_1", "doc_oauth", 99) is None
    assert index.has_vectors("kb_1")


def test_grep_candidates_hold_every_word_as_a_prefix(instances: Instances) -> None:
    index = seeded(instances)
    assert [c.id for c in index.candidates(["kb_1"], ["oauth", "tok"])] == ["doc_oauth#00000"]
    assert index.candidates(["kb_1"], ["oauth", "zebra"]) == []


def test_replacing_and_deleting_documents(instances: Instances) -> None:
    index = seeded(instances)
    parts = chunks("doc_walrus", "Penguins waddle on the shore.")
    index.replace_document(
        "kb_1", "doc_walrus", parts, EMBEDDER.embed([parts[0].text], purpose="document"), EMBEDDER.name
    )
    assert index.keyword(["kb_1"], "walrus") == []
    assert ids(index.keyword(["kb_1"], "penguins")) == ["doc_walrus#00000"]
    assert index.count("kb_1", "doc_walrus") == 1
    index.delete_document("kb_1", "doc_oauth")
    assert index.keyword(["kb_1"], "token") == []
    assert index.count("kb_1", "doc_oauth") == 0
    vector = EMBEDDER.embed(["OAuth2 refresh tokens rotate on every use."], purpose="query")[0]
    assert "doc_oauth" not in {h.chunk.document_id for h in index.semantic(["kb_1"], vector, limit=10)}
    index.delete_document("kb_1", "doc_never_there")  # changes nothing
    index.replace_document("kb_1", "doc_lambda", [], None, None)
    assert index.count("kb_1", "doc_lambda") == 0


def test_bad_writes_are_refused_and_change_nothing(instances: Instances) -> None:
    index = seeded(instances)
    parts = chunks("doc_new", "Brand new text about otters.")
    with pytest.raises(ValueError, match="never mixes embedders"):
        index.replace_document("kb_1", "doc_new", parts, [[1.0] * 8], "other:model")
    with pytest.raises(ValueError, match="2 vectors for 1 chunks"):
        index.replace_document("kb_1", "doc_new", parts, [[1.0] * 16, [1.0] * 16], EMBEDDER.name)
    with pytest.raises(ValueError, match="appears twice"):
        index.replace_document("kb_1", "doc_new", [*parts, parts[0]], None, None)
    with pytest.raises(ValueError, match="belongs to document"):
        index.replace_document("kb_1", "doc_other", parts, None, None)
    assert index.keyword(["kb_1"], "otters") == []


def test_several_knowledge_bases_merge_by_score(instances: Instances) -> None:
    index = seeded(instances)
    parts = chunks("doc_b", "Walruses everywhere: walrus walrus walrus.", kb_id="kb_2")
    index.replace_document("kb_2", "doc_b", parts, None, None)
    hits = index.keyword(["kb_1", "kb_2"], "walrus", limit=10)
    assert {h.chunk.knowledge_base_id for h in hits} == {"kb_1", "kb_2"}
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert index.keyword(["kb_2"], "clams") == []


def test_reanalysis_switches_language_and_keeps_writes_made_meanwhile(instances: Instances) -> None:
    index = seeded(instances, language="none")
    assert index.analysis("kb_1").language == "none"
    assert ids(index.keyword(["kb_1"], "walrus")) == ["doc_walrus#00001"]  # no stems: "walruses" is another word
    seen: list[tuple[int, int]] = []
    index.reanalyse("kb_1", "english", lambda done, total: seen.append((done, total)))
    analysis = index.analysis("kb_1")
    assert (analysis.language, analysis.up_to_date, analysis.reanalysing) == ("english", True, None)
    assert seen
    assert seen[-1][0] == seen[-1][1] > 0
    assert set(ids(index.keyword(["kb_1"], "walrus"))) == {"doc_walrus#00000", "doc_walrus#00001"}
    assert {h.chunk.document_id for h in index.keyword(["kb_1"], "检索")} == {"doc_zh1", "doc_zh2"}
    index_document(index, "doc_after", "Otters float on their backs.")
    assert found(instances(), "otter") == {"doc_after"}
    assert index.analysis("kb_1").language == "english"


@pytest.mark.parametrize("engine", ["lance", "files"])
def test_concurrent_writers_from_several_processes_lose_nothing(
    engine: str, tmp_path: Path, aws_credentials: None
) -> None:
    # Processes, not threads: each has its own object-store and DynamoDB clients, caches and commit retries, as
    # Lambda sandboxes do; they meet only on the moto server (S3 and DynamoDB).
    import multiprocessing

    from mcpbridge.adapters.system_clock import SystemClock
    from tests.support.lance import write_from_a_process

    writers, documents = 3, 4
    spawn = multiprocessing.get_context("spawn")
    # moto checks a condition and writes without a lock; DynamoDB does both atomically (atomic_dynamodb gives the
    # server, in this process, that guarantee: without it two writers can both take the file index's lease).
    with moto_server() as url, atomic_dynamodb():
        resources = create_lance_resources(url)
        start, errors = spawn.Barrier(writers), spawn.Queue()
        processes = [
            spawn.Process(
                target=write_from_a_process,
                args=(resources, engine, str(tmp_path / f"cache-{p}"), prefix, documents, start, errors),
            )
            for p, prefix in enumerate("xyz"[:writers])
        ]
        for process in processes:
            process.start()
        for process in processes:
            process.join(180)
        for process in processes:
            if process.is_alive():
                process.terminate()
        failures = []
        while not errors.empty():
            failures.append(errors.get())
        assert failures == []
        assert [process.exitcode for process in processes] == [0] * writers
        clock = SystemClock()
        reader: Any
        if engine == "lance":
            reader = LanceSearchIndex(resources.store(clock), resources.location, clock)
        else:
            cache = tmp_path / "cache-reader"
            reader = FileSearchIndex(
                S3IndexFiles(resources.store(clock), resources.client("s3"), resources.bucket, cache, clock)
            )
        try:
            for prefix in "xyz"[:writers]:
                assert found(reader, f"animal{prefix}") == {f"doc_{prefix}{n}" for n in range(documents)}
            assert sum(reader.count("kb_1", f"doc_{p}{n}") for p in "xyz" for n in range(documents)) == 12
        finally:
            reader.close()
