"""Liveness (``/healthz``: the process answers) and readiness (``/readyz``: store and secrets reachable)."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from mcpbridge.errors import MCPBridgeError
from mcpbridge.http.deps import SecretsDep, StoreDep

router = APIRouter(tags=["health"])


@router.get("/healthz", operation_id="getHealth", summary="Liveness")
def healthz() -> dict[str, str]:
    """Answers 200 as long as the process serves requests; it checks nothing else."""
    return {"status": "ok"}


def _probe(check: Callable[[], None]) -> str:
    try:
        check()
    except MCPBridgeError as exc:
        return exc.code
    return "ok"


@router.get("/readyz", operation_id="getReadiness", summary="Readiness", response_model=None)
def readyz(store: StoreDep, secrets: SecretsDep) -> JSONResponse:
    """Checks that the store and the key service answer: 200 `ready`, or 503 with the check that failed."""
    checks = {"store": _probe(lambda: store.ping()), "secrets": _probe(lambda: secrets.ping())}
    ready = all(v == "ok" for v in checks.values())
    return JSONResponse(
        {"status": "ready" if ready else "unavailable", "checks": checks}, status_code=200 if ready else 503
    )
