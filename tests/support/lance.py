"""Lance search indexes for tests: in a directory with a SQLite store, or on S3 with the DynamoDB commit store and a
DynamoDB store for the pointers, against a moto server on 127.0.0.1 (Lance's own S3 and DynamoDB clients speak
HTTP: moto's in-process mock cannot reach them)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import boto3
import httpx
from moto.server import ThreadedMotoServer

from mcpbridge.adapters.aws.dynamodb import DynamoStore
from mcpbridge.adapters.lance.tables import LanceLocation
from tests.support.aws import table_create_kwargs
from tests.support.serve import free_port

REGION = "eu-west-1"
FAKE_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing"}


def commit_table_kwargs(name: str) -> dict[str, Any]:
    """Lance's commit store table, as ``template.yaml`` declares ``IndexCommitsTable``."""
    return {
        "TableName": name,
        "KeySchema": [
            {"AttributeName": "base_uri", "KeyType": "HASH"},
            {"AttributeName": "version", "KeyType": "RANGE"},
        ],
        "AttributeDefinitions": [
            {"AttributeName": "base_uri", "AttributeType": "S"},
            {"AttributeName": "version", "AttributeType": "N"},
        ],
        "BillingMode": "PAY_PER_REQUEST",
    }


@dataclass(frozen=True)
class LanceOnS3:
    endpoint_url: str
    bucket: str
    table_name: str
    commit_table: str

    @property
    def location(self) -> LanceLocation:
        return LanceLocation(
            f"s3+ddb://{self.bucket}/lance",
            commit_table=self.commit_table,
            storage_options=storage_options(self.endpoint_url),
        )

    def client(self, service: str) -> Any:
        return boto3.client(
            service,  # type: ignore[call-overload]
            region_name=REGION,
            endpoint_url=self.endpoint_url,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def store(self, clock: Any) -> DynamoStore:
        return DynamoStore(self.client("dynamodb"), self.table_name, clock)

    def object_bytes(self) -> list[bytes]:
        """Every object of the bucket, current versions and older ones."""
        s3 = self.client("s3")
        found: list[bytes] = []
        for page in s3.get_paginator("list_object_versions").paginate(Bucket=self.bucket):
            for version in page.get("Versions", []):
                body = s3.get_object(Bucket=self.bucket, Key=version["Key"], VersionId=version["VersionId"])["Body"]
                found.append(body.read())
        return found


def storage_options(endpoint_url: str) -> dict[str, str]:
    return {
        "aws_endpoint": endpoint_url,
        "dynamodb_endpoint": endpoint_url,
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
        "aws_region": REGION,
        "allow_http": "true",
    }


@contextmanager
def moto_server() -> Iterator[str]:
    """A moto server on a free 127.0.0.1 port (its state is the process's: it is reset when it stops)."""
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


def create_lance_resources(endpoint_url: str, *, versioned: bool = False) -> LanceOnS3:
    """A bucket, the store's table and Lance's commit table on the server at ``endpoint_url``."""
    suffix = uuid.uuid4().hex[:10]
    made = LanceOnS3(endpoint_url, f"mcpbridge-lance-{suffix}", f"store-{suffix}", f"commits-{suffix}")
    dynamodb = made.client("dynamodb")
    dynamodb.create_table(**table_create_kwargs(made.table_name))
    dynamodb.create_table(**commit_table_kwargs(made.commit_table))
    s3 = made.client("s3")
    s3.create_bucket(Bucket=made.bucket, CreateBucketConfiguration={"LocationConstraint": REGION})
    if versioned:
        s3.put_bucket_versioning(Bucket=made.bucket, VersioningConfiguration={"Status": "Enabled"})
    return made


class InProcessLambda:
    """A Lambda client whose ``invoke`` runs a handler in this process on the JSON payload, as the service would
    (the transport seam of ``adapters.aws.lambda_search_index``): a ``RequestResponse`` call gets the handler's
    JSON reply back, an ``Event`` call runs it and returns nothing; an exception becomes a ``FunctionError``."""

    def __init__(self, handler: Any) -> None:
        self._handler = handler
        self.invocations: list[tuple[str, int]] = []

    def invoke(self, *, FunctionName: str, InvocationType: str, Payload: bytes) -> dict[str, Any]:
        import io
        import json

        self.invocations.append((InvocationType, len(Payload)))
        try:
            reply = self._handler(json.loads(Payload), None)
        except Exception as exc:
            return {
                "FunctionError": "Unhandled",
                "Payload": io.BytesIO(json.dumps({"errorType": type(exc).__name__}).encode()),
            }
        return {"StatusCode": 200, "Payload": io.BytesIO(json.dumps(reply).encode())}


def write_from_a_process(
    resources: LanceOnS3, engine: str, cache_dir: str, prefix: str, documents: int, start: Any, errors: Any
) -> None:
    """One writer process (``multiprocessing`` target): its own index of ``engine`` (``lance`` or ``files``) on the
    moto server, ``documents`` documents of its own written once ``start`` (a barrier) lets every writer go; a
    failure is put on ``errors`` by class and message."""
    from pathlib import Path

    from mcpbridge.adapters.system_clock import SystemClock
    from mcpbridge.domain.knowledge import Chunk
    from tests.support.embedder import HashingEmbedder

    clock = SystemClock()
    try:
        index: Any
        if engine == "lance":
            from mcpbridge.adapters.lance.search_index import LanceSearchIndex

            index = LanceSearchIndex(resources.store(clock), resources.location, clock)
        else:
            from mcpbridge.adapters.aws.s3_search_index import S3IndexFiles
            from mcpbridge.adapters.index_files.search_index import FileSearchIndex

            files = S3IndexFiles(
                resources.store(clock), resources.client("s3"), resources.bucket, Path(cache_dir), clock
            )
            index = FileSearchIndex(files)
        embedder = HashingEmbedder(16)
        start.wait(60)
        for n in range(documents):
            document_id = f"doc_{prefix}{n}"
            text = f"animal{prefix} number {n} swims"
            chunk = Chunk(
                id=Chunk.make_id(document_id, 0),
                knowledge_base_id="kb_1",
                document_id=document_id,
                document_title=document_id,
                seq=0,
                text=text,
                start_line=1,
                end_line=1,
                start_offset=0,
                end_offset=len(text),
            )
            vectors = embedder.embed([text], purpose="document")
            index.replace_document("kb_1", document_id, [chunk], vectors, embedder.name, language="english")
        index.close()
    except BaseException as exc:  # reported to the test, which fails on it
        errors.put(f"{prefix}: {type(exc).__name__}: {exc}")
        raise
