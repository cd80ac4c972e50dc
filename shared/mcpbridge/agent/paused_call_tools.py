"""The tools a published endpoint that publishes external tools offers beside them, for calls that paused:
``check_call`` (a paused call's result once it has run) and ``answer_call`` (the caller's answer to a question its
upstream put during the call). :mod:`mcpbridge.agent.gateway` answers them."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from mcpbridge.agent.calls import ToolCall

APPROVAL_PAGE: Final = "/console/approvals/{pending_id}"
CHECK_CALL: Final = "check_call"
ANSWER_CALL: Final = "answer_call"

CHECK_CALL_TOOL: Final[dict[str, Any]] = {
    "annotations": {
        "destructiveHint": False,
        "idempotentHint": True,
        "openWorldHint": False,
        "readOnlyHint": True,
        "title": "Check a paused call",
    },
    "description": (
        "A call of an external tool that needed a person's approval (or your authorization) answered with a "
        "call_id. Give that call_id here: you get the tool's result once the call has run, the same waiting notice "
        "while it still waits, or an error naming why it did not run (rejected, timed out)."
    ),
    "inputSchema": {
        "properties": {"call_id": {"description": "The call_id a paused call answered.", "type": "string"}},
        "required": ["call_id"],
        "type": "object",
    },
    "name": CHECK_CALL,
    "title": "Check a paused call",
}


ANSWER_CALL_TOOL: Final[dict[str, Any]] = {
    "annotations": {
        "destructiveHint": False,
        "idempotentHint": False,
        "openWorldHint": True,
        "readOnlyHint": False,
        "title": "Answer a service's question",
    },
    "description": (
        "A call of an external tool whose service asked a question before it could go on answered with a call_id "
        "and an input_request (a message and a requested_schema). Give that call_id and your answer as content, a "
        "JSON object matching requested_schema: the tool then runs again with the answer. Call check_call for its "
        "result."
    ),
    "inputSchema": {
        "properties": {
            "call_id": {"description": "The call_id the paused call answered.", "type": "string"},
            "content": {"description": "The answer, matching the input_request's requested_schema.", "type": "object"},
        },
        "required": ["call_id", "content"],
        "type": "object",
    },
    "name": ANSWER_CALL,
    "title": "Answer a service's question",
}


def waiting_notice(call: ToolCall, base_url: str, authorization_url: str | None) -> dict[str, Any]:
    """The tool result of a call that still waits (for a person, its caller's authorization or an answer), for a
    client that is not asked through an input request: what it waits for, where, and how to get its result."""
    data: dict[str, Any] = {"call_id": call.id, "status": call.status}
    if call.input_request is not None:
        data["approval_url"] = base_url.rstrip("/") + APPROVAL_PAGE.format(pending_id=call.id)
        data["input_request"] = {
            "message": call.input_request["message"],
            "requested_schema": call.input_request["requested_schema"],
        }
        text = (
            f"The service asks a question before this call can go on (input_request). Answer it with {ANSWER_CALL} "
            "(call_id and content matching requested_schema), or on approval_url"
        )
    elif call.status == "awaiting_oauth":
        data["authorization_url"] = authorization_url
        text = "This call waits for your authorization of the service: open authorization_url"
    elif call.status == "awaiting_approval":
        data["approval_url"] = base_url.rstrip("/") + APPROVAL_PAGE.format(pending_id=call.id)
        text = "This call waits for a person's approval (approval_url)"
    else:
        text = "This call was approved and is running"
    if call.deadline_at is not None:
        data["deadline_at"] = call.deadline_at
    text += f". Call {CHECK_CALL} with call_id {call.id} for its result."
    return tool_result(data, text, is_error=False)


def tool_result(data: dict[str, Any], text: str, *, is_error: bool) -> dict[str, Any]:
    """A tool result carrying ``data`` both as text (after ``text``) and as structured content."""
    body = json.dumps(data, ensure_ascii=False, indent=2)
    return {"content": [{"text": f"{text}\n{body}", "type": "text"}], "isError": is_error, "structuredContent": data}
