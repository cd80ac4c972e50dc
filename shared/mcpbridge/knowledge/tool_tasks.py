"""Knowledge tools run as Tasks (``ask``, ``add_document``): the durable record of each, in the store.

A task belongs to the endpoint and the caller (the endpoint's token, or one OAuth user on it) that asked for it;
anyone else is told it does not exist. Its work runs after the request that created it, as a background job (the
process's thread pool under ``serve``, an asynchronous invocation of the indexer function on AWS), so the request
answers at once. Records are kept :data:`RETENTION_SECONDS` from their creation (the store's TTL), ended or not.

    WS#<ws> / TOOLTASK#<id>   {endpoint_id, owner, user_id, client_id, tool, arguments, knowledge_base_ids,
                               base_url, status, result, document_id, runner, started_at, status_message,
                               created_at, updated_at, expires_at}

``status``: ``working`` until the tool has answered (``add_document``: until its document's indexing has ended, which
the reader checks), then ``completed`` with the tool's result (an error result included, as the synchronous call
answers it), ``failed`` (the run itself was lost: the server restarted, or the run outlasted its deadline) or
``cancelled`` by its caller. A run writes its outcome only over ``working``, so a cancellation wins.

Under ``serve`` a run is the process's: ``runner`` names the process, and a ``working`` task of another (an earlier
process, since restarted) is failed when next read, naming why; it is not resumed, since ``ask`` may have half run
(a session turn written). On AWS a run that started more than :data:`RUN_DEADLINE_SECONDS` ago and never ended (its
invocation timed out) is failed alike. A job delivered twice runs the tool once (``started_at``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from mcpbridge.domain.identity import timestamp
from mcpbridge.domain.ids import is_id, new_id
from mcpbridge.domain.items import AttrAbsent, Compare, Condition, Item, ItemAbsent, Key, Update, all_of
from mcpbridge.domain.knowledge import KnowledgeAccess
from mcpbridge.errors import ConditionFailed, NotFound
from mcpbridge.ports import Clock, Jobs, Store

TASK_ID_PREFIX: Final = "task"
RUN_JOB: Final = "tool_task"
RETENTION_SECONDS: Final = 24 * 3600
"""How long a task (and its result) is kept after its creation: its ``ttlMs``."""
RUN_DEADLINE_SECONDS: Final = 960
"""A run not ended this long after it started is lost (the indexer function's timeout is 900 s)."""
PROCESS_RUNNER: Final = f"process:{uuid.uuid4().hex}"
"""This process, as the runner of the tasks it runs on its own thread pool."""
TOOLS: Final = frozenset({"ask", "add_document"})

RESTARTED: Final = "the server restarted before the task finished; ask again"
LOST: Final = "the task's run did not finish in time; ask again"


@dataclass(frozen=True)
class ToolTask:
    id: str
    workspace_id: str
    endpoint_id: str
    owner: str
    user_id: str | None
    client_id: str | None
    tool: str
    arguments: dict[str, Any]
    knowledge_base_ids: frozenset[str] | None
    base_url: str
    status: str
    result: dict[str, Any] | None
    document_id: str | None
    runner: str | None
    started_at: float | None
    status_message: str | None
    created_at: str
    updated_at: str

    @property
    def access(self) -> KnowledgeAccess:
        return KnowledgeAccess(self.workspace_id, self.knowledge_base_ids)


def task_key(workspace_id: str, task_id: str) -> Key:
    return Key(f"WS#{workspace_id}", f"TOOLTASK#{task_id}")


def is_task_id(value: str) -> bool:
    return is_id(value, TASK_ID_PREFIX)


class ToolTasks:
    """The tasks of knowledge tools: created by a request, run by a job, read (and cancelled) by their caller."""

    def __init__(self, store: Store, clock: Clock, jobs: Jobs, *, in_process: bool) -> None:
        self._store = store
        self._clock = clock
        self._jobs = jobs
        self._in_process = in_process

    def create(
        self,
        access: KnowledgeAccess,
        *,
        endpoint_id: str,
        owner: str,
        user_id: str | None,
        client_id: str | None,
        tool: str,
        arguments: Mapping[str, Any],
        base_url: str,
        run: bool = True,
    ) -> ToolTask:
        """Record a new ``working`` task and, with ``run``, submit the job that runs it (without, the caller runs
        it at once, with :meth:`claim` and :meth:`finish`)."""
        now = self._clock.now()
        task_id = new_id(TASK_ID_PREFIX)
        kb_ids = None if access.knowledge_base_ids is None else sorted(access.knowledge_base_ids)
        item: Item = {
            **task_key(access.workspace_id, task_id).as_dict(),
            "endpoint_id": endpoint_id,
            "owner": owner,
            "user_id": user_id,
            "client_id": client_id,
            "tool": tool,
            "arguments": dict(arguments),
            "knowledge_base_ids": kb_ids,
            "base_url": base_url,
            "status": "working",
            "runner": PROCESS_RUNNER if self._in_process else None,
            "created_at": timestamp(now),
            "updated_at": timestamp(now),
            "expires_at": int(now) + RETENTION_SECONDS,
        }
        item = {name: value for name, value in item.items() if value is not None}
        self._store.put(item, condition=Condition("task_is_new", ItemAbsent()))
        task = _task_of(item)
        if run:
            try:
                self._jobs.submit(RUN_JOB, {"workspace_id": access.workspace_id, "task_id": task_id})
            except Exception:
                self._store.delete(task_key(access.workspace_id, task_id))
                raise
        return task

    def find(self, workspace_id: str, task_id: str, *, endpoint_id: str, owner: str) -> ToolTask:
        """The caller's task, lost runs failed on the way (``NotFound`` for any other id)."""
        item = self._store.get(task_key(workspace_id, task_id)) if is_task_id(task_id) else None
        if item is None or item.get("endpoint_id") != endpoint_id or item.get("owner") != owner:
            raise NotFound("no such task", code="task_not_found")
        task = _task_of(item)
        reason = self._lost(task)
        return task if reason is None else self.fail(task, reason)

    def _lost(self, task: ToolTask) -> str | None:
        if task.status != "working" or task.document_id is not None:
            return None
        if task.runner is not None and task.runner != PROCESS_RUNNER:
            return RESTARTED
        if task.started_at is not None and self._clock.now() - task.started_at > RUN_DEADLINE_SECONDS:
            return LOST
        return None

    def claim(self, workspace_id: str, task_id: str) -> ToolTask | None:
        """The task for its run to start: None when it is gone, no longer working, or started already (a job
        delivered twice)."""
        condition = Condition("task_unstarted", all_of(Compare("status", "=", "working"), AttrAbsent("started_at")))
        try:
            item = self._store.update(
                task_key(workspace_id, task_id), Update(set={"started_at": int(self._clock.now())}), condition=condition
            )
        except ConditionFailed:
            return None
        return _task_of(item)

    def finish(self, task: ToolTask, result: Mapping[str, Any], *, document_id: str | None = None) -> ToolTask:
        """The tool's answer: ``completed`` with it, or, for a document to wait for, still ``working`` with it."""
        changes: dict[str, Any] = {"result": dict(result)}
        if document_id is None:
            changes["status"] = "completed"
        else:
            changes["document_id"] = document_id
        return self._settle(task, changes)

    def complete(self, task: ToolTask, result: Mapping[str, Any]) -> ToolTask:
        """A task waiting for its document, ended with the result as it now stands."""
        return self._settle(task, {"status": "completed", "result": dict(result)})

    def fail(self, task: ToolTask, reason: str) -> ToolTask:
        return self._settle(task, {"status": "failed", "status_message": reason})

    def cancel(self, task: ToolTask) -> ToolTask:
        return self._settle(task, {"status": "cancelled", "status_message": "cancelled by its caller"})

    def _settle(self, task: ToolTask, changes: dict[str, Any]) -> ToolTask:
        """Write ``changes`` over a ``working`` task; the task as it stands when it had ended meanwhile."""
        update = Update(set={**changes, "updated_at": timestamp(self._clock.now())})
        try:
            item = self._store.update(
                task_key(task.workspace_id, task.id),
                update,
                condition=Condition("task_working", Compare("status", "=", "working")),
            )
        except ConditionFailed as exc:
            if exc.current is None:
                raise NotFound("no such task", code="task_not_found") from None
            return _task_of(exc.current)
        return _task_of(item)


def _task_of(item: Mapping[str, Any]) -> ToolTask:
    kb_ids = item.get("knowledge_base_ids")
    started = item.get("started_at")
    return ToolTask(
        id=str(item["sk"]).removeprefix("TOOLTASK#"),
        workspace_id=str(item["pk"]).removeprefix("WS#"),
        endpoint_id=str(item["endpoint_id"]),
        owner=str(item["owner"]),
        user_id=item.get("user_id"),
        client_id=item.get("client_id"),
        tool=str(item["tool"]),
        arguments=dict(item.get("arguments") or {}),
        knowledge_base_ids=None if kb_ids is None else frozenset(str(k) for k in kb_ids),
        base_url=str(item.get("base_url") or ""),
        status=str(item["status"]),
        result=item.get("result"),
        document_id=item.get("document_id"),
        runner=item.get("runner"),
        started_at=None if started is None else float(started),
        status_message=item.get("status_message"),
        created_at=str(item["created_at"]),
        updated_at=str(item["updated_at"]),
    )
