"""Logging: structured JSON in Lambda (powertools formatter, request id on every line), plain text locally.

Nothing logs a secret, token, authorization code or state value: modules log ids and hints only.
"""

from __future__ import annotations

import logging
from typing import Any


def configure_local_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")


class LambdaLogging:
    """The ``mcpbridge`` logger tree as JSON lines, tagged with the invocation's request id."""

    def __init__(self, level: str) -> None:
        from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter

        self._formatter = LambdaPowertoolsFormatter(service="mcpbridge")
        handler = logging.StreamHandler()
        handler.setFormatter(self._formatter)
        root = logging.getLogger("mcpbridge")
        root.handlers[:] = [handler]
        root.setLevel(level.upper())
        root.propagate = False

    def bind(self, context: Any) -> None:
        request_id = getattr(context, "aws_request_id", None)
        if request_id:
            self._formatter.append_keys(request_id=request_id)
