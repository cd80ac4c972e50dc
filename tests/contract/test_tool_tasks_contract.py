"""The records of ``ask`` / ``add_document`` Tasks (``knowledge.tool_tasks``) on both stores: one run per task
however often its job is delivered, a cancellation that a late run does not overwrite, only the owner's reads, and
the retention after which a task is gone."""

from __future__ import annotations

from typing import Any

import pytest

from mcpbridge.domain.knowledge import KnowledgeAccess
from mcpbridge.errors import NotFound
from mcpbridge.knowledge.tool_tasks import LOST, RETENTION_SECONDS, RUN_DEADLINE_SECONDS, RUN_JOB, ToolTask, ToolTasks
from mcpbridge.ports import Store
from tests.support.clock import FakeClock

ACCESS = KnowledgeAccess("ws_1", frozenset({"kb_b", "kb_a"}))
OWNER = "endpoint:ep_1"


class RecordedJobs:
    """``ports.Jobs`` keeping what was submitted (the run is driven by the test, as the job would)."""

    def __init__(self) -> None:
        self.submitted: list[tuple[str, dict[str, str]]] = []

    def submit(self, kind: str, payload: dict[str, str]) -> None:
        self.submitted.append((kind, dict(payload)))


def _tasks(store: Store, clock: FakeClock, jobs: RecordedJobs, *, in_process: bool = False) -> ToolTasks:
    return ToolTasks(store, clock, jobs, in_process=in_process)


def _create(tasks: ToolTasks, **overrides: Any) -> ToolTask:
    fields: dict[str, Any] = {
        "endpoint_id": "ep_1",
        "owner": OWNER,
        "user_id": None,
        "client_id": None,
        "tool": "ask",
        "arguments": {"question": "Where do walruses rest?"},
        "base_url": "https://hub.example",
        **overrides,
    }
    return tasks.create(ACCESS, **fields)


def test_a_task_is_recorded_and_its_job_submitted(store: Store, clock: FakeClock) -> None:
    jobs = RecordedJobs()
    tasks = _tasks(store, clock, jobs)
    task = _create(tasks)
    assert jobs.submitted == [(RUN_JOB, {"workspace_id": "ws_1", "task_id": task.id})]
    found = tasks.find("ws_1", task.id, endpoint_id="ep_1", owner=OWNER)
    assert (found.status, found.tool, found.arguments) == ("working", "ask", {"question": "Where do walruses rest?"})
    assert found.access == ACCESS


def test_a_job_delivered_twice_runs_the_task_once(store: Store, clock: FakeClock) -> None:
    tasks = _tasks(store, clock, RecordedJobs())
    task = _create(tasks)
    claimed = tasks.claim("ws_1", task.id)
    assert claimed is not None
    assert tasks.claim("ws_1", task.id) is None
    done = tasks.finish(claimed, {"content": [], "isError": False})
    assert done.status == "completed"
    assert tasks.claim("ws_1", task.id) is None


def test_a_cancelled_task_stays_cancelled_when_its_run_ends_late(store: Store, clock: FakeClock) -> None:
    tasks = _tasks(store, clock, RecordedJobs())
    task = _create(tasks)
    claimed = tasks.claim("ws_1", task.id)
    assert claimed is not None
    assert tasks.cancel(task).status == "cancelled"
    late = tasks.finish(claimed, {"content": [], "isError": False})
    assert (late.status, late.result) == ("cancelled", None)


def test_only_the_owner_through_its_endpoint_finds_a_task(store: Store, clock: FakeClock) -> None:
    tasks = _tasks(store, clock, RecordedJobs())
    task = _create(tasks)
    for endpoint_id, owner in (("ep_2", OWNER), ("ep_1", "endpoint:ep_1#user:usr_1"), ("ep_1", "endpoint:ep_2")):
        with pytest.raises(NotFound):
            tasks.find("ws_1", task.id, endpoint_id=endpoint_id, owner=owner)
    with pytest.raises(NotFound):
        tasks.find("ws_2", task.id, endpoint_id="ep_1", owner=OWNER)
    with pytest.raises(NotFound):
        tasks.find("ws_1", "not-a-task-id", endpoint_id="ep_1", owner=OWNER)


def test_a_task_is_kept_for_its_retention_then_gone(store: Store, clock: FakeClock) -> None:
    tasks = _tasks(store, clock, RecordedJobs())
    task = _create(tasks)
    clock.advance(RETENTION_SECONDS - 1)
    assert tasks.find("ws_1", task.id, endpoint_id="ep_1", owner=OWNER).id == task.id
    clock.advance(2)
    with pytest.raises(NotFound):
        tasks.find("ws_1", task.id, endpoint_id="ep_1", owner=OWNER)


def test_a_run_that_outlasts_its_deadline_is_failed_when_read(store: Store, clock: FakeClock) -> None:
    tasks = _tasks(store, clock, RecordedJobs())
    task = _create(tasks)
    assert tasks.claim("ws_1", task.id) is not None
    clock.advance(RUN_DEADLINE_SECONDS - 1)
    assert tasks.find("ws_1", task.id, endpoint_id="ep_1", owner=OWNER).status == "working"
    clock.advance(2)
    failed = tasks.find("ws_1", task.id, endpoint_id="ep_1", owner=OWNER)
    assert (failed.status, failed.status_message) == ("failed", LOST)


def test_a_document_task_waits_working_with_its_document(store: Store, clock: FakeClock) -> None:
    tasks = _tasks(store, clock, RecordedJobs(), in_process=True)
    task = _create(tasks, tool="add_document", arguments={"knowledge_base_id": "kb_a", "title": "Seals"}, run=False)
    waiting = tasks.finish(task, {"structuredContent": {"document": {"id": "doc_1"}}}, document_id="doc_1")
    assert (waiting.status, waiting.document_id) == ("working", "doc_1")
    clock.advance(RUN_DEADLINE_SECONDS * 2)  # indexing may take long: a waiting document is not a lost run
    assert tasks.find("ws_1", task.id, endpoint_id="ep_1", owner=OWNER).status == "working"
    done = tasks.complete(waiting, {"content": [], "isError": False})
    assert done.status == "completed"
