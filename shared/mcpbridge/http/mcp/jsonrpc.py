"""JSON-RPC 2.0 as an MCP endpoint reads and answers it: one message per POST body, its error codes, and the
HTTP answer a message gets (:class:`Reply`).

A body is one strict JSON value (no ``NaN`` or ``Infinity``; else -32700), one message object (a batch or a scalar
is -32600), whose ``id``, if it has one next to a ``method``, is a string or an integer (-32600 with ``id: null``:
the SDK would take it for a notification and answer 202 without running it), and which is a request, a
notification or a response as JSON-RPC 2.0 has them (-32600). All of these are HTTP 400.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

import pydantic_core

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602


class JsonRpcError(Exception):
    """A JSON-RPC error answer: what a tool server raises for a request it refuses (e.g. an unknown tool)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


def invalid_params() -> JsonRpcError:
    return JsonRpcError(INVALID_PARAMS, "Invalid request parameters", "")


@dataclass(frozen=True)
class Reply:
    """An HTTP answer: status, ``Content-Type`` (None: no header) and body."""

    status: int
    body: bytes = b""
    content_type: str | None = "application/json"
    headers: tuple[tuple[str, str], ...] = ()


def to_json(value: Any) -> bytes:
    return pydantic_core.to_json(value)


def error_reply(status: int, code: int, message: str, request_id: Any = None, data: Any = None) -> Reply:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return Reply(status, to_json({"jsonrpc": "2.0", "id": request_id, "error": error}))


@dataclass(frozen=True)
class Message:
    """One JSON-RPC message as read. ``is_request``: a request as JSON-RPC's envelopes tell them apart (the
    handshake era's reading: a message that also holds a well-formed ``error`` is an error response, ignored);
    ``request_shaped``: it has what a request needs, whatever else it holds (the modern era's reading)."""

    raw: dict[str, Any]
    is_request: bool

    @property
    def request_shaped(self) -> bool:
        return "id" in self.raw and _is_call(self.raw)

    @property
    def id(self) -> Any:
        return self.raw.get("id")

    @property
    def method(self) -> str:
        return str(self.raw["method"])

    @property
    def params(self) -> dict[str, Any] | None:
        return self.raw.get("params")


def _is_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def read_message(body: bytes) -> Message | Reply:
    """The body as one JSON-RPC message, or the 400 that says what is wrong with it."""
    try:
        decoded = pydantic_core.from_json(body, allow_inf_nan=False)
    except ValueError as exc:
        return error_reply(400, PARSE_ERROR, f"Parse error: {exc}")
    if isinstance(decoded, list):
        return error_reply(400, INVALID_REQUEST, "Invalid Request: batches are not supported, send one message")
    if not isinstance(decoded, dict):
        return error_reply(400, INVALID_REQUEST, "Invalid Request: the body must be a JSON-RPC message object")
    has_id = "id" in decoded
    valid_id = has_id and _is_id(decoded["id"])
    if has_id and "method" in decoded and not valid_id:
        # A request all the same (it has an id), not a notification: MCP allows no null id.
        return error_reply(400, INVALID_REQUEST, "Invalid Request: the id must be a string or an integer")
    version_2 = decoded.get("jsonrpc") == "2.0"
    if version_2 and (valid_id or (has_id and decoded["id"] is None)) and _is_error(decoded):
        return Message(decoded, is_request=False)  # an error response, even beside a method: nobody asked for it
    if _is_call(decoded):
        return Message(decoded, is_request=has_id)
    if version_2 and valid_id and _is_result(decoded):
        return Message(decoded, is_request=False)  # a response to a request the server never sent
    return error_reply(
        400,
        INVALID_REQUEST,
        "Invalid Request: not a JSON-RPC 2.0 request, notification or response",
        decoded["id"] if valid_id else None,
    )


def _is_call(message: dict[str, Any]) -> bool:
    """A request or a notification: ``jsonrpc`` 2.0, a method name, params an object or absent."""
    params = message.get("params")
    return (
        message.get("jsonrpc") == "2.0"
        and isinstance(message.get("method"), str)
        and (params is None or isinstance(params, dict))
    )


def _is_result(message: dict[str, Any]) -> bool:
    return isinstance(message.get("result"), dict)


def _is_error(message: dict[str, Any]) -> bool:
    error = message.get("error")
    if not isinstance(error, dict) or not isinstance(error.get("message"), str):
        return False
    return integer_like(error.get("code"))


def integer_like(value: Any) -> bool:
    """What a lax integer field takes: an integer (a boolean too), an integral float that a 64-bit integer holds,
    an integral decimal string."""
    if isinstance(value, float):
        return value.is_integer() and -(2**63) <= value < 2**63
    return isinstance(value, int) or _is_decimal(value)


_DECIMAL = re.compile(r"\s*[+-]?[0-9](?:_?[0-9])*(?:\.0*)?\s*", re.ASCII)


def _is_decimal(value: Any) -> bool:
    """A string a lax integer field takes: an integral decimal number (``" +1_000.0 "``)."""
    return isinstance(value, str) and _DECIMAL.fullmatch(value) is not None
