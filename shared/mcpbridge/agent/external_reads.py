"""What agents read from external MCP services besides tools: resources and prompts, live, and a re-pull of their
own catalog.

Every read goes the way a tool call goes (:mod:`mcpbridge.agent.invoke`): the service's connection spec as the
caller sees it (:class:`~mcpbridge.client.specs.SpecSource`: the stored credentials, or for an OAuth service the
caller's own bearer, refused at once with ``oauth_required`` when the caller never authorized it), the cached
connection of that scope, the egress guard of the connection layer, and a deadline inside the request's budget
(at most :data:`MAX_SECONDS`). Only services the agent's profile selects and that are enabled are reached.

Caps: a read answers at most :data:`MAX_CONTENT_BYTES` of contents (text counted in UTF-8 bytes, blobs in their
base64 characters); a larger answer is refused whole with 502 ``resource_too_large`` naming the cap (the connection
layer's own cap on any answer still applies before it). Lists hold at most 10 000 entries (the connection layer's).

Refresh re-pulls the catalog of the selected services for the caller: the workspace's snapshot of a shared service,
the caller's own of an OAuth one. It is rate limited per caller (workspace and user) with the exact limiter of
endpoints (:class:`~mcpbridge.publishing.rate_limit.RateLimiter`): :data:`REFRESHES_PER_MINUTE` requests a minute.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

import anyio
from anyio import to_thread

from mcpbridge.agent.profiles import AgentProfile, require_agent
from mcpbridge.client.pool import ConnectionPools, PoolKey
from mcpbridge.client.registry import ServiceRegistry
from mcpbridge.client.tool_catalog import SpecFor, ToolCatalog
from mcpbridge.domain.external_services import ExternalService, scope_for
from mcpbridge.domain.identity import Principal, Scope
from mcpbridge.errors import Forbidden, InvalidInput, MCPBridgeError, NotFound, RateLimited, UpstreamError

if TYPE_CHECKING:
    from mcp.types import GetPromptResult, Prompt, ReadResourceResult, Resource

    from mcpbridge.client.connection import Connection


class Limiter(Protocol):
    """The exact sliding-window limiter (:class:`~mcpbridge.publishing.rate_limit.RateLimiter`), as these reads use
    it: named by shape, so the agent package does not import publishing (which imports agent)."""

    def hit(self, endpoint_id: str, limit: int) -> Decision: ...


class Decision(Protocol):
    @property
    def allowed(self) -> bool: ...

    @property
    def retry_after_seconds(self) -> int: ...


MAX_SECONDS: Final = 25.0
"""Every read ends within this (API Gateway answers 504 at 29 s), or within the request's budget when shorter."""
MAX_CONTENT_BYTES: Final = 4 * 1024 * 1024
"""A resource read's contents, all parts together (a Lambda answer is at most 6 MB)."""
MAX_URI_CHARS: Final = 2048
MAX_PROMPT_NAME_CHARS: Final = 256
MAX_PROMPT_ARGUMENTS: Final = 64
MAX_PROMPT_ARGUMENT_CHARS: Final = 64 * 1024
REFRESHES_PER_MINUTE: Final = 5
MAX_REFRESHED_AT_ONCE: Final = 4

_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:[^\x00-\x20\x7f]*")
_JSONRPC_NOT_FOUND = -32002  # the MCP specification's "resource not found"
_JSONRPC_INVALID_PARAMS = -32602

Outcome = Literal["refreshed", "failed", "timed_out"]


@dataclass(frozen=True)
class ReadContents:
    service: ExternalService
    uri: str
    contents: list[dict[str, Any]]
    """As the server sent them: ``uri``, ``mimeType``, and ``text`` or ``blob`` (base64)."""
    size_bytes: int


@dataclass(frozen=True)
class PromptMessages:
    service: ExternalService
    name: str
    description: str | None
    messages: list[dict[str, Any]]


@dataclass(frozen=True)
class RefreshOutcome:
    service: ExternalService
    outcome: Outcome
    tool_count: int | None = None
    error_code: str | None = None
    error_message: str | None = None


class ExternalReads:
    def __init__(
        self,
        registry: ServiceRegistry,
        catalog: ToolCatalog,
        pools: ConnectionPools,
        spec_for: SpecFor,
        limiter: Limiter,
        *,
        request_budget: float | None = None,
        max_content_bytes: int = MAX_CONTENT_BYTES,
        refreshes_per_minute: int = REFRESHES_PER_MINUTE,
    ) -> None:
        """``request_budget``: a synchronous request's seconds in all (None: :data:`MAX_SECONDS`)."""
        self._registry = registry
        self._catalog = catalog
        self._pools = pools
        self._spec_for = spec_for
        self._limiter = limiter
        self._seconds = min(MAX_SECONDS, request_budget or MAX_SECONDS)
        self._max_content_bytes = max_content_bytes
        self._refreshes_per_minute = refreshes_per_minute

    # -- resources -------------------------------------------------------------------------------------------

    @property
    def max_content_bytes(self) -> int:
        return self._max_content_bytes

    @property
    def refreshes_per_minute(self) -> int:
        return self._refreshes_per_minute

    async def resources(
        self, principal: Principal, agent: AgentProfile, service_id: str
    ) -> tuple[ExternalService, list[Resource]]:
        """The service's resources, as the server lists them now to this caller (none when it declares none)."""
        service = await self._reachable(principal, agent, service_id)

        async def listed(connection: Connection, until: float) -> list[Resource]:
            if connection.capabilities.resources is None:
                return []
            return await connection.list_resources(until=until)

        return service, await self._on(principal, service, listed)

    async def read(self, principal: Principal, agent: AgentProfile, service_id: str, uri: str) -> ReadContents:
        checked = check_uri(uri)
        service = await self._reachable(principal, agent, service_id)

        async def read(connection: Connection, until: float) -> ReadResourceResult:
            return await connection.read_resource(checked, until=until)

        try:
            result = await self._on(principal, service, read)
        except UpstreamError as exc:
            raise _not_found_as_404(exc, service, "resource", checked) from None
        contents = [part.model_dump(mode="json", by_alias=True, exclude_none=True) for part in result.contents]
        size = sum(_size_of(part) for part in contents)
        if size > self._max_content_bytes:
            raise UpstreamError(
                f"the resource of {service.name} is larger than the {_shown(self._max_content_bytes)} cap on a "
                "resource read",
                code="resource_too_large",
                details={"service_id": service.id, "limit_bytes": self._max_content_bytes, "size_bytes": size},
            )
        return ReadContents(service=service, uri=checked, contents=contents, size_bytes=size)

    # -- prompts ---------------------------------------------------------------------------------------------

    async def prompts(
        self, principal: Principal, agent: AgentProfile, service_id: str
    ) -> tuple[ExternalService, list[Prompt]]:
        """The service's prompts, as the server lists them now to this caller (none when it declares none)."""
        service = await self._reachable(principal, agent, service_id)

        async def listed(connection: Connection, until: float) -> list[Prompt]:
            if connection.capabilities.prompts is None:
                return []
            return await connection.list_prompts(until=until)

        return service, await self._on(principal, service, listed)

    async def prompt(
        self, principal: Principal, agent: AgentProfile, service_id: str, name: str, arguments: Mapping[str, Any]
    ) -> PromptMessages:
        """The prompt's messages. Its arguments are checked against the server's own listing first: an unknown
        prompt is 404, a missing required argument or one it does not declare is 400, and nothing is asked."""
        checked_name, checked_arguments = check_prompt_request(name, arguments)
        service = await self._reachable(principal, agent, service_id)

        async def get(connection: Connection, until: float) -> GetPromptResult:
            listed = {prompt.name: prompt for prompt in await connection.list_prompts(until=until)}
            found = listed.get(checked_name)
            if found is None:
                raise NotFound(
                    f"{service.name} has no prompt of that name",
                    code="prompt_not_found",
                    details={"service_id": service.id},
                )
            check_prompt_arguments(found, checked_arguments)
            return await connection.get_prompt(checked_name, checked_arguments, until=until)

        result = await self._on(principal, service, get)
        return PromptMessages(
            service=service,
            name=checked_name,
            description=result.description,
            messages=[m.model_dump(mode="json", by_alias=True, exclude_none=True) for m in result.messages],
        )

    # -- refresh ---------------------------------------------------------------------------------------------

    async def refresh(
        self, principal: Principal, agent: AgentProfile, service_id: str | None = None
    ) -> list[RefreshOutcome]:
        """Re-pull the catalog of the selected enabled services (or of one) for the caller. Raises
        :class:`RateLimited` (``details["retry_after_seconds"]``) past the caller's budget, before any pull."""
        require_agent(principal)
        if service_id is not None:
            chosen = [await self._reachable(principal, agent, service_id)]
        else:
            chosen = await to_thread.run_sync(self._selected_enabled, principal, agent)
        decision = await to_thread.run_sync(
            self._limiter.hit, f"agentcatalog#{principal.workspace_id}#{principal.user_id}", self._refreshes_per_minute
        )
        if not decision.allowed:
            raise RateLimited(
                f"at most {self._refreshes_per_minute} catalog refreshes a minute; retry in "
                f"{decision.retry_after_seconds} s",
                code="refresh_rate_limited",
                details={"retry_after_seconds": decision.retry_after_seconds, "limit": self._refreshes_per_minute},
            )
        outcomes: dict[str, RefreshOutcome] = {}
        reader = _reader(principal)
        slots = anyio.CapacityLimiter(MAX_REFRESHED_AT_ONCE)

        async def pull(service: ExternalService) -> None:
            async with slots:
                try:
                    view = await self._catalog.refresh_for(reader, service)
                except MCPBridgeError as exc:
                    outcomes[service.id] = RefreshOutcome(service, "failed", None, exc.code, exc.message)
                    return
                tools = (view.snapshot or {}).get("tools") or []
                outcomes[service.id] = RefreshOutcome(service, "refreshed", len(tools))

        with anyio.move_on_after(self._seconds):
            async with anyio.create_task_group() as group:
                for service in chosen:
                    group.start_soon(pull, service)
        return [outcomes.get(s.id) or RefreshOutcome(s, "timed_out") for s in chosen]

    # -- helpers ---------------------------------------------------------------------------------------------

    async def _reachable(self, principal: Principal, agent: AgentProfile, service_id: str) -> ExternalService:
        require_agent(principal)
        if agent.workspace_id != principal.workspace_id:
            raise NotFound("agent not found", code="agent_not_found")
        if not service_id:
            raise InvalidInput("service_id is required", code="service_id_required")
        service = await to_thread.run_sync(self._registry.get, _reader(principal), service_id)
        if agent.mcp_selection_mode == "none" or not agent.selects(service.id):
            raise Forbidden(
                f"the agent's profile does not select the MCP service {service.name}",
                code="service_not_selected",
                details={"service_id": service.id},
            )
        if not service.enabled:
            raise Forbidden(
                f"the MCP service {service.name} is disabled",
                code="service_disabled",
                details={"service_id": service.id},
            )
        if service.is_builtin:
            raise InvalidInput(
                f"{service.name} is built in: it serves tools only",
                code="builtin_service",
                details={"service_id": service.id},
            )
        return service

    def _selected_enabled(self, principal: Principal, agent: AgentProfile) -> list[ExternalService]:
        if agent.mcp_selection_mode == "none":
            return []
        services = self._registry.list(_reader(principal))
        return [s for s in services if agent.selects(s.id) and s.enabled and not s.is_builtin]

    async def _on(self, principal: Principal, service: ExternalService, operation: Any) -> Any:
        """``operation(connection, until)`` on the cached connection of the caller's scope, within the deadline."""
        until = anyio.current_time() + self._seconds
        spec = await self._spec_for(service, principal)
        pool = self._pools.for_running_loop()
        async with pool.session(PoolKey(service.id, scope_for(service, principal)), spec, until=until) as connection:
            return await operation(connection, until)


# ---------------------------------------------------------------------------------------------------- checks


def check_uri(uri: str) -> str:
    if not isinstance(uri, str) or not uri.strip():
        raise InvalidInput("uri is required", code="invalid_resource_uri")
    if len(uri) > MAX_URI_CHARS:
        raise InvalidInput(
            f"uri is longer than {MAX_URI_CHARS} characters",
            code="invalid_resource_uri",
            details={"max_chars": MAX_URI_CHARS},
        )
    if not _URI.fullmatch(uri):
        raise InvalidInput(
            "uri must be an absolute URI (a scheme, then no spaces or control characters)",
            code="invalid_resource_uri",
        )
    return uri


def check_prompt_request(name: Any, arguments: Any) -> tuple[str, dict[str, str]]:
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_PROMPT_NAME_CHARS:
        raise InvalidInput(
            f"name must be a prompt's name (1 to {MAX_PROMPT_NAME_CHARS} characters)", code="invalid_prompt_name"
        )
    if not isinstance(arguments, Mapping):
        raise InvalidInput("arguments must be a JSON object", code="invalid_prompt_arguments")
    if len(arguments) > MAX_PROMPT_ARGUMENTS:
        raise InvalidInput(f"at most {MAX_PROMPT_ARGUMENTS} prompt arguments", code="invalid_prompt_arguments")
    checked: dict[str, str] = {}
    for key, value in arguments.items():
        if not isinstance(value, str) or len(value) > MAX_PROMPT_ARGUMENT_CHARS:
            raise InvalidInput(
                f"the prompt argument {str(key)[:64]!r} must be a string of at most {MAX_PROMPT_ARGUMENT_CHARS} "
                "characters",
                code="invalid_prompt_arguments",
                details={"argument": str(key)[:64]},
            )
        checked[str(key)] = value
    return name, checked


def check_prompt_arguments(prompt: Prompt, arguments: Mapping[str, str]) -> None:
    declared = {argument.name: argument for argument in prompt.arguments or []}
    unknown = sorted(set(arguments) - set(declared))
    if unknown:
        raise InvalidInput(
            f"the prompt does not take the argument {unknown[0][:64]!r}",
            code="unknown_prompt_argument",
            details={"argument": unknown[0][:64], "accepted": sorted(declared)[:MAX_PROMPT_ARGUMENTS]},
        )
    missing = [name for name, argument in declared.items() if argument.required and name not in arguments]
    if missing:
        raise InvalidInput(
            f"the prompt needs the argument {missing[0][:64]!r}",
            code="missing_prompt_argument",
            details={"argument": missing[0][:64]},
        )


def _not_found_as_404(exc: UpstreamError, service: ExternalService, what: str, uri: str) -> MCPBridgeError:
    """A JSON-RPC "not found" or "invalid params" the server answered about the resource is the caller's mistake."""
    if exc.code == "upstream_error" and exc.details.get("jsonrpc_code") in (
        _JSONRPC_NOT_FOUND,
        _JSONRPC_INVALID_PARAMS,
    ):
        return NotFound(
            f"{service.name} has no {what} at that uri", code=f"{what}_not_found", details={"service_id": service.id}
        )
    return exc


def _size_of(part: Mapping[str, Any]) -> int:
    text, blob = part.get("text"), part.get("blob")
    return (len(text.encode()) if isinstance(text, str) else 0) + (len(blob) if isinstance(blob, str) else 0)


def _shown(count: int) -> str:
    return f"{count // (1024 * 1024)} MiB" if count % (1024 * 1024) == 0 else f"{count} bytes"


def _reader(principal: Principal) -> Principal:
    """The principal without its key's capability list, once ``call_tools`` has been checked (reads only)."""
    return dataclasses.replace(principal, scope=Scope())
