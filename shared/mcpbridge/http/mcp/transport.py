"""``/mcp/{endpoint_id}``: stateless Streamable HTTP with JSON answers (:mod:`mcpbridge.http.mcp.protocol`).

A browser's CORS preflight (``OPTIONS``) is answered 204 for an origin of ``allowed_origins`` (or the page's own)
asking to POST or DELETE, and 403 otherwise; an answer to an allowed origin carries ``Access-Control-Allow-Origin``.

Order of checks, before the protocol sees the request: method (GET is 405: no server-initiated streams), Host (421
unless allowed), browser Origin (403 unless allowed), credentials in the query string (401), bearer token of this
endpoint (401 / 403): its static ``mcp_`` token, or an OAuth access token ``mcpat_`` of mcpbridge's authorization
server (:mod:`mcpbridge.authserver.access`: the call then runs as the token's user, within the user's access), as
the endpoint's ``auth_mode`` allows. A 401 from an endpoint that accepts OAuth names its RFC 9728 metadata in
``WWW-Authenticate``, which is how a client that knows only the URL starts signing in. Nothing is cached between
requests, so a rotated, disabled or deleted endpoint, or a revoked grant, fails on its next request. The token is
checked by :func:`~mcpbridge.http.store_reads.store_read`: on the event loop where store reads are local
(SQLite), in a worker thread where they are network calls (DynamoDB). Then the body, at most 4 MiB (413 beyond),
goes to the protocol, and a tool call takes one worker thread for the rate limit, the use record and the tool.
"""

# Over 400 lines: the endpoint's HTTP checks and the tools one request may call (its own and published ones) share
# the request's authority.

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from mcpbridge import __version__
from mcpbridge.agent.discovery import PublishedCall
from mcpbridge.agent.request_state import InvalidRequestState
from mcpbridge.bootstrap import Container
from mcpbridge.domain import credentials
from mcpbridge.domain.identity import Principal
from mcpbridge.domain.knowledge import KnowledgeAccess
from mcpbridge.errors import Conflict, Forbidden, InvalidInput, MCPBridgeError, NotFound, Unauthenticated
from mcpbridge.http.mcp import protocol, tool_outputs, tool_tasks
from mcpbridge.http.mcp.app import SERVER_CARD
from mcpbridge.http.mcp.jsonrpc import INVALID_PARAMS, JsonRpcError, Reply
from mcpbridge.http.mcp.params import declares_extension, elicitation_modes
from mcpbridge.http.mcp.primitives import Primitives
from mcpbridge.http.mcp.protocol import TASKS_EXTENSION, Resume, ServerIdentity
from mcpbridge.http.mcp.tools import INSTRUCTIONS, SPECS, SPECS_BY_NAME, ToolContext, ToolSpec
from mcpbridge.http.problems import WWW_AUTHENTICATE, problem
from mcpbridge.http.store_reads import store_read
from mcpbridge.publishing.endpoints import Endpoint

log = logging.getLogger("mcpbridge.mcp")

CHECK_CALL = "check_call"
ANSWER_CALL = "answer_call"
SEARCH_TOOLS = "search_tools"
CALL_TOOL = "call_tool"
TASK_TOOLS = frozenset({"ask", "add_document"})
"""The knowledge tools that run as Tasks for a client declaring the extension (:mod:`.tool_tasks`)."""
IDEMPOTENCY_META = "io.mcpbridge/idempotency-key"
"""The ``_meta`` key of a ``tools/call`` of a published external tool that makes retries return the first call."""

ENDPOINT_STATE = "mcpbridge.endpoint"
INVALID_STATE = "Invalid or expired requestState"
"""The one answer to a ``requestState`` that is not this request's (the reason goes to the log only)."""
# Query parameters that would carry a credential: refused, since URLs end up in logs and histories.
_QUERY_CREDENTIALS = frozenset({"token", "access_token", "api_key", "apikey", "key", "auth", "authorization"})
MAX_BODY_BYTES = 4 * 1024 * 1024
IDENTITY = ServerIdentity("mcpbridge", __version__, INSTRUCTIONS)

HINTS = {
    400: "Check the arguments against the tool's input schema and try again.",
    401: "The endpoint token is not valid; ask the workspace admin for a new one.",
    403: "This endpoint is not allowed to do that.",
    404: "Rediscover what exists with list_knowledge_bases and list_documents, then retry with a listed id.",
    409: "The item changed meanwhile; read it again and retry.",
    413: "The input is too large; send less.",
    429: "Rate limit reached for this endpoint; retry shortly.",
}
RETRY_LATER = "A temporary failure on the server side; retry later."


@dataclass(frozen=True)
class Authority:
    """What one request may do: its endpoint's tools and knowledge, narrowed to a user's for an OAuth token."""

    endpoint: Endpoint
    tools: tuple[str, ...] | list[str]
    access: KnowledgeAccess
    user_id: str | None = None
    client_id: str | None = None

    @property
    def rate_key(self) -> str:
        """The rate limit's count: the endpoint's, or the user's on it when the endpoint counts per user."""
        if self.user_id is not None and self.endpoint.rate_limit_scope == "user":
            return f"{self.endpoint.id}~{self.user_id}"
        return self.endpoint.id


def _tool(spec: ToolSpec, output_schema: dict[str, Any], icons: list[dict[str, Any]]) -> dict[str, Any]:
    """A tool as ``tools/list`` gives it: with what it answers (``outputSchema``, :mod:`.tool_outputs`) and its
    icon."""
    return {
        "annotations": {
            "destructiveHint": spec.destructive,
            "idempotentHint": spec.read_only,
            "openWorldHint": False,
            "readOnlyHint": spec.read_only,
            "title": spec.title,
        },
        "description": spec.description,
        "icons": icons,
        "inputSchema": spec.input_schema,
        "name": spec.name,
        "outputSchema": output_schema,
        "title": spec.title,
    }


def _tools() -> dict[str, dict[str, Any]]:
    schemas, icons = tool_outputs.output_schemas(), tool_outputs.icons()
    return {spec.name: _tool(spec, schemas[spec.name], icons[spec.name]) for spec in SPECS}


TOOLS: dict[str, dict[str, Any]] = _tools()


def _json_result(data: dict[str, Any], *, is_error: bool = False) -> dict[str, Any]:
    text = json.dumps(data, ensure_ascii=False, indent=2)
    return {"content": [{"text": text, "type": "text"}], "isError": is_error, "structuredContent": data}


def error_result(code: str, message: str, status: int) -> dict[str, Any]:
    hint = HINTS.get(status, RETRY_LATER if status >= 500 else HINTS[400])
    return _json_result({"error": {"code": code, "message": message, "hint": hint}}, is_error=True)


class McpEndpointApp:
    """The ASGI app behind ``/mcp/{endpoint_id}``."""

    def __init__(self, container: Container) -> None:
        self._container = container
        self._allowed_of: _Allowed | None = None
        tool_tasks.register(container)  # the Tasks this app creates run as this process's jobs where jobs are local

    @property
    def container(self) -> Container:
        return self._container

    # ------------------------------------------------------------------------------------------ HTTP

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        if scope.get(SERVER_CARD):
            await (await self._server_card(request))(scope, receive, send)
            return
        if request.method == "OPTIONS":
            await self._preflight(request)(scope, receive, send)
            return
        origin = request.headers.get("origin")
        if origin is not None and self._origin_allowed(origin, request):
            send = _with_cors(send, origin)
        refusal = await self._refusal(request)
        body = None if refusal is not None else await read_body(scope, receive, MAX_BODY_BYTES)
        if body is None:
            await (refusal or Response("Request body too large", status_code=413))(scope, receive, send)
            return
        authority: Authority = scope["state"][ENDPOINT_STATE]
        await self.answer(scope, receive, send, authority, body)

    async def answer(self, scope: Scope, receive: Receive, send: Send, authority: Authority, body: bytes) -> None:
        """The protocol's answer to an admitted request, sent."""
        headers = protocol.Headers(scope["headers"])
        tools = EndpointTools(self, authority, _base_url(scope))
        primitives = Primitives(self._container, authority.access, authority.tools, lambda: self.admit(authority))
        reply = await protocol.answer(scope["method"], headers, body, IDENTITY, tools, primitives)
        await send_reply(reply, send)

    async def _server_card(self, request: Request) -> Response:
        """The endpoint's server card (:mod:`.server_card`), for anyone, on a host served here."""
        from mcpbridge.http.mcp import server_card

        base = None
        if self._host_allowed(request):
            base = (self._container.settings.public_base_url or str(request.base_url)).rstrip("/")
        return await server_card.answer(self._container, request, request.path_params.get("endpoint_id", ""), base)

    def _preflight(self, request: Request) -> Response:
        """A browser's CORS preflight: 204 with what the page may send, for an allowed origin asking to POST or
        DELETE; 403 for any other origin or method (421 for a host not served), so the browser sends nothing."""
        if not self._host_allowed(request):
            return problem(421, "misdirected_request", "this host name is not served here")
        origin = request.headers.get("origin")
        if origin is None or not self._origin_allowed(origin, request):
            return problem(403, "origin_not_allowed", "requests from this browser origin are not allowed")
        wanted = (request.headers.get("access-control-request-method") or "").strip().upper()
        if wanted not in ("POST", "DELETE"):
            return problem(403, "method_not_allowed", "this endpoint answers POST (and DELETE) only")
        return Response(status_code=204, headers={**_cors_headers(origin), **PREFLIGHT_HEADERS})

    async def _refusal(self, request: Request) -> Response | None:
        if request.method not in ("POST", "DELETE"):
            return problem(405, "method_not_allowed", "this endpoint answers POST only", headers={"Allow": "POST"})
        if not self._host_allowed(request):
            return problem(421, "misdirected_request", "this host name is not served here")
        origin = request.headers.get("origin")
        if origin is not None and not self._origin_allowed(origin, request):
            return problem(403, "origin_not_allowed", "requests from this browser origin are not allowed")
        if request.scope.get("query_string") and _QUERY_CREDENTIALS & {n.lower() for n in request.query_params}:
            return _unauthorized("query_token_refused", "send the token in the Authorization header, not the URL")
        authorization = request.headers.get("authorization")
        if authorization is None:
            return await self._challenge(request, "missing_token", "this endpoint needs a bearer token", invalid=False)
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        endpoint_id = request.path_params.get("endpoint_id", "")
        if scheme.lower() == "bearer" and token.startswith(credentials.OAUTH_ACCESS_PREFIX):
            return await self._oauth(request, endpoint_id, token)
        if scheme.lower() != "bearer" or not credentials.well_formed(token, credentials.ENDPOINT_TOKEN_PREFIX):
            return await self._challenge(request, "invalid_token", "the token is not valid for this endpoint")
        try:
            endpoint = await store_read(self._container, self._container.endpoints.authenticate, endpoint_id, token)
        except Unauthenticated as exc:
            return await self._challenge(request, exc.code, exc.message)
        except Forbidden as exc:
            return problem(403, exc.code, exc.message)
        authority = Authority(endpoint, endpoint.tools, endpoint.knowledge_access())
        request.scope.setdefault("state", {})[ENDPOINT_STATE] = authority
        return None

    async def _oauth(self, request: Request, endpoint_id: str, token: str) -> Response | None:
        try:
            caller = await store_read(self._container, self._container.oauth_access.authenticate, endpoint_id, token)
        except Unauthenticated as exc:
            return await self._challenge(request, exc.code, exc.message)
        except Forbidden as exc:
            return problem(403, exc.code, exc.message)
        authority = Authority(caller.endpoint, caller.tools, caller.access, caller.user_id, caller.client_id)
        request.scope.setdefault("state", {})[ENDPOINT_STATE] = authority
        return None

    async def _challenge(self, request: Request, code: str, detail: str, *, invalid: bool = True) -> Response:
        """A 401; for an endpoint that accepts OAuth, its challenge names the resource metadata (RFC 9728 5.1)."""
        endpoint_id = request.path_params.get("endpoint_id", "")
        endpoint = await store_read(self._container, self._container.endpoints.find, endpoint_id)
        if endpoint is None or not endpoint.accepts_oauth:
            return _unauthorized(code, detail, invalid=invalid)
        from mcpbridge.authserver.metadata import Issuer

        base = (self._container.settings.public_base_url or str(request.base_url)).rstrip("/")
        challenge = Issuer(base, endpoint).challenge(error="invalid_token" if invalid else None)
        return problem(401, code, detail, headers={"WWW-Authenticate": challenge})

    def _origin_allowed(self, origin: str, request: Request) -> bool:
        """A configured origin, or the page's own origin: a same-origin request (its Host already checked) cannot
        be a DNS-rebinding attack, which needs a foreign page."""
        origin = origin.strip().rstrip("/").lower()
        if origin in self._allowed().origins:
            return True
        parts = urlsplit(origin)
        return parts.scheme in ("http", "https") and parts.netloc == (request.headers.get("host") or "").strip().lower()

    def _host_allowed(self, request: Request) -> bool:
        host = (request.headers.get("host") or "").strip().lower()
        allowed = self._allowed().hosts
        if host in allowed or _host_name(host) in allowed:
            return True
        # Behind API Gateway, the request context names the API's own domain; it comes from AWS, not the client.
        event = request.scope.get("aws.event")
        if isinstance(event, dict):
            domain = event.get("requestContext", {}).get("domainName")
            if isinstance(domain, str):
                return domain.lower() in (host, _host_name(host))
        return False

    def _allowed(self) -> _Allowed:
        """The allowed hosts and origins of the settings in use, normalised once per settings object."""
        settings = self._container.settings
        if self._allowed_of is None or self._allowed_of.settings is not settings:
            hosts = {h.strip().lower() for h in settings.allowed_hosts}
            if settings.public_base_url:
                hosts.add((urlsplit(settings.public_base_url).hostname or "").lower())
            origins = frozenset(o.strip().rstrip("/").lower() for o in settings.allowed_origins)
            self._allowed_of = _Allowed(settings, frozenset(hosts), origins)
        return self._allowed_of

    # ------------------------------------------------------------------------------------------ tools

    def admit(self, authority: Authority) -> int | None:
        """One count in the rate limit of a resource read or a prompt: None when admitted, else the wait in s."""
        decision = self._container.rate_limiter.hit(authority.rate_key, authority.endpoint.rate_limit_per_minute)
        if not decision.allowed:
            return decision.retry_after_seconds
        self._container.endpoints.touch(authority.endpoint)
        return None

    def admit_call(self, authority: Authority) -> dict[str, Any] | None:
        """The rate limit and the use record of one tool call (blocking): an error result when it is over the limit."""
        wait = self.admit(authority)
        if wait is None:
            return None
        return error_result("rate_limited", f"rate limit exceeded for this endpoint; retry in {wait} s", 429)

    def run_tool(
        self, authority: Authority, name: str, arguments: dict[str, Any], base_url: str = ""
    ) -> dict[str, Any]:
        """One tool call of an admitted request, in a worker thread: the rate limit, the use record, the tool."""
        container, endpoint = self._container, authority.endpoint
        refused = self.admit_call(authority)
        if refused is not None:
            return refused
        if authority.user_id is not None:
            log.info("tool %s on endpoint %s, as user %s (OAuth)", name, endpoint.id, authority.user_id)
        return tool_result(container, authority, name, arguments, container.settings.public_base_url or base_url)

    def task_answer(self, authority: Authority, name: str, arguments: dict[str, Any], base_url: str) -> dict[str, Any]:
        """A call of ``ask`` or ``add_document`` as a Task (:mod:`.tool_tasks`), in a worker thread."""
        return tool_tasks.create(self, authority, name, arguments, base_url)


def tool_result(
    container: Container, authority: Authority, name: str, arguments: dict[str, Any], base_url: str
) -> dict[str, Any]:
    """What one admitted call of a knowledge tool answers (blocking): its result, or the error result."""
    endpoint = authority.endpoint
    context = ToolContext(
        container, authority.access, endpoint.id, authority.user_id, base_url, endpoint.default_agent_id
    )
    try:
        data = SPECS_BY_NAME[name].handler(context, arguments)
    except MCPBridgeError as exc:
        return error_result(exc.code, exc.message, exc.status)
    except Exception:
        log.exception("tool %s failed on endpoint %s", name, endpoint.id)
        return error_result("internal_error", "the tool failed unexpectedly", 500)
    return _json_result(data)


json_result = _json_result


class EndpointTools:
    """The tools one request may see and call (:class:`~mcpbridge.http.mcp.protocol.ToolServer`): the knowledge tools
    of its endpoint and, where the endpoint publishes external services, their tools and ``check_call``
    (:mod:`mcpbridge.agent.gateway`)."""

    __slots__ = ("_app", "_authority", "_base_url")

    def __init__(self, app: McpEndpointApp, authority: Authority, base_url: str = "") -> None:
        self._app = app
        self._authority = authority
        self._base_url = base_url

    async def tools(self) -> list[dict[str, Any]]:
        own = [TOOLS[name] for name in self._authority.tools if name in TOOLS]
        if not self._authority.endpoint.services:
            return own
        try:
            published = await anyio.to_thread.run_sync(self._published)
        except MCPBridgeError as exc:  # the knowledge tools stay listed; the external ones come back next time
            log.warning("published tools of endpoint %s unavailable: %s", self._authority.endpoint.id, exc.code)
            return own
        return own + published

    def _published(self) -> list[dict[str, Any]]:
        container, authority = self._app.container, self._authority
        publication = container.publication_of(authority.endpoint)
        return container.gateway.tools(publication, self._caller())

    def _caller(self) -> Principal:
        from mcpbridge.agent.publications import caller

        endpoint = self._authority.endpoint
        return caller(endpoint.workspace_id, endpoint.id, self._authority.user_id)

    async def call(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        modern: bool,
        meta: Mapping[str, Any] | None = None,
        resume: Resume | None = None,
    ) -> dict[str, Any]:
        if name in self._authority.tools and name in SPECS_BY_NAME:
            if resume is not None:  # a knowledge tool never asks for input: no state of ours names it
                raise JsonRpcError(INVALID_PARAMS, INVALID_STATE, {"reason": "invalid_request_state"})
            if name in TASK_TOOLS and modern and declares_extension(meta, TASKS_EXTENSION):
                return await anyio.to_thread.run_sync(
                    self._app.task_answer, self._authority, name, arguments, self._base_url
                )
            # One worker thread for the limit, the use record and the tool: each hop to a thread costs a wake-up.
            return await anyio.to_thread.run_sync(self._app.run_tool, self._authority, name, arguments, self._base_url)
        if self._authority.endpoint.services:
            wrapped = name == CALL_TOOL and self._authority.endpoint.external_tool_mode == "search"
            if wrapped:
                # Exactly a call of the named tool: the same admission, broker, pauses and retries.
                from mcpbridge.agent.search_mode import unwrap_call

                try:
                    name, arguments = unwrap_call(arguments)
                except MCPBridgeError as exc:
                    return error_result(exc.code, exc.message, exc.status)
            key = (meta or {}).get(IDEMPOTENCY_META)
            elicits = elicitation_modes(meta) if modern else frozenset()
            as_task = modern and declares_extension(meta, TASKS_EXTENSION)
            answered = await self._gateway_call(
                name, arguments, key if isinstance(key, str) else None, elicits=elicits, resume=resume, as_task=as_task
            )
            if answered is not None:
                return answered
            if wrapped:  # call_tool exists; the tool it names is not offered to this caller (or does not exist)
                return error_result("tool_not_found", "no such tool is offered here: find one with search_tools", 404)
        # Every version's spec (2024-11-05 on) has an unknown tool as a protocol error, -32602; a tool this caller
        # may not use is not listed to it, so it is unknown alike.
        raise JsonRpcError(INVALID_PARAMS, f"Unknown tool: {name}")

    @property
    def tasks_offered(self) -> bool:
        """Calls become Tasks on endpoints that publish external tools (:mod:`mcpbridge.agent.call_tasks`) or offer
        ``ask`` or ``add_document`` (:mod:`.tool_tasks`)."""
        return bool(self._authority.endpoint.services) or not TASK_TOOLS.isdisjoint(self._authority.tools)

    async def task(self, method: str, task_id: str, input_responses: Mapping[str, Any] | None) -> dict[str, Any]:
        container, authority = self._app.container, self._authority

        def answer() -> dict[str, Any]:
            if task_id.startswith("task_"):  # a knowledge tool's; gateway calls' ids start call_
                return tool_tasks.answer(container, authority, method, task_id)
            if not authority.endpoint.services:
                raise NotFound("no such task", code="task_not_found")
            publication = container.publication_of(authority.endpoint)
            return container.gateway.task(publication, self._caller(), method, task_id, input_responses, self._base_url)

        try:
            return await anyio.to_thread.run_sync(answer)
        except NotFound:
            raise _unknown_task() from None
        except InvalidInput as wrong:  # an answer to the service's question that does not fit it: nothing changed
            raise JsonRpcError(INVALID_PARAMS, wrong.message, {"code": wrong.code, **wrong.details}) from None

    def _gateway_own(
        self, name: str, publication: Any, principal: Principal, arguments: dict[str, Any]
    ) -> dict[str, Any]:
        """``check_call``, ``answer_call``, or ``search_tools`` of an endpoint in search mode (blocking)."""
        gateway = self._app.container.gateway
        if name == CHECK_CALL:
            return gateway.check(publication, principal, arguments, self._base_url)  # type: ignore[no-any-return]
        if name == ANSWER_CALL:
            return gateway.answer(publication, principal, arguments, self._base_url)  # type: ignore[no-any-return]
        return gateway.search(publication, principal, arguments)

    async def _gateway_call(
        self,
        name: str,
        arguments: dict[str, Any],
        key: str | None,
        *,
        elicits: frozenset[str] = frozenset(),
        resume: Resume | None = None,
        as_task: bool = False,
    ) -> dict[str, Any] | None:
        """A call of a published external tool or of ``check_call``; None when ``name`` is neither. In the modern
        era a call that waits for a person answers ``InputRequiredResult`` when the client takes the elicitation
        mode its wait needs (``elicits``: the modes it declares), and its retry (``resume``) the call as it stands."""
        container, authority = self._app.container, self._authority
        gateway, principal = container.gateway, self._caller()
        publication = container.publication_of(authority.endpoint)

        def admit() -> dict[str, Any] | PublishedCall | None:
            if name in (CHECK_CALL, ANSWER_CALL) or (name == SEARCH_TOOLS and publication.search_mode):
                if resume is not None:  # neither ever asks for input: no state of ours names them
                    raise JsonRpcError(INVALID_PARAMS, INVALID_STATE, {"reason": "invalid_request_state"})
                return self._app.admit_call(authority) or self._gateway_own(name, publication, principal, arguments)
            found = gateway.find(publication, principal, name)
            if found is None:
                return None
            if resume is None:
                return self._app.admit_call(authority) or found
            # A retry reads the call it names and takes no count of the rate limit: the call itself took one, and a
            # client polls while a person decides (the SDK's driver every 0.25 s).
            try:
                state, responses = resume.request_state, resume.input_responses
                return gateway.resume(publication, principal, name, arguments, state, responses, self._base_url)
            except InvalidRequestState as exc:
                log.warning("requestState refused on endpoint %s: %s", authority.endpoint.id, exc)
                raise JsonRpcError(INVALID_PARAMS, INVALID_STATE, {"reason": "invalid_request_state"}) from None

        try:
            admitted = await anyio.to_thread.run_sync(admit)
            if not isinstance(admitted, PublishedCall):
                return admitted
            if authority.user_id is not None:
                log.info(
                    "external tool %s on endpoint %s, as user %s (OAuth)",
                    name,
                    authority.endpoint.id,
                    authority.user_id,
                )
            return await gateway.call(
                publication,
                principal,
                admitted,
                arguments,
                self._base_url,
                key,
                paused_as=name if elicits else None,
                elicits=elicits,
                as_task=as_task,
            )
        except Conflict as exc:
            if exc.code == "idempotency_key_reused":  # the request is at fault, as a JSON-RPC error
                raise JsonRpcError(INVALID_PARAMS, exc.message) from None
            return error_result(exc.code, exc.message, exc.status)
        except MCPBridgeError as exc:
            return error_result(exc.code, exc.message, exc.status)


def _unknown_task() -> JsonRpcError:
    return JsonRpcError(INVALID_PARAMS, "Unknown task")


def _base_url(scope: Scope) -> str:
    """The request's base URL (scheme, host and root path), for links in answers."""
    return str(Request(scope).base_url).rstrip("/")


async def read_body(scope: Scope, receive: Receive, limit: int) -> bytes | None:
    """The request's body, or None when it is (or declares to be) larger than ``limit`` bytes."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                if int(value) > limit:
                    return None
            except ValueError:
                pass
            break
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def send_reply(reply: Reply, send: Send) -> None:
    headers = [(b"content-length", str(len(reply.body)).encode())]
    if reply.content_type is not None:
        headers.append((b"content-type", reply.content_type.encode()))
    headers.extend((name.encode(), value.encode()) for name, value in reply.headers)
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    await send({"type": "http.response.body", "body": reply.body})


PREFLIGHT_HEADERS = {
    "Access-Control-Allow-Methods": "POST, DELETE",
    "Access-Control-Allow-Headers": "authorization, content-type, accept, mcp-protocol-version, mcp-method, mcp-name",
    "Access-Control-Max-Age": "600",
}
"""What a preflight allows besides the origin: the methods and the headers an MCP client sends."""


def _cors_headers(origin: str) -> dict[str, str]:
    return {
        "Access-Control-Allow-Origin": origin.strip(),
        "Access-Control-Expose-Headers": "www-authenticate, mcp-protocol-version, x-request-id",
        "Vary": "Origin",
    }


def _with_cors(send: Send, origin: str) -> Send:
    """``send`` adding the CORS headers of an allowed origin to the answer, so that its page may read it."""
    extra = [(name.lower().encode(), value.encode("latin-1")) for name, value in _cors_headers(origin).items()]

    async def sending(message: Any) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *extra]}
        await send(message)

    return sending


@dataclass(frozen=True)
class _Allowed:
    settings: Any
    hosts: frozenset[str]
    origins: frozenset[str]


def _host_name(host: str) -> str:
    """The name part of a Host header: ``[::1]:8080`` -> ``[::1]``, ``example.com:443`` -> ``example.com``."""
    if host.startswith("["):
        return host[: host.find("]") + 1] if "]" in host else host
    return host.split(":", 1)[0]


def _unauthorized(code: str, detail: str, *, invalid: bool = True) -> JSONResponse:
    challenge = WWW_AUTHENTICATE + (', error="invalid_token"' if invalid else "")
    return problem(401, code, detail, headers={"WWW-Authenticate": challenge})
