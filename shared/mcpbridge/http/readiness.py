"""Liveness and readiness, as every function answers them (``/healthz``, ``/readyz``), with or without FastAPI."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mcpbridge.errors import MCPBridgeError
from mcpbridge.ports import SecretBox, Store

ALIVE = {"status": "ok"}


def _probe(check: Callable[[], None]) -> str:
    try:
        check()
    except MCPBridgeError as exc:
        return exc.code
    return "ok"


def readiness(store: Store, secrets: SecretBox) -> tuple[int, dict[str, Any]]:
    """200 ``ready`` when the store and the key service answer, else 503 naming the check that failed."""
    checks = {"store": _probe(store.ping), "secrets": _probe(secrets.ping)}
    ready = all(v == "ok" for v in checks.values())
    return (200 if ready else 503), {"status": "ready" if ready else "unavailable", "checks": checks}
