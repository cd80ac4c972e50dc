"""``GET /api/v1/mcp-oauth/callback``: public; the ``state`` parameter alone authenticates it."""

from __future__ import annotations

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from mcpbridge.http.problems import problem

router = APIRouter(prefix="/api/v1", tags=["oauth"])


@router.get("/mcp-oauth/callback", response_model=None)
def oauth_callback(
    state: str | None = Query(default=None, max_length=512),
    code: str | None = Query(default=None, max_length=4096),
    error: str | None = Query(default=None, max_length=256),
) -> JSONResponse:
    if not state:
        return problem(400, "oauth_state_missing", "the authorization server did not return a state")
    # No authorization attempt can be started by this version, so every state is unknown.
    return problem(400, "oauth_state_invalid", "unknown, used or expired authorization state")
