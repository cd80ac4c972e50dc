"""What the admin API function's init imports: on an on-demand cold start only what a first request needs; for a
SnapStart snapshot everything (lambda_entry's module docstring)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_mcp_handler_imports import FAKE_AWS

REPO = Path(__file__).resolve().parents[2]

LOAD_HANDLER = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("handler", "functions/admin_api/handler.py")
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
def loaded():
    names = ("mcpbridge.http.routes.", "mcpbridge.adapters.aws.kms", "mcpbridge.adapters.aws.dynamodb", "boto3")
    return sorted(n for n in sys.modules if n.startswith(names) and (n == "boto3" or not n.startswith("boto3")))
at_init = loaded()
event = {
    "version": "2.0", "routeKey": "ANY /api/v1/{proxy+}", "rawPath": "/api/v1/api-keys", "rawQueryString": "",
    "headers": {"host": "abc123.execute-api.eu-west-1.amazonaws.com"},
    "requestContext": {
        "accountId": "123456789012", "apiId": "abc123", "domainName": "abc123.execute-api.eu-west-1.amazonaws.com",
        "http": {"method": "GET", "path": "/api/v1/api-keys", "protocol": "HTTP/1.1", "sourceIp": "192.0.2.1",
                 "userAgent": "test"},
        "requestId": "test", "routeKey": "ANY /api/v1/{proxy+}", "stage": "$default",
        "time": "01/Dec/2026:00:00:00 +0000", "timeEpoch": 1796083200000,
    },
    "isBase64Encoded": False,
}
answer = module.handler(event, None)
print(json.dumps({"init": at_init, "status": answer["statusCode"], "after": loaded()}))
"""

ROUTES = "mcpbridge.http.routes."
EVERY_ROUTER = {
    f"{ROUTES}{name}"
    for name in [
        *("agent_calls", "api_keys", "me", "users", "workspaces", "knowledge", "documents", "wiki", "endpoints"),
        *("services", "service_oauth", "agents", "agent_catalog", "oauth_grants", "health"),
    ]
}


def _run(init_type: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MCPBRIDGE_", "AWS_"))} | FAKE_AWS
    env["AWS_LAMBDA_INITIALIZATION_TYPE"] = init_type
    done = subprocess.run(
        [sys.executable, "-I", "-c", LOAD_HANDLER], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def test_on_demand_init_imports_no_router_and_the_first_request_its_own() -> None:
    report = _run("on-demand")
    # The store's adapter and boto3 are in: every request but a refused one uses the store.
    assert report["init"] == ["boto3", "mcpbridge.adapters.aws.dynamodb", f"{ROUTES}health"]
    # Without a key the route answers 401 (no store call): its router is in, the others are not, nor is KMS.
    assert report["status"] == 401
    assert report["after"] == ["boto3", "mcpbridge.adapters.aws.dynamodb", f"{ROUTES}api_keys", f"{ROUTES}health"]


@pytest.mark.parametrize("init_type", ["snap-start", "provisioned-concurrency"])
def test_a_snapshot_or_provisioned_init_imports_every_router_and_the_adapters(init_type: str) -> None:
    report = _run(init_type)
    assert set(report["init"]) >= EVERY_ROUTER | {"mcpbridge.adapters.aws.kms", "mcpbridge.adapters.aws.dynamodb"}
    assert report["status"] == 401
