"""The Tasks extension (``io.modelcontextprotocol/tasks``) on the official SDK client: a ``ClientExtension`` whose
claim on ``tools/call``'s ``resultType: "task"`` polls ``tasks/get`` through the client's own session until the task
ends, so ``client.call_tool`` answers the tool's result as it would synchronously. It keeps every task it saw (the
``CreateTaskResult`` and each poll) for the test to inspect."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp_types import CallToolResult, Request, RequestParams, Result
from pydantic import ConfigDict

TASKS = "io.modelcontextprotocol/tasks"
ENDED = frozenset({"completed", "failed", "cancelled"})


class CreatedTask(Result):
    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"]
    task_id: str
    status: str
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None


class TaskState(Result):
    model_config = ConfigDict(extra="allow")
    task_id: str
    status: str
    status_message: str | None = None
    result: dict[str, Any] | None = None


class TaskIdParams(RequestParams):
    task_id: str


class GetTask(Request[TaskIdParams, Literal["tasks/get"]]):
    name_param: ClassVar[str | None] = "taskId"


class CancelTask(Request[TaskIdParams, Literal["tasks/cancel"]]):
    name_param: ClassVar[str | None] = "taskId"


class TaskFailed(RuntimeError):
    def __init__(self, state: TaskState) -> None:
        super().__init__(f"task {state.task_id} ended {state.status}: {state.status_message}")
        self.state = state


@dataclass
class Tasks(ClientExtension):
    """Declare the extension and resolve tasks by polling (every ``poll_seconds``, or the server's interval)."""

    poll_seconds: float | None = None
    created: list[CreatedTask] = field(default_factory=list)
    polls: list[TaskState] = field(default_factory=list)
    identifier: ClassVar[str] = TASKS  # type: ignore[misc]

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return (ResultClaim(result_type="task", model=CreatedTask, resolve=self._resolve),)

    async def _resolve(self, created: CreatedTask, ctx: ClaimContext) -> CallToolResult:
        self.created.append(created)
        interval = self.poll_seconds or (created.poll_interval_ms or 1000) / 1000
        while True:
            state = await ctx.session.send_request(
                GetTask(method="tasks/get", params=TaskIdParams(task_id=created.task_id)), TaskState
            )
            self.polls.append(state)
            if state.status in ENDED:
                break
            await asyncio.sleep(interval)
        if state.status != "completed" or state.result is None:
            raise TaskFailed(state)
        return CallToolResult.model_validate(state.result)
