"""The two lists every workspace writes to, documents waiting to be indexed and tool calls not finished yet, are
spread over 16 partitions of their secondary index (no constant partition key), on SQLite and on DynamoDB (moto);
their readers read every shard, and the unsharded partition that earlier releases wrote, so an upgrade leaves no
document or call behind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mcpbridge.agent.calls import OPEN_PARTITION, call_key
from mcpbridge.bootstrap import Container
from mcpbridge.domain.ids import new_id
from mcpbridge.domain.items import Update
from mcpbridge.domain.knowledge import KnowledgeAccess
from mcpbridge.domain.shards import SHARD_COUNT, list_partitions
from mcpbridge.knowledge.document_records import doc_key
from mcpbridge.knowledge.documents import PENDING
from tests.support.containers import container_on

WORKSPACE = "ws_shards"


class HeldJobs:
    """Jobs accepted and kept (never run), so documents stay pending."""

    def __init__(self) -> None:
        self.submitted: list[tuple[str, dict[str, str]]] = []

    def submit(self, kind: str, payload: dict[str, str]) -> None:
        self.submitted.append((kind, payload))


@pytest.fixture(params=["local", "aws"])
def container(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Container]:
    with container_on(request.param, tmp_path, monkeypatch, jobs=HeldJobs(), embedder=None) as built:
        yield built


def partitions_of(container: Container, prefix: str) -> dict[str, int]:
    """Index partition -> how many entries it holds, for every partition a reader of the list reads."""
    return {
        partition: len(container.store.query(partition, index="gsi2", limit=1000).items)
        for partition in list_partitions(prefix)
    }


def test_pending_documents_are_spread_over_shards_and_read_from_all(container: Container) -> None:
    access = KnowledgeAccess(WORKSPACE)
    kb = container.knowledge_bases.create(access, name="Shards")
    created = [
        container.documents.create_from_text(access, kb.id, title=f"doc {i}", content=f"text {i}").id for i in range(24)
    ]
    spread = partitions_of(container, PENDING)
    assert spread[PENDING] == 0  # nothing under the constant key
    assert sum(spread.values()) == len(created)
    assert len([n for n in spread.values() if n]) > 1
    assert len(list_partitions(PENDING)) == SHARD_COUNT + 1

    # A document left pending by an older release, under the unsharded key, is still found.
    legacy = created[0]
    container.store.update(doc_key(WORKSPACE, legacy), Update(set={"gsi2pk": PENDING}))
    jobs = container.jobs
    assert isinstance(jobs, HeldJobs)
    jobs.submitted.clear()
    assert container.documents.resume_pending() == len(created)
    assert sorted(payload["document_id"] for _, payload in jobs.submitted) == sorted(created)


def _new_call(container: Container, status: str) -> str:
    item = {
        "id": new_id("call"),
        "workspace_id": WORKSPACE,
        "owner_user_id": "usr_1",
        "service_id": "svc_1",
        "tool_name": "echo",
        "tool_ref": "ref_1",
        "arguments": {},
        "status": status,
    }
    return container.tool_call_records.create(item).id


def test_unfinished_calls_are_spread_over_shards_and_read_from_all(container: Container) -> None:
    opened = [_new_call(container, "awaiting_approval") for _ in range(20)]
    spread = partitions_of(container, OPEN_PARTITION)
    assert spread[OPEN_PARTITION] == 0
    assert sum(spread.values()) == len(opened)
    assert len([n for n in spread.values() if n]) > 1

    legacy = opened[0]
    container.store.update(call_key(WORKSPACE, legacy), Update(set={"gsi2pk": OPEN_PARTITION}))
    records = container.tool_call_records
    assert sorted(c.id for c in records.unfinished()) == sorted(opened)
    # A call that ends leaves the list, wherever its entry was.
    for call_id in (legacy, opened[1]):
        records.move(records.find(WORKSPACE, call_id), "rejected")
    assert sorted(c.id for c in records.unfinished()) == sorted(opened[2:])
    assert sum(partitions_of(container, OPEN_PARTITION).values()) == len(opened) - 2
