"""The search function's Lambda entry (``functions/search_index``): search index calls from the other functions
(``domain.index_wire``) and the index's own upkeep jobs (``optimise_index``, ``migrate_index``), which it queues to
itself, to the version that is running, so that they run where the search engine is installed."""

from __future__ import annotations

import os
from typing import Any

from mcpbridge.bootstrap import Container
from mcpbridge.heap import freeze_startup_objects
from mcpbridge.settings import get_settings


def search_container() -> Container:
    """The container of the search function: the Lance index itself, jobs to this very function version."""
    name, version = os.environ.get("AWS_LAMBDA_FUNCTION_NAME"), os.environ.get("AWS_LAMBDA_FUNCTION_VERSION")
    settings = get_settings()
    changes: dict[str, Any] = {"search_engine": "lance", "search_function": ""}
    if name:
        changes["indexer_function"] = f"{name}:{version}" if version and version != "$LATEST" else name
        changes["jobs"] = "lambda"
    return Container(settings.model_copy(update=changes))


def make_search_handler(container: Container | None = None) -> Any:
    wired = container if container is not None else search_container()
    freeze_startup_objects(collect=False)

    def handler(event: dict[str, Any], context: Any) -> Any:
        from mcpbridge.knowledge.index_requests import answer

        if "kind" in event:
            wired.run_job(str(event["kind"]), {k: str(v) for k, v in dict(event.get("payload", {})).items()})
            return {"status": "done"}
        return answer(wired.search_index, wired.index_maintenance, wired.blobs, event)

    return handler
