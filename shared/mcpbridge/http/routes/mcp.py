"""``/mcp/{endpoint_id}``: the published MCP endpoint's front door (bearer token from the header only)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from mcpbridge.domain import credentials
from mcpbridge.http.problems import WWW_AUTHENTICATE, problem

router = APIRouter(tags=["mcp"])

# Query parameters that would carry a credential: refused outright, since URLs end up in logs and histories.
_QUERY_CREDENTIALS = frozenset({"token", "access_token", "api_key", "apikey", "key", "auth", "authorization"})


def _unauthorized(code: str, detail: str, *, invalid: bool) -> JSONResponse:
    challenge = WWW_AUTHENTICATE + (', error="invalid_token"' if invalid else "")
    return problem(401, code, detail, headers={"WWW-Authenticate": challenge})


@router.api_route("/mcp/{endpoint_id}", methods=["GET", "POST", "DELETE"], include_in_schema=False)
async def mcp_endpoint(endpoint_id: str, request: Request) -> JSONResponse:
    if _QUERY_CREDENTIALS & {name.lower() for name in request.query_params}:
        return _unauthorized(
            "query_token_refused", "send the token in the Authorization header, not the URL", invalid=True
        )
    authorization = request.headers.get("authorization")
    if authorization is None:
        return _unauthorized("missing_token", "this endpoint needs Authorization: Bearer mcp_...", invalid=False)
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not credentials.well_formed(token.strip(), credentials.ENDPOINT_TOKEN_PREFIX):
        return _unauthorized("invalid_token", "the token is not valid for this endpoint", invalid=True)
    # This version publishes no endpoints yet, so no token can belong to one.
    return _unauthorized("invalid_token", "the token is not valid for this endpoint", invalid=True)
