"""The body of a POST to an MCP endpoint, checked before the SDK sees it (see :mod:`mcpbridge.http.mcp.transport`):
one JSON-RPC message or a 400 with the JSON-RPC error that says what is wrong; then the body, read once, given back.
"""

from __future__ import annotations

import pydantic_core
from mcp import types
from mcp.types.jsonrpc import jsonrpc_message_adapter
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Message, Receive


def invalid_message(request: Request, body: bytes) -> Response | None:
    """The JSON-RPC error for a body that is not one valid message, or None to let the SDK take it."""
    if not (request.headers.get("content-type") or "").lower().startswith("application/json"):
        return None  # the SDK refuses the content type itself
    try:
        message = pydantic_core.from_json(body, allow_inf_nan=False)
    except ValueError as exc:
        return _jsonrpc_error(types.PARSE_ERROR, f"Parse error: {exc}")
    if isinstance(message, list):
        return _jsonrpc_error(types.INVALID_REQUEST, "Invalid Request: batches are not supported, send one message")
    if not isinstance(message, dict):
        return _jsonrpc_error(types.INVALID_REQUEST, "Invalid Request: the body must be a JSON-RPC message object")
    request_id = message.get("id")
    valid_id = isinstance(request_id, str) or (isinstance(request_id, int) and not isinstance(request_id, bool))
    if "method" in message and "id" in message and not valid_id:
        # A request all the same (it has an id), not a notification: JSON-RPC ids are strings or integers, and MCP
        # allows no null id.
        return _jsonrpc_error(types.INVALID_REQUEST, "Invalid Request: the id must be a string or an integer")
    params = message.get("params")
    if (
        message.get("jsonrpc") == "2.0"
        and isinstance(message.get("method"), str)
        and (params is None or isinstance(params, dict))
    ):
        return None  # a request (its id checked above) or a notification, as the envelope's schema has them
    try:
        jsonrpc_message_adapter.validate_python(message, by_name=False)
    except ValidationError:
        return _jsonrpc_error(
            types.INVALID_REQUEST,
            "Invalid Request: not a JSON-RPC 2.0 request, notification or response",
            request_id if valid_id else None,
        )
    return None


def _jsonrpc_error(code: int, message: str, request_id: str | int | None = None) -> JSONResponse:
    return JSONResponse({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}, 400)


def replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` with the body, already read, given back first."""
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Message:
        return pending.pop() if pending else await receive()

    return replayed
