"""Generated JSON-RPC traffic for a published MCP endpoint (hypothesis strategies): messages valid and malformed
(wrong types for every envelope member, batches, huge and deeply nested values, unknown methods, every tool with
generated arguments, wrong or missing headers, bodies that are not JSON or not UTF-8), for both protocol eras.

The generated values point at what a test's endpoint holds (:class:`Corpus`), so that most tool calls get past the
argument checks and do real work.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from mcpbridge.http.mcp.tools import SPECS

TOOL_NAMES = [spec.name for spec in SPECS]
VERSIONS = ["2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"]
METHODS = [
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "server/discover",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "prompts/list",
    "prompts/get",
    "logging/setLevel",
    "completion/complete",
    "notifications/initialized",
    "notifications/cancelled",
]
MODERN = "2026-07-28"


@dataclass(frozen=True)
class Corpus:
    """What the endpoint under test holds and takes."""

    token: str
    kb_id: str
    document_id: str
    scratch_id: str
    """A document for the write tools to update and delete."""


def replayable(max_examples: int) -> settings:
    """A bounded run that draws the same examples every time (a failure reproduces) and keeps no example database."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def as_sent(headers: dict[str, str]) -> dict[str, bytes]:
    """Header values as they go out: UTF-8 bytes (a generated method or tool name may be any text)."""
    return {name: value.encode() for name, value in headers.items()}


def seed_endpoint(api: httpx.Client, name: str, tools: list[str]) -> tuple[dict[str, Any], Corpus]:
    """A knowledge base with two documents and a wiki page, published (6000 calls a minute) with ``tools``, through
    the admin API ``api`` speaks to: the endpoint as created, and what the generated traffic points at."""
    kb = api.post("/api/v1/knowledge-bases", json={"name": "Field notes"}).json()
    document = api.post(
        f"/api/v1/knowledge-bases/{kb['id']}/documents",
        json={"title": "Arctic", "content": "# Arctic\n\nWalruses and seals share the ice. " * 20},
    ).json()
    scratch = api.post(
        f"/api/v1/knowledge-bases/{kb['id']}/documents", json={"title": "Scratch", "content": "Drafts."}
    ).json()
    page = api.post(
        f"/api/v1/knowledge-bases/{kb['id']}/wiki/pages",
        json={"slug": "concept/ice", "type": "concept", "title": "Ice", "content": "Sea ice melts."},
    )
    assert page.status_code == 201, page.text
    published = api.post(
        "/api/v1/mcp-endpoints",
        json={"name": name, "knowledge_base_ids": [kb["id"]], "tools": tools, "rate_limit_per_minute": 6000},
    )
    assert published.status_code == 201, published.text
    endpoint: dict[str, Any] = published.json()
    return endpoint, Corpus(endpoint["token"], kb["id"], document["id"], scratch["id"])


# Most members right, so that a message usually gets past the envelope checks and reaches a method or a tool.
mostly = st.integers(0, 19).map(lambda n: n < 19)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
bad_ids = st.one_of(
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.lists(json_scalars, max_size=2),
    st.dictionaries(st.text(max_size=5), json_scalars, max_size=2),
)
# Valid JSON numbers that no float holds (they parse as infinity), which json.dumps cannot write: placeholders.
OVERFLOWING = {"<1e400>": "1e400", "<-1e999>": "-1e999"}
STRANGE_TEXT = ["", " ", "(", "[a-", "a{99999}", ".*", "^\\d+$", "\\", "x" * 5000, "\x00", "\ud800", "\u202e"]
URLS = ["http://127.0.0.1:1/x", "file:///etc/passwd", "ftp://a/b", "http://169.254.169.254/", "http://[::1", "x"]


WORDS = ["walrus", "seals share", "ice", "Arctic", "walrus|seal", "seal(s)?", "melts", "ice sea"]


def _argument_value(tool: str, name: str, schema: dict[str, Any], target: Corpus) -> st.SearchStrategy[Any]:
    """Mostly a plausible value for the property (the ids that exist, words of the corpus, edge values of its
    type), sometimes a wrong one, sometimes any JSON at all."""
    kind = schema.get("type")
    wrong = st.sampled_from(["nope", "", target.document_id, target.kb_id, "concept/nope"]) | st.text(max_size=20)
    document = target.scratch_id if tool in ("update_document", "delete_document") else target.document_id
    selectors = st.sampled_from([target.kb_id, "FIELD NOTES", "field notes"])
    typed: st.SearchStrategy[Any]
    if kind == "integer":
        edges = st.sampled_from([*OVERFLOWING, -(2**70), 2**70, 10**9, 1.5, 1e300, "7", -1, 0])
        typed = st.one_of(edges, st.integers(min_value=-5, max_value=200))
    elif kind == "boolean":
        typed = st.booleans()
    elif "enum" in schema:
        typed = st.sampled_from(schema["enum"])
    elif name == "knowledge_base_id":
        typed = selectors
    elif name == "knowledge_base_ids":
        typed = st.lists(selectors, min_size=1, max_size=2)
    elif name in ("document_id", "knowledge_id"):
        typed = st.just(document)
    elif name in ("document_ids", "knowledge_ids"):
        typed = st.lists(st.just(document), min_size=1, max_size=2)
    elif name == "slug":
        typed = st.just("concept/ice")
    elif name == "url":
        typed = st.sampled_from(URLS)
    elif kind == "array":
        typed = st.lists(wrong, max_size=3)
    else:
        typed = st.sampled_from(WORDS) | st.sampled_from(STRANGE_TEXT) | st.text(max_size=60)
    return st.one_of(*[typed] * 6, wrong, json_values)


@st.composite
def tool_call_params(draw: st.DrawFn, target: Corpus) -> dict[str, Any]:
    spec = draw(st.sampled_from(SPECS))
    arguments: dict[str, Any] = {}
    for name, schema in spec.input_schema["properties"].items():
        if (name in spec.input_schema["required"] and draw(mostly)) or draw(st.booleans()):
            arguments[name] = draw(_argument_value(spec.name, name, schema, target))
    if not draw(mostly):
        arguments.update(draw(st.dictionaries(st.text(max_size=10), json_values, max_size=2)))
    params: dict[str, Any] = {"name": spec.name if draw(mostly) else draw(st.sampled_from(["unknown", 5, "", None]))}
    shape = draw(st.sampled_from(["object"] * 18 + ["missing", "any"]))
    if shape == "object":
        params["arguments"] = arguments
    elif shape == "any":
        params["arguments"] = draw(json_values)
    return params


def _uris(target: Corpus) -> st.SearchStrategy[Any]:
    document = f"mcpbridge://kb/{target.kb_id}/documents/{target.document_id}"
    windows = st.sampled_from(["1-3", "2", "2-", "0-1", "5-2", "x", "1-1&lines=2", "999999-"])
    return st.one_of(
        st.just(document),
        windows.map(lambda lines: f"{document}?lines={lines}"),
        st.sampled_from(["1", "2", "0", "x"]).map(lambda page: f"mcpbridge://kb/{target.kb_id}/documents?page={page}"),
        st.sampled_from(["mcpbridge://kb/kb_nope/documents/doc_nope", "file:///etc/passwd", "", "mcpbridge://kb"]),
        json_values,
    )


def _read_params(target: Corpus) -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries({"uri": _uris(target)})


def _prompt_params(target: Corpus) -> st.SearchStrategy[Any]:
    documents = st.sampled_from([target.document_id, target.scratch_id, "doc_nope", ""]) | json_values
    arguments = st.fixed_dictionaries(
        {},
        optional={"document": documents, "first": documents, "second": documents, "question": st.sampled_from(WORDS)},
    )
    names = st.sampled_from(["summarise_document", "compare_documents", "answer_with_citations", "nope"])
    return st.fixed_dictionaries({"name": names | json_values}, optional={"arguments": arguments | json_values})


def _completion_params(target: Corpus) -> st.SearchStrategy[Any]:
    refs = st.one_of(
        st.sampled_from(["summarise_document", "answer_with_citations", "nope"]).map(
            lambda name: {"type": "ref/prompt", "name": name}
        ),
        st.sampled_from(["mcpbridge://kb/{kb_id}/documents/{document_id}{?lines}", "mcpbridge://x"]).map(
            lambda uri: {"type": "ref/resource", "uri": uri}
        ),
        json_values,
    )
    names = st.sampled_from(["kb_id", "document_id", "lines", "document", "knowledge_base", "x"])
    argument = st.fixed_dictionaries({"name": names, "value": st.sampled_from(["", "Arc", "kb_", "doc_"])})
    context = st.fixed_dictionaries({"arguments": st.fixed_dictionaries({}, optional={"kb_id": st.just(target.kb_id)})})
    return st.fixed_dictionaries(
        {"ref": refs, "argument": argument | json_values}, optional={"context": context | json_values}
    )


PRIMITIVE_PARAMS = {
    "resources/read": _read_params,
    "prompts/get": _prompt_params,
    "completion/complete": _completion_params,
}
"""Params that mostly reach the method's work: the endpoint's documents, prompts and templates, and wrong ones."""


@st.composite
def requests(draw: st.DrawFn, target: Corpus) -> tuple[Any, dict[str, str]]:
    """One JSON-RPC envelope (each member right or wrong) and the headers sent with it."""
    version = draw(st.sampled_from(VERSIONS)) if draw(mostly) else draw(st.sampled_from(["2099-01-01", "", None]))
    message: dict[str, Any] = {}
    jsonrpc = "2.0" if draw(mostly) else draw(st.sampled_from(["1.0", 2.0, None, "missing"]))
    if jsonrpc != "missing":
        message["jsonrpc"] = jsonrpc
    if draw(st.integers(0, 9)):
        message["id"] = draw(st.integers(0, 10**6) | st.text(max_size=20)) if draw(mostly) else draw(bad_ids)
    method: Any = "tools/call" if draw(st.integers(0, 2)) else draw(st.sampled_from(METHODS))
    if not draw(mostly):
        method = draw(st.text(max_size=30) | json_values)
    message["method"] = method
    params: Any
    if method == "tools/call":
        params = draw(tool_call_params(target))
    elif method == "initialize":
        params = {
            "protocolVersion": draw(st.sampled_from(VERSIONS) | json_values),
            "capabilities": draw(st.just({}) | json_values),
            "clientInfo": draw(st.just({"name": "fuzz", "version": "1"}) | json_values),
        }
    elif isinstance(method, str) and method in PRIMITIVE_PARAMS and draw(mostly):
        params = draw(PRIMITIVE_PARAMS[method](target))
    else:
        params = draw(st.just({}) | json_values)
    if version == MODERN and isinstance(params, dict) and draw(mostly):
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": version,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "fuzz", "version": "1"},
        }
    elif not draw(mostly) and isinstance(params, dict):
        params["_meta"] = draw(json_values)
    if draw(mostly):
        message["params"] = params
    if not draw(mostly):
        message[draw(st.sampled_from(["result", "error", "extra"]))] = draw(json_values)

    sent = {"Authorization": f"Bearer {target.token}"}
    content_types = ["text/plain", "application/json; charset=utf-16", "application/jsonx", "", None]
    content_type = "application/json" if draw(mostly) else draw(st.sampled_from(content_types))
    if content_type is not None:
        sent["Content-Type"] = content_type
    accepts = ["application/json", "text/event-stream", "*/*", "", None]
    accept = "application/json, text/event-stream" if draw(mostly) else draw(st.sampled_from(accepts))
    if accept is not None:
        sent["Accept"] = accept
    if version is not None:
        sent["MCP-Protocol-Version"] = version
    if version == MODERN and draw(mostly) and isinstance(method, str):
        sent["Mcp-Method"] = method
        name_key = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}.get(method)
        if name_key and isinstance(params, dict) and isinstance(params.get(name_key), str):
            sent["Mcp-Name"] = params[name_key]
    if not draw(mostly):
        extra = draw(st.sampled_from(["Mcp-Session-Id", "Mcp-Method", "Mcp-Name", "Mcp-Param-Query", "Last-Event-ID"]))
        sent[extra] = draw(st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), max_size=30))
    # HTTP/1.1 cannot carry control characters in a header at all, nor a value that starts or ends with a space or a
    # tab (the client refuses to send them): such a header is left out.
    return message, {name: value for name, value in sent.items() if _sendable(value)}


def _sendable(value: str) -> bool:
    return value == value.strip(" \t") and all(c == "\t" or " " <= c != "\x7f" for c in value)


@st.composite
def bodies(draw: st.DrawFn, target: Corpus) -> tuple[bytes, dict[str, str]]:
    message, sent = draw(requests(target))
    kind = draw(st.sampled_from(["message"] * 15 + ["batch", "scalar", "bytes", "truncated", "nested", "huge"]))
    if kind == "message":
        return _encoded(message), sent
    if kind == "batch":
        return json.dumps([message, *(m for m, _ in draw(st.lists(requests(target), max_size=2)))]).encode(), sent
    if kind == "scalar":
        return json.dumps(draw(json_values)).encode(), sent
    if kind == "bytes":
        raw = st.binary(max_size=64) | st.sampled_from([b"\xff\xfe{}", b'{"jsonrpc":"2.0","id":1,"method":"\xc3\x28"}'])
        return draw(raw), sent
    whole = _encoded(message)
    if kind == "truncated":
        return whole[: draw(st.integers(0, max(0, len(whole) - 1)))], sent
    if kind == "nested":
        depth = draw(st.sampled_from([64, 500, 5000, 50_000]))
        opener, closer = draw(st.sampled_from([("[", "]"), ('{"a":', "}")]))
        deep = (opener * depth + "1" + closer * depth).encode()
        return (whole[:-1] + b', "deep": ' + deep + b"}" if whole.endswith(b"}") else deep), sent
    return json.dumps(_swollen(message, "walrus " * draw(st.sampled_from([15_000, 300_000])))).encode(), sent


def _encoded(message: Any) -> bytes:
    """JSON, with the overflowing placeholders written as the number literals they stand for."""
    text = json.dumps(message)
    for placeholder, literal in OVERFLOWING.items():
        text = text.replace(json.dumps(placeholder), literal)
    return text.encode()


def _swollen(message: dict[str, Any], huge: str) -> dict[str, Any]:
    """The message with every string argument (or, lacking any, its params) carrying ``huge``."""
    params = dict(message["params"]) if isinstance(message.get("params"), dict) else {}
    arguments = params.get("arguments")
    if isinstance(arguments, dict) and any(isinstance(v, str) for v in arguments.values()):
        params["arguments"] = {k: huge if isinstance(v, str) else v for k, v in arguments.items()}
    else:
        params["blob"] = huge
    return {**message, "params": params}
