"""Containers for tests, wired by ``bootstrap`` like production, on the embedded backend or on moto."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws

from mcpbridge.bootstrap import Container
from mcpbridge.settings import Settings
from tests.support.aws import create_aws_resources, set_fake_aws_env
from tests.support.moto_atomic import atomic_dynamodb


@contextlib.contextmanager
def container_on(
    backend: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    settings: dict[str, Any] | None = None,
    **overrides: Any,
) -> Iterator[Container]:
    """A container on ``local`` (SQLite, key file and files under ``tmp_path``) or ``aws`` (DynamoDB, KMS and S3 in
    moto, the table built from template.yaml). ``settings`` are extra Settings fields; ``overrides`` replace ports."""
    extra = dict(settings or {})
    if backend == "local":
        built = Container(Settings(data_dir=tmp_path / "data", **extra), **overrides)
        try:
            yield built
        finally:
            built.close()
        return
    set_fake_aws_env(monkeypatch)
    with mock_aws(), atomic_dynamodb():
        resources = create_aws_resources(table_name="mcpbridge-test")
        built = Container(
            Settings(
                backend="aws",
                table_name=resources.table_name,
                kms_key_id=resources.kms_key_id,
                bucket_name=resources.bucket_name,
                aws_region="eu-west-1",
                index_cache_dir=tmp_path / "index-cache",
                **extra,
            ),
            **overrides,
        )
        try:
            yield built
        finally:
            built.close()
