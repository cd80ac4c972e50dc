"""Liveness (``/healthz``: the process answers) and readiness (``/readyz``: store and secrets reachable)."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from mcpbridge.errors import MCPBridgeError
from mcpbridge.http.deps import SecretsDep, StoreDep

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


def _probe(check: Callable[[], None]) -> str:
    try:
        check()
    except MCPBridgeError as exc:
        return exc.code
    return "ok"


@router.get("/readyz", response_model=None)
def readyz(store: StoreDep, secrets: SecretsDep) -> JSONResponse:
    checks = {"store": _probe(lambda: store.ping()), "secrets": _probe(lambda: secrets.ping())}
    ready = all(v == "ok" for v in checks.values())
    return JSONResponse(
        {"status": "ready" if ready else "unavailable", "checks": checks}, status_code=200 if ready else 503
    )
