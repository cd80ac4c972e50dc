"""The endpoint's file tools (Yuxi's): ``read_document`` with ``patterns`` (windows of lines around literal
patterns) and ``find_documents`` (documents by file name across the knowledge bases in scope)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mcpbridge.errors import InvalidInput
from mcpbridge.http.views import DocumentOut
from mcpbridge.knowledge.line_windows import CONTEXT_DEFAULT, CONTEXT_MAX, FIND_LIMIT_DEFAULT, FIND_LIMIT_MAX

if TYPE_CHECKING:
    from mcpbridge.domain.knowledge import Document
    from mcpbridge.http.mcp.tools import ToolContext
    from mcpbridge.knowledge.line_windows import WindowsResult

_STRING: dict[str, Any] = {"type": "string"}
_INTEGER: dict[str, Any] = {"type": "integer"}
_BOOLEAN: dict[str, Any] = {"type": "boolean"}


def _whole(args: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = args.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{name} must be a whole number", code="invalid_argument")
    return max(low, min(high, value))


def _patterns(args: dict[str, Any]) -> list[str]:
    value = args.get("patterns")
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidInput("patterns must be a list of strings", code="invalid_patterns")
    return list(value)


def windows_answer(result: WindowsResult) -> dict[str, Any]:
    return {
        "document": DocumentOut.of(result.document).model_dump(exclude={"content"}),
        "patterns": result.patterns,
        "context_lines": result.context_lines,
        "windows": [
            {
                "start_line": w.start_line,
                "end_line": w.end_line,
                "patterns": w.patterns,
                "lines": [{"line": line.line, "text": line.text, "matched": line.matched} for line in w.lines],
            }
            for w in result.windows
        ],
        "matches": result.matches,
        "truncated": result.truncated,
        "next_line": result.next_line,
        "note": result.note,
    }


def read_windows(ctx: ToolContext, document: Document, args: dict[str, Any]) -> dict[str, Any]:
    """``read_document`` given ``patterns``."""
    result = ctx.container.file_tools.read_windows(
        document,
        _patterns(args),
        context_lines=_whole(args, "context_lines", CONTEXT_DEFAULT, 0, CONTEXT_MAX),
        from_line=_whole(args, "from_line", 1, 1, 10_000_000),
    )
    return windows_answer(result)


def find_documents(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    name = args.get("name")
    if not isinstance(name, str):
        raise InvalidInput("name is required (a file name, or part of one)", code="missing_argument")
    selectors = args.get("knowledge_base_ids")
    if selectors is not None and (not isinstance(selectors, list) or not all(isinstance(s, str) for s in selectors)):
        raise InvalidInput("knowledge_base_ids must be a list of strings", code="invalid_argument")
    every = ctx.container.file_tools.find_by_name(ctx.access, name, knowledge_base_ids=selectors)
    found, total = every[: _whole(args, "limit", FIND_LIMIT_DEFAULT, 1, FIND_LIMIT_MAX)], len(every)
    return {
        "name": name.strip(),
        "documents": [
            {
                **DocumentOut.of(n.document).model_dump(exclude={"content"}),
                "knowledge_base_name": n.knowledge_base_name,
                "match": ("exact", "prefix", "contains")[n.rank],
            }
            for n in found
        ],
        "total": total,
        "has_more": total > len(found),
    }


FIND_DESCRIPTION = (
    "Find documents by file name (or title) across the knowledge bases in scope, case-insensitively: exact names "
    "first, then names starting with it, then names containing it. Open a result with read_document. When no name "
    "matches, search_knowledge may still find the content."
)
FIND_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "A file name or part of one, e.g. design.pdf or design."},
        "knowledge_base_ids": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Knowledge bases to look in, by id or name. Default: every one in scope.",
        },
        "limit": {"type": "integer", "minimum": 1, "maximum": FIND_LIMIT_MAX, "default": FIND_LIMIT_DEFAULT},
    },
    "required": ["name"],
}
WINDOW_INPUTS: dict[str, Any] = {
    "patterns": {
        "type": "array",
        "items": {"type": "string"},
        "description": "Literal texts (not regexes, case-insensitive, 1 to 10): answers windows of lines around the "
        "lines holding any of them, merged so no line repeats. Continue with from_line=next_line.",
    },
    "context_lines": {
        "type": "integer",
        "minimum": 0,
        "maximum": CONTEXT_MAX,
        "default": CONTEXT_DEFAULT,
        "description": "With patterns: lines before and after each matching line.",
    },
    "from_line": {"type": "integer", "minimum": 1, "description": "With patterns: look from this line on."},
}
WINDOW_OUTPUTS: dict[str, Any] = {
    "patterns": {"type": "array", "items": _STRING},
    "context_lines": _INTEGER,
    "windows": {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "start_line": _INTEGER,
                "end_line": _INTEGER,
                "patterns": {"type": "array", "items": _STRING},
                "lines": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"line": _INTEGER, "text": _STRING, "matched": _BOOLEAN},
                        "required": ["line", "text", "matched"],
                    },
                },
            },
            "required": ["start_line", "end_line", "patterns", "lines"],
        },
    },
    "next_line": {"type": ["integer", "null"]},
}
