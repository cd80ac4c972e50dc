"""Events of the embedded backend: one JSON line per event on the ``mcpbridge.events`` logger (a log stream a
console can tail; ``mcpbridge serve`` prints it with the other logs)."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

log = logging.getLogger("mcpbridge.events")


class LogEvents:
    def publish(self, kind: str, detail: Mapping[str, Any]) -> None:
        log.info("%s", json.dumps({"kind": kind, "detail": dict(detail)}, sort_keys=True, default=str))
