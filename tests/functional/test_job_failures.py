"""Background work that fails never hangs, on the AWS backend in moto (DynamoDB, S3, KMS, SQS):

* a job that fails all its retries reaches the job-recovery function as Lambda's destination record (through an SQS
  queue, as the event source mapping delivers it); its document ends ``failed`` with the reason, never ``pending``;
  other jobs are submitted again once, then given up (left for the redrive queue);
* a knowledge base's index held by another writer sends the document back to ``pending`` and the job raises, to be
  retried, instead of failing it;
* deleting a document never waits for the index: its chunks and blobs go in a job;
* the sweep re-drives documents and deletions whose jobs never ended, and fails a document after two re-drives;
* locally, the thread pool retries and then records a job it gave up on the same way.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from mcpbridge.adapters.aws.s3_search_index import S3IndexFiles, lease_key
from mcpbridge.adapters.index_files.search_index import FileSearchIndex
from mcpbridge.adapters.local.jobs import ThreadJobs
from mcpbridge.bootstrap import Container
from mcpbridge.domain.items import Update
from mcpbridge.domain.knowledge import KnowledgeAccess
from mcpbridge.domain.shards import list_partitions
from mcpbridge.errors import Unavailable
from mcpbridge.knowledge.document_records import doc_key
from mcpbridge.knowledge.documents import DELETING, PENDING, blob_key, deletion_key
from mcpbridge.lambda_entry import make_recovery_handler
from mcpbridge.settings import Settings
from tests.support.aws import REPO_ROOT, create_aws_resources, set_fake_aws_env
from tests.support.clock import FakeClock
from tests.support.moto_atomic import atomic_dynamodb
from tests.support.stepfunctions import FakeLambdaContext

REGION = "eu-west-1"
INDEXER_ARN = "arn:aws:lambda:eu-west-1:123456789012:function:mcpbridge-indexer:live"
HOUR = 3600.0


class HeldJobs:
    """Jobs accepted and kept; ``run_all`` carries them out (as the indexer would)."""

    def __init__(self) -> None:
        self.submitted: list[tuple[str, dict[str, str]]] = []

    def submit(self, kind: str, payload: dict[str, str]) -> None:
        self.submitted.append((kind, dict(payload)))

    def take(self) -> list[tuple[str, dict[str, str]]]:
        taken, self.submitted = self.submitted, []
        return taken


@dataclass
class World:
    container: Container
    clock: FakeClock
    jobs: HeldJobs
    sqs: Any
    queue_url: str
    kb_id: str
    cache: Path

    @property
    def access(self) -> KnowledgeAccess:
        return KnowledgeAccess("ws_jobs")

    def document(self, document_id: str) -> dict[str, Any]:
        item = self.container.store.get(doc_key("ws_jobs", document_id))
        assert item is not None
        return item

    def add(self, text: str = "Walruses haul out on ice floes.") -> str:
        return self.container.documents.create_from_text(self.access, self.kb_id, title="walruses", content=text).id

    def run_jobs(self) -> None:
        for kind, payload in self.jobs.take():
            self.container.run_job(kind, payload)

    def deliver(self, *records: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
        """Send destination records through the queue and hand them to the recovery function as the event source
        mapping would; (message ids, the function's answer)."""
        for record in records:
            self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=json.dumps(record))
        received = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10)["Messages"]
        event = {
            "Records": [
                {
                    "messageId": m["MessageId"],
                    "receiptHandle": m["ReceiptHandle"],
                    "body": m["Body"],
                    "eventSource": "aws:sqs",
                    "eventSourceARN": "arn:aws:sqs:eu-west-1:123456789012:failed-jobs",
                }
                for m in received
            ]
        }
        handler = make_recovery_handler(self.container)
        answer = handler(event, FakeLambdaContext(INDEXER_ARN, "job-recovery", 120))
        return [m["MessageId"] for m in received], answer


def destination_record(
    kind: str,
    payload: dict[str, str],
    *,
    condition: str = "RetriesExhausted",
    error_type: str = "Unavailable",
    message: str = "the embedding provider failed: it did not answer within 30 s",
    request_id: str | None = None,
) -> dict[str, Any]:
    """Lambda's record of an asynchronous invocation that failed for good (infra/README.md, Failed jobs)."""
    record: dict[str, Any] = {
        "version": "1.0",
        "timestamp": "2026-01-01T12:00:00.000Z",
        "requestContext": {
            "requestId": request_id or str(uuid.uuid4()),
            "functionArn": INDEXER_ARN,
            "condition": condition,
            "approximateInvokeCount": 3 if condition == "RetriesExhausted" else 0,
        },
        "requestPayload": {"kind": kind, "payload": payload},
    }
    if condition == "RetriesExhausted":
        record["responseContext"] = {"statusCode": 200, "executedVersion": "7", "functionError": "Unhandled"}
        record["responsePayload"] = {"errorType": error_type, "errorMessage": message, "stackTrace": ["..."]}
    return record


@pytest.fixture
def restore_logging() -> Iterator[None]:
    logger = logging.getLogger("mcpbridge")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    try:
        yield
    finally:
        logger.handlers[:], logger.level, logger.propagate = saved


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, restore_logging: None) -> Iterator[World]:
    set_fake_aws_env(monkeypatch, REGION)
    with mock_aws(), atomic_dynamodb():
        resources = create_aws_resources(table_name="mcpbridge-jobs", region=REGION)
        clock, jobs = FakeClock(), HeldJobs()
        settings = Settings(
            backend="aws",
            table_name=resources.table_name,
            kms_key_id=resources.kms_key_id,
            bucket_name=resources.bucket_name,
            aws_region=REGION,
            index_cache_dir=tmp_path / "index-cache",
        )
        container = Container(settings, clock=clock, jobs=jobs, embedder=None)
        # A writer waits a fifth of a second for a busy index here (a minute when deployed).
        files = S3IndexFiles(
            container.store, container._s3, resources.bucket_name, tmp_path / "cache", clock, lease_wait_seconds=0.2
        )
        container.__dict__["search_index"] = FileSearchIndex(files)
        sqs = boto3.client("sqs", region_name=REGION)
        queue_url = sqs.create_queue(QueueName="failed-jobs")["QueueUrl"]
        kb = container.knowledge_bases.create(KnowledgeAccess("ws_jobs"), name="Animals")
        try:
            yield World(container, clock, jobs, sqs, queue_url, kb.id, tmp_path)
        finally:
            container.close()


def index_payload(document_id: str, version: int = 1) -> dict[str, str]:
    return {"workspace_id": "ws_jobs", "document_id": document_id, "version": str(version)}


def pending_entries(world: World, prefix: str = PENDING) -> list[str]:
    store = world.container.store
    return [i["gsi2sk"] for p in list_partitions(prefix) for i in store.query(p, index="gsi2", limit=100).items]


# ------------------------------------------------------------------------------------------------ failed jobs


def test_a_job_that_fails_all_its_retries_ends_failed_with_the_reason_never_pending(world: World) -> None:
    document_id = world.add()
    assert world.document(document_id)["parse_status"] == "pending"
    record = destination_record("index_document", index_payload(document_id))

    _, answer = world.deliver(record)

    assert answer == {"batchItemFailures": []}  # settled: SQS deletes it
    document = world.document(document_id)
    assert document["parse_status"] == "failed"
    assert document["parse_error"] == (
        "indexing failed after 3 attempts: the embedding provider failed: it did not answer within 30 s; "
        "update the document to index it again"
    )
    assert "gsi2pk" not in document
    assert pending_entries(world) == []
    # The same record delivered again changes nothing.
    world.deliver(record)
    assert world.document(document_id) == document


@pytest.mark.parametrize(
    ("record_options", "reason"),
    [
        ({"condition": "EventAgeExceeded"}, "indexing waited too long for the indexer (more than an hour, throttled)"),
        (
            {"error_type": "Sandbox.Timedout", "message": "Task timed out after 900.00 seconds"},
            "indexing failed after 3 attempts: it did not finish within the indexer's time limit",
        ),
        (
            {"error_type": "KeyError", "message": "'arn:aws:secret-looking-internal-detail'"},
            "indexing failed after 3 attempts: an internal error (KeyError)",
        ),
    ],
)
def test_the_reason_says_what_happened_without_internals(
    world: World, record_options: dict[str, str], reason: str
) -> None:
    document_id = world.add()
    world.deliver(destination_record("index_document", index_payload(document_id), **record_options))
    document = world.document(document_id)
    assert document["parse_status"] == "failed"
    assert document["parse_error"].startswith(reason)
    assert "secret-looking" not in document["parse_error"]


def test_a_failure_of_a_version_since_replaced_changes_nothing(world: World) -> None:
    document_id = world.add()
    world.container.documents.update(world.access, document_id, content="Walruses have tusks.")
    _, answer = world.deliver(destination_record("index_document", index_payload(document_id, 1)))
    assert answer == {"batchItemFailures": []}
    document = world.document(document_id)
    assert (document["version"], document["parse_status"]) == (2, "pending")
    assert pending_entries(world) == [document_id]


def test_other_jobs_are_submitted_again_once_then_given_up(world: World) -> None:
    payload = {"workspace_id": "ws_jobs", "knowledge_base_id": "kb_gone"}
    first = destination_record("purge_knowledge_base", payload)
    _, answer = world.deliver(first)
    assert answer == {"batchItemFailures": []}
    assert world.jobs.take() == [("purge_knowledge_base", payload)]

    world.deliver(first)  # the same failure delivered again: not a second failure
    assert world.jobs.take() == []

    ids, answer = world.deliver(destination_record("purge_knowledge_base", payload))  # it failed again
    assert answer == {"batchItemFailures": [{"itemIdentifier": ids[0]}]}  # left for the redrive queue
    assert world.jobs.take() == []


def test_a_reanalysis_given_up_no_longer_shows_as_under_way(world: World) -> None:
    bases = world.container.knowledge_bases
    assert bases.request_reanalysis("ws_jobs", world.kb_id, "french")
    world.jobs.take()
    payload = {"workspace_id": "ws_jobs", "knowledge_base_id": world.kb_id, "language": "french"}
    world.deliver(destination_record("reanalyse_index", payload))
    assert world.jobs.take() == [("reanalyse_index", payload)]
    assert bases.get(world.access, world.kb_id).reanalysis is not None

    world.deliver(destination_record("reanalyse_index", payload))
    assert bases.get(world.access, world.kb_id).reanalysis is None
    assert bases.request_reanalysis("ws_jobs", world.kb_id, "french")  # it can be asked for again


def test_a_record_that_is_not_a_job_is_left_for_the_redrive_queue(world: World) -> None:
    ids, answer = world.deliver({"something": "else"})
    assert answer == {"batchItemFailures": [{"itemIdentifier": ids[0]}]}


# ------------------------------------------------------------------------------------------------ a busy index


def hold_the_lease(world: World) -> None:
    """Another writer holds the knowledge base's index (its lease runs two more minutes)."""
    until = world.clock.now() + 120
    world.container.store.update(lease_key(world.kb_id), Update(set={"holder": "other", "lease_until": until}))


def test_a_busy_index_sends_the_document_back_to_pending_and_the_job_is_retried(world: World) -> None:
    document_id = world.add()
    ((kind, payload),) = world.jobs.take()
    hold_the_lease(world)

    with pytest.raises(Unavailable) as busy:
        world.container.run_job(kind, payload)  # Lambda retries a job that raised (with backoff)

    assert busy.value.code == "index_busy"
    document = world.document(document_id)
    assert document["parse_status"] == "pending"  # not failed
    assert document.get("parse_error") is None
    assert pending_entries(world) == [document_id]

    world.container.store.delete(lease_key(world.kb_id))  # the other write is done
    world.container.run_job(kind, payload)
    assert world.document(document_id)["parse_status"] == "completed"


def test_a_busy_index_through_every_retry_ends_failed_saying_so(world: World) -> None:
    document_id = world.add()
    ((kind, payload),) = world.jobs.take()
    hold_the_lease(world)
    with pytest.raises(Unavailable) as busy:
        world.container.run_job(kind, payload)
    world.deliver(destination_record(kind, payload, message=busy.value.message))
    document = world.document(document_id)
    assert document["parse_status"] == "failed"
    assert "stayed busy" in document["parse_error"]


def test_a_document_that_would_outgrow_the_index_file_fails_naming_lance(world: World) -> None:
    container = world.container
    bucket = container.settings.bucket_name
    limit = 512 * 1024
    limited = S3IndexFiles(
        container.store, container._s3, bucket, world.cache / "limited", world.clock, max_file_bytes=limit
    )
    container.__dict__["search_index"] = FileSearchIndex(limited)
    first = world.add()
    world.run_jobs()
    assert world.document(first)["parse_status"] == "completed"
    document_id = world.add("Seals sleep on beaches. " * 20_000)
    world.run_jobs()  # failed for good, not raised to be retried
    document = world.document(document_id)
    assert document["parse_status"] == "failed"
    assert "would grow to" in document["parse_error"]
    assert "SearchEngine=lance" in document["parse_error"]
    assert container.search_index.keyword([world.kb_id], "seals") == []
    assert [h.chunk.document_id for h in container.search_index.keyword([world.kb_id], "walruses")] == [first]


# ------------------------------------------------------------------------------------------------ deletion


def test_deleting_a_document_never_waits_for_the_index(world: World) -> None:
    document_id = world.add()
    world.run_jobs()
    source = blob_key("ws_jobs", document_id, 1, "source")
    assert world.container.blobs.get(source) is not None
    hold_the_lease(world)

    world.container.documents.delete(world.access, document_id)  # returns although the index is busy

    assert world.container.store.get(doc_key("ws_jobs", document_id)) is None
    ((kind, payload),) = world.jobs.take()
    assert kind == "delete_document"
    assert pending_entries(world, DELETING) == [document_id]
    with pytest.raises(Unavailable):  # the job waits its turn: retried later
        world.container.run_job(kind, payload)
    world.container.store.delete(lease_key(world.kb_id))
    world.container.run_job(kind, payload)
    assert world.container.search_index.count(world.kb_id, document_id) == 0
    assert world.container.blobs.get(source) is None
    assert world.container.store.get(deletion_key("ws_jobs", document_id)) is None
    assert pending_entries(world, DELETING) == []
    world.container.run_job(kind, payload)  # twice is harmless


# ------------------------------------------------------------------------------------------------ the sweep


def sweep(world: World) -> dict[str, Any]:
    answer = make_recovery_handler(world.container)({}, FakeLambdaContext(INDEXER_ARN, "job-recovery", 120))
    return answer


def test_the_sweep_redrives_a_lost_job_twice_then_fails_the_document(world: World) -> None:
    document_id = world.add()
    world.jobs.take()  # the job is lost
    assert sweep(world) == {"status": "swept", "backlog": 1, "redriven": 0, "failed": 0}  # not past the deadline

    for redrive in (1, 2):
        world.clock.advance(2 * HOUR + 1)
        assert sweep(world)["redriven"] == 1
        assert world.jobs.take() == [("index_document", index_payload(document_id))]
        assert world.document(document_id)["redrives"] == redrive
        assert sweep(world)["redriven"] == 0  # its new job has its own deadline

    world.clock.advance(2 * HOUR + 1)
    assert sweep(world) == {"status": "swept", "backlog": 1, "redriven": 0, "failed": 1}
    document = world.document(document_id)
    assert document["parse_status"] == "failed"
    assert "submitted 3 times" in document["parse_error"]
    assert sweep(world)["backlog"] == 0


def test_the_sweep_redrives_a_document_stuck_processing_and_its_job_completes(world: World) -> None:
    document_id = world.add()
    world.jobs.take()
    world.container.store.update(doc_key("ws_jobs", document_id), Update(set={"parse_status": "processing"}))
    world.clock.advance(2 * HOUR + 1)
    assert sweep(world)["redriven"] == 1
    world.run_jobs()
    assert world.document(document_id)["parse_status"] == "completed"
    assert sweep(world)["backlog"] == 0


def test_the_sweep_reads_documents_stored_before_queued_at_existed(world: World) -> None:
    document_id = world.add()
    world.jobs.take()
    key = doc_key("ws_jobs", document_id)
    world.container.store.update(key, Update(set={"gsi2pk": PENDING}, remove=["queued_at"]))  # an older release's
    world.clock.advance(2 * HOUR + 1)
    assert sweep(world)["redriven"] == 1
    assert world.jobs.take() == [("index_document", index_payload(document_id))]


def test_the_sweep_redrives_a_lost_deletion(world: World) -> None:
    document_id = world.add()
    world.run_jobs()
    world.container.documents.delete(world.access, document_id)
    world.jobs.take()  # the deletion job is lost
    world.clock.advance(2 * HOUR + 1)
    sweep(world)
    ((kind, payload),) = world.jobs.take()
    assert (kind, payload["document_id"]) == ("delete_document", document_id)
    world.container.run_job(kind, payload)
    assert world.container.store.get(deletion_key("ws_jobs", document_id)) is None
    assert world.container.search_index.count(world.kb_id, document_id) == 0


def test_the_function_sweeps_on_a_scheduled_event(monkeypatch: pytest.MonkeyPatch, restore_logging: None) -> None:
    set_fake_aws_env(monkeypatch, REGION)
    with mock_aws():
        resources = create_aws_resources(table_name="mcpbridge-recovery", region=REGION)
        for name, value in resources.settings_env().items():
            monkeypatch.setenv(name, value)
        handler = load_recovery_handler()
        event = {"task": "sweep"}  # the schedule's input
        context = FakeLambdaContext(INDEXER_ARN, "job-recovery", 120)
        assert handler(event, context) == {"status": "swept", "backlog": 0, "redriven": 0, "failed": 0}


def load_recovery_handler() -> Callable[[dict[str, Any], Any], dict[str, Any]]:
    path = REPO_ROOT / "functions" / "job_recovery" / "handler.py"
    spec = importlib.util.spec_from_file_location(f"mcpbridge_lambda_job_recovery_{uuid.uuid4().hex}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    handler: Callable[[dict[str, Any], Any], dict[str, Any]] = module.handler
    return handler


# ------------------------------------------------------------------------------------------------ locally


class FlakyIndex:
    """A search index whose writes fail with a busy index ``failures`` times, then work."""

    def __init__(self, index: Any, failures: int) -> None:
        self._index = index
        self.failures = failures

    def replace_document(self, *args: Any, **kwargs: Any) -> None:
        if self.failures:
            self.failures -= 1
            raise Unavailable("the index is busy", code="index_busy")
        self._index.replace_document(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._index, name)


@pytest.mark.parametrize(("failures", "status"), [(2, "completed"), (3, "failed")])
def test_the_local_thread_pool_retries_then_records_a_job_it_gave_up_on(
    tmp_path: Path, failures: int, status: str
) -> None:
    container = Container(Settings(data_dir=tmp_path / "data"), embedder=None)
    pool = ThreadJobs(container.run_job, backoff_seconds=0.01, on_failure=container._job_failed)
    container.__dict__["jobs"] = pool
    try:
        container.__dict__["search_index"] = FlakyIndex(container.search_index, failures)
        access = KnowledgeAccess("ws_local")
        kb = container.knowledge_bases.create(access, name="Local")
        document = container.documents.create_from_text(access, kb.id, title="t", content="Narwhals.")
        pool.close()  # waits for the job and its retries
        stored = container.documents.get(access, document.id)
        assert stored.parse_status == status
        if status == "failed":
            assert stored.parse_error == (
                "indexing failed after 3 attempts: the index is busy; update the document to index it again"
            )
    finally:
        container.close()
