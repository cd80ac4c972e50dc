"""The MCP SDK's own server behind a published endpoint: the reference :mod:`mcpbridge.http.mcp.protocol` answers as.

``SdkReferenceApp`` is the endpoint's ASGI app (the same HTTP checks, token check and tools) whose admitted requests
are answered by the SDK's low-level ``Server`` through its stateless, JSON-response ``StreamableHTTPSessionManager``
instead of by mcpbridge's protocol module. Both read the body the same way first (``jsonrpc.read_message``, the
envelope checks mcpbridge has always made before the SDK saw a request). One session manager runs per event loop,
started by the first request, as a bare SDK server's lifespan would start it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from mcp import types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from starlette.types import Message, Receive, Scope, Send

from mcpbridge.bootstrap import Container
from mcpbridge.http.mcp import jsonrpc, protocol
from mcpbridge.http.mcp.primitives import Primitives
from mcpbridge.http.mcp.transport import IDENTITY, TOOLS, Authority, EndpointTools, McpEndpointApp, send_reply

_AUTHORITY = "mcpbridge.reference.authority"


class SdkReferenceApp(McpEndpointApp):
    def __init__(self, container: Container) -> None:
        super().__init__(container)
        self._server: Server[Any] = Server(
            IDENTITY.name,
            version=IDENTITY.version,
            instructions=IDENTITY.instructions,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            get_tool_input_schema=lambda name: TOOLS[name]["inputSchema"] if name in TOOLS else None,
            on_list_resources=self._primitive("resources/list", types.ListResourcesResult),
            on_list_resource_templates=self._primitive("resources/templates/list", types.ListResourceTemplatesResult),
            on_read_resource=self._primitive("resources/read", types.ReadResourceResult),
            on_list_prompts=self._primitive("prompts/list", types.ListPromptsResult),
            on_get_prompt=self._primitive("prompts/get", types.GetPromptResult),
            on_completion=self._primitive("completion/complete", types.CompleteResult),
        )
        self._managers: dict[asyncio.AbstractEventLoop, StreamableHTTPSessionManager] = {}
        self._runs: list[asyncio.Task[None]] = []

    async def answer(self, scope: Scope, receive: Receive, send: Send, authority: Authority, body: bytes) -> None:
        if scope["method"] == "POST" and _is_json(scope):
            read = jsonrpc.read_message(body)
            if isinstance(read, jsonrpc.Reply):
                await send_reply(read, send)
                return
        scope = {**scope, "state": {**scope.get("state", {}), _AUTHORITY: authority}}
        manager = await self._manager()
        await manager.handle_request(scope, _replay(body), send)

    async def _manager(self) -> StreamableHTTPSessionManager:
        loop = asyncio.get_running_loop()
        if loop not in self._managers:
            manager = StreamableHTTPSessionManager(
                app=self._server,
                json_response=True,
                stateless=True,
                security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
            )
            started = asyncio.Event()

            async def run() -> None:
                async with manager.run():
                    started.set()
                    await asyncio.Event().wait()

            self._managers[loop] = manager
            self._runs.append(loop.create_task(run()))
            await started.wait()
        return self._managers[loop]

    def _tools(self, ctx: ServerRequestContext[Any]) -> EndpointTools:
        assert ctx.request is not None
        return EndpointTools(self, ctx.request.scope["state"][_AUTHORITY])

    # The SDK's typed results, as a server written on the SDK returns them: its models fill what each era adds.

    async def _list_tools(self, ctx: ServerRequestContext[Any], params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool.model_validate(tool) for tool in await self._tools(ctx).tools()])

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        modern = ctx.protocol_version in protocol.MODERN_VERSIONS
        try:
            result = await self._tools(ctx).call(params.name, dict(params.arguments or {}), modern=modern)
        except jsonrpc.JsonRpcError as exc:
            raise MCPError(code=exc.code, message=exc.message, data=exc.data) from None
        return types.CallToolResult.model_validate(result)

    def _primitive(self, method: str, result_type: Any) -> Any:
        """A handler answering ``method`` with mcpbridge's resources, prompts and completion, on the params the SDK
        has read (and checked) itself."""

        async def handle(ctx: ServerRequestContext[Any], params: Any) -> Any:
            assert ctx.request is not None
            authority: Authority = ctx.request.scope["state"][_AUTHORITY]
            primitives = Primitives(self._container, authority.access, authority.tools)
            sent = None if params is None else params.model_dump(by_alias=True, exclude_none=True, mode="json")
            modern = ctx.protocol_version in protocol.MODERN_VERSIONS
            try:
                result = await primitives.answer(method, sent, lambda meta: None, modern=modern)
            except jsonrpc.JsonRpcError as exc:
                raise MCPError(code=exc.code, message=exc.message, data=exc.data) from None
            return result_type.model_validate(result)

        return handle


def _is_json(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"content-type":
            return value.decode("latin-1").lower().startswith("application/json")
    return False


def _replay(body: bytes) -> Receive:
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> Message:
        if pending:
            return pending.pop()
        await asyncio.Event().wait()  # no disconnect while the answer is being written
        raise AssertionError("unreachable")

    return receive
