"""The search index seen by several instances at once: a directory of files (embedded) and S3 files behind a
DynamoDB version pointer and a writer lease (AWS, on moto). Each "instance" has its own cache, as Lambda
sandboxes do."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from mcpbridge.adapters.aws.dynamodb import DynamoStore
from mcpbridge.adapters.aws.s3_search_index import S3IndexFiles, pointer_key
from mcpbridge.adapters.index_files.search_index import DirectoryIndexFiles, FileSearchIndex
from mcpbridge.domain.knowledge import Chunk
from tests.support.aws import create_aws_resources
from tests.support.clock import FakeClock
from tests.support.embedder import HashingEmbedder
from tests.support.moto_atomic import atomic_dynamodb

Instances = Callable[[], FileSearchIndex]
EMBEDDER = HashingEmbedder(16)


@pytest.fixture(params=["local", "aws"])
def instances(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Instances]:
    made: list[FileSearchIndex] = []
    if request.param == "local":

        def local() -> FileSearchIndex:
            made.append(FileSearchIndex(DirectoryIndexFiles(tmp_path / "indexes")))
            return made[-1]

        yield local
    else:
        request.getfixturevalue("aws_credentials")
        with mock_aws(), atomic_dynamodb():
            resources = create_aws_resources(table_name="index-test")
            clock = FakeClock()

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


def index_document(index: FileSearchIndex, document_id: str, *texts: str) -> None:
    parts = chunks(document_id, *texts)
    vectors = EMBEDDER.embed([c.text for c in parts], purpose="document")
    index.replace_document("kb_1", document_id, parts, vectors, EMBEDDER.name)


def found(index: FileSearchIndex, query: str) -> set[str]:
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

    def write(index: FileSearchIndex, prefix: str) -> None:
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
