"""What the knowledge tools answer, declared: an output schema per tool (MCP 2025-06-18 on) and an icon per group of
tools (MCP 2025-11-25 on), as ``tools/list`` gives them.

Every knowledge tool answers a JSON object, sent as ``structuredContent`` and as the same JSON in ``content[0].text``
(what clients without structured output read). The schemas describe those objects: the shared shapes come from the
REST views (:mod:`mcpbridge.http.views`), so a field added there is declared here too; a client (the MCP SDK's
does) validates each result against its tool's schema. The schemas require what every answer holds and allow more
(``additionalProperties`` is left open), so adding a field never breaks a client. An error result (``isError``) is
not held to them: it carries ``{"error": {"code", "message", "hint"}}``.

Icons are small SVG images inlined as ``data:`` URIs: nothing to fetch, so no request leaves a client for them.
"""

from __future__ import annotations

import base64
from functools import cache
from typing import Any, Final

from pydantic import BaseModel

from mcpbridge.http.mcp import file_tools, session_tools
from mcpbridge.http.views import AskOut, ChunkOut, DocumentOut, PageOut
from mcpbridge.publishing.offered_tools import BY_NAME


def _inlined(schema: Any, definitions: dict[str, Any]) -> Any:
    """``schema`` with its local ``$ref``s replaced by what they name, and without pydantic's ``title`` and
    ``examples`` keywords, so that a part of it can sit anywhere in another schema."""
    if isinstance(schema, list):
        return [_inlined(item, definitions) for item in schema]
    if not isinstance(schema, dict):
        return schema
    reference = schema.get("$ref")
    if isinstance(reference, str) and reference.startswith("#/$defs/"):
        return _inlined(definitions[reference.removeprefix("#/$defs/")], definitions)
    shaped: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ("$defs", "title", "examples"):
            continue
        if key == "properties":  # names, not keywords: a property may be called "title"
            shaped[key] = {name: _inlined(part, definitions) for name, part in value.items()}
        else:
            shaped[key] = _inlined(value, definitions)
    return shaped


@cache
def _view(model: type[BaseModel], *, without: tuple[str, ...] = ()) -> dict[str, Any]:
    """The JSON Schema of a REST view, self-contained, without the fields a tool leaves out."""
    schema = model.model_json_schema()
    shaped: dict[str, Any] = _inlined(schema, schema.get("$defs", {}))
    for name in without:
        shaped["properties"].pop(name, None)
        if name in shaped.get("required", ()):
            shaped["required"] = [field for field in shaped["required"] if field != name]
    return shaped


def _object(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    """An object with these properties, all required unless ``required`` says which."""
    return {"type": "object", "properties": properties, "required": list(properties) if required is None else required}


def _with(base: dict[str, Any], **more: Any) -> dict[str, Any]:
    """``base`` with more properties, required too."""
    return {**base, "properties": {**base["properties"], **more}, "required": [*base.get("required", []), *more]}


def _array(items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": items}


_STRING: Final = {"type": "string"}
_INTEGER: Final = {"type": "integer"}
_BOOLEAN: Final = {"type": "boolean"}
_STRINGS: Final = _array({"type": "string"})
_MAYBE_STRING: Final = {"type": ["string", "null"]}
_LINES: Final = _array(_object({"line": _INTEGER, "text": _STRING}))


def _document() -> dict[str, Any]:
    return _view(DocumentOut, without=("content",))


def _chunk() -> dict[str, Any]:
    return _view(ChunkOut)


def _bases(**extra: Any) -> dict[str, Any]:
    """A list of knowledge bases, each with ``extra`` fields."""
    kb = {
        "id": _STRING,
        "name": _STRING,
        "description": _STRING,
        "capabilities": _array({"type": "string", "enum": ["keyword", "semantic", "wiki"]}),
        "document_count": _INTEGER,
        **extra,
    }
    return _object({"knowledge_bases": _array(_object(kb)), "total": _INTEGER})


def output_schemas() -> dict[str, dict[str, Any]]:
    """Each knowledge tool's output schema, by tool name."""
    return {
        "list_knowledge_bases": _bases(),
        "list_shared_knowledge_bases": _bases(
            owner_workspace_id=_STRING,
            permission={"type": "string", "enum": ["read", "write"]},
            searched_by_default=_BOOLEAN,
        ),
        "search_knowledge": _object(
            {
                "query": _STRING,
                "mode": {"type": "string", "enum": ["hybrid", "semantic", "keyword"]},
                "notices": _STRINGS,
                "results": _array(_with(_chunk(), score={"type": "number"})),
            }
        ),
        "grep_chunks": _object(
            {
                "pattern": _STRING,
                "matches": _array(_with(_chunk(), lines=_LINES)),
                "truncated": _BOOLEAN,
                "notices": _STRINGS,
            }
        ),
        "list_documents": _object(
            {
                "knowledge_base_id": _STRING,
                "total": _INTEGER,
                "page": _INTEGER,
                "page_size": _INTEGER,
                "has_more": _BOOLEAN,
                "documents": _array(_document()),
            }
        ),
        "read_document": _read_document(),
        "find_documents": _object(
            {
                "name": _STRING,
                "documents": _array(
                    _with(
                        _document(),
                        knowledge_base_name=_STRING,
                        match={"type": "string", "enum": ["exact", "prefix", "contains"]},
                    )
                ),
                "total": _INTEGER,
                "has_more": _BOOLEAN,
            }
        ),
        "ask": _view(AskOut),
        **session_tools.OUTPUTS,
        **_wiki_and_write_schemas(),
    }


def _read_document() -> dict[str, Any]:
    return _object(
        {
            "document": _document(),
            "chunks": _array(_with(_chunk(), matched=_BOOLEAN)),
            "total_chunks": _INTEGER,
            "next_offset": {"type": ["integer", "null"]},
            "truncated": _BOOLEAN,
            "query": _MAYBE_STRING,
            "matches": _INTEGER,
            "note": _MAYBE_STRING,
            "metadata_only": _BOOLEAN,
            **file_tools.WINDOW_OUTPUTS,
        },
        ["document"],  # metadata_only=true answers the document alone; patterns answer windows
    )


def _wiki_and_write_schemas() -> dict[str, dict[str, Any]]:
    return {
        "wiki_search": _object(
            {
                "matches": _array(
                    _object(
                        {
                            "knowledge_base_id": _STRING,
                            "slug": _STRING,
                            "type": _STRING,
                            "title": _STRING,
                            "lines": _LINES,
                        }
                    )
                ),
                "truncated": _BOOLEAN,
                "notices": _STRINGS,
            }
        ),
        "wiki_read_page": _view(PageOut),
        "wiki_index": _object(
            {
                "knowledge_base_id": _STRING,
                "intro": _STRING,
                "groups": _array(
                    _object(
                        {
                            "type": _STRING,
                            "total": _INTEGER,
                            "pages": _array(_object({"slug": _STRING, "title": _STRING})),
                            "truncated": _BOOLEAN,
                        }
                    )
                ),
            }
        ),
        "add_document": _object({"knowledge_base_id": _STRING, "document": _document(), "note": _STRING}),
        "update_document": _object({"document": _document(), "note": _STRING}),
        "delete_document": _object(
            {
                "deleted": {"type": "boolean", "const": True},
                "document_id": _STRING,
                "knowledge_id": _STRING,
                "title": _STRING,
            }
        ),
    }


# ---------------------------------------------------------------------------------------------------- icons

_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" fill="none" stroke="currentColor" '
    'stroke-width="2" stroke-linecap="round" stroke-linejoin="round">{}</svg>'
)
_SHAPES: Final = {
    # a magnifier: finding
    "search": '<circle cx="11" cy="11" r="7"/><path d="M21 21l-5-5"/>',
    # a page with lines: documents
    "document": '<path d="M14 3H6v18h12V7z"/><path d="M14 3v4h4M9 12h6M9 16h6"/>',
    # a stack: knowledge bases
    "library": '<ellipse cx="12" cy="6" rx="8" ry="3"/><path d="M4 6v12c0 1.7 3.6 3 8 3s8-1.3 8-3V6"/>'
    '<path d="M4 12c0 1.7 3.6 3 8 3s8-1.3 8-3"/>',
    # a speech bubble: answers
    "answer": '<path d="M21 12a8 8 0 0 1-11.6 7.1L4 21l1.9-5.4A8 8 0 1 1 21 12z"/>',
    # an open book: the wiki
    "wiki": '<path d="M2 5h7a3 3 0 0 1 3 3v13a2 2 0 0 0-2-2H2z"/>'
    '<path d="M22 5h-7a3 3 0 0 0-3 3v13a2 2 0 0 1 2-2h8z"/>',
    # a pencil: writing
    "write": '<path d="M16 3l5 5L8 21H3v-5z"/>',
}
_ICON_OF_TOOL: Final = {
    "list_knowledge_bases": "library",
    "list_shared_knowledge_bases": "library",
    "search_knowledge": "search",
    "grep_chunks": "search",
    "list_documents": "document",
    "read_document": "document",
    "find_documents": "search",
    "ask": "answer",
    "list_sessions": "answer",
    "get_session": "answer",
    "delete_session": "answer",
    "wiki_search": "wiki",
    "wiki_read_page": "wiki",
    "wiki_index": "wiki",
    "add_document": "write",
    "update_document": "write",
    "delete_document": "write",
}
assert set(_ICON_OF_TOOL) == set(BY_NAME), "every knowledge tool has its icon"


def _data_uri(shape: str) -> str:
    svg = _SVG.format(_SHAPES[shape]).encode()
    return "data:image/svg+xml;base64," + base64.b64encode(svg).decode("ascii")


def icons() -> dict[str, list[dict[str, Any]]]:
    """Each knowledge tool's ``icons`` (MCP 2025-11-25 ``Icon``: ``src``, ``mimeType``, ``sizes``)."""
    return {
        tool: [{"src": _data_uri(shape), "mimeType": "image/svg+xml", "sizes": ["any"]}]
        for tool, shape in _ICON_OF_TOOL.items()
    }


def server_icon() -> dict[str, Any]:
    """The server's own icon (a server card's ``icons``)."""
    return {"src": _data_uri("library"), "mimeType": "image/svg+xml", "sizes": ["any"]}
