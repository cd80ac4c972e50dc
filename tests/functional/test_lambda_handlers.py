"""The four Lambda entry points (functions/<name>/handler.py), invoked the way the Lambda runtime does.

Each module is loaded by file path (the function folders are not packages), so it builds its handler from the
environment exactly as at a cold start, against moto's DynamoDB/KMS/S3. Events are API Gateway HTTP API payload
v2.0 events built by hand. Every handler is invoked several times in one process, as a warm sandbox would be.
"""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import json
import logging
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlencode

import pytest
from moto import mock_aws

from mcpbridge.bootstrap import Container
from mcpbridge.settings import Settings
from tests.support.aws import AwsResources, create_aws_resources

REPO_ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS_DIR = REPO_ROOT / "functions"
REGION = "eu-west-1"
DOMAIN = "abc123.execute-api.eu-west-1.amazonaws.com"
PROBLEM_JSON = "application/problem+json"
WWW_AUTHENTICATE = 'Bearer realm="mcpbridge"'
FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": REGION,
}

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]


# ---------------------------------------------------------------------------------------------- events


class FakeLambdaContext:
    """What the Python runtime passes as ``context`` (the attributes handlers and powertools read)."""

    def __init__(self, function_name: str) -> None:
        self.aws_request_id = str(uuid.uuid4())
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.invoked_function_arn = f"arn:aws:lambda:{REGION}:123456789012:function:{function_name}"
        self.memory_limit_in_mb = 1024
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "2026/01/01/[$LATEST]0123456789abcdef"

    def get_remaining_time_in_millis(self) -> int:
        return 29_000


def http_event(
    method: str,
    path: str,
    *,
    route_key: str,
    query: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
    base64_body: bool = False,
    path_parameters: dict[str, str] | None = None,
) -> dict[str, Any]:
    """An API Gateway HTTP API (payload format 2.0) event, as the service builds it."""
    raw_query = urlencode(query or {})
    all_headers = {
        "host": DOMAIN,
        "user-agent": "pytest",
        "accept": "*/*",
        "x-amzn-trace-id": "Root=1-00000000-000000000000000000000000",
        "x-forwarded-for": "198.51.100.7",
        "x-forwarded-port": "443",
        "x-forwarded-proto": "https",
    }
    if body is not None:
        all_headers["content-length"] = str(len(body))
    all_headers.update({name.lower(): value for name, value in (headers or {}).items()})
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": route_key,
        "rawPath": path,
        "rawQueryString": raw_query,
        "headers": all_headers,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": DOMAIN.split(".", 1)[0],
            "domainName": DOMAIN,
            "domainPrefix": DOMAIN.split(".", 1)[0],
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "198.51.100.7",
                "userAgent": "pytest",
            },
            "requestId": str(uuid.uuid4()),
            "routeKey": route_key,
            "stage": "$default",
            "time": "01/Jan/2026:00:00:00 +0000",
            "timeEpoch": 1_767_225_600_000,
        },
        "isBase64Encoded": base64_body,
    }
    if query:
        event["queryStringParameters"] = dict(query)
    if path_parameters:
        event["pathParameters"] = dict(path_parameters)
    if body is not None:
        event["body"] = base64.b64encode(body).decode() if base64_body else body.decode()
    return event


@dataclass(frozen=True)
class LambdaResponse:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")

    def json(self) -> Any:
        return json.loads(self.body)


def invoke(handler: Handler, event: dict[str, Any], function_name: str) -> LambdaResponse:
    raw = handler(event, FakeLambdaContext(function_name))
    assert isinstance(raw["statusCode"], int), raw
    body = raw.get("body", "")
    data = base64.b64decode(body) if raw.get("isBase64Encoded") else body.encode()
    headers = {name.lower(): value for name, value in (raw.get("headers") or {}).items()}
    return LambdaResponse(raw["statusCode"], headers, data)


def assert_problem(response: LambdaResponse, status: int, code: str) -> dict[str, Any]:
    assert response.status == status, response.body
    assert response.content_type.startswith(PROBLEM_JSON), response.headers
    body: dict[str, Any] = response.json()
    assert body["code"] == code, body
    assert body["status"] == status
    return body


def assert_json(response: LambdaResponse, status: int) -> Any:
    assert response.status == status, response.body
    assert response.content_type.startswith("application/json"), response.headers
    return response.json()


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


# ---------------------------------------------------------------------------------------------- fixtures


@dataclass(frozen=True)
class Deployment:
    resources: AwsResources
    admin_key: str
    workspace_id: str


@pytest.fixture(scope="module")
def aws_deployment() -> Iterator[Deployment]:
    """moto's AWS with the template's table, a KMS key and a bucket, initialised once for this module."""
    with pytest.MonkeyPatch.context() as monkeypatch, mock_aws():
        for name in [n for n in os.environ if n.startswith("MCPBRIDGE_")]:
            monkeypatch.delenv(name)
        for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
            monkeypatch.delenv(name, raising=False)
        for name, value in FAKE_CREDENTIALS.items():
            monkeypatch.setenv(name, value)
        resources = create_aws_resources(region=REGION)
        with pytest.MonkeyPatch.context() as settings_env:
            settings_env.setenv("MCPBRIDGE_BACKEND", "aws")
            settings_env.setenv("MCPBRIDGE_TABLE_NAME", resources.table_name)
            settings_env.setenv("MCPBRIDGE_KMS_KEY_ID", resources.kms_key_id)
            settings_env.setenv("MCPBRIDGE_BUCKET_NAME", resources.bucket_name)
            container = Container(Settings())
            initialization = container.identity.initialize()
            container.close()
        assert initialization.created
        assert initialization.api_key is not None
        yield Deployment(resources, initialization.api_key, initialization.workspace_id)


@pytest.fixture
def deployment(aws_deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> Deployment:
    """The environment a deployed function has (template.yaml's Globals), for the test that loads one."""
    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MCPBRIDGE_BACKEND", "aws")
    monkeypatch.setenv("MCPBRIDGE_TABLE_NAME", aws_deployment.resources.table_name)
    monkeypatch.setenv("MCPBRIDGE_KMS_KEY_ID", aws_deployment.resources.kms_key_id)
    monkeypatch.setenv("MCPBRIDGE_BUCKET_NAME", aws_deployment.resources.bucket_name)
    monkeypatch.setenv("MCPBRIDGE_LOG_LEVEL", "INFO")
    return aws_deployment


@pytest.fixture
def load_function() -> Iterator[Callable[[str], Handler]]:
    """Load functions/<name>/handler.py by path, as a cold start does; undo its process-wide side effects after.

    At import a handler module configures the ``mcpbridge`` logger (JSON to stderr, no propagation) and Mangum
    sets an event loop on this thread: both are restored so later tests see the process as it was.
    """
    logger = logging.getLogger("mcpbridge")
    saved = (logger.handlers[:], logger.level, logger.propagate)

    def load(name: str) -> Handler:
        path = FUNCTIONS_DIR / name / "handler.py"
        spec = importlib.util.spec_from_file_location(f"mcpbridge_lambda_{name}_{uuid.uuid4().hex}", path)
        assert spec is not None
        assert spec.loader is not None
        module: ModuleType = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        handler: Handler = module.handler
        assert callable(handler)
        return handler

    try:
        yield load
    finally:
        logger.handlers[:], logger.level, logger.propagate = saved
        loop: asyncio.AbstractEventLoop | None
        try:
            loop = asyncio.get_event_loop_policy().get_event_loop()
        except RuntimeError:
            loop = None
        if loop is not None and not loop.is_running():
            loop.close()
            asyncio.set_event_loop(None)


# ---------------------------------------------------------------------------------------------- admin_api


@pytest.mark.parametrize("init_type", ["on-demand", "snap-start"])
def test_admin_api_warm_invocations(
    deployment: Deployment, load_function: Callable[[str], Handler], init_type: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On demand the routers are included as requests need them (api-keys first, then me): the answers are the same.
    monkeypatch.setenv("AWS_LAMBDA_INITIALIZATION_TYPE", init_type)
    handler = load_function("admin_api")
    route = "ANY /api/v1/{proxy+}"

    def call(method: str, path: str, **kwargs: Any) -> LambdaResponse:
        params = {"proxy": path.removeprefix("/api/v1/")}
        return invoke(handler, http_event(method, path, route_key=route, path_parameters=params, **kwargs), "admin")

    listings = [
        assert_json(call("GET", "/api/v1/api-keys", headers=bearer(deployment.admin_key)), 200) for _ in range(2)
    ]
    assert listings[0]["items"], "the admin key is not listed"
    assert [k["id"] for k in listings[0]["items"]] == [k["id"] for k in listings[1]["items"]]
    assert "admin (created by init)" in [k["name"] for k in listings[0]["items"]]
    names_before = [k["name"] for k in listings[0]["items"]]

    for _ in range(2):
        anonymous = call("GET", "/api/v1/api-keys")
        assert_problem(anonymous, 401, "unauthenticated")
        assert anonymous.headers["www-authenticate"] == WWW_AUTHENTICATE

    # A body API Gateway delivers base64-encoded (isBase64Encoded true).
    encoded = call(
        "POST",
        "/api/v1/api-keys",
        headers={**bearer(deployment.admin_key), "content-type": "application/json"},
        body=json.dumps({"name": "from base64", "role": "viewer"}).encode(),
        base64_body=True,
    )
    created = assert_json(encoded, 201)
    assert encoded.headers.get("cache-control") == "no-store"
    assert created["name"] == "from base64"
    viewer_key = created["key"]
    assert viewer_key.startswith("sk_")

    # The next invocation of the same warm handler accepts the new key.
    me = assert_json(call("GET", "/api/v1/me", headers=bearer(viewer_key)), 200)
    assert me == {
        "workspace_id": deployment.workspace_id,
        "workspace_name": "Default workspace",
        "user_id": me["user_id"],
        "user_name": "admin",
        "api_key_id": created["id"],
        "role": "viewer",
        "capabilities": None,
        "knowledge_base_ids": None,
    }
    assert_problem(call("GET", "/api/v1/api-keys", headers=bearer(viewer_key)), 403, "admin_required")

    # A plain-text body (isBase64Encoded false), and a malformed one in base64 that stores nothing.
    plain = call(
        "POST",
        "/api/v1/api-keys",
        headers={**bearer(deployment.admin_key), "content-type": "application/json"},
        body=json.dumps({"name": "plain body"}).encode(),
    )
    assert assert_json(plain, 201)["role"] == "viewer"
    malformed = call(
        "POST",
        "/api/v1/api-keys",
        headers={**bearer(deployment.admin_key), "content-type": "application/json"},
        body=b'{"name": ',
        base64_body=True,
    )
    assert_problem(malformed, 400, "malformed_json")
    wrong_type = call(
        "POST",
        "/api/v1/api-keys",
        headers={**bearer(deployment.admin_key), "content-type": "application/json"},
        body=json.dumps({"name": 7}).encode(),
    )
    assert_problem(wrong_type, 422, "validation_failed")
    page = assert_json(call("GET", "/api/v1/api-keys", headers=bearer(deployment.admin_key)), 200)
    assert sorted(k["name"] for k in page["items"]) == sorted([*names_before, "from base64", "plain body"])

    key_id = created["id"]
    assert (
        assert_json(call("GET", f"/api/v1/api-keys/{key_id}", headers=bearer(deployment.admin_key)), 200)["id"]
        == key_id
    )
    revoked = call("DELETE", f"/api/v1/api-keys/{key_id}", headers=bearer(deployment.admin_key))
    assert revoked.status == 204
    assert_problem(call("GET", "/api/v1/me", headers=bearer(viewer_key)), 401, "invalid_api_key")


def test_admin_api_health_routes(deployment: Deployment, load_function: Callable[[str], Handler]) -> None:
    handler = load_function("admin_api")
    for _ in range(2):
        healthz = invoke(handler, http_event("GET", "/healthz", route_key="GET /healthz"), "admin")
        assert assert_json(healthz, 200) == {"status": "ok"}
        readyz = invoke(handler, http_event("GET", "/readyz", route_key="GET /readyz"), "admin")
        assert assert_json(readyz, 200) == {"status": "ready", "checks": {"store": "ok", "secrets": "ok"}}


def test_admin_api_query_string_is_passed_through(
    deployment: Deployment, load_function: Callable[[str], Handler]
) -> None:
    handler = load_function("admin_api")
    route = "ANY /api/v1/{proxy+}"
    for _ in range(2):
        too_big = http_event(
            "GET", "/api/v1/api-keys", route_key=route, query={"limit": "1000"}, headers=bearer(deployment.admin_key)
        )
        assert_problem(invoke(handler, too_big, "admin"), 422, "validation_failed")
        one = http_event(
            "GET", "/api/v1/api-keys", route_key=route, query={"limit": "1"}, headers=bearer(deployment.admin_key)
        )
        assert len(assert_json(invoke(handler, one, "admin"), 200)["items"]) == 1


# ---------------------------------------------------------------------------------------------- mcp_endpoint


def test_mcp_endpoint_requires_a_bearer_token(deployment: Deployment, load_function: Callable[[str], Handler]) -> None:
    handler = load_function("mcp_endpoint")
    route = "ANY /mcp/{endpoint_id}"
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}

    for base64_body in (False, True):
        event = http_event(
            "POST",
            "/mcp/ep_x",
            route_key=route,
            path_parameters={"endpoint_id": "ep_x"},
            headers=headers,
            body=json.dumps(initialize).encode(),
            base64_body=base64_body,
        )
        response = invoke(handler, event, "mcp")
        assert_problem(response, 401, "missing_token")
        assert response.headers["www-authenticate"] == WWW_AUTHENTICATE

    wrong = http_event(
        "POST",
        "/mcp/ep_x",
        route_key=route,
        path_parameters={"endpoint_id": "ep_x"},
        headers={**headers, **bearer(deployment.admin_key)},
        body=json.dumps(initialize).encode(),
    )
    for _ in range(2):
        response = invoke(handler, wrong, "mcp")
        assert_problem(response, 401, "invalid_token")
        assert response.headers["www-authenticate"].startswith(WWW_AUTHENTICATE)
        assert 'error="invalid_token"' in response.headers["www-authenticate"]

    in_query = http_event("POST", "/mcp/ep_x", route_key=route, query={"access_token": "mcp_abc"})
    assert_problem(invoke(handler, in_query, "mcp"), 401, "query_token_refused")
    assert_problem(invoke(handler, http_event("GET", "/mcp/ep_x", route_key=route), "mcp"), 405, "method_not_allowed")


def test_mcp_endpoint_serves_tools_on_warm_invocations(
    deployment: Deployment, load_function: Callable[[str], Handler], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCPBRIDGE_JOBS", "inline")  # index while the request runs: no indexer function here
    admin = load_function("admin_api")
    mcp = load_function("mcp_endpoint")

    def api(method: str, path: str, body: dict[str, Any]) -> Any:
        event = http_event(
            method,
            path,
            route_key="ANY /api/v1/{proxy+}",
            path_parameters={"proxy": path.removeprefix("/api/v1/")},
            headers={**bearer(deployment.admin_key), "content-type": "application/json"},
            body=json.dumps(body).encode(),
        )
        response = invoke(admin, event, "admin")
        assert response.status in (200, 201), response.body
        return response.json()

    kb = api("POST", "/api/v1/knowledge-bases", {"name": f"Lambda notes {uuid.uuid4().hex[:6]}"})
    api("POST", f"/api/v1/knowledge-bases/{kb['id']}/documents", {"title": "Ice", "content": "Walruses rest on ice."})
    endpoint = api(
        "POST",
        "/api/v1/mcp-endpoints",
        {"name": "lambda", "knowledge_base_ids": [kb["id"]], "tools": ["search_knowledge"]},
    )
    headers = {
        **bearer(endpoint["token"]),
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
    }

    def rpc(message: dict[str, Any], extra: dict[str, str] | None = None) -> Any:
        event = http_event(
            "POST",
            f"/mcp/{endpoint['id']}",
            route_key="ANY /mcp/{endpoint_id}",
            path_parameters={"endpoint_id": endpoint["id"]},
            headers={**headers, **(extra or {})},
            body=json.dumps(message).encode(),
        )
        return assert_json(invoke(mcp, event, "mcp"), 200)

    session = {"mcp-protocol-version": "2025-11-25"}
    for _ in range(2):
        initialized = rpc(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "lambda-test", "version": "1"},
                },
            }
        )
        assert initialized["result"]["serverInfo"]["name"] == "mcpbridge"
        listed = rpc({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, session)
        assert [t["name"] for t in listed["result"]["tools"]] == ["search_knowledge"]
        called = rpc(
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "tools/call",
                "params": {"name": "search_knowledge", "arguments": {"query": "walruses", "mode": "keyword"}},
            },
            session,
        )
        result = called["result"]
        assert not result["isError"]
        assert result["structuredContent"]["results"][0]["document_title"] == "Ice"
        assert json.loads(result["content"][0]["text"]) == result["structuredContent"]


def test_mcp_endpoint_function_serves_only_its_routes(
    deployment: Deployment, load_function: Callable[[str], Handler]
) -> None:
    handler = load_function("mcp_endpoint")
    event = http_event(
        "GET", "/api/v1/api-keys", route_key="ANY /api/v1/{proxy+}", headers=bearer(deployment.admin_key)
    )
    missing = assert_problem(invoke(handler, event, "mcp"), 404, "not_found")
    assert missing["request_id"] == event["requestContext"]["requestId"]
    assert assert_json(invoke(handler, http_event("GET", "/healthz", route_key="GET /healthz"), "mcp"), 200)
    ready = assert_json(invoke(handler, http_event("GET", "/readyz", route_key="GET /readyz"), "mcp"), 200)
    assert ready == {"status": "ready", "checks": {"store": "ok", "secrets": "ok"}}
    refused = invoke(handler, http_event("POST", "/healthz", route_key="POST /healthz"), "mcp")
    assert_problem(refused, 405, "method_not_allowed")
    assert refused.headers["allow"] == "GET"


# ---------------------------------------------------------------------------------------------- oauth_callback


def test_oauth_callback_rejects_unknown_state(deployment: Deployment, load_function: Callable[[str], Handler]) -> None:
    handler = load_function("oauth_callback")
    route = "GET /api/v1/mcp-oauth/callback"
    for _ in range(2):
        event = http_event("GET", "/api/v1/mcp-oauth/callback", route_key=route, query={"state": "abc", "code": "xyz"})
        assert_problem(invoke(handler, event, "oauth"), 400, "oauth_state_invalid")
    for _ in range(2):
        missing = http_event("GET", "/api/v1/mcp-oauth/callback", route_key=route, query={"code": "xyz"})
        assert_problem(invoke(handler, missing, "oauth"), 400, "oauth_state_missing")


# ---------------------------------------------------------------------------------------------- resolutions


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("tool-approvals", {"decision": "approve", "reason": "looks fine"}),
        ("mcp-oauth-resolutions", {"service_id": "svc_1", "decision": "authorize"}),
    ],
)
def test_resolutions_need_a_key_and_find_nothing_pending(
    deployment: Deployment, load_function: Callable[[str], Handler], route: str, body: dict[str, Any]
) -> None:
    handler = load_function("resolutions")
    path = f"/api/v1/agent/{route}/pnd_1"
    route_key = f"POST /api/v1/agent/{route}/{{pending_id}}"

    def call(headers: dict[str, str], base64_body: bool) -> LambdaResponse:
        event = http_event(
            "POST",
            path,
            route_key=route_key,
            path_parameters={"pending_id": "pnd_1"},
            headers={"content-type": "application/json", **headers},
            body=json.dumps(body).encode(),
            base64_body=base64_body,
        )
        return invoke(handler, event, "resolutions")

    for base64_body in (False, True):
        anonymous = call({}, base64_body)
        assert_problem(anonymous, 401, "unauthenticated")
        assert anonymous.headers["www-authenticate"] == WWW_AUTHENTICATE
    for base64_body in (False, True):
        assert_problem(call(bearer(deployment.admin_key), base64_body), 404, "pending_not_found")
