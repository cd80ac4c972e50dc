"""The template's ``IndexerFunction`` on moto, invoked asynchronously as on AWS.

The function (with its ``live`` alias, the ARN the other functions' ``MCPBRIDGE_INDEXER_FUNCTION`` names) exists in
moto's Lambda. An ``Event`` invocation is accepted at once (moto answers 202) and the real
``functions/indexer/handler.py``, loaded as a cold start loads it, runs the event afterwards on a thread of its own,
as Lambda runs it in another sandbox: the invoking request never waits for the job. Routed through
:func:`tests.support.stepfunctions.route_lambda_invocations`; use inside ``mock_aws`` with the functions' environment
set (``lambda_hub(..., jobs="lambda", indexer_function=INDEXER_ALIAS_ARN)``).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import threading
import zipfile
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from unittest.mock import patch

import boto3
from moto.core.config import default_user_config

from tests.support.api_gateway import load_handler
from tests.support.aws import REPO_ROOT, load_template
from tests.support.stepfunctions import route_lambda_invocations

REGION = "eu-west-1"
INDEXER = "mcpbridge-test-indexer"
INDEXER_ALIAS_ARN = f"arn:aws:lambda:{REGION}:123456789012:function:{INDEXER}:live"


@dataclass
class IndexerRuns:
    """The jobs the indexer received (their events), and each run's outcome once it ended."""

    events: list[dict[str, Any]] = field(default_factory=list)
    runs: list[Future[Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        with self.lock:
            return [event for event in self.events if event.get("kind") == kind]


def _create_function() -> None:
    template = load_template()
    properties = template["Resources"]["IndexerFunction"]["Properties"]
    iam = boto3.client("iam", region_name=REGION)
    statement = {"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}
    role = iam.create_role(
        RoleName=f"{INDEXER}-role",
        AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [statement]}),
    )["Role"]["Arn"]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.write(REPO_ROOT / "functions" / "indexer" / "handler.py", "handler.py")
    client = boto3.client("lambda", region_name=REGION)
    created = client.create_function(
        FunctionName=INDEXER,
        Runtime=template["Globals"]["Function"]["Runtime"],
        Role=role,
        Handler=properties["Handler"],
        Code={"ZipFile": buffer.getvalue()},
        Timeout=int(properties["Timeout"]),
        Publish=True,
    )
    client.create_alias(FunctionName=INDEXER, Name="live", FunctionVersion=created["Version"])


@contextlib.contextmanager
def asynchronous_indexer() -> Iterator[IndexerRuns]:
    """The indexer function, its ``Event`` invocations run after they were accepted; waits for the runs on exit.
    moto's Lambda without Docker (``lambda.use_docker`` off, its simple backend) for the duration."""
    with patch.dict(default_user_config, {"lambda": {"use_docker": False}}):
        yield from _indexer()


def _indexer() -> Iterator[IndexerRuns]:
    _create_function()
    logger = logging.getLogger("mcpbridge")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    handler = load_handler("indexer")
    logger.handlers[:], logger.level, logger.propagate = saved
    runs = IndexerRuns()
    pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="indexer-sandbox")

    def accepted(event: dict[str, Any], context: Any) -> None:
        with runs.lock:
            runs.events.append(event)
            runs.runs.append(pool.submit(handler, event, context))

    try:
        with route_lambda_invocations({INDEXER: accepted}):
            yield runs
    finally:
        pool.shutdown(wait=True)
