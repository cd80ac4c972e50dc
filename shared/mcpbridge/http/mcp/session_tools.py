"""The endpoint's tools for ``ask`` sessions: ``list_sessions``, ``get_session``, ``delete_session``.

They reach the sessions ``ask`` started through the same endpoint (and, signed in with OAuth, by the same user): the
sessions the caller may continue, nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mcpbridge.errors import InvalidInput

if TYPE_CHECKING:
    from mcpbridge.http.mcp.tools import ToolContext
    from mcpbridge.knowledge.ask_sessions import AskSession

_STRING: dict[str, Any] = {"type": "string"}
_INTEGER: dict[str, Any] = {"type": "integer"}
_SESSION_ID = {"type": "string", "description": "The session_id an ask answer gave (ses_...)."}
LIST_LIMIT = 100


def _session_id(args: dict[str, Any]) -> str:
    value = args.get("session_id")
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput("session_id is required (the session_id an ask answer gave)", code="missing_argument")
    if len(value) > 100:
        raise InvalidInput("session_id is longer than 100 characters", code="invalid_argument")
    return value


def _summary(session: AskSession) -> dict[str, Any]:
    return {
        "session_id": session.id,
        "title": session.title,
        "turn_count": session.turn_count,
        "created_at": session.created_at,
        "updated_at": session.updated_at,
        "expires_at": session.expires_at,
    }


def list_sessions(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    limit = args.get("limit", 20)
    if isinstance(limit, bool) or not isinstance(limit, int):
        limit = 20
    limit = max(1, min(LIST_LIMIT, limit))
    found = ctx.container.ask_sessions.list(ctx.access, owner=ctx.owner, credential=ctx.owner)
    return {"sessions": [_summary(s) for s in found[:limit]], "total": len(found), "has_more": len(found) > limit}


def get_session(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    session = ctx.container.ask_sessions.get(ctx.access, _session_id(args), owner=ctx.owner, credential=ctx.owner)
    return {**_summary(session), "turns": [{"question": t.question, "answer": t.answer} for t in session.turns]}


def delete_session(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    session = ctx.container.ask_sessions.delete(ctx.access, _session_id(args), owner=ctx.owner, credential=ctx.owner)
    return {"deleted": True, "session_id": session.id}


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required}


INPUTS: dict[str, dict[str, Any]] = {
    "list_sessions": _object({"limit": {"type": "integer", "minimum": 1, "maximum": LIST_LIMIT, "default": 20}}, []),
    "get_session": _object({"session_id": _SESSION_ID}, ["session_id"]),
    "delete_session": _object({"session_id": _SESSION_ID}, ["session_id"]),
}
DESCRIPTIONS: dict[str, str] = {
    "list_sessions": "List the ask conversations started through this endpoint, most recently used first.",
    "get_session": "Read one ask conversation: its questions and answers, oldest first.",
    "delete_session": "Delete one ask conversation; its session_id can no longer be continued.",
}
_SUMMARY: dict[str, Any] = {
    "session_id": _STRING,
    "title": _STRING,
    "turn_count": _INTEGER,
    "created_at": {"type": ["string", "null"]},
    "updated_at": _STRING,
    "expires_at": _STRING,
}
OUTPUTS: dict[str, dict[str, Any]] = {
    "list_sessions": _object(
        {
            "sessions": {"type": "array", "items": _object(_SUMMARY, list(_SUMMARY))},
            "total": _INTEGER,
            "has_more": {"type": "boolean"},
        },
        ["sessions", "total", "has_more"],
    ),
    "get_session": _object(
        {
            **_SUMMARY,
            "turns": {
                "type": "array",
                "items": _object({"question": _STRING, "answer": _STRING}, ["question", "answer"]),
            },
        },
        [*_SUMMARY, "turns"],
    ),
    "delete_session": _object(
        {"deleted": {"type": "boolean", "const": True}, "session_id": _STRING}, ["deleted", "session_id"]
    ),
}
