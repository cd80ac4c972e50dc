"""A request's body arrives at a minimum rate, or the request is answered 408 and no handler runs on it.

``mcpbridge serve`` reads requests straight from their clients, with no API Gateway in front to receive them whole
first: a body trickling in would hold its request, and whatever the app holds for it, for as long as the client
likes. :class:`BodyDeadline` gives a request's body ``grace`` seconds from the request's start, plus one second for
every ``min_rate`` bytes received so far: a small body must come within the grace, a large one at ``min_rate``
bytes a second on average (a 100 MiB upload over a slow link is served; one byte every few seconds is not). Every
``receive()`` of the body is bounded by what is left of that. When it runs out, the request is answered at once
(408 ``request_timeout``, closing the connection) whatever the app does next, and the ``receive()`` raises, so the
code reading the body (FastAPI's, the MCP endpoint's) stops there: no handler runs on part of a body. What the app
sends after that is dropped. Once the body is complete, ``receive()`` is no longer bounded: it then only waits for
the client to leave (an answer streamed to the client, as an MCP stream's events, is not a body and has no limit).
"""

from __future__ import annotations

import anyio
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcpbridge.http.problems import problem


class BodyTimedOut(HTTPException):
    """The body's deadline passed; the request has been answered 408 already."""


class _Exchange:
    """One request's ``receive`` and ``send``, as the app sees them under the deadline."""

    def __init__(self, receive: Receive, send: Send, grace: float, min_rate: int) -> None:
        self._receive = receive
        self._send = send
        self._grace = grace
        self._min_rate = min_rate
        self._start = anyio.current_time()
        self._received = 0
        self._body_complete = False
        self._answer_started = False
        self.timed_out = False

    async def receive(self) -> Message:
        if self._body_complete:
            return await self._receive()
        if not self.timed_out:
            with anyio.move_on_after(self._deadline() - anyio.current_time()):
                message = await self._receive()
                if message["type"] == "http.request":
                    self._received += len(message.get("body", b""))
                if message["type"] != "http.request" or not message.get("more_body", False):
                    self._body_complete = True
                return message
            await self._time_out()
        raise BodyTimedOut(408, self._detail())

    async def send(self, message: Message) -> None:
        if self.timed_out:
            return  # the 408 went instead
        if message["type"] == "http.response.start":
            self._answer_started = True
        await self._send(message)

    def _deadline(self) -> float:
        return self._start + self._grace + self._received / self._min_rate

    def _detail(self) -> str:
        return (
            f"the request's body did not arrive within {self._grace:g} s plus 1 s for every {self._min_rate} bytes "
            f"received ({self._received} bytes came)"
        )

    async def _time_out(self) -> None:
        self.timed_out = True
        if self._answer_started:
            return  # too late for a 408: the app's answer ends unfinished and uvicorn closes the connection
        answer = problem(408, "request_timeout", self._detail(), headers={"Connection": "close"})
        await self._send({"type": "http.response.start", "status": 408, "headers": answer.raw_headers})
        await self._send({"type": "http.response.body", "body": answer.body})


class BodyDeadline:
    """ASGI middleware: a request's body must arrive within ``grace`` seconds of the request's start, plus one
    second for every ``min_rate`` bytes of it received."""

    def __init__(self, app: ASGIApp, grace: float, min_rate: int) -> None:
        self._app = app
        self._grace = grace
        self._min_rate = min_rate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        exchange = _Exchange(receive, send, self._grace, self._min_rate)
        try:
            await self._app(scope, exchange.receive, exchange.send)
        except BodyTimedOut:
            if not exchange.timed_out:
                raise
