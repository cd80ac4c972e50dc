"""An HTTP API in front of the template's Lambda functions, for clients that speak real HTTP to them.

Each request goes to the function whose route (``template.yaml``'s ``HttpApi`` events) matches it, the way API Gateway
chooses: the method before ``ANY``, literal segments before ``{param}``, and ``{proxy+}`` last. The function gets the
payload-format 2.0 event API Gateway would build (cookies apart from the headers, the body as text or base64, the
request context's domain name) and its answer is turned back into HTTP (its ``cookies`` into ``Set-Cookie``).

The handlers are the real ``functions/<name>/handler.py`` modules, imported as a cold start does (they build their
container from the environment: the test sets it to moto's AWS first). Each invocation runs in a worker thread with
an event loop of its own, as a Lambda sandbox runs one invocation at a time.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import importlib.util
import logging
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import unquote

import anyio.to_thread

from tests.support.aws import REPO_ROOT, load_template

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    function: str
    pattern: re.Pattern[str]

    @property
    def rank(self) -> tuple[int, int, int]:
        """Lower is chosen first: no greedy segment, more literal segments, a method of its own."""
        segments = self.path.strip("/").split("/")
        literal = sum(1 for s in segments if not s.startswith("{"))
        return ("{proxy+}" in self.path, -literal, self.method == "ANY")  # type: ignore[return-value]

    @property
    def route_key(self) -> str:
        return f"{self.method} {self.path}"


def template_routes() -> tuple[list[Route], dict[str, str]]:
    """The HTTP API's routes and each function's code folder, from ``template.yaml``."""
    resources = load_template()["Resources"]
    routes, code = [], {}
    for name, resource in resources.items():
        if resource["Type"] != "AWS::Serverless::Function":
            continue
        properties = resource["Properties"]
        code[name] = str(properties["CodeUri"]).rstrip("/").rsplit("/", 1)[-1]
        for event in (properties.get("Events") or {}).values():
            if event["Type"] != "HttpApi":
                continue
            path, method = event["Properties"]["Path"], event["Properties"]["Method"].upper()
            regex = re.escape(path)
            regex = regex.replace(re.escape("{proxy+}"), ".+")
            regex = re.sub(r"\\\{[a-z_]+\\\}", "[^/]+", regex)
            routes.append(Route(method, path, name, re.compile(f"^{regex}$")))
    return sorted(routes, key=lambda r: r.rank), code


def load_handler(folder: str) -> Handler:
    path = REPO_ROOT / "functions" / folder / "handler.py"
    spec = importlib.util.spec_from_file_location(f"mcpbridge_lambda_{folder}_{uuid.uuid4().hex}", path)
    assert spec is not None
    assert spec.loader is not None
    module: ModuleType = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    handler: Handler = module.handler
    return handler


class _Context:
    def __init__(self, function_name: str) -> None:
        self.aws_request_id = str(uuid.uuid4())
        self.function_name = function_name
        self.function_version = "1"
        self.invoked_function_arn = f"arn:aws:lambda:eu-west-1:123456789012:function:{function_name}:live"
        self.memory_limit_in_mb = 1024
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "2026/01/01/[1]0123456789abcdef"

    def get_remaining_time_in_millis(self) -> int:
        return 29_000


class ApiGateway:
    """ASGI: API Gateway's HTTP API and the Lambda functions behind it."""

    def __init__(self, handlers: dict[str, Handler], routes: list[Route]) -> None:
        self.handlers = handlers
        self.routes = routes
        self.invocations: list[tuple[str, str]] = []
        """(function, route key) of every invocation, in order."""

    def route_for(self, method: str, path: str) -> Route | None:
        for route in self.routes:
            if route.method in (method, "ANY") and route.pattern.match(path):
                return route
        return None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        route = self.route_for(scope["method"], scope["path"])
        if route is None:
            await _answer(send, 404, [(b"content-type", b"application/json")], b'{"message":"Not Found"}')
            return
        event = _event(scope, route, body)
        self.invocations.append((route.function, route.route_key))
        answer = await anyio.to_thread.run_sync(_invoke, self.handlers[route.function], event, route.function)
        headers = [(k.lower().encode(), str(v).encode()) for k, v in (answer.get("headers") or {}).items()]
        headers += [(b"set-cookie", c.encode()) for c in answer.get("cookies") or []]
        raw = answer.get("body") or ""
        data = base64.b64decode(raw) if answer.get("isBase64Encoded") else raw.encode()
        await _answer(send, int(answer["statusCode"]), headers, data)


def _invoke(handler: Handler, event: dict[str, Any], function: str) -> dict[str, Any]:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return handler(event, _Context(function))
    finally:
        loop.close()
        asyncio.set_event_loop(None)


def _event(scope: dict[str, Any], route: Route, body: bytes) -> dict[str, Any]:
    headers: dict[str, str] = {}
    cookies: list[str] = []
    for name, value in scope["headers"]:
        key, text = name.decode().lower(), value.decode()
        if key == "cookie":
            cookies += [c.strip() for c in text.split(";") if c.strip()]
        else:
            headers[key] = f"{headers[key]},{text}" if key in headers else text
    host = headers.get("host", "127.0.0.1")
    headers.setdefault("x-forwarded-proto", scope.get("scheme", "http"))
    path = scope["path"]
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": route.route_key,
        "rawPath": path,
        "rawQueryString": scope.get("query_string", b"").decode(),
        "headers": headers,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "local",
            "domainName": host.split(":", 1)[0],
            "domainPrefix": "local",
            "http": {
                "method": scope["method"],
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "127.0.0.1",
                "userAgent": headers.get("user-agent", ""),
            },
            "requestId": str(uuid.uuid4()),
            "routeKey": route.route_key,
            "stage": "$default",
            "time": "01/Jan/2026:00:00:00 +0000",
            "timeEpoch": 1_767_225_600_000,
        },
        "pathParameters": _path_parameters(route.path, path),
        "isBase64Encoded": True,
        "body": base64.b64encode(body).decode(),
    }
    if cookies:
        event["cookies"] = cookies
    return event


def _path_parameters(template: str, path: str) -> dict[str, str]:
    names = re.findall(r"\{([a-z_]+)\+?\}", template)
    regex = re.sub(r"\\\{[a-z_]+\\\+\\\}", "(.+)", re.escape(template))
    regex = re.sub(r"\\\{[a-z_]+\\\}", "([^/]+)", regex)
    found = re.match(f"^{regex}$", path)
    return {n: unquote(v) for n, v in zip(names, found.groups(), strict=True)} if found else {}


async def _answer(send: Any, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@contextlib.contextmanager
def deployed_functions(functions: list[str]) -> Iterator[dict[str, Handler]]:
    """The handlers of these template functions, loaded from ``functions/`` as cold starts do; the process-wide
    side effects of loading them are undone: the event loop Mangum sets on the loading thread at once (each
    invocation runs on a loop of its own; left set, the next ``asyncio.run`` would drop it unclosed), the
    ``mcpbridge`` logger's JSON handler afterwards."""
    logger = logging.getLogger("mcpbridge")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    _, code = template_routes()
    try:
        handlers = {name: load_handler(code[name]) for name in functions}
        _close_current_loop()
        yield handlers
    finally:
        logger.handlers[:], logger.level, logger.propagate = saved
        _close_current_loop()


def _close_current_loop() -> None:
    with contextlib.suppress(RuntimeError):
        loop = asyncio.get_event_loop_policy().get_event_loop()
        if not loop.is_running():
            loop.close()
    asyncio.set_event_loop(None)


def functions_root() -> Path:
    return REPO_ROOT / "functions"
