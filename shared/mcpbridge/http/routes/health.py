"""Liveness (``/healthz``: the process answers) and readiness (``/readyz``: store and secrets reachable)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from mcpbridge.http.deps import SecretsDep, StoreDep
from mcpbridge.http.readiness import ALIVE, readiness

router = APIRouter(tags=["health"])


@router.get("/healthz", operation_id="getHealth", summary="Liveness")
def healthz() -> dict[str, str]:
    """Answers 200 as long as the process serves requests; it checks nothing else."""
    return dict(ALIVE)


@router.get("/readyz", operation_id="getReadiness", summary="Readiness", response_model=None)
def readyz(store: StoreDep, secrets: SecretsDep) -> JSONResponse:
    """Checks that the store and the key service answer: 200 `ready`, or 503 with the check that failed."""
    status, body = readiness(store, secrets)
    return JSONResponse(body, status_code=status)
