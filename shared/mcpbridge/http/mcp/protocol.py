"""MCP over stateless Streamable HTTP, server side: the JSON-RPC a published endpoint answers, in both eras.

The handshake era (2024-11-05 to 2025-11-25) has ``initialize``, ``ping``, ``tools/list`` and ``tools/call``; the
modern one (2026-07-28) has no handshake: every request carries its protocol version, the client's capabilities and
(optionally) its identity in ``params._meta``, mirrored by the ``MCP-Protocol-Version``, ``Mcp-Method`` and ``Mcp-Name``
headers, and a server describes itself through ``server/discover``. An ``MCP-Protocol-Version`` header that names no
handshake-era version takes a request to the modern era. One POST carries one message; a request gets one JSON
answer, a notification (or a posted response) 202 and no body. No session, no event stream, nothing kept between
requests: what a Lambda function behind API Gateway can serve.

The answers are the MCP SDK's, message for message, as its low-level server gives them in stateless JSON-response
mode (``tests/functional/test_mcp_protocol_reference.py`` sends both the same generated traffic and lists where they
differ on purpose), without what the SDK costs a published endpoint: importing its models of every message of every
era (over half the MCP endpoint function's cold start), and building a transport, memory streams and tasks for each
request.

Order of the checks: a POST whose ``Content-Type`` is JSON must hold one JSON-RPC message
(:func:`~mcpbridge.http.mcp.jsonrpc.read_message`, 400 otherwise); then the era's own checks, in the SDK's order:
``Content-Type`` (400, plain text), ``Accept`` (406), and for the modern era the envelope's ladder
(:func:`modern_rejection`: 400, with -32020 to -32022 or -32602); then the method and its params
(:mod:`~mcpbridge.http.mcp.params`). Errors of the handshake era are HTTP 200 once the message is read; the modern
era maps a JSON-RPC error to its status (-32601: 404, the client-fault codes: 400).
"""

# Over 400 lines: both eras of the protocol, each method answered once for both, with their checks side by side.

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from mcpbridge.http.mcp.jsonrpc import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    JsonRpcError,
    Message,
    Reply,
    error_reply,
    invalid_params,
    read_message,
    to_json,
)
from mcpbridge.http.mcp.params import (
    CLIENT_CAPABILITIES_META,
    PROTOCOL_VERSION_META,
    SERVER_INFO_META,
    MetaCheck,
    call_params,
    declares_extension,
    handshake_meta,
    initialize_params,
    listing_params,
    modern_meta,
    request_params,
)

# ------------------------------------------------------------------------------------------------ the protocol's words

HANDSHAKE_VERSIONS: Final = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MODERN_VERSIONS: Final = ("2026-07-28",)
TASKS_EXTENSION: Final = "io.modelcontextprotocol/tasks"
"""The Tasks extension (SEP-2663): declared where calls may become tasks (:mod:`mcpbridge.agent.call_tasks`)."""
LATEST_HANDSHAKE_VERSION: Final = HANDSHAKE_VERSIONS[-1]

PROTOCOL_VERSION_HEADER: Final = "mcp-protocol-version"
METHOD_HEADER: Final = "mcp-method"
NAME_HEADER: Final = "mcp-name"
_ROUTING_HEADERS: Final = (PROTOCOL_VERSION_HEADER, METHOD_HEADER, NAME_HEADER)

HEADER_MISMATCH: Final = -32020
MISSING_REQUIRED_CLIENT_CAPABILITY: Final = -32021
UNSUPPORTED_PROTOCOL_VERSION: Final = -32022

MODERN_ERROR_STATUS: Final[Mapping[int, int]] = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    MISSING_REQUIRED_CLIENT_CAPABILITY: 400,
    UNSUPPORTED_PROTOCOL_VERSION: 400,
    METHOD_NOT_FOUND: 404,
}
"""The HTTP status of a modern-era JSON-RPC error; a code not listed is 200."""

_CACHE_HINT: Final = {"cacheScope": "private", "ttlMs": 0}
"""Freshness of a listing (``tools/list``, ``server/discover``, the resources', prompts/list) and of a resource read
in the modern era: at once stale, this caller's."""
CACHED_LISTINGS: Final = frozenset({"resources/list", "resources/templates/list", "resources/read", "prompts/list"})


@dataclass(frozen=True)
class ServerIdentity:
    name: str
    version: str
    instructions: str


class ToolServer(Protocol):
    """What a published endpoint offers one request: its tools (as ``tools/list`` gives them) and calls."""

    def tools(self) -> Awaitable[list[dict[str, Any]]]: ...

    def call(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        modern: bool,
        meta: Mapping[str, Any] | None = None,
        resume: Resume | None = None,
    ) -> Awaitable[dict[str, Any]]:
        """A ``CallToolResult`` (its wire form), or in the modern era an ``InputRequiredResult`` (``resultType``
        ``input_required``) or a ``CreateTaskResult`` (``task``); raises :class:`JsonRpcError` for a call the era
        refuses."""
        ...

    @property
    def tasks_offered(self) -> bool:
        """Whether calls may become Tasks here (the extension ``io.modelcontextprotocol/tasks``)."""
        ...

    def task(self, method: str, task_id: str, input_responses: Mapping[str, Any] | None) -> Awaitable[dict[str, Any]]:
        """``tasks/get``, ``tasks/update`` or ``tasks/cancel``; raises :class:`JsonRpcError` (-32602) for an unknown
        task."""
        ...


@dataclass(frozen=True)
class Resume:
    """A modern-era retry of a call that answered ``InputRequiredResult``: what the client sends back."""

    request_state: str | None
    input_responses: Mapping[str, Any] | None


class PrimitiveServer(Protocol):
    """What a published endpoint offers one request besides tools: resources, prompts, completion
    (:class:`~mcpbridge.http.mcp.primitives.Primitives`)."""

    def capabilities(self) -> dict[str, Any]: ...

    def serves(self, method: str) -> bool: ...

    def answer(
        self, method: str, params: dict[str, Any] | None, meta: MetaCheck, *, modern: bool
    ) -> Awaitable[dict[str, Any]]: ...


@dataclass(frozen=True)
class Served:
    """One request's tools and other primitives."""

    tools: ToolServer
    primitives: PrimitiveServer | None

    def capabilities(self) -> dict[str, Any]:
        declared = {"tools": {"listChanged": False}, **(self.primitives.capabilities() if self.primitives else {})}
        if self.tools.tasks_offered:
            declared["extensions"] = {TASKS_EXTENSION: {}}
        return declared

    def serves(self, method: str) -> PrimitiveServer | None:
        """The primitives, if they serve ``method``."""
        return self.primitives if self.primitives is not None and self.primitives.serves(method) else None


# ------------------------------------------------------------------------------------------------ HTTP


class Headers:
    """A request's headers: lower-case names, the first value of each, and which names came more than once."""

    __slots__ = ("_repeated", "_values")

    def __init__(self, raw: Sequence[tuple[bytes, bytes]]) -> None:
        values: dict[str, str] = {}
        repeated: set[str] = set()
        for name_bytes, value in raw:
            name = name_bytes.decode("latin-1").lower()
            if name in values:
                repeated.add(name)
            else:
                values[name] = value.decode("latin-1")
        self._values = values
        self._repeated = repeated

    def get(self, name: str) -> str | None:
        return self._values.get(name)

    def repeated(self, name: str) -> bool:
        return name in self._repeated


def accepts(headers: Headers) -> tuple[bool, bool]:
    """Whether ``Accept`` admits JSON and event streams (``*/*``, ``application/*`` and ``text/*`` included)."""
    accepted = {part.split(";")[0].strip().lower() for part in (headers.get("accept") or "").split(",")}
    anything = "*/*" in accepted
    json = anything or "application/json" in accepted or "application/*" in accepted
    sse = anything or "text/event-stream" in accepted or "text/*" in accepted
    return json, sse


_NOT_JSON = Reply(400, b"Invalid Content-Type header", None)
_ACCEPTED_LEGACY = Reply(202)
_ACCEPTED_MODERN = Reply(202, content_type=None)
_NOT_ACCEPTABLE_MODERN = Reply(406, content_type=None)
_INVALID_BODY = "Body must be a single JSON-RPC request or notification object"


async def answer(
    http_method: str,
    headers: Headers,
    body: bytes,
    identity: ServerIdentity,
    server: ToolServer,
    primitives: PrimitiveServer | None = None,
) -> Reply:
    """The answer to one request (``POST`` or ``DELETE``) of an authenticated caller."""
    content_type = headers.get("content-type")
    is_json = content_type is not None and content_type.lower().startswith("application/json")
    message: Message | None = None
    if http_method == "POST" and is_json:
        read = read_message(body)
        if isinstance(read, Reply):
            return read
        message = read
    version = headers.get(PROTOCOL_VERSION_HEADER)
    if version is not None and version not in HANDSHAKE_VERSIONS:
        return await _modern(http_method, headers, message, identity, Served(server, primitives))
    return await _handshake_era(http_method, headers, content_type, message, identity, Served(server, primitives))


# ------------------------------------------------------------------------------------------------ handshake era


async def _handshake_era(
    http_method: str,
    headers: Headers,
    content_type: str | None,
    message: Message | None,
    identity: ServerIdentity,
    server: Served,
) -> Reply:
    """Every handshake-era version is answered alike; a request without a version header is 2025-03-26's."""
    if http_method != "POST":
        return error_reply(405, INVALID_REQUEST, "Method Not Allowed: Session termination not supported")
    if message is None:
        return _NOT_JSON
    if not accepts(headers)[0]:
        return error_reply(406, INVALID_REQUEST, "Not Acceptable: Client must accept application/json")
    media_types = [part.strip() for part in (content_type or "").split(";")[0].split(",")]
    if "application/json" not in media_types:
        return error_reply(415, INVALID_REQUEST, "Unsupported Media Type: Content-Type must be application/json")
    if not message.is_request:
        return _ACCEPTED_LEGACY
    try:
        result = await _handshake_result(message, identity, server)
    except JsonRpcError as exc:
        return error_reply(200, exc.code, exc.message, message.id, exc.data)
    return Reply(200, to_json({"jsonrpc": "2.0", "id": message.id, "result": result}))


async def _handshake_result(message: Message, identity: ServerIdentity, served: Served) -> dict[str, Any]:
    method, params, server = message.method, message.params, served.tools
    if method == "initialize":
        requested = initialize_params(params)
        return {
            "capabilities": served.capabilities(),
            "instructions": identity.instructions,
            "protocolVersion": requested if requested in HANDSHAKE_VERSIONS else LATEST_HANDSHAKE_VERSION,
            "serverInfo": {"name": identity.name, "version": identity.version},
        }
    if method == "ping":
        request_params(params, handshake_meta)
        return {}
    if method == "tools/list":
        listing_params(params, handshake_meta)
        return {"tools": await server.tools()}
    if method == "tools/call":
        name, arguments = call_params(params, handshake_meta, modern=False)
        return await server.call(name, arguments, modern=False, meta=_meta_of(params))
    if (primitives := served.serves(method)) is not None:
        return await primitives.answer(method, params, handshake_meta, modern=False)
    raise JsonRpcError(METHOD_NOT_FOUND, "Method not found", method)


# ------------------------------------------------------------------------------------------------ modern era


async def _modern(
    http_method: str, headers: Headers, message: Message | None, identity: ServerIdentity, server: Served
) -> Reply:
    if http_method != "POST":
        return Reply(405, content_type=None, headers=(("allow", "POST"),))
    if message is None:
        return _NOT_JSON
    json_accepted, sse_accepted = accepts(headers)
    if not json_accepted:
        return _NOT_ACCEPTABLE_MODERN
    if "id" not in message.raw:
        requested = headers.get(PROTOCOL_VERSION_HEADER) or ""
        if requested not in MODERN_VERSIONS:
            return _modern_error(None, _unsupported_version(requested))
        return _ACCEPTED_MODERN
    if not message.request_shaped:
        return error_reply(400, INVALID_REQUEST, _INVALID_BODY)
    request_id = message.id
    if message.method == "subscriptions/listen" and not sse_accepted:
        return _NOT_ACCEPTABLE_MODERN
    for name in _ROUTING_HEADERS:
        if headers.repeated(name):
            return error_reply(400, HEADER_MISMATCH, f"{name} header appears more than once", request_id)
    rejection = modern_rejection(message.raw, headers)
    if rejection is not None:
        return _modern_error(request_id, rejection)
    try:
        result = await _modern_result(message, identity, server)
    except JsonRpcError as exc:
        return _modern_error(request_id, exc)
    result.setdefault("resultType", "complete")  # or "input_required": a paused call of a published external tool
    result["_meta"] = {SERVER_INFO_META: {"name": identity.name, "version": identity.version}}
    return Reply(200, to_json({"jsonrpc": "2.0", "id": request_id, "result": result}))


def _modern_error(request_id: Any, error: JsonRpcError) -> Reply:
    return error_reply(MODERN_ERROR_STATUS.get(error.code, 200), error.code, error.message, request_id, error.data)


def _unsupported_version(requested: str) -> JsonRpcError:
    data = {"supported": list(MODERN_VERSIONS), "requested": requested}
    return JsonRpcError(UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version", data)


def modern_rejection(body: Mapping[str, Any], headers: Headers) -> JsonRpcError | None:
    """The modern envelope's ladder, first failure wins: ``params._meta`` holds the protocol version and the client's
    capabilities (-32602); the headers agree with the body (``MCP-Protocol-Version``, ``Mcp-Method``, and
    ``Mcp-Name`` for ``tools/call``, ``prompts/get`` and ``resources/read``, possibly base64-wrapped: -32020; the
    last two compared without the whitespace around the field's value); the version is a string (-32602) the server
    serves (-32022, naming the versions it does)."""
    params = body.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict):
        return JsonRpcError(
            INVALID_PARAMS,
            f"params._meta must be an object carrying the required {PROTOCOL_VERSION_META!r} and "
            f"{CLIENT_CAPABILITIES_META!r} envelope keys",
        )
    missing = [key for key in (PROTOCOL_VERSION_META, CLIENT_CAPABILITIES_META) if key not in meta]
    if missing:
        return JsonRpcError(
            INVALID_PARAMS, f"params._meta is missing the required envelope key(s): {', '.join(missing)}"
        )
    version = meta[PROTOCOL_VERSION_META]
    version_header = headers.get(PROTOCOL_VERSION_HEADER)
    if version_header is None or version_header != version:
        return JsonRpcError(
            HEADER_MISMATCH, f"{PROTOCOL_VERSION_HEADER} header does not match the request envelope's protocol version"
        )
    method = body.get("method")
    if _field_value(headers.get(METHOD_HEADER)) != method:
        return JsonRpcError(HEADER_MISMATCH, f"{METHOD_HEADER} header does not match the request body's method")
    name_key = NAME_BEARING_METHODS.get(method) if isinstance(method, str) else None
    if name_key is not None and isinstance(params, dict):
        name = params.get(name_key)
        if name is not None and decode_header_value(_field_value(headers.get(NAME_HEADER))) != name:
            return JsonRpcError(
                HEADER_MISMATCH, f"{NAME_HEADER} header does not match the request body's {name_key!r} parameter"
            )
    if not isinstance(version, str):
        return JsonRpcError(INVALID_PARAMS, "the protocol-version envelope value must be a string")
    if version not in MODERN_VERSIONS:
        return _unsupported_version(version)
    return None


NAME_BEARING_METHODS: Final[Mapping[str, str]] = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
"""The methods whose ``Mcp-Name`` header mirrors a param: which one."""


def _field_value(value: str | None) -> str | None:
    """A header's value without the whitespace around it, which HTTP says is not part of it (RFC 9110 5.5)."""
    return None if value is None else value.strip(" \t")


_BASE64_SENTINEL = re.compile(r"^=\?base64\?(?P<payload>.*)\?=$")


def decode_header_value(value: str | None) -> str | None:
    """A header value as sent: verbatim, or UTF-8 from the ``=?base64?...?=`` wrapping a client uses for values
    that an HTTP header cannot carry (None for a wrapping that is not canonical base64 of UTF-8)."""
    if value is None:
        return None
    wrapped = _BASE64_SENTINEL.fullmatch(value)
    if wrapped is None:
        return value
    payload = wrapped.group("payload")
    try:
        decoded = base64.b64decode(payload, validate=True)
        if base64.b64encode(decoded).decode("ascii") != payload:
            return None
        return decoded.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


async def _modern_result(message: Message, identity: ServerIdentity, served: Served) -> dict[str, Any]:
    method, params, server = message.method, message.params, served.tools
    if method == "tools/list":
        listing_params(params, modern_meta)
        return {**_CACHE_HINT, "tools": await server.tools()}
    if method == "tools/call":
        name, arguments = call_params(params, modern_meta, modern=True)
        resume = None
        if params is not None and (params.get("requestState") is not None or params.get("inputResponses")):
            resume = Resume(params.get("requestState"), params.get("inputResponses"))
        return dict(await server.call(name, arguments, modern=True, meta=_meta_of(params), resume=resume))
    if method == "server/discover":
        request_params(params, modern_meta)
        return {
            **_CACHE_HINT,
            "capabilities": served.capabilities(),
            "instructions": identity.instructions,
            "supportedVersions": list(MODERN_VERSIONS),
        }
    if method in TASK_METHODS and server.tasks_offered:
        return await _task(method, params, server)
    if (primitives := served.serves(method)) is not None:
        result = await primitives.answer(method, params, modern_meta, modern=True)
        return {**_CACHE_HINT, **result} if method in CACHED_LISTINGS else result
    raise JsonRpcError(METHOD_NOT_FOUND, "Method not found", method)


TASK_METHODS: Final = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})


async def _task(method: str, params: dict[str, Any] | None, server: ToolServer) -> dict[str, Any]:
    """A method of the Tasks extension: only for a request whose client declares it (-32021 otherwise)."""
    request_params(params, modern_meta)
    if not declares_extension(_meta_of(params), TASKS_EXTENSION):
        data: dict[str, Any] = {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}}
        raise JsonRpcError(
            MISSING_REQUIRED_CLIENT_CAPABILITY, f"{method} needs the client capability {TASKS_EXTENSION}", data
        )
    task_id = (params or {}).get("taskId")
    responses = (params or {}).get("inputResponses")
    if not isinstance(task_id, str) or (method == "tasks/update" and not isinstance(responses, dict)):
        raise invalid_params()
    return dict(await server.task(method, task_id, responses))


def _meta_of(params: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """A request's ``_meta`` (checked by the era's rules already), for what a tool call reads of it."""
    meta = (params or {}).get("_meta")
    return meta if isinstance(meta, Mapping) else None
