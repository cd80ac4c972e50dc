"""``serve``'s HTTP/1.1 protocol: uvicorn's (httptools), with a deadline on every request's head.

uvicorn bounds neither how long a new connection may take to send its first request nor how long a head may take
once begun: its keep-alive timer runs only between requests and any byte received stops it, so a client sending a
header byte a second holds its connection (a file descriptor, parser state) forever.

Here a connection gets ``head_timeout`` seconds from when it opens, or from when its previous answer ends, to
complete a request's head (request line and headers); past it the connection is closed, answered 408 first if a
head had begun. The same deadline closes a connection whose client goes on sending the body of a request that was
already answered (an answer before the body was read, a 401 or a 404, leaves uvicorn reading and dropping it). The
body of a request being served is bounded by the app (:mod:`mcpbridge.http.body_deadline`).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

DEFAULT_HEAD_SECONDS = 10.0


class ServeConfig(uvicorn.Config):
    """uvicorn's configuration with ``serve``'s protocol and its head deadline: pickled whole to each process of
    ``serve --workers N``, which then serve with the same deadline."""

    def __init__(self, app: Any, *, head_timeout: float, **options: Any) -> None:
        super().__init__(app, http=BoundedHeadProtocol, **options)
        self.head_timeout = head_timeout


def refusal(status: int, reason: str, code: str, detail: str) -> bytes:
    """A problem answer written straight to the connection, which then closes (no request was made of the app)."""
    body = json.dumps(
        {
            "type": f"urn:mcpbridge:problem:{code}",
            "title": code.replace("_", " ").capitalize(),
            "status": status,
            "code": code,
            "detail": detail,
        }
    ).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/problem+json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


class BoundedHeadProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, closing a connection whose request head comes too slowly."""

    def __init__(
        self,
        config: uvicorn.Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.head_timeout = config.head_timeout if isinstance(config, ServeConfig) else DEFAULT_HEAD_SECONDS
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_begun = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_arrived()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_begun = True

    def on_headers_complete(self) -> None:
        self._head_arrived()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # uvicorn arms its keep-alive timer when it waits for the next request (none is queued, the connection
        # stays open): the next head is due from now.
        if self.timeout_keep_alive_task is not None:
            self._await_head()

    def _await_head(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
        self._head_timer = self.loop.call_later(self.head_timeout, self._head_timed_out)

    def _head_arrived(self) -> None:
        self._head_begun = False
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self._head_begun:  # not so for the rest of an answered request's body, nor an idle connection
            detail = f"the request's head (request line and headers) did not arrive within {self.head_timeout:g} s"
            self.transport.write(refusal(408, "Request Timeout", "request_timeout", detail))
        self._head_arrived()
        self.transport.close()
