"""``/mcp/{endpoint_id}``: stateless Streamable HTTP (JSON responses) on the official SDK's low-level server.

Order of checks, before the SDK sees the request: method (GET is 405: no server-initiated streams), Host (421 unless
allowed), browser Origin (403 unless allowed), credentials in the query string (401), bearer token of this
endpoint (401 / 403): its static ``mcp_`` token, or an OAuth access token ``mcpat_`` of mcpbridge's authorization
server (:mod:`mcpbridge.authserver.access`: the call then runs as the token's user, within the user's access), as
the endpoint's ``auth_mode`` allows. A 401 from an endpoint that accepts OAuth names its RFC 9728 metadata in
``WWW-Authenticate``, which is how a client that knows only the URL starts signing in. Nothing is cached between
requests, so a rotated, disabled or deleted endpoint, or a revoked grant, fails on its next request. The token is
checked by :func:`~mcpbridge.http.store_reads.store_read`: on the event loop where store reads are local
(SQLite), in a worker thread where they are network calls (DynamoDB). A tool call then takes one worker thread for
the rate limit, the use record and the tool. The SDK's own DNS-rebinding check only knows localhost, so it is off
and ours takes its place.

Then the body (at most the SDK's 4 MiB) must be one JSON-RPC message, checked before the SDK sees it: strict JSON
(no ``NaN``/``Infinity``) or -32700; a request whose ``id`` is not a string or an integer (``true``, ``1.5``, ``[]``,
``null``) is an invalid request, -32600 with ``id: null``, where the SDK would take it for a notification and answer
202 without running it; a batch or any other envelope the SDK cannot read is -32600 too (the SDK says -32602, the
code for bad method parameters). All of them are HTTP 400, as the transport requires for input it cannot accept.

One stateless session manager per event loop serves the requests, as in a bare SDK server: the first request
starts its ``run()`` in a task of its own that lasts as long as the loop (serve's, or the one Mangum keeps across a
Lambda sandbox's invocations), so no lifespan is needed; the SDK still builds a transport per request.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import anyio.to_thread
from mcp import types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import (
    DEFAULT_MAX_REQUEST_BODY_SIZE,
    RequestBodyLimitMiddleware,
    TransportSecuritySettings,
)
from mcp.shared.exceptions import MCPError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from mcpbridge import __version__
from mcpbridge.bootstrap import Container
from mcpbridge.domain import credentials
from mcpbridge.domain.knowledge import KnowledgeAccess
from mcpbridge.errors import Forbidden, MCPBridgeError, Unauthenticated
from mcpbridge.http.mcp.jsonrpc_body import invalid_message, replay
from mcpbridge.http.mcp.tools import INSTRUCTIONS, SPECS, SPECS_BY_NAME, ToolContext
from mcpbridge.http.problems import WWW_AUTHENTICATE, problem
from mcpbridge.http.store_reads import store_read
from mcpbridge.publishing.endpoints import Endpoint

log = logging.getLogger("mcpbridge.mcp")

ENDPOINT_STATE = "mcpbridge.endpoint"
# Query parameters that would carry a credential: refused, since URLs end up in logs and histories.
_QUERY_CREDENTIALS = frozenset({"token", "access_token", "api_key", "apikey", "key", "auth", "authorization"})
MODERN = "2026-07-28"

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


def _tool(spec: Any) -> types.Tool:
    return types.Tool(
        name=spec.name,
        title=spec.title,
        description=spec.description,
        input_schema=spec.input_schema,
        annotations=types.ToolAnnotations(
            title=spec.title,
            read_only_hint=spec.read_only,
            destructive_hint=spec.destructive,
            idempotent_hint=spec.read_only,
            open_world_hint=False,
        ),
    )


TOOLS: dict[str, types.Tool] = {spec.name: _tool(spec) for spec in SPECS}


def _json_result(data: dict[str, Any], *, is_error: bool = False) -> types.CallToolResult:
    text = json.dumps(data, ensure_ascii=False, indent=2)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=data, is_error=is_error
    )


def error_result(code: str, message: str, status: int) -> types.CallToolResult:
    hint = HINTS.get(status, RETRY_LATER if status >= 500 else HINTS[400])
    return _json_result({"error": {"code": code, "message": message, "hint": hint}}, is_error=True)


class McpEndpointApp:
    """The ASGI app behind ``/mcp/{endpoint_id}``."""

    def __init__(self, container: Container) -> None:
        self._container = container
        self._server: Server[Any] = Server(
            "mcpbridge",
            version=__version__,
            instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            get_tool_input_schema=lambda name: TOOLS[name].input_schema if name in TOOLS else None,
        )
        self._security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        self._managers: dict[asyncio.AbstractEventLoop, _Running] = {}
        self._allowed_of: _Allowed | None = None
        # The body is read once here, under the same cap the SDK applies (413 beyond it), then replayed to the SDK.
        self._bounded = RequestBodyLimitMiddleware(self._serve, DEFAULT_MAX_REQUEST_BODY_SIZE)

    # ------------------------------------------------------------------------------------------ HTTP

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        refusal = await self._refusal(request)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self._bounded(scope, receive, send)

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] == "POST":
            request = Request(scope, receive)
            body = await request.body()
            invalid = invalid_message(request, body)
            if invalid is not None:
                await invalid(scope, receive, send)
                return
            receive = replay(body, receive)
        manager = await self._manager()
        await manager.handle_request(scope, receive, send)

    async def _manager(self) -> StreamableHTTPSessionManager:
        """The session manager running on this event loop, started by the first request that needs it."""
        loop = asyncio.get_running_loop()
        running = self._managers.get(loop)
        if running is None:
            manager = StreamableHTTPSessionManager(
                app=self._server, json_response=True, stateless=True, security_settings=self._security
            )
            running = self._managers[loop] = _Running(manager, asyncio.Event())
            running.task = loop.create_task(_run_until_cancelled(running), name="mcp-session-manager")
            # Gone with its loop (cancelled as the loop ends) or after a failure: the next request starts another.
            running.task.add_done_callback(lambda _: self._managers.pop(loop, None))
        await running.started.wait()
        if running.task is None or running.task.done():
            raise RuntimeError("the MCP session manager did not start")
        return running.manager

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

    # ------------------------------------------------------------------------------------------ MCP

    @staticmethod
    def _authority(ctx: ServerRequestContext[Any]) -> Authority:
        request = ctx.request
        authority = None if request is None else request.scope.get("state", {}).get(ENDPOINT_STATE)
        if not isinstance(authority, Authority):
            raise MCPError(code=types.INVALID_REQUEST, message="unauthorized")
        return authority

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        authority = self._authority(ctx)
        return types.ListToolsResult(tools=[TOOLS[name] for name in authority.tools if name in TOOLS])

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        authority = self._authority(ctx)
        name = params.name
        if name not in authority.tools or name not in SPECS_BY_NAME:
            if ctx.protocol_version >= MODERN:
                raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {name}")
            return error_result("tool_not_enabled", f'tool "{name}" is not enabled on this endpoint', 403)
        arguments = dict(params.arguments or {})
        # One worker thread for the limit, the use record and the tool: each hop to a thread costs a wake-up.
        return await anyio.to_thread.run_sync(self._run_tool, authority, name, arguments)

    def _run_tool(self, authority: Authority, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        container, endpoint = self._container, authority.endpoint
        decision = container.rate_limiter.hit(authority.rate_key, endpoint.rate_limit_per_minute)
        if not decision.allowed:
            return error_result(
                "rate_limited",
                f"rate limit exceeded for this endpoint; retry in {decision.retry_after_seconds} s",
                429,
            )
        container.endpoints.touch(endpoint)
        if authority.user_id is not None:
            log.info("tool %s on endpoint %s, as user %s (OAuth)", name, endpoint.id, authority.user_id)
        context = ToolContext(container, authority.access, endpoint.id, authority.user_id)
        try:
            data = SPECS_BY_NAME[name].handler(context, arguments)
        except MCPBridgeError as exc:
            return error_result(exc.code, exc.message, exc.status)
        except Exception:
            log.exception("tool %s failed on endpoint %s", name, endpoint.id)
            return error_result("internal_error", "the tool failed unexpectedly", 500)
        return _json_result(data)


@dataclass(frozen=True)
class _Allowed:
    settings: Any
    hosts: frozenset[str]
    origins: frozenset[str]


@dataclass
class _Running:
    """A session manager whose ``run()`` lasts as long as its event loop (the SDK allows one ``run()`` each)."""

    manager: StreamableHTTPSessionManager
    started: asyncio.Event
    task: asyncio.Task[None] | None = None


async def _run_until_cancelled(running: _Running) -> None:
    try:
        async with running.manager.run():
            running.started.set()
            await asyncio.Event().wait()  # until the loop ends and cancels it
    finally:
        running.started.set()  # requests waiting on a manager that failed to start see it failed


def _host_name(host: str) -> str:
    """The name part of a Host header: ``[::1]:8080`` -> ``[::1]``, ``example.com:443`` -> ``example.com``."""
    if host.startswith("["):
        return host[: host.find("]") + 1] if "]" in host else host
    return host.split(":", 1)[0]


def _unauthorized(code: str, detail: str, *, invalid: bool = True) -> JSONResponse:
    challenge = WWW_AUTHENTICATE + (', error="invalid_token"' if invalid else "")
    return problem(401, code, detail, headers={"WWW-Authenticate": challenge})
