"""A ``tools/call`` on a Streamable HTTP session the MCP SDK opened: sent and read here, on the session's own HTTP
client.

The SDK's client runs every request through a dispatcher, memory streams, a task per POST and its models of every
message: about two thirds of the CPU a tool call costs mcpbridge's connection layer, where ``serve`` makes hundreds
of calls a second on one interpreter. :class:`StreamableEndpoint` sends the call as the SDK's transport sends it
(its headers; in the 2026-07-28 era the ``_meta`` envelope and the ``Mcp-Method``, ``Mcp-Name`` and ``Mcp-Param-*``
headers; redirects followed only within the endpoint's origin) and reads the answer as the SDK reads it:

* a JSON body, or an event stream whose notifications are passed over, whose requests from the server (handshake
  era) are answered as the SDK answers them when no callback is set (ping; sampling, elicitation and roots declined;
  anything else -32601; a form question during a call that relays them goes to its relay,
  :mod:`mcpbridge.client.input_relay`), and which is resumed with ``Last-Event-ID`` when it ends early after an
  event id;
* HTTP failures turned into the SDK's JSON-RPC errors (202 to a request, an unfollowed redirect, a JSON-RPC error
  in a 4xx/5xx body, 404 "Session terminated" when the session is known, an unexpected content type), so
  :mod:`mcpbridge.client.connection` translates them as before;
* in the 2026-07-28 era a ``HEADER_MISMATCH`` answer (the tool's ``Mcp-Param-*`` headers were not known or changed)
  re-lists the tools and sends the call once more, as the SDK does.

An answer is at most the policy's ``max_answer_bytes`` (the transport refuses more, see
:mod:`mcpbridge.outbound.http`), one event of an event stream as well; a large one is parsed and validated in a
worker thread, so that it does not hold up every other request on the event loop.

The session's SDK client still does the handshake and the listings, validates a result's structured content
against the tool's output schema (listing the tools first when it has not yet), and runs a call whose answer asks
for input (``input_required``): that call is sent again through it, which is how such a call starts.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
import pydantic_core
from mcp import Client
from mcp.client.streamable_http import (
    DEFAULT_RECONNECTION_DELAY_MS,
    LAST_EVENT_ID,
    MAX_RECONNECTION_ATTEMPTS,
    MCP_SESSION_ID,
    _unfollowed_redirect,
)
from mcp.shared._httpx_utils import sse_within_origin, stream_within_origin
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import encode_header_value, find_invalid_x_mcp_header, mcp_param_headers, x_mcp_header_map
from mcp.types import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    CONNECTION_CLOSED,
    HEADER_MISMATCH,
    INTERNAL_ERROR,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    PROTOCOL_VERSION_META_KEY,
    CallToolResult,
    Implementation,
    Tool,
)
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

from mcpbridge.client import input_relay
from mcpbridge.outbound.policy import DEFAULT_MAX_ANSWER_BYTES

log = logging.getLogger("mcpbridge.services")

_FIRST_ID = 1 << 40
"""Ids of the calls sent here start far above the SDK's own (which count up from 0 on the same session)."""
_RELIST_PAGES = 100
OFF_LOOP_BYTES = 256 * 1024
"""An answer at least this large is parsed and validated in a worker thread (a few milliseconds of CPU and up)."""
_DECLINED = {
    "sampling/createMessage": "Sampling not supported",
    "elicitation/create": "Elicitation not supported",
    "roots/list": "List roots not supported",
}


@dataclass
class StreamableEndpoint:
    """What a call needs of one open Streamable HTTP session: the endpoint's URL, the session's HTTP client (the
    SSRF guard, the credentials, the response hooks: set when it is made), the session id the ``initialize`` answer
    gave, and what the handshake negotiated (set by :meth:`opened`)."""

    url: str
    client_info: Implementation
    max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES
    http: httpx2.AsyncClient | None = None
    session_id: str | None = None
    protocol_version: str = ""
    _param_maps: dict[str, dict[tuple[str, ...], str]] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(_FIRST_ID))

    async def capture_session(self, response: httpx2.Response) -> None:
        """Response hook: the session id of the ``initialize`` answer, as the SDK's transport takes it."""
        if self.session_id is not None or response.request.method != "POST":
            return
        session_id = response.headers.get(MCP_SESSION_ID)
        if session_id and b'"initialize"' in response.request.content:
            self.session_id = session_id

    def opened(self, client: Client) -> None:
        self.protocol_version = client.protocol_version

    @property
    def modern(self) -> bool:
        return self.protocol_version in MODERN_PROTOCOL_VERSIONS

    def absorb(self, tools: list[Tool]) -> None:
        """Note the ``Mcp-Param-*`` headers each listed tool's calls carry (2026-07-28), as the SDK's session does."""
        if not self.modern:
            return
        for tool in tools:
            if find_invalid_x_mcp_header(tool.input_schema) is None:
                self._param_maps[tool.name] = x_mcp_header_map(tool.input_schema)
            else:
                self._param_maps.pop(tool.name, None)

    # ------------------------------------------------------------------------------------------ the call

    async def call_tool(self, client: Client, name: str, arguments: dict[str, Any]) -> CallToolResult:
        """The tool's result; raises :class:`~mcp.shared.exceptions.MCPError` (a JSON-RPC error, the server's or the
        SDK's word for a failure), ``httpx2`` errors, or what the SDK's output-schema check raises."""
        try:
            answer, size = await self._send(name, arguments)
        except MCPError as mismatch:
            if mismatch.code != HEADER_MISMATCH or not self.modern:
                raise
            try:
                await self._relist(client, name)
            except Exception as relist_error:
                raise mismatch from relist_error
            answer, size = await self._send(name, arguments)
        if answer.get("resultType") == "input_required":
            return await client.call_tool(name, arguments)
        if size < OFF_LOOP_BYTES:
            result = CallToolResult.model_validate(answer)
        else:
            result = await anyio.to_thread.run_sync(CallToolResult.model_validate, answer)
        if not result.is_error:
            await client.session.validate_tool_result(name, result)
        return result

    async def _relist(self, client: Client, name: str) -> None:
        cursor: str | None = None
        for _ in range(_RELIST_PAGES):
            page = await client.list_tools(cursor=cursor, cache_mode="bypass")
            self.absorb(list(page.tools))
            cursor = page.next_cursor
            if cursor is None or any(tool.name == name for tool in page.tools):
                return

    def _client(self) -> httpx2.AsyncClient:
        if self.http is None:
            raise RuntimeError("the session's HTTP client is not open")
        return self.http

    def _headers(self) -> dict[str, str]:
        headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
        if self.session_id:
            headers[MCP_SESSION_ID] = self.session_id
        if self.protocol_version:
            headers["mcp-protocol-version"] = self.protocol_version
        return headers

    async def _send(self, name: str, arguments: dict[str, Any]) -> tuple[dict[str, Any], int]:
        """The call's result and the size of the answer it came in."""
        request_id = next(self._ids)
        params: dict[str, Any] = {"name": name, "arguments": arguments}
        headers = self._headers()
        if self.modern:
            params["_meta"] = {
                PROTOCOL_VERSION_META_KEY: self.protocol_version,
                CLIENT_INFO_META_KEY: self.client_info.model_dump(mode="json", exclude_none=True),
                CLIENT_CAPABILITIES_META_KEY: {},
            }
            headers["mcp-method"] = "tools/call"
            headers["mcp-name"] = encode_header_value(name)
            header_map = self._param_maps.get(name)
            if header_map:
                headers.update(mcp_param_headers(header_map, arguments))
        body = pydantic_core.to_json({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})
        async with stream_within_origin(self._client(), "POST", self.url, content=body, headers=headers) as response:
            return await self._answer(response)

    # ------------------------------------------------------------------------------------------ the answer

    async def _answer(self, response: httpx2.Response) -> tuple[dict[str, Any], int]:
        status = response.status_code
        if status == 202:
            raise MCPError(INVALID_REQUEST, "server answered a request with 202 Accepted")
        if (redirect := _unfollowed_redirect(response)) is not None:
            raise MCPError(INVALID_REQUEST, redirect)
        content_type = response.headers.get("content-type", "").lower()
        if status >= 400:
            if content_type.startswith("application/json"):
                try:
                    error = _error_of(pydantic_core.from_json(await response.aread()))
                except (httpx2.StreamError, ValueError):
                    error = None  # not a JSON-RPC error: the status says what went wrong
                if error is not None:
                    raise error
            if status == 404:
                if self.session_id is None:
                    raise MCPError(METHOD_NOT_FOUND, "Not Found")
                raise MCPError(INVALID_REQUEST, "Session terminated")
            raise MCPError(INTERNAL_ERROR, "Server returned an error response")
        if content_type.startswith("application/json"):
            body = await response.aread()
            try:
                message = await parsed_json(body)
            except ValueError as exc:
                raise MCPError(PARSE_ERROR, f"Failed to parse JSON response: {exc}") from None
            return _settled(message), len(body)
        if content_type.startswith("text/event-stream"):
            return await self._events(response)
        raise MCPError(INVALID_REQUEST, f"Unexpected content type: {content_type}")

    async def _events(self, response: httpx2.Response) -> tuple[dict[str, Any], int]:
        """The answer on the call's event stream, resumed with ``Last-Event-ID`` if it ends before the answer."""
        stream = _Stream()
        try:
            answer = await stream.read(self, httpx2.EventSource(response, max_event_size=self.max_answer_bytes))
        except httpx2.SSEError as exc:
            raise MCPError(CONNECTION_CLOSED, f"SSE stream failed: {exc}") from None
        except MCPError:
            raise
        except Exception:
            answer = None  # the stream broke: resumed below when the server gave event ids
        attempt = 0
        while answer is None and stream.last_id is not None:
            if attempt >= MAX_RECONNECTION_ATTEMPTS:
                raise MCPError(CONNECTION_CLOSED, "SSE stream ended and reconnection attempts were exhausted")
            await anyio.sleep(
                (stream.retry_ms if stream.retry_ms is not None else DEFAULT_RECONNECTION_DELAY_MS) / 1000
            )
            headers = {**self._headers(), LAST_EVENT_ID: stream.last_id}
            is_stream = False
            try:
                async with sse_within_origin(
                    self._client(), self.url, headers=headers, max_event_size=self.max_answer_bytes
                ) as source:
                    source.response.raise_for_status()
                    media = source.response.headers.get("content-type", "").partition(";")[0]
                    is_stream = media.strip().lower() == "text/event-stream"
                    answer = await stream.read(self, source)
                attempt = 0  # it ended again without the answer: start counting again
            except httpx2.SSEError as exc:
                if is_stream:
                    raise MCPError(CONNECTION_CLOSED, f"SSE stream failed: {exc}") from None
                attempt += 1
            except MCPError:
                raise
            except Exception:
                attempt += 1
        if answer is None:
            raise MCPError(CONNECTION_CLOSED, "SSE stream ended without a response")
        return answer, stream.answer_size

    async def reply(self, request: Mapping[str, Any]) -> None:
        """Answer a request the server sent on the call's stream, as the SDK's session does without callbacks."""
        method = request.get("method")
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request.get("id")}
        relayed = input_relay.answer_for(request.get("params")) if method == "elicitation/create" else None
        if method == "ping":
            message["result"] = {}
        elif relayed is not None:
            message["result"] = relayed
        elif method in _DECLINED:
            message["error"] = {"code": INVALID_REQUEST, "message": _DECLINED[str(method)]}
        else:
            message["error"] = {"code": METHOD_NOT_FOUND, "message": "Method not found", "data": method}
        body = pydantic_core.to_json(message)
        try:
            async with stream_within_origin(
                self._client(), "POST", self.url, content=body, headers=self._headers()
            ) as sent:
                await sent.aread()
        except Exception as exc:  # the call goes on; the server decides what an unanswered request means
            log.warning("the answer to %s from the server could not be sent (%s)", method, type(exc).__name__)


@dataclass
class _Stream:
    """Where the call's event stream got to: the last event id and the server's reconnection delay."""

    last_id: str | None = None
    retry_ms: int | None = None
    answer_size: int = 0

    async def read(self, endpoint: StreamableEndpoint, events: httpx2.EventSource) -> dict[str, Any] | None:
        """The answer, or None when the stream ends before it."""
        async for event in events:
            if event.id:
                self.last_id = event.id
            if event.retry is not None:
                self.retry_ms = event.retry
            if event.event != "message" or not event.data:
                continue  # a priming event (an id, no data) or another kind of event
            try:
                message = await parsed_json(event.data)
            except ValueError as exc:
                raise MCPError(PARSE_ERROR, f"Failed to parse SSE message: {exc}") from None
            if not isinstance(message, dict) or not ("result" in message or "error" in message or "method" in message):
                raise MCPError(PARSE_ERROR, "Failed to parse SSE message: not a JSON-RPC message")
            if "result" in message or "error" in message:
                self.answer_size = len(event.data)
                return _settled(message)
            if "id" in message and not endpoint.modern:
                await endpoint.reply(message)  # a request from the server; a notification is passed over
        return None


async def parsed_json(data: bytes | str) -> Any:
    """``data`` parsed as JSON; in a worker thread when it is large (raises ValueError)."""
    if len(data) < OFF_LOOP_BYTES:
        return pydantic_core.from_json(data)
    return await anyio.to_thread.run_sync(pydantic_core.from_json, data)


def _error_of(message: Any) -> MCPError | None:
    """The JSON-RPC error a message is, if it is one."""
    error = message.get("error") if isinstance(message, dict) else None
    if isinstance(error, dict) and isinstance(error.get("code"), int) and isinstance(error.get("message"), str):
        return MCPError(error["code"], error["message"], error.get("data"))
    return None


def _settled(message: Any) -> dict[str, Any]:
    """The result of a JSON-RPC response; a JSON-RPC error raised as :class:`MCPError`."""
    error = _error_of(message)
    if error is not None:
        raise error
    result = message.get("result") if isinstance(message, dict) else None
    if isinstance(result, dict):
        return result
    raise MCPError(PARSE_ERROR, "Failed to parse JSON response: not a JSON-RPC response")
