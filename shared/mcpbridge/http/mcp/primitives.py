"""What a published endpoint serves besides tools: its documents as resources
(:mod:`~mcpbridge.http.mcp.resources`), its prompts and completion (:mod:`~mcpbridge.http.mcp.prompts`); the methods'
params checked as the SDK's models check them (-32602), their answers in both eras.

Resources are declared (and served) where the endpoint's callers may read documents (``read_document``), each
prompt where the tool whose knowledge it reads is offered, completion where either is; elsewhere the methods are
-32601 as before. Each request's answer is computed in a worker thread: it reads the store and document texts
(S3 on AWS).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final

import anyio.to_thread

from mcpbridge.bootstrap import Container
from mcpbridge.domain.knowledge import KnowledgeAccess
from mcpbridge.http.mcp.jsonrpc import INVALID_PARAMS, JsonRpcError, invalid_params
from mcpbridge.http.mcp.params import MetaCheck, listing_params, request_params
from mcpbridge.http.mcp.prompts import Prompts
from mcpbridge.http.mcp.resources import TEMPLATES, Resources

RATE_LIMITED: Final = -32029
"""The error of a read refused by the endpoint's rate limit (a server-defined code); ``data`` holds the wait."""
COUNTED: Final = frozenset({"resources/read", "prompts/get"})
"""The methods that read document texts or search, and so count in the endpoint's rate limit as a tool call does."""
Admit = Callable[[], int | None]
"""One count in the rate limit: None when admitted, else the seconds to wait."""

RESOURCE_METHODS: Final = frozenset({"resources/list", "resources/templates/list", "resources/read"})
PROMPT_METHODS: Final = frozenset({"prompts/list", "prompts/get"})
COMPLETION_METHOD: Final = "completion/complete"


def _require(condition: bool) -> None:
    if not condition:
        raise invalid_params()


def _strings(value: Any) -> dict[str, str]:
    _require(value is None or (isinstance(value, dict) and all(isinstance(v, str) for v in value.values())))
    return dict(value or {})


class Primitives:
    """The resources, prompts and completion one request may use."""

    def __init__(
        self, container: Container, access: KnowledgeAccess, tools: Iterable[str], admit: Admit | None = None
    ) -> None:
        offered = frozenset(tools)
        self._admit = admit
        self._resources = Resources(container, access) if "read_document" in offered else None
        self._prompts = Prompts(container, access, offered)

    def capabilities(self) -> dict[str, Any]:
        """The capabilities to declare besides ``tools``."""
        declared: dict[str, Any] = {}
        if self._prompts.offered:
            declared["prompts"] = {"listChanged": False}
        if self._resources is not None:
            declared["resources"] = {"listChanged": False, "subscribe": False}
        if declared:
            declared["completions"] = {}
        return declared

    def serves(self, method: str) -> bool:
        if method in RESOURCE_METHODS:
            return self._resources is not None
        if method in PROMPT_METHODS:
            return bool(self._prompts.offered)
        return method == COMPLETION_METHOD and (self._resources is not None or bool(self._prompts.offered))

    async def answer(
        self, method: str, params: dict[str, Any] | None, meta: MetaCheck, *, modern: bool
    ) -> dict[str, Any]:
        """The result of ``method`` (which :meth:`serves`); raises :class:`JsonRpcError`."""
        work = self._checked(method, params, meta, modern=modern)
        admit = self._admit if method in COUNTED else None

        def run() -> dict[str, Any]:
            wait = None if admit is None else admit()
            if wait is not None:
                message = f"rate limit exceeded for this endpoint; retry in {wait} s"
                raise JsonRpcError(RATE_LIMITED, message, {"retry_after_seconds": wait})
            return work()

        result: dict[str, Any] = await anyio.to_thread.run_sync(run)
        return result

    def _checked(
        self, method: str, params: dict[str, Any] | None, meta: MetaCheck, *, modern: bool
    ) -> Callable[[], dict[str, Any]]:
        """The params checked, now; the work, to run in a worker thread."""
        resources, prompts = self._resources, self._prompts
        if method in ("resources/list", "resources/templates/list", "prompts/list"):
            listing_params(params, meta)
            cursor = None if params is None else params.get("cursor")
            if method == "prompts/list":
                return prompts.listing
            if method == "resources/templates/list":
                return lambda: {"resourceTemplates": list(TEMPLATES)}
            assert resources is not None
            return lambda: resources.listing(cursor)
        _require(params is not None)
        assert params is not None
        request_params(params, meta)
        if method == "resources/read":
            uri = params.get("uri")
            _require(isinstance(uri, str))
            assert resources is not None
            return lambda: resources.read(str(uri), modern=modern)
        if method == "prompts/get":
            name = params.get("name")
            _require(isinstance(name, str))
            arguments = _strings(params.get("arguments"))
            return lambda: prompts.get(str(name), arguments)
        return self._completion(params)

    def _completion(self, params: dict[str, Any]) -> Callable[[], dict[str, Any]]:
        ref, argument, context = params.get("ref"), params.get("argument"), params.get("context")
        _require(isinstance(ref, dict) and isinstance(argument, dict))
        assert isinstance(ref, dict)
        assert isinstance(argument, dict)
        kind = ref.get("type")
        _require(
            (kind == "ref/prompt" and isinstance(ref.get("name"), str))
            or (kind == "ref/resource" and isinstance(ref.get("uri"), str))
        )
        name, value = argument.get("name"), argument.get("value")
        _require(isinstance(name, str) and isinstance(value, str))
        _require(context is None or isinstance(context, dict))
        known = _strings(context.get("arguments") if isinstance(context, dict) else None)
        if kind == "ref/resource" and self._resources is None:
            raise JsonRpcError(INVALID_PARAMS, "this endpoint offers no resource templates")
        return lambda: self._prompts.complete(ref, str(name), str(value), known)
