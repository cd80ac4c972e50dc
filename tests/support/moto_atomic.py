"""Give moto's DynamoDB the per-item atomicity the real service has.

DynamoDB evaluates a condition and applies the write atomically. moto checks the condition and then writes in
plain Python, with no lock, so two threads can both pass the same condition. Serialising moto's request handling
restores the guarantee the real service gives; the race tests then check what is ours to get right: that the
adapters never turn a conditional write into a read followed by a write.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from moto.dynamodb.responses import DynamoHandler

_lock = threading.RLock()


@contextlib.contextmanager
def atomic_dynamodb() -> Iterator[None]:
    original = DynamoHandler.call_action

    def call_action(self: Any) -> Any:
        with _lock:
            return original(self)

    DynamoHandler.call_action = call_action  # type: ignore[method-assign]
    try:
        yield
    finally:
        DynamoHandler.call_action = original  # type: ignore[method-assign]
