"""How agents address external MCP tools: function names and tool references (pure rules).

* :func:`function_name`: ``mcp_<service>_<tool>_<hash>``, the name a model calls a tool by. Lower case, spaces,
  ``-`` and ``.`` become ``_``, anything else outside ``[a-z0-9_]`` is dropped (accents are folded first: ``Café``
  gives ``cafe``), at most 64 characters (OpenAI's limit). When too long the service part is cut first, down to 4
  characters, then the tool part. The 8 hex characters at the end hash the service id and the tool's original name,
  so names that sanitise alike (``docs-a`` and ``docs.a``) stay distinct and a name never depends on what else is
  listed.
* :class:`FunctionNames`: hands out names for a list of tools, first registration wins (GHSA-67q9-58vj-32qx: a later
  tool never takes over an earlier one's name; it gets a distinct one, the same on every pass over the same order).
* :func:`definition_ref`: ``mcpt_`` + SHA-256 of service id, tool name and the digest of the tool's whole definition,
  so any change (schema, description, annotations) invalidates every reference taken before it changed.
  :func:`tool_ref` (over the input schema only) is the earlier form.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Callable, Mapping
from typing import Any, Final

MAX_FUNCTION_NAME_CHARS: Final = 64
FUNCTION_PREFIX: Final = "mcp_"
HASH_CHARS: Final = 8
MIN_SERVICE_CHARS: Final = 4
TOOL_REF_PREFIX: Final = "mcpt_"
MAX_NAME_ATTEMPTS: Final = 1000

_SEPARATORS = re.compile(r"[\s\-.]+")
_OUTSIDE = re.compile(r"[^a-z0-9_]")
_UNDERSCORES = re.compile(r"_+")
_TOOL_REF = re.compile(r"mcpt_[0-9a-f]{64}")

Namer = Callable[[str, str, str, int], str]
"""``(service_name, service_id, tool_name, attempt) -> function name``; attempt 0 first, then 1, 2... on collision."""


def sanitize(text: str) -> str:
    """``text`` reduced to ``[a-z0-9_]``: accents folded, separators to ``_``, runs of ``_`` collapsed."""
    folded = unicodedata.normalize("NFKD", text).lower()
    kept = _OUTSIDE.sub("", _SEPARATORS.sub("_", folded))
    return _UNDERSCORES.sub("_", kept).strip("_")


def _suffix(service_id: str, tool_name: str, attempt: int) -> str:
    material = f"{service_id}\x00{tool_name}" if attempt == 0 else f"{service_id}\x00{tool_name}\x00{attempt}"
    return hashlib.sha256(material.encode()).hexdigest()[:HASH_CHARS]


def function_name(service_name: str, service_id: str, tool_name: str, attempt: int = 0) -> str:
    """The function name of a tool (see the module docstring). ``attempt`` > 0 varies the hash, for collisions."""
    service = sanitize(service_name) or "svc"
    tool = sanitize(tool_name) or "tool"
    budget = MAX_FUNCTION_NAME_CHARS - len(FUNCTION_PREFIX) - HASH_CHARS - 2  # two joining underscores
    if len(service) + len(tool) > budget:
        service = service[: max(MIN_SERVICE_CHARS, budget - len(tool))].rstrip("_") or service[:MIN_SERVICE_CHARS]
    if len(service) + len(tool) > budget:
        tool = tool[: budget - len(service)].rstrip("_") or tool[:1]
    return f"{FUNCTION_PREFIX}{service}_{tool}_{_suffix(service_id, tool_name, attempt)}"


def _default_namer(service_name: str, service_id: str, tool_name: str, attempt: int) -> str:
    return function_name(service_name, service_id, tool_name, attempt)


class FunctionNames:
    """Function names for tools registered one after another: the first keeps its name; a later tool whose name
    collides gets a distinct one. Registering the same (service id, tool name) again returns its name."""

    def __init__(self, namer: Namer = _default_namer) -> None:
        self._namer = namer
        self._by_name: dict[str, tuple[str, str]] = {}
        self._by_tool: dict[tuple[str, str], str] = {}

    def register(self, service_name: str, service_id: str, tool_name: str) -> str:
        identity = (service_id, tool_name)
        known = self._by_tool.get(identity)
        if known is not None:
            return known
        for attempt in range(MAX_NAME_ATTEMPTS):
            name = self._namer(service_name, service_id, tool_name, attempt)
            if name not in self._by_name:
                self._by_name[name] = identity
                self._by_tool[identity] = name
                return name
        raise RuntimeError("no free function name")  # unreachable with a hashing namer

    def name_of(self, service_id: str, tool_name: str) -> str | None:
        return self._by_tool.get((service_id, tool_name))

    def owner_of(self, name: str) -> tuple[str, str] | None:
        """The (service id, tool name) holding a function name."""
        return self._by_name.get(name)


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def tool_ref(service_id: str, tool_name: str, input_schema: Mapping[str, Any] | None) -> str:
    """``mcpt_`` + SHA-256 hex of ``service_id \\x00 tool_name \\x00 canonical JSON schema`` (None counts as ``{}``)."""
    material = f"{service_id}\x00{tool_name}\x00{canonical_json(dict(input_schema or {}))}"
    return TOOL_REF_PREFIX + hashlib.sha256(material.encode()).hexdigest()


def definition_ref(service_id: str, tool_name: str, definition_hash: str) -> str:
    """``mcpt_`` + SHA-256 hex of ``service_id \\x00 tool_name \\x00 definition hash``: any change of the tool's
    definition (description and annotations included) gives another reference."""
    material = f"{service_id}\x00{tool_name}\x00{definition_hash}"
    return TOOL_REF_PREFIX + hashlib.sha256(material.encode()).hexdigest()


def is_tool_ref(value: str) -> bool:
    return isinstance(value, str) and _TOOL_REF.fullmatch(value) is not None
