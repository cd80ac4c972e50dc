"""What every Lambda function does at import: read settings, wire the container, wrap the app in Mangum.

Only construction happens here (no network call, no randomness), so the state SnapStart snapshots is the same
for every sandbox restored from it. ``lifespan="off"``: Mangum would otherwise run the ASGI lifespan on every
invocation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mangum import Mangum
from mangum.adapter import DEFAULT_TEXT_MIME_TYPES

from mcpbridge.bootstrap import build_container
from mcpbridge.http.apps import Surface, create_app
from mcpbridge.observability import LambdaLogging

LambdaHandler = Callable[[dict[str, Any], Any], dict[str, Any]]


def make_handler(surface: Surface) -> LambdaHandler:
    container = build_container()
    container.preload()
    logging_ = LambdaLogging(container.settings.log_level)
    # Error bodies are problem+json: text, so they go back to API Gateway readable rather than base64-encoded.
    text_types = [*DEFAULT_TEXT_MIME_TYPES, "application/problem+json"]
    asgi = Mangum(create_app(container, surface), lifespan="off", text_mime_types=text_types)

    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        logging_.bind(context)
        response: dict[str, Any] = asgi(event, context)
        return response

    return handler


def make_job_handler() -> LambdaHandler:
    """The indexer function: runs one background job per (asynchronous) invocation."""
    container = build_container()
    container.preload()
    logging_ = LambdaLogging(container.settings.log_level)

    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        logging_.bind(context)
        container.run_job(str(event["kind"]), {k: str(v) for k, v in dict(event["payload"]).items()})
        return {"status": "done"}

    return handler
