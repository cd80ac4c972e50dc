"""What :func:`mcpbridge.http.mcp.jsonrpc.read_message` takes for one JSON-RPC message is what the MCP SDK's own
envelope model takes (``jsonrpc_message_adapter``), except an id the SDK would read as a notification's, which is
refused here; and it tells requests from the rest as the SDK does."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from mcp_types.jsonrpc import JSONRPCRequest, jsonrpc_message_adapter
from pydantic import ValidationError

from mcpbridge.http.mcp.jsonrpc import Message, Reply, read_message

values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["", "2.0", "1", " 7 ", "+1_0", "1.0", "1.5", "x", "١"]),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.sampled_from(["a", "code", "message"]), st.integers() | st.text(max_size=3), max_size=2),
)
TEMPLATES = [
    {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": "a", "result": {}},
    {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "x"}},
]
MEMBERS = ["jsonrpc", "id", "method", "params", "result", "error"]


@st.composite
def envelopes(draw: st.DrawFn) -> dict[str, Any]:
    """A well-formed message of each kind, with up to three members changed, removed or added."""
    message = dict(draw(st.sampled_from(TEMPLATES)))
    for _ in range(draw(st.integers(0, 3))):
        member = draw(st.sampled_from(MEMBERS))
        change = draw(st.sampled_from(["value", "remove", "error"]))
        if change == "remove":
            message.pop(member, None)
        elif change == "error" and member == "error":
            error = {"code": draw(values), "message": draw(st.text(max_size=3) | values)}
            message["error"] = {k: v for k, v in error.items() if draw(st.integers(0, 4))}
        else:
            message[member] = draw(values)
    return message


def _sdk_reads(message: dict[str, Any]) -> str | None:
    """ "request", "other" (a notification or a response) or None (refused), as the SDK reads the message."""
    if "method" in message and "id" in message:
        request_id = message["id"]
        if not isinstance(request_id, str | int) or isinstance(request_id, bool):
            return None  # refused ahead of the SDK, which would take it for a notification
    try:
        read = jsonrpc_message_adapter.validate_python(message, by_name=False)
    except ValidationError:
        return None
    return "request" if isinstance(read, JSONRPCRequest) else "other"


@settings(max_examples=3000, derandomize=True, database=None, deadline=None)
@given(message=envelopes())
def test_a_message_is_read_as_the_sdk_reads_it(message: dict[str, Any]) -> None:
    read = read_message(json.dumps(message).encode())
    expected = _sdk_reads(message)
    if expected is None:
        assert isinstance(read, Reply)
        assert read.status == 400
        assert json.loads(read.body)["error"]["code"] == -32600
    else:
        assert isinstance(read, Message)
        assert read.is_request == (expected == "request")


def test_bodies_that_are_not_one_message_say_why() -> None:
    cases = {
        b'{"jsonrpc": "2.0", "id": 1, "method": ': (-32700, "Parse error"),
        b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "x": NaN}': (-32700, "Parse error"),
        b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]': (-32600, "batches are not supported"),
        b'"ping"': (-32600, "message object"),
        b'{"jsonrpc": "2.0", "id": null, "method": "ping"}': (-32600, "the id must be a string or an integer"),
    }
    for body, (code, words) in cases.items():
        read = read_message(body)
        assert isinstance(read, Reply), body
        assert read.status == 400, body
        error = json.loads(read.body)["error"]
        assert error["code"] == code, (body, error)
        assert words in error["message"], (body, error)
