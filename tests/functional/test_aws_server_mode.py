"""``mcpbridge init`` and ``mcpbridge serve`` with ``MCPBRIDGE_BACKEND=aws``, against DynamoDB/KMS/S3 served by a
moto server on 127.0.0.1 (``AWS_ENDPOINT_URL``), in subprocesses: the same admin flow as on SQLite, and a restart
that keeps everything.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from moto.server import ThreadedMotoServer

from tests.support.aws import AwsResources, create_aws_resources
from tests.support.serve import (
    SERVE_TEST_TIMEOUT,
    ServeProcess,
    check_admin_flow,
    check_after_restart,
    cli_env,
    free_port,
    run_init,
)

# Each test starts `serve` (a few CPU seconds each time): at load 20 on two cores that can take minutes, which the
# readiness waits allow (tests.support.readiness); this is only the last resort against a hang.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(SERVE_TEST_TIMEOUT)]

REGION = "eu-west-1"
FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": REGION,
}


@pytest.fixture
def moto_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A moto server on a free 127.0.0.1 port; its URL. moto's state is process-wide: it is reset after the test."""
    for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
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


@pytest.fixture
def resources(moto_server: str) -> AwsResources:
    return create_aws_resources(table_name=f"mcpbridge-{uuid.uuid4().hex[:8]}", endpoint_url=moto_server, region=REGION)


def aws_cli_env(resources: AwsResources, endpoint_url: str) -> dict[str, str]:
    return cli_env(
        {
            **FAKE_CREDENTIALS,
            "AWS_ENDPOINT_URL": endpoint_url,
            "MCPBRIDGE_BACKEND": "aws",
            "MCPBRIDGE_TABLE_NAME": resources.table_name,
            "MCPBRIDGE_KMS_KEY_ID": resources.kms_key_id,
            "MCPBRIDGE_BUCKET_NAME": resources.bucket_name,
        }
    )


def stored_api_keys(resources: AwsResources, endpoint_url: str) -> list[dict[str, Any]]:
    """The API-key items in the table, read straight from DynamoDB."""
    client = boto3.client("dynamodb", region_name=REGION, endpoint_url=endpoint_url)
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {
        "TableName": resources.table_name,
        "FilterExpression": "begins_with(sk, :prefix)",
        "ExpressionAttributeValues": {":prefix": {"S": "APIKEY#"}},
    }
    for _ in range(100):
        page = client.scan(**kwargs)
        items.extend(page["Items"])
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    raise AssertionError("the scan did not end")


def test_init_and_serve_on_dynamodb_and_kms(tmp_path: Path, moto_server: str, resources: AwsResources) -> None:
    env = aws_cli_env(resources, moto_server)

    first = run_init([], cwd=tmp_path, env=env)
    assert first["created"] is True
    admin_key = first["api_key"]
    assert isinstance(admin_key, str)
    assert admin_key.startswith("sk_")
    again = run_init([], cwd=tmp_path, env=env)
    assert again == {"workspace_id": first["workspace_id"], "api_key": None, "created": False}
    assert len(stored_api_keys(resources, moto_server)) == 1
    # The aws backend keeps nothing on local disk.
    assert list(tmp_path.iterdir()) == []

    server = ServeProcess.start(cwd=tmp_path, env=env, args=[], log_dir=tmp_path, tag="serve1")
    try:
        server.wait_ready()
        assert server.printed_keys() == [], server.output()
        assert f"DynamoDB table {resources.table_name}" in server.stdout()
        viewer = check_admin_flow(server.base_url, admin_key)
        # The rejected bodies (malformed, wrong type, escalation) stored nothing.
        stored = stored_api_keys(resources, moto_server)
        assert sorted(item["role"]["S"] for item in stored) == ["admin", "viewer"]
        assert all(admin_key not in str(item) and viewer.key not in str(item) for item in stored)
        code = server.interrupt()
        assert code == 0, f"serve exited with {code} on SIGINT:\n{server.output()}"
    finally:
        server.kill()
    assert "Traceback" not in server.output()
    assert not (tmp_path / ".mcpbridge").exists()

    restarted = ServeProcess.start(cwd=tmp_path, env=env, args=[], log_dir=tmp_path, tag="serve2")
    try:
        restarted.wait_ready()
        assert restarted.printed_keys() == [], restarted.output()
        assert "Already initialised" in restarted.stdout()
        check_after_restart(restarted.base_url, admin_key, viewer)
        code = restarted.interrupt()
        assert code == 0, f"serve exited with {code} on SIGINT:\n{restarted.output()}"
    finally:
        restarted.kill()


def test_serve_initialises_an_empty_table(tmp_path: Path, moto_server: str, resources: AwsResources) -> None:
    env = aws_cli_env(resources, moto_server)
    server = ServeProcess.start(cwd=tmp_path, env=env, args=[], log_dir=tmp_path, tag="serve")
    try:
        server.wait_ready()
        printed = server.printed_keys()
        assert len(printed) == 1, server.output()
        check_admin_flow(server.base_url, printed[0])
    finally:
        server.kill()
    assert run_init([], cwd=tmp_path, env=env)["created"] is False
