"""Jobs as asynchronous invocations of the indexer Lambda function (Lambda retries a failed one twice)."""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from mcpbridge.errors import Unavailable


class LambdaJobs:
    """``ports.Jobs``: each job is one ``Event`` invocation of ``function_name`` with ``{kind, payload}``."""

    def __init__(self, client: Any, function_name: str) -> None:
        self._client = client
        self._function = function_name

    def submit(self, kind: str, payload: dict[str, str]) -> None:
        body = json.dumps({"kind": kind, "payload": payload}).encode()
        try:
            self._client.invoke(FunctionName=self._function, InvocationType="Event", Payload=body)
        except (ClientError, BotoCoreError) as exc:
            raise Unavailable("cannot queue the background job; retry", code="jobs_unavailable") from exc
