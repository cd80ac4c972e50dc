"""A hand-written MCP server that speaks only the legacy 2024-11-05 HTTP+SSE transport (not the SDK server).

* ``GET /sse`` opens a session's event stream; its first event is ``endpoint`` with ``/messages?session_id=<id>``.
* ``POST /messages?session_id=<id>`` takes one JSON-RPC message and answers ``202 Accepted``; the JSON-RPC response
  travels as an ``event: message`` on that session's stream. An unknown session gets ``404 Session not found``.
* ``initialize`` always answers protocol version 2024-11-05 (whatever the client proposed); ``ping``,
  ``tools/list`` and ``tools/call`` work; any other method (``server/discover`` included) is -32601.

Use an instance as the ASGI app (``with serve(LegacySSEServer()) as base: ...``). ``received`` keeps every message
in arrival order; :meth:`drop_sessions` forgets every session (as a restarted or load-balanced server would) and
:meth:`close` ends the open streams so uvicorn can shut down. Both may be called from the test's thread.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

PROTOCOL_VERSION = "2024-11-05"
SERVER_INFO = {"name": "legacy-sse-test", "version": "0.9.0"}
INSTRUCTIONS = "A 2024-11-05 HTTP+SSE server: add numbers, schedule reminders."

ADD_TOOL: dict[str, Any] = {
    "name": "add",
    "description": "Add two numbers.",
    "inputSchema": {
        "type": "object",
        "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    },
}
SCHEDULE_TOOL: dict[str, Any] = {
    "name": "schedule",
    "description": "Schedule a reminder at a time or after a delay.",
    "inputSchema": {
        "type": "object",
        "properties": {
            "text": {"type": "string", "minLength": 1},
            "when": {
                "oneOf": [
                    {"type": "string", "format": "date-time"},
                    {
                        "type": "object",
                        "properties": {"minutes": {"type": "integer", "minimum": 1}},
                        "required": ["minutes"],
                    },
                ]
            },
            "tags": {"type": "array", "items": {"type": "string", "enum": ["home", "work"]}, "uniqueItems": True},
        },
        "required": ["text", "when"],
    },
}


class LegacySSEServer:
    """The ASGI app; see the module docstring."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self._sessions: dict[str, asyncio.Queue[dict[str, Any] | None]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._app = Starlette(
            routes=[Route("/sse", self._stream, methods=["GET"]), Route("/messages", self._post, methods=["POST"])]
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app(scope, receive, send)

    @property
    def methods(self) -> list[str]:
        """The methods of the messages received, in order (responses from the client have none)."""
        return [message["method"] for message in self.received if "method" in message]

    def drop_sessions(self) -> None:
        """Forget every session; their streams stay open, but posts to them now get 404."""
        self._sessions.clear()

    def close(self) -> None:
        """End every open stream (thread-safe)."""
        if self._loop is not None:
            for queue in list(self._sessions.values()):
                self._loop.call_soon_threadsafe(queue.put_nowait, None)

    # -- transport ---------------------------------------------------------------------------------------------

    async def _stream(self, request: Request) -> Response:
        self._loop = asyncio.get_running_loop()
        session_id = secrets.token_hex(16)
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._sessions[session_id] = queue

        async def events() -> Any:
            try:
                yield f"event: endpoint\ndata: /messages?session_id={session_id}\n\n"
                while (message := await queue.get()) is not None:
                    yield f"event: message\ndata: {json.dumps(message)}\n\n"
            finally:
                if self._sessions.get(session_id) is queue:
                    del self._sessions[session_id]

        return StreamingResponse(events(), media_type="text/event-stream", headers={"cache-control": "no-cache"})

    async def _post(self, request: Request) -> Response:
        queue = self._sessions.get(request.query_params.get("session_id", ""))
        if queue is None:
            return PlainTextResponse("Session not found", status_code=404)
        try:
            message = json.loads(await request.body())
        except ValueError:
            return PlainTextResponse("Could not parse message", status_code=400)
        if not isinstance(message, dict):
            return PlainTextResponse("Expected one JSON-RPC message", status_code=400)
        self.received.append(message)
        if "method" in message and "id" in message:  # a request: the answer goes out on the stream
            await queue.put({"jsonrpc": "2.0", "id": message["id"], **self._answer(message)})
        return PlainTextResponse("Accepted", status_code=202)

    # -- methods -----------------------------------------------------------------------------------------------

    def _answer(self, request: dict[str, Any]) -> dict[str, Any]:
        method, params = request["method"], request.get("params") or {}
        if method == "initialize":
            return {
                "result": {
                    "protocolVersion": PROTOCOL_VERSION,
                    "capabilities": {"tools": {}},
                    "serverInfo": SERVER_INFO,
                    "instructions": INSTRUCTIONS,
                }
            }
        if method == "ping":
            return {"result": {}}
        if method == "tools/list":
            return {"result": {"tools": [ADD_TOOL, SCHEDULE_TOOL]}}
        if method == "tools/call":
            return {"result": self._call(params.get("name"), params.get("arguments") or {})}
        return {"error": {"code": -32601, "message": "Method not found"}}

    @staticmethod
    def _call(name: Any, arguments: dict[str, Any]) -> dict[str, Any]:
        if name == "add":
            a: Any = arguments.get("a")
            b: Any = arguments.get("b")
            if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in (a, b)):
                return {"content": [{"type": "text", "text": "a and b must be numbers"}], "isError": True}
            return {"content": [{"type": "text", "text": str(a + b)}]}
        if name == "schedule":
            return {"content": [{"type": "text", "text": f"scheduled: {arguments.get('text')}"}]}
        return {"content": [{"type": "text", "text": f"unknown tool: {name}"}], "isError": True}
