"""Gateway calls as Tasks: the MCP extension ``io.modelcontextprotocol/tasks`` (SEP-2663, on 2026-07-28).

A client that declares the extension in a ``tools/call``'s client capabilities gets, for a published external tool
whose call waits for a person, a ``CreateTaskResult`` at once: the task is the call's durable record, its id the
call's id. The tool's result when it ran at once is answered as usual (the extension's immediate-result shortcut).

* ``tasks/get``: the task as it stands (a *DetailedTask*). A call waiting for a person is ``input_required`` with
  its page as a URL-mode elicitation in ``inputRequests`` (``approval``: the approval page; ``oauth``: the caller's
  own consent URL) until the client answers it with ``tasks/update``; then, and while approved or running, it is
  ``working``. A call waiting on its upstream's own question is ``input_required`` with that question as a form-mode
  elicitation (``input_<n>``); the client's ``tasks/update`` answer to it is the answer the call runs again with
  (:mod:`mcpbridge.client.input_relay`). A call that ran is ``completed`` with the tool's result inlined, ``isError``
  included; a call that did not run (rejected, timed out, refused by a check, its outcome unknown) is ``completed``
  with an error result naming why, as the synchronous call answers it (``failed`` is the protocol's, for the server's
  own failures); a call withdrawn by its caller or whose authorization was cancelled is ``cancelled``.
* ``tasks/update``: the client's answers to ``inputRequests``, recorded on the call (the approver still decides).
* ``tasks/cancel``: the caller withdraws a call that waits for a person; one approved or running is not stopped.
  Both answer the extension's empty acknowledgement.

A task is kept as long as its call's record (``MCPBRIDGE_CALL_RETENTION_DAYS``, counted from its creation): that is
its ``ttlMs``. Only the caller that made the call, through the endpoint that made it, sees its task; any other id is
unknown (``-32602``).
"""

from __future__ import annotations

from typing import Any, Final

from mcpbridge.agent.calls import ToolCall

POLL_INTERVAL_MS: Final = 1000
ANSWERED: Final = "mcp_task_answered"
"""The call record's attribute listing the input requests its client answered (``tasks/update``)."""

_WORKING: Final = frozenset({"approved", "ready", "running"})
_ASKING: Final = {"awaiting_approval": "approval", "awaiting_oauth": "oauth"}


def asked_of(call: ToolCall) -> str | None:
    """The input request a waiting call puts to its client (``approval``, ``oauth``, or ``input_<n>`` for its
    upstream's n-th question), or None."""
    if call.input_request is not None:
        return input_key(call)
    return _ASKING.get(call.status)


def input_key(call: ToolCall) -> str:
    """The key of the upstream's current question in ``inputRequests`` (one per round: a new question, a new key)."""
    return f"input_{int(call.item.get('input_rounds') or 1)}"


def form_elicitation(question: dict[str, Any]) -> dict[str, Any]:
    """The upstream's question as the form-mode ``elicitation/create`` params it came as."""
    return {"mode": "form", "message": question["message"], "requestedSchema": question["requested_schema"]}


def answered(call: ToolCall) -> list[str]:
    value = call.item.get(ANSWERED)
    return [str(key) for key in value] if isinstance(value, list) else []


def envelope(call: ToolCall, ttl_seconds: int) -> dict[str, Any]:
    """The fields every task carries (the extension's ``Task``)."""
    return {
        "taskId": call.id,
        "status": status_of(call),
        "createdAt": call.created_at,
        "lastUpdatedAt": call.updated_at,
        "ttlMs": ttl_seconds * 1000,
        "pollIntervalMs": POLL_INTERVAL_MS,
    }


def status_of(call: ToolCall) -> str:
    asked = asked_of(call)
    if asked is not None:
        return "working" if asked in answered(call) else "input_required"
    if call.status in _WORKING:
        return "working"
    if call.status == "cancelled":
        return "cancelled"
    return "completed"


def created(call: ToolCall, ttl_seconds: int) -> dict[str, Any]:
    """``CreateTaskResult``: flat, the task's fields beside ``resultType``."""
    return {"resultType": "task", **envelope(call, ttl_seconds)}


def detailed(
    call: ToolCall,
    ttl_seconds: int,
    *,
    question: tuple[str, dict[str, Any]] | None,
    result: dict[str, Any] | None,
) -> dict[str, Any]:
    """The ``tasks/get`` answer: ``question`` is the waiting call's (key, elicitation params), ``result`` the tool
    result of an ended call (its own, or the error result naming why it did not run)."""
    task = envelope(call, ttl_seconds)
    if task["status"] == "input_required" and question is None:  # nothing this client could answer
        task["status"] = "working"
    status = task["status"]
    if status == "input_required" and question is not None:
        key, elicitation = question
        task["inputRequests"] = {key: {"method": "elicitation/create", "params": elicitation}}
    elif status == "working" and call.input_request is not None:
        task["statusMessage"] = "waits for the answer to its service's question"
    elif status == "working" and call.status in _ASKING:
        waiting = call.status == "awaiting_approval"
        task["statusMessage"] = "waits for a person's approval" if waiting else "waits for the user's authorization"
    elif status == "completed" and result is not None:
        task["result"] = result
    elif status == "cancelled":
        task["statusMessage"] = str((call.error or {}).get("message") or "cancelled")
    return task
