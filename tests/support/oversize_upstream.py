"""An upstream MCP server whose answer to one method never ends (for the answer-cap tests and bench).

Everything but ``method`` is answered by an SDK server with one tool, ``echo``. ``method`` gets an answer of one of
:data:`SHAPES`: JSON promising 300 MB in its ``Content-Length``, chunked JSON, or an event stream whose one event
never ends; it goes on until the client leaves (``left`` is set) or ``ceiling`` bytes are written (``sent``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
from mcp import types
from mcp.server.lowlevel import Server

from tests.support.everything import handle_stateless

CEILING = 64 * 1024 * 1024
"""The most an answer writes by default before giving up on its own (an unbounded reader takes all of it)."""
FILLER = b'{"name":"t","inputSchema":{"type":"object"}},' * 1400
SHAPES = ("json-length", "json-chunked", "event-stream")
"""The answers that do not end; ``json-valid`` is a valid tool listing of about ``ceiling`` bytes (1,000 tools)."""


class Oversize:
    """An SDK server with one tool, ``echo``, except that ``method`` is answered with an answer of ``shape`` that
    goes on until its client leaves (or ``ceiling`` bytes)."""

    def __init__(self, method: str, shape: str, ceiling: int = CEILING) -> None:
        self.method = method
        self.shape = shape
        self.ceiling = ceiling
        self.report: Path | None = None
        self.sent = 0
        self.left = anyio.Event()

        async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
            tools = [types.Tool(name="echo", input_schema={"type": "object"})]
            if shape == "json-valid":  # about ``ceiling`` bytes in all, answered by the SDK server itself
                description = "x" * max(1, ceiling // 1000 - 100)
                tools += [
                    types.Tool(name=f"tool_{i}", description=description, input_schema={"type": "object"})
                    for i in range(1000)
                ]
                self.sent = ceiling
            return types.ListToolsResult(tools=tools)

        async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            return types.CallToolResult(content=[types.TextContent(type="text", text="hi")])

        self.server: Server[Any] = Server("oversize", version="1", on_list_tools=list_tools, on_call_tool=call_tool)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await handle_stateless(self.server, scope, receive, send)
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        request = json.loads(body)
        if request.get("method") != self.method or self.shape == "json-valid":
            replayed = [{"type": "http.request", "body": body, "more_body": False}]

            async def replay() -> Any:
                return replayed.pop() if replayed else await receive()

            await handle_stateless(self.server, scope, replay, send)
            return
        await self._oversize(request["id"], receive, send)

    async def _oversize(self, request_id: Any, receive: Any, send: Any) -> None:
        headers = [(b"content-type", b"application/json")]
        opening = json.dumps({"jsonrpc": "2.0", "id": request_id}).encode()[:-1] + b',"result":{"tools":['
        ceiling = self.ceiling
        if self.shape == "json-length":
            headers.append((b"content-length", b"300000000"))
            ceiling = min(ceiling, 300_000_000 - len(opening) - len(FILLER))  # never past what it promised
        elif self.shape == "event-stream":
            headers = [(b"content-type", b"text/event-stream")]
            opening = b"event: message\ndata: " + opening
        await send({"type": "http.response.start", "status": 200, "headers": headers})

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            self.left.set()

        async with anyio.create_task_group() as group:
            group.start_soon(watch)
            await send({"type": "http.response.body", "body": opening, "more_body": True})
            while not self.left.is_set() and self.sent < ceiling:
                await send({"type": "http.response.body", "body": FILLER, "more_body": True})
                self.sent += len(FILLER)
                await anyio.lowlevel.checkpoint()  # a send to a client that left returns at once: let watch() see it
            group.cancel_scope.cancel()
        if self.report is not None:
            self.report.write_text(json.dumps({"sent": self.sent, "left": self.left.is_set()}))


def main() -> None:
    """``python -m tests.support.oversize_upstream METHOD SHAPE CEILING PORT REPORT``: serve until killed, writing
    ``{"sent", "left"}`` to REPORT after each oversize answer (benchmarks run it in a process of its own)."""
    import sys

    import uvicorn

    method, shape, ceiling, port, report = sys.argv[1:6]
    upstream = Oversize(method, shape, ceiling=int(ceiling))
    upstream.report = Path(report)
    uvicorn.run(upstream, host="127.0.0.1", port=int(port), log_level="error", lifespan="off")


if __name__ == "__main__":
    main()
