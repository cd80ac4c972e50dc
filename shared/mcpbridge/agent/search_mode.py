"""The two tools an endpoint in search mode lists in place of its external tools (:mod:`mcpbridge.agent.gateway`):
``search_tools`` (a request -> the best matching published tools with their schemas) and ``call_tool`` (a tool's
name and arguments: exactly a call of that tool by its name)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from mcpbridge.errors import InvalidInput

SEARCH_TOOLS: Final = "search_tools"
CALL_TOOL: Final = "call_tool"
SEARCH_LIMIT_DEFAULT: Final = 5
SEARCH_LIMIT_MAX: Final = 10

SEARCH_TOOLS_TOOL: Final[dict[str, Any]] = {
    "annotations": {
        "destructiveHint": False,
        "idempotentHint": True,
        "openWorldHint": False,
        "readOnlyHint": True,
        "title": "Search external tools",
    },
    "description": (
        "Find the external tools (GitHub, Slack, browsers, databases...) that fit a task, instead of a list of all "
        "of them. Say what you want to do, in any language; you get the best matching tools with their name, "
        "description and inputSchema. Then run one with call_tool."
    ),
    "inputSchema": {
        "properties": {
            "query": {"description": "What you want to do, e.g. 'open a pull request on GitHub'.", "type": "string"},
            "limit": {
                "description": f"How many tools to return, 1 to {SEARCH_LIMIT_MAX} (default {SEARCH_LIMIT_DEFAULT}).",
                "type": "integer",
            },
        },
        "required": ["query"],
        "type": "object",
    },
    "name": SEARCH_TOOLS,
    "title": "Search external tools",
}
CALL_TOOL_TOOL: Final[dict[str, Any]] = {
    "annotations": {"destructiveHint": True, "openWorldHint": True, "title": "Call an external tool"},
    "description": (
        "Run an external tool found with search_tools: its name and arguments matching its inputSchema. A call "
        "that needs a person's approval answers with a call_id for check_call."
    ),
    "inputSchema": {
        "properties": {
            "name": {"description": "The tool's name as search_tools gave it.", "type": "string"},
            "arguments": {"description": "The tool's arguments.", "type": "object"},
        },
        "required": ["name"],
        "type": "object",
    },
    "name": CALL_TOOL,
    "title": "Call an external tool",
}


def unwrap_call(arguments: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The tool name and arguments a ``call_tool`` call names (``InvalidInput`` when they are not a name and an
    object)."""
    name, inner = arguments.get("name"), arguments.get("arguments", {})
    if not isinstance(name, str) or not name.strip():
        raise InvalidInput("name must be the name of a tool search_tools found", code="invalid_tool_name")
    if not isinstance(inner, dict):
        raise InvalidInput("arguments must be an object", code="invalid_arguments")
    return name.strip(), inner
