"""Events on AWS: EventBridge ``PutEvents`` on the configured bus, source ``mcpbridge``, detail-type = the kind."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

log = logging.getLogger("mcpbridge.events")

SOURCE = "mcpbridge"


class EventBridgeEvents:
    def __init__(self, client: Any, bus_name: str = "default") -> None:
        self._client = client
        self._bus = bus_name

    def publish(self, kind: str, detail: Mapping[str, Any]) -> None:
        """Best effort: an event that cannot be published is logged (kind only), never fails the caller."""
        entry = {
            "Source": SOURCE,
            "DetailType": kind,
            "Detail": json.dumps(dict(detail), default=str),
            "EventBusName": self._bus,
        }
        try:
            answer = self._client.put_events(Entries=[entry])
        except Exception as exc:  # the call's own outcome must not depend on the event
            log.warning("could not publish event %s: %s", kind, type(exc).__name__)
            return
        if answer.get("FailedEntryCount"):
            log.warning("EventBridge refused event %s", kind)
