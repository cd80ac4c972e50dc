"""The built Lambda artifacts work on their own: every function's handler, loaded from its built code folder and
the built layer only, imports and answers.

``make smoke`` builds the template with ``infra/build_artifacts.py build --for-interpreter auto`` (the same script
and steps as the deployable build, for a Python on this machine: the template's runtime version when there is one)
and runs this module with ``MCPBRIDGE_SMOKE_BUILD`` naming that build; without it the module is skipped. Each
function runs in a fresh interpreter (``-I -S``: no site-packages, no PYTHONPATH) whose ``sys.path`` is the built
code folder, the built layer's ``python/`` and the standard library, as in Lambda; the repository's ``shared/`` is
nowhere on it. The environment is the template's (parameter defaults), pointed at a moto server on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from moto.server import ThreadedMotoServer

from mcpbridge.bootstrap import Container
from mcpbridge.settings import Settings
from tests.support.aws import REPO_ROOT, AwsResources, create_aws_resources
from tests.support.build_script import build_script
from tests.support.serve import free_port

pytestmark = [pytest.mark.slow]

BUILD = os.environ.get("MCPBRIDGE_SMOKE_BUILD")
if not BUILD:
    pytest.skip(
        "set MCPBRIDGE_SMOKE_BUILD to a build of infra/build_artifacts.py (make smoke)", allow_module_level=True
    )
BUILD_DIR = (REPO_ROOT / BUILD).resolve()
ARTIFACTS: dict[str, Any] = json.loads((BUILD_DIR / "artifacts.json").read_text(encoding="utf-8"))
BUILT_TEMPLATE: dict[str, Any] = json.loads((BUILD_DIR / "template.yaml").read_text(encoding="utf-8"))
RUNTIME_DRIVER = REPO_ROOT / "tests" / "support" / "lambda_runtime.py"
REGION = "eu-west-1"
DOMAIN = "abc123.execute-api.eu-west-1.amazonaws.com"
FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
}
# Well-formed ids of things that do not exist.
MISSING_WORKSPACE = "ws_" + "0" * 26
MISSING_CALL = "call_" + "0" * 26
MISSING_DOCUMENT = "doc_" + "0" * 26
HTTP_FUNCTIONS = (
    "AdminApiFunction",
    "McpEndpointFunction",
    "OAuthCallbackFunction",
    "ResolutionsFunction",
    "AuthorizationServerFunction",
)


def http_event(method: str, path: str, route_key: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """A minimal API Gateway HTTP API (payload format 2.0) event."""
    return {
        "version": "2.0",
        "routeKey": route_key,
        "rawPath": path,
        "rawQueryString": "",
        "headers": {"host": DOMAIN, "x-forwarded-proto": "https", "x-forwarded-port": "443", **(headers or {})},
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "abc123",
            "domainName": DOMAIN,
            "domainPrefix": "abc123",
            "http": {"method": method, "path": path, "protocol": "HTTP/1.1", "sourceIp": "198.51.100.7"},
            "requestId": str(uuid.uuid4()),
            "routeKey": route_key,
            "stage": "$default",
            "time": "01/Jan/2026:00:00:00 +0000",
            "timeEpoch": 1_767_225_600_000,
        },
        "isBase64Encoded": False,
    }


# ---------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{port}"
    try:
        yield url
    finally:
        try:
            httpx.post(f"{url}/moto-api/reset", timeout=10.0, trust_env=False)
        finally:
            server.stop()


@pytest.fixture(scope="module")
def resources(moto_url: str) -> Iterator[AwsResources]:
    with pytest.MonkeyPatch.context() as monkeypatch:
        for name in [n for n in os.environ if n.startswith(("MCPBRIDGE_", "AWS_"))]:
            monkeypatch.delenv(name)
        for name, value in FAKE_CREDENTIALS.items():
            monkeypatch.setenv(name, value)
        yield create_aws_resources(table_name=f"smoke-{uuid.uuid4().hex[:8]}", endpoint_url=moto_url, region=REGION)


@pytest.fixture(scope="module")
def admin_key(resources: AwsResources) -> str:
    """A workspace and its admin key, created with the repository's code (the test side may use it)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        for name, value in resources.settings_env().items():
            monkeypatch.setenv(name, value)
        container = Container(Settings())
        initialization = container.identity.initialize()
        container.close()
    assert initialization.api_key is not None
    return initialization.api_key


NO_VALUE = object()


def _condition(value: Any) -> bool:
    """A template condition with every parameter at its default (Equals, Not, And, Or, Condition)."""
    if isinstance(value, str):
        return _condition(BUILT_TEMPLATE["Conditions"][value])
    ((function, args),) = value.items()
    if function == "Condition":
        return _condition(args)
    if function == "Fn::Not":
        return not _condition(args[0])
    if function in ("Fn::And", "Fn::Or"):
        results = [_condition(a) for a in args]
        return all(results) if function == "Fn::And" else any(results)
    if function == "Fn::Equals":
        parameters = BUILT_TEMPLATE["Parameters"]
        sides = [str(parameters[a["Ref"]].get("Default", "")) if isinstance(a, dict) else str(a) for a in args]
        return sides[0] == sides[1]
    raise AssertionError(f"a condition the smoke test cannot evaluate: {value}")


def _resolve(value: Any, resources: AwsResources) -> Any:
    """A template environment value as CloudFormation would resolve it here with the parameters' defaults (other
    ARNs: stand-ins; ``NO_VALUE`` for AWS::NoValue, a variable left out)."""
    parameters = BUILT_TEMPLATE["Parameters"]
    if isinstance(value, str | int | float):
        return str(value)
    if isinstance(value, dict) and "Fn::If" in value:
        condition, when_true, when_false = value["Fn::If"]
        return _resolve(when_true if _condition(condition) else when_false, resources)
    if value == {"Ref": "AWS::NoValue"}:
        return NO_VALUE
    ref = value.get("Ref") if isinstance(value, dict) else None
    known = {"Table": resources.table_name, "Bucket": resources.bucket_name, "AWS::StackName": "smoke"}
    if ref in parameters:
        return str(parameters[ref].get("Default", ""))
    if ref in known:
        return known[ref]
    if value == {"Fn::GetAtt": ["SecretsKey", "Arn"]}:
        return resources.kms_key_id
    return f"arn:aws:lambda:{REGION}:123456789012:function:smoke-stand-in"


def function_env(name: str, resources: AwsResources, moto_url: str) -> dict[str, str]:
    template_vars = {
        **BUILT_TEMPLATE["Globals"]["Function"]["Environment"]["Variables"],
        **BUILT_TEMPLATE["Resources"][name]["Properties"].get("Environment", {}).get("Variables", {}),
    }
    resolved = {key: _resolve(value, resources) for key, value in template_vars.items()}
    env = {key: value for key, value in resolved.items() if value is not NO_VALUE}
    return (
        env
        | FAKE_CREDENTIALS
        | {
            "AWS_ENDPOINT_URL": moto_url,
            "AWS_LAMBDA_FUNCTION_NAME": name,
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "1024",
            "LAMBDA_TASK_ROOT": str(BUILD_DIR / name),
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/tmp"),
            "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
        }
    )


def run_built(name: str, events: list[dict[str, Any]], resources: AwsResources, moto_url: str, tmp: Path) -> Any:
    """Import the built handler of ``name`` in a fresh interpreter and invoke it with each event (twice)."""
    report = ARTIFACTS["functions"][name]
    request = {
        "function_name": name,
        "code_dir": str(BUILD_DIR / report["code_dir"]),
        "layer_dirs": [str(BUILD_DIR / layer) for layer in report["layers"]],
        "handler": report["handler"],
        "events": events,
    }
    request_file, result_file = tmp / f"{name}-request.json", tmp / f"{name}-result.json"
    request_file.write_text(json.dumps(request), encoding="utf-8")
    python = ARTIFACTS["smoke_python"] or sys.executable
    # From a folder outside the repository, so not even the working directory could lend it a module.
    completed = subprocess.run(
        [python, "-I", "-S", str(RUNTIME_DRIVER), str(request_file), str(result_file)],
        env=function_env(name, resources, moto_url),
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    result: dict[str, Any] = json.loads(result_file.read_text(encoding="utf-8"))
    # Everything came from the artifacts or the standard library; mcpbridge from the layer.
    assert result["foreign_modules"] == []
    layer_root = BUILD_DIR / report["layers"][0]
    assert Path(result["mcpbridge_file"]).resolve().is_relative_to(layer_root)
    assert not any(str(REPO_ROOT / "shared") in entry for entry in result["sys_path"])
    # Every compiled extension of the layer loads on this interpreter (the binaries fit it).
    assert result["extension_count"] > 10
    assert result["broken_extensions"] == []
    timings = BUILD_DIR / "smoke-timings.json"
    recorded = json.loads(timings.read_text(encoding="utf-8")) if timings.exists() else {}
    # For the record (what SnapStart would save), from the first test that runs the function; never asserted.
    recorded.setdefault(
        name,
        {
            "python": result["python"].split()[0],
            "init_seconds": round(result["init_seconds"], 3),
            "first_invocation_seconds": round(result["invocations"][0]["seconds"], 3),
            "warm_invocation_seconds": round(min(i["seconds"] for i in result["invocations"][1:]), 4),
        },
    )
    timings.write_text(json.dumps(recorded, indent=1) + "\n", encoding="utf-8")
    return result["invocations"]


def responses(invocations: list[dict[str, Any]]) -> list[tuple[int, Any]]:
    """(status, JSON body) of each HTTP invocation; fails on an invocation that raised."""
    answered = []
    for invocation in invocations:
        assert "response" in invocation, invocation
        response = invocation["response"]
        answered.append((response["statusCode"], json.loads(response["body"])))
    return answered


# ---------------------------------------------------------------------------------------------- tests


def test_the_build_is_for_the_interpreter_that_runs_it() -> None:
    target = ARTIFACTS["target"]
    python = ARTIFACTS["smoke_python"] or sys.executable
    probe = "import platform, sys; print(platform.machine(), '%d.%d' % sys.version_info[:2])"
    machine, version = subprocess.run([python, "-I", "-c", probe], capture_output=True, text=True).stdout.split()
    assert version == target["python"]
    assert {"x86_64": "x86_64", "aarch64": "arm64"}[machine] == target["arch"]
    assert set(ARTIFACTS["functions"]) == {
        name for name, r in BUILT_TEMPLATE["Resources"].items() if r["Type"] == "AWS::Serverless::Function"
    }
    for report in ARTIFACTS["functions"].values():
        assert report["unzipped_bytes"] <= ARTIFACTS["limits"]["unzipped_bytes"]


@pytest.mark.parametrize("name", HTTP_FUNCTIONS)
def test_http_function_answers_health_and_readiness(
    name: str, resources: AwsResources, moto_url: str, tmp_path: Path
) -> None:
    events = [http_event("GET", "/healthz", "GET /healthz"), http_event("GET", "/readyz", "GET /readyz")]
    answered = responses(run_built(name, events, resources, moto_url, tmp_path))
    healthy, ready = answered[:2], answered[2:]
    assert healthy == [(200, {"status": "ok"})] * 2
    # DynamoDB and KMS (moto) reached through the boto3 of the layer.
    assert ready == [(200, {"status": "ready", "checks": {"store": "ok", "secrets": "ok"}})] * 2


def test_admin_api_authenticates_a_key(resources: AwsResources, moto_url: str, admin_key: str, tmp_path: Path) -> None:
    events = [
        http_event("GET", "/api/v1/me", "ANY /api/v1/{proxy+}", {"authorization": f"Bearer {admin_key}"}),
        http_event("GET", "/api/v1/me", "ANY /api/v1/{proxy+}", {"authorization": "Bearer sk_not-a-key"}),
    ]
    (known, known_again, unknown, unknown_again) = responses(
        run_built("AdminApiFunction", events, resources, moto_url, tmp_path)
    )
    assert known[0] == known_again[0] == 200, known
    assert unknown[0] == unknown_again[0] == 401, unknown


def test_mcp_endpoint_refuses_an_unknown_token(resources: AwsResources, moto_url: str, tmp_path: Path) -> None:
    event = http_event(
        "POST",
        "/mcp/ep_missing",
        "ANY /mcp/{endpoint_id}",
        {"content-type": "application/json", "accept": "application/json, text/event-stream"},
    )
    event["pathParameters"] = {"endpoint_id": "ep_missing"}
    event["body"] = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    invocations = run_built("McpEndpointFunction", [event], resources, moto_url, tmp_path)
    statuses = [invocation["response"]["statusCode"] for invocation in invocations]
    assert statuses == [401, 401], invocations


def test_indexer_runs_a_job_for_a_document_that_is_gone(resources: AwsResources, moto_url: str, tmp_path: Path) -> None:
    # The job's conditional update finds no such version: the job is done, nothing is indexed.
    event = {
        "kind": "index_document",
        "payload": {"workspace_id": MISSING_WORKSPACE, "document_id": MISSING_DOCUMENT, "version": "1"},
    }
    invocations = run_built("IndexerFunction", [event], resources, moto_url, tmp_path)
    assert [invocation.get("response") for invocation in invocations] == [{"status": "done"}] * 2, invocations


def test_tool_call_steps_end_a_missing_call_and_name_a_bad_step_by_error(
    resources: AwsResources, moto_url: str, tmp_path: Path
) -> None:
    # A call whose record is gone (its workspace or user was deleted) just ends: prepare routes it to finish,
    # finish says so. What the state machine sees of a bad event: the error's class name (its Catch and Retry
    # match on it).
    events = [
        {"step": "prepare", "call_id": MISSING_CALL, "workspace_id": MISSING_WORKSPACE},
        {"step": "finish", "call_id": MISSING_CALL, "workspace_id": MISSING_WORKSPACE},
        {"step": "no-such-step", "call_id": MISSING_CALL, "workspace_id": MISSING_WORKSPACE},
    ]
    invocations = run_built("ToolCallsFunction", events, resources, moto_url, tmp_path)
    answers = [invocation.get("response") for invocation in invocations]
    assert answers[:2] == [{"next": "finish"}] * 2, invocations
    assert answers[2:4] == [{"call_id": MISSING_CALL, "status": "deleted", "outcome_uncertain": False}] * 2
    assert [invocation.get("errorType") for invocation in invocations[4:]] == ["InvalidInput"] * 2, invocations


def test_job_recovery_sweeps_and_leaves_a_record_it_cannot_settle(
    resources: AwsResources, moto_url: str, tmp_path: Path
) -> None:
    # The schedule's event sweeps (an empty table: nothing waits); an SQS batch whose record is not a job's is
    # reported back, for SQS to deliver again and then move to the redrive queue.
    batch = {"Records": [{"messageId": "m-1", "receiptHandle": "r", "body": "{}", "eventSource": "aws:sqs"}]}
    invocations = run_built("JobRecoveryFunction", [{"task": "sweep"}, batch], resources, moto_url, tmp_path)
    answers = [invocation.get("response") for invocation in invocations]
    assert answers[:2] == [{"status": "swept", "backlog": 0, "redriven": 0, "failed": 0}] * 2, invocations
    assert answers[2:] == [{"batchItemFailures": [{"itemIdentifier": "m-1"}]}] * 2, invocations


@pytest.mark.timeout(600)  # pip resolves the whole set for the target before it can fail
def test_a_dependency_without_a_wheel_for_the_target_fails_the_build(tmp_path: Path) -> None:
    # numpy and google-re2 publish aarch64 wheels for glibc 2.27/2.28 only: a target that allows no more than
    # manylinux2014 (glibc 2.17) cannot have them, and the build says so by name instead of installing less.
    pins = build_script()._pins()
    completed = subprocess.run(
        [sys.executable, str(REPO_ROOT / "infra" / "build_artifacts.py"), "layer", str(tmp_path), "--glibc", "2.17"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 1
    (verdict,) = [line for line in completed.stderr.splitlines() if line.startswith("build: FAILED")]
    assert "no wheel for cp313 arm64" in verdict
    assert f"numpy=={pins['numpy']}" in verdict
    assert f"google-re2=={pins['google-re2']}" in verdict
    assert "cryptography" not in verdict  # it has manylinux2014 wheels: only the culprits are named
    assert not any((tmp_path / "python").iterdir())
