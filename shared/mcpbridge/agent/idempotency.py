"""Idempotency keys of tool calls: a caller-supplied key makes a retried call return the first call, never run twice.

Items: ``WS#<ws> / IDEMKEY#<sha256(owner, key)>`` -> the call's id and the digest of what was asked (the tool, the
agent or endpoint, the arguments; never the values themselves), expiring with the call (``RETENTION_SECONDS``). The
key is claimed with a conditional write before the call is recorded: of two calls with one key, one claims it and
runs; the other reads the claim and gets the first call (the same request) or a conflict (another request).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

from mcpbridge.agent.calls import RETENTION_SECONDS
from mcpbridge.domain.items import Condition, Key
from mcpbridge.errors import ConditionFailed, Conflict, InvalidInput
from mcpbridge.ports import Clock, Store

MAX_KEY_CHARS: Final = 255


def idempotency_key(workspace_id: str, owner: str, key: str) -> Key:
    hashed = hashlib.sha256(f"{owner}\x00{key}".encode()).hexdigest()
    return Key(f"WS#{workspace_id}", f"IDEMKEY#{hashed}")


def request_digest(service_id: str, tool_name: str, agent_id: str | None, arguments: Mapping[str, Any]) -> str:
    canonical = json.dumps(
        [service_id, tool_name, agent_id, arguments], sort_keys=True, separators=(",", ":"), default=str
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def check_key(key: Any) -> str:
    if not isinstance(key, str) or not key.strip() or len(key) > MAX_KEY_CHARS or not key.isprintable():
        raise InvalidInput(
            f"the idempotency key must be 1 to {MAX_KEY_CHARS} printable characters", code="invalid_idempotency_key"
        )
    return key.strip()


class IdempotencyKeys:
    def __init__(self, store: Store, clock: Clock, retention_seconds: int = RETENTION_SECONDS) -> None:
        """``retention_seconds``: the calls' (a key lives as long as its call's record)."""
        self._store = store
        self._clock = clock
        self._retention = retention_seconds

    def claim(self, workspace_id: str, owner: str, key: str, digest: str, call_id: str) -> str | None:
        """Claim ``key`` for the new call ``call_id``: None when claimed now; the first call's id when the key was
        used for the same request; ``Conflict`` (``idempotency_key_reused``) when it was used for another."""
        where = idempotency_key(workspace_id, owner, key)
        found = self._store.get(where)
        if found is None:
            item = {
                **where.as_dict(),
                "call_id": call_id,
                "digest": digest,
                "expires_at": int(self._clock.now()) + self._retention,
            }
            try:
                self._store.put(item, condition=Condition.absent("idempotency_key_new"))
                return None
            except ConditionFailed as lost:
                found = lost.current
                if found is None:
                    raise
        if found.get("digest") != digest:
            raise Conflict(
                "this idempotency key was used for another request (another tool or other arguments)",
                code="idempotency_key_reused",
            )
        return str(found["call_id"])

    def release(self, workspace_id: str, owner: str, key: str) -> None:
        """Give a key back after its call could not be recorded (best effort: it expires anyway)."""
        self._store.delete(idempotency_key(workspace_id, owner, key))
