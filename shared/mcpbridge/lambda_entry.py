"""What every Lambda function does at import: read settings, wire the container, wrap the app in Mangum.

Only construction happens here (no randomness, and no network call but one: the settings secret, read when
``MCPBRIDGE_SETTINGS_SECRET_ARN`` is set), so the state SnapStart snapshots is the same for every sandbox restored
from it; the secret's values are in the snapshot, as the environment is. ``lifespan="off"``: Mangum would
otherwise run the ASGI lifespan on every invocation. Every function records metrics and traces through
:class:`~mcpbridge.observability.LambdaTelemetry`, its metrics written as each invocation ends. What init built is
then frozen out of the garbage collector's way (:mod:`mcpbridge.heap`), before any invocation.

What init builds depends on who waits for it (``AWS_LAMBDA_INITIALIZATION_TYPE``). On an ``on-demand`` cold start
the caller does: the admin API then includes each of its routers when a request first needs it (a request needs one
group of them), and the key service's adapter is imported by the first request that seals or unseals a secret
(most of its requests do not). For a SnapStart snapshot (``snap-start``) or provisioned concurrency nobody does, and
init builds everything, so no restored sandbox pays for it on a request.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, cast

from mangum import Mangum
from mangum.adapter import DEFAULT_TEXT_MIME_TYPES
from starlette.types import ASGIApp

from mcpbridge.bootstrap import Container, build_container
from mcpbridge.heap import freeze_startup_objects
from mcpbridge.observability import LambdaLogging, LambdaTelemetry

if TYPE_CHECKING:
    from mangum.types import ASGI

    from mcpbridge.http.apps import Surface

log = logging.getLogger("mcpbridge.lambda")

LambdaHandler = Callable[[dict[str, Any], Any], dict[str, Any]]

BACKLOG_EVERY_SECONDS = 60.0
"""The indexer reports the backlog after each job, counting it at most this often per sandbox (a count reads every
waiting document's entry)."""


def lambda_container(*, sealing: bool = True) -> Container:
    """The container of a Lambda function: settings from the environment and the settings secret (a secret that
    cannot be read fails the cold start, naming why), Powertools telemetry. The backend's adapters are preloaded,
    the key service's only with ``sealing`` (the store's and boto3 always: every request but a refused one uses
    them)."""
    container = build_container(telemetry=LambdaTelemetry())
    container.preload(sealing=sealing)
    return container


def _flush(container: Container) -> None:
    flush = getattr(container.telemetry, "flush", None)
    if flush is not None:
        flush()


def _app(container: Container, surface: Surface | Literal["mcp_endpoint"]) -> ASGIApp:
    """The function's app: FastAPI's for the REST surfaces; the MCP endpoint's own, which needs no FastAPI."""
    if surface == "mcp_endpoint":
        from mcpbridge.http.mcp.app import create_mcp_function_app

        return create_mcp_function_app(container)
    from mcpbridge.http.apps import create_app

    return create_app(container, surface, lazy=on_demand_init())


def on_demand_init() -> bool:
    """Whether this init is an on-demand cold start, which a caller waits for (not a SnapStart snapshot nor
    provisioned concurrency, nor a process outside Lambda)."""
    return os.environ.get("AWS_LAMBDA_INITIALIZATION_TYPE") == "on-demand"


def make_handler(surface: Surface | Literal["mcp_endpoint"]) -> LambdaHandler:
    # On demand the admin API leaves the key service's adapter to the first request that seals or unseals (most of
    # its requests do not); the other functions' requests mostly do.
    container = lambda_container(sealing=not (surface == "admin_api" and on_demand_init()))
    logging_ = LambdaLogging(container.settings.log_level)
    # Error bodies are problem+json: text, so they go back to API Gateway readable rather than base64-encoded.
    text_types = [*DEFAULT_TEXT_MIME_TYPES, "application/problem+json"]
    asgi = Mangum(cast("ASGI", _app(container, surface)), lifespan="off", text_mime_types=text_types)
    freeze_startup_objects(collect=False)

    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        logging_.bind(context)
        try:
            response: dict[str, Any] = asgi(event, context)
        finally:
            _flush(container)
        return response

    return handler


def make_job_handler() -> LambdaHandler:
    """The indexer function: runs one background job per (asynchronous) invocation; a job that raises is retried
    by Lambda. After each job it reports the indexing backlog (``IndexingBacklog``)."""
    from mcpbridge.http.mcp.tool_tasks import register

    container = lambda_container()
    register(container)  # ask and add_document run as Tasks here, invoked by the MCP endpoint function
    logging_ = LambdaLogging(container.settings.log_level)
    backlog: list[float] = []  # [when it was counted, the count]
    freeze_startup_objects(collect=False)

    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        logging_.bind(context)
        try:
            container.run_job(str(event["kind"]), {k: str(v) for k, v in dict(event["payload"]).items()})
        finally:
            try:
                _report_backlog(container, backlog)
            finally:
                _flush(container)
        return {"status": "done"}

    return handler


def make_recovery_handler(container: Container | None = None) -> LambdaHandler:
    """The job-recovery function: a batch of the indexer's failure records (an SQS event; the records it could not
    settle are reported back, so SQS delivers them again and, in the end, to the redrive queue), or the periodic
    sweep (any other event, from EventBridge Scheduler). ``container``: the one to use (tests), else built here."""
    wired = container if container is not None else lambda_container()
    logging_ = LambdaLogging(wired.settings.log_level)
    freeze_startup_objects(collect=False)

    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        logging_.bind(context)
        try:
            if isinstance(event.get("Records"), list):
                return {"batchItemFailures": _settle_failed_jobs(wired, event["Records"])}
            report = wired.sweep.run()
        finally:
            _flush(wired)
        return {"status": "swept", "backlog": report.backlog, "redriven": report.redriven, "failed": report.failed}

    return handler


def _report_backlog(container: Container, last: list[float]) -> None:
    try:
        if not last or time.monotonic() - last[0] >= BACKLOG_EVERY_SECONDS:
            last[:] = [time.monotonic(), float(container.indexing_recovery.backlog())]
        container.telemetry.count("IndexingBacklog", last[1])
    except Exception as exc:  # the job's own outcome stands
        log.warning("the indexing backlog could not be counted (%s)", type(exc).__name__)


def _settle_failed_jobs(container: Container, records: list[Mapping[str, Any]]) -> list[dict[str, str]]:
    from mcpbridge.maintenance.failed_jobs import failed_job_of

    unsettled = []
    for record in records:
        message_id = str(record.get("messageId", ""))
        try:
            outcome = container.failed_jobs.record(failed_job_of(json.loads(record["body"])))
        except Exception as exc:  # malformed, or the store or Lambda failed: delivered again, then redriven
            log.warning("failed-job record %s not settled (%s)", message_id, type(exc).__name__)
            unsettled.append({"itemIdentifier": message_id})
            continue
        if outcome == "given_up":
            unsettled.append({"itemIdentifier": message_id})
    return unsettled
