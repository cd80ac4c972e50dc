"""Every store contract test runs on both adapters: SQLite and DynamoDB (moto, table from template.yaml)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from mcpbridge.adapters.aws.dynamodb import DynamoStore
from mcpbridge.adapters.local.sqlite import SqliteStore
from mcpbridge.ports import Store
from tests.support.clock import FakeClock
from tests.support.moto_atomic import atomic_dynamodb


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=["local", "aws"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store(backend: str, clock: FakeClock, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Store]:
    if backend == "local":
        sqlite = SqliteStore(tmp_path / "store.sqlite3", clock)
        yield sqlite
        sqlite.close()
        return
    request.getfixturevalue("aws_credentials")
    from tests.support.aws import table_create_kwargs

    with mock_aws(), atomic_dynamodb():
        client = boto3.client("dynamodb", region_name="eu-west-1")
        client.create_table(**table_create_kwargs("contract"))
        yield DynamoStore(client, "contract", clock)
