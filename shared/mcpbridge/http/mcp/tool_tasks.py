"""``ask`` and ``add_document`` as Tasks on a published endpoint (the extension ``io.modelcontextprotocol/tasks``,
on 2026-07-28; records in :mod:`mcpbridge.knowledge.tool_tasks`).

A ``tools/call`` of either, whose client declares the extension, answers a ``CreateTaskResult`` at once; the tool
runs as a background job (the ``serve`` process's thread pool; the indexer function on AWS, outside API Gateway's
29 s). ``tasks/get`` answers ``working`` until it has run, then ``completed`` with the result the synchronous call
gives (an ``isError`` result for a refusal, as that call answers it). ``add_document`` stays ``working`` until its
document's indexing has ended, and completes with the document as it then stands (``parse_status`` ``completed`` or
``failed``); a document given as ``content`` is created in the request itself (its text is too large for the task's
record), one given as ``url`` is fetched by the job. ``tasks/cancel`` cancels a task not yet ended (its result, if
the run still ends, is dropped; a document already created stays); cancelling an ended task is acknowledged alike
and changes nothing.
``tasks/update`` has nothing to answer: these tools never ask for input. Task ids start ``task_``; gateway calls'
(``call_``) go to :mod:`mcpbridge.agent.call_tasks`.

A call the tool would refuse at once (a missing or oversized ``question``, the rate limit) is answered as the
synchronous call answers it, with no task (the extension's immediate result).
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING, Any, Final

from mcpbridge.errors import MCPBridgeError, NotFound
from mcpbridge.knowledge.tool_tasks import RETENTION_SECONDS, RUN_JOB, ToolTask

if TYPE_CHECKING:
    from mcpbridge.bootstrap import Container
    from mcpbridge.http.mcp.transport import Authority, McpEndpointApp

log = logging.getLogger("mcpbridge.mcp")

POLL_INTERVAL_MS: Final = 1000
INDEXING: Final = frozenset({"pending", "processing"})


def owner_of(endpoint_id: str, user_id: str | None) -> str:
    """Whose task it is: the endpoint's token, or one OAuth user on the endpoint (as ``ask`` sessions are owned)."""
    return f"endpoint:{endpoint_id}" if user_id is None else f"endpoint:{endpoint_id}#user:{user_id}"


def create(
    app: McpEndpointApp, authority: Authority, name: str, arguments: dict[str, Any], base_url: str
) -> dict[str, Any]:
    """The answer to ``tools/call`` of ``ask`` or ``add_document`` as a task (blocking: store writes)."""
    from mcpbridge.http.mcp.tools import SPECS_BY_NAME
    from mcpbridge.http.mcp.transport import tool_result

    container, endpoint = app.container, authority.endpoint
    refused = app.admit_call(authority)
    if refused is not None:
        return refused
    base_url = container.settings.public_base_url or base_url
    if not _runs_later(name, arguments):  # answered now, as the synchronous call answers it
        return tool_result(container, authority, name, arguments, base_url)
    known = SPECS_BY_NAME[name].input_schema.get("properties", {})
    kept = {key: value for key, value in arguments.items() if key in known}
    tasks = container.tool_tasks
    owner = owner_of(endpoint.id, authority.user_id)
    new_task = partial(
        tasks.create,
        authority.access,
        endpoint_id=endpoint.id,
        owner=owner,
        user_id=authority.user_id,
        client_id=authority.client_id,
        tool=name,
        base_url=base_url,
    )
    if name == "add_document" and "url" not in arguments:
        result = tool_result(container, authority, name, arguments, base_url)
        document_id = _document_id(result)
        if document_id is None:
            return result  # refused: nothing was created, and the caller learns why at once
        kept.pop("content", None)
        task = new_task(arguments=kept, run=False)
        task = tasks.finish(task, result, document_id=document_id)
    else:
        task = new_task(arguments=kept)
    log.info("tool %s on endpoint %s runs as task %s", name, endpoint.id, task.id)
    return {"resultType": "task", **envelope(task)}


def _runs_later(name: str, arguments: dict[str, Any]) -> bool:
    from mcpbridge.knowledge.answers import QUESTION_MAX_CHARS

    if name == "ask":
        question = arguments.get("question")
        return isinstance(question, str) and bool(question.strip()) and len(question) <= QUESTION_MAX_CHARS
    return True


def _document_id(result: dict[str, Any]) -> str | None:
    if result.get("isError"):
        return None
    document = (result.get("structuredContent") or {}).get("document") or {}
    found = document.get("id")
    return found if isinstance(found, str) else None


def register(container: Container) -> None:
    """Run this process's jobs of Tasks (the ``serve`` process, the indexer function) here."""
    container.add_job_runner(RUN_JOB, partial(run, container))


def run(container: Container, payload: dict[str, str]) -> None:
    """The job of one task: run its tool as the caller that asked, record the outcome. Never raises: a failure is
    the task's (a retry would run the tool twice)."""
    from mcpbridge.http.mcp.transport import Authority, error_result, tool_result

    tasks = container.tool_tasks
    task = tasks.claim(payload["workspace_id"], payload["task_id"])
    if task is None:
        return
    try:
        endpoint = container.endpoints.find(task.endpoint_id)
        if endpoint is None or not endpoint.enabled or task.tool not in endpoint.tools:
            message = "this endpoint no longer offers the tool"
            result = error_result("endpoint_unavailable", message, 403)
        else:
            authority = Authority(endpoint, endpoint.tools, task.access, task.user_id, task.client_id)
            result = tool_result(container, authority, task.tool, task.arguments, task.base_url)
        document_id = _document_id(result) if task.tool == "add_document" else None
        tasks.finish(task, result, document_id=document_id)
    except Exception:
        log.exception("task %s of endpoint %s failed", task.id, task.endpoint_id)
        tasks.fail(task, "the task failed unexpectedly")


def answer(container: Container, authority: Authority, method: str, task_id: str) -> dict[str, Any]:
    """``tasks/get``, ``tasks/update`` or ``tasks/cancel`` of the caller's task (blocking). Raises ``NotFound`` for
    any other id."""
    tasks = container.tool_tasks
    owner = owner_of(authority.endpoint.id, authority.user_id)
    task = tasks.find(authority.access.workspace_id, task_id, endpoint_id=authority.endpoint.id, owner=owner)
    if method == "tasks/update":
        return {"resultType": "complete"}
    task = _indexed(container, task)
    if method == "tasks/cancel":  # the same acknowledgement for an ended task, left as it ended (idempotent)
        if task.status == "working":
            tasks.cancel(task)
        return {"resultType": "complete"}
    return {"resultType": "complete", **detailed(task)}


def _indexed(container: Container, task: ToolTask) -> ToolTask:
    """A task that waits for its document, completed once the document's indexing has ended."""
    if task.status != "working" or task.document_id is None or task.result is None:
        return task
    from mcpbridge.http.mcp.tools import document_view
    from mcpbridge.http.mcp.transport import error_result, json_result

    try:
        document = container.documents.get(task.access, task.document_id)
    except NotFound:
        return container.tool_tasks.complete(
            task, error_result("document_not_found", "the document was deleted before its indexing ended", 404)
        )
    except MCPBridgeError:
        return task
    if document.parse_status in INDEXING:
        return task
    data = {**(task.result.get("structuredContent") or {}), "document": document_view(document)}
    return container.tool_tasks.complete(task, json_result(data))


def envelope(task: ToolTask) -> dict[str, Any]:
    """The fields every task carries (the extension's ``Task``)."""
    return {
        "taskId": task.id,
        "status": task.status,
        "createdAt": task.created_at,
        "lastUpdatedAt": task.updated_at,
        "ttlMs": RETENTION_SECONDS * 1000,
        "pollIntervalMs": POLL_INTERVAL_MS,
    }


def detailed(task: ToolTask) -> dict[str, Any]:
    found = envelope(task)
    if task.status == "completed" and task.result is not None:
        found["result"] = task.result
    elif task.status in ("failed", "cancelled") and task.status_message:
        found["statusMessage"] = task.status_message
    elif task.status == "working" and task.document_id is not None:
        found["statusMessage"] = "the document is being indexed"
    return found
