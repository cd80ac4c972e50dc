"""``GET /api/v1/mcp-oauth/callback``: public; the ``state`` parameter alone authenticates it.

The authorization server sends the user's browser here with ``code``, ``state`` and (RFC 9207) ``iss``, or with
``error``. The token exchange runs detached from the browser's request (a client that goes away does not cancel it)
within its own timeout; the browser is then redirected (303) to the attempt's front-end URL with
``#mcp_oauth_result=success`` or ``#mcp_oauth_error=<code>``, or, when the attempt named none and none is configured,
shown a small result page. A missing, unknown, used or expired state is a 400 problem: there is then no trusted place
to send the browser.

The query of this route holds an authorization code and a state: they never reach a response, an error message or a
log line. uvicorn's access log (``mcpbridge serve``) prints request lines with their query, so this module installs a
filter on the ``uvicorn.access`` logger that blanks the query of callback requests; API Gateway's access log logs the
route key only (``template.yaml``).

``GET /api/v1/mcp-oauth/client-metadata.json`` serves mcpbridge's OAuth client ID metadata document when
``MCPBRIDGE_OAUTH_CLIENT_METADATA_URL`` is configured (404 otherwise).
"""

from __future__ import annotations

import html
import logging

import anyio
from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from mcpbridge.http.deps import OAuthDep
from mcpbridge.http.openapi import problems
from mcpbridge.http.problems import problem

router = APIRouter(prefix="/api/v1", tags=["oauth"])

CALLBACK_PATH = "/api/v1/mcp-oauth/callback"
_HEADERS = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}
_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>mcpbridge authorization</title></head>
<body><h1>{title}</h1><p>{detail}</p></body></html>
"""


class RedactCallbackQueries(logging.Filter):
    """Blank the query of OAuth callback request lines in uvicorn's access log (it holds the code and the state)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            path = args[2]
            if path.startswith(CALLBACK_PATH) and "?" in path:
                record.args = (*args[:2], path.split("?", 1)[0] + "?[redacted]", *args[3:])
        return True


def redact_callback_queries(logger_name: str = "uvicorn.access") -> None:
    """Install :class:`RedactCallbackQueries` on ``logger_name`` once (idempotent)."""
    access = logging.getLogger(logger_name)
    if not any(isinstance(existing, RedactCallbackQueries) for existing in access.filters):
        access.addFilter(RedactCallbackQueries())


# Whichever app serves the callback imports this module, before uvicorn configures logging (which keeps filters).
redact_callback_queries()


def _page(error: str | None) -> HTMLResponse:
    if error is None:
        title, detail, status = "Authorization complete", "You can close this window.", 200
    else:
        detail = f"Reason: {html.escape(error)}. Close this window and retry."
        title, status = "Authorization failed", 400
    return HTMLResponse(_PAGE.format(title=title, detail=detail), status_code=status, headers=_HEADERS)


@router.get(
    "/mcp-oauth/callback",
    operation_id="completeOAuthCallback",
    summary="OAuth callback",
    response_model=None,
    responses=problems(400),
)
async def oauth_callback(
    request: Request,
    oauth: OAuthDep,
    state: str | None = Query(default=None, max_length=512, description="The attempt's state, as it was sent."),
    code: str | None = Query(default=None, max_length=4096, description="The authorization code, on success."),
    error: str | None = Query(default=None, max_length=256, description="The OAuth error code, on failure."),
    iss: str | None = Query(default=None, max_length=2048, description="The authorization server's issuer (RFC 9207)."),
) -> Response:
    """Where an authorization server sends the user's browser back. Public: the `state` alone authenticates it.
    Redirects (303) to the attempt's front end with the result in the fragment, or shows a small result page."""
    if not state:
        return problem(400, "oauth_state_missing", "the authorization server did not return a state")
    # Detached from the browser's request: a closed connection must not cancel a half-done exchange (the state is
    # single use). The manager bounds the exchange with its own timeout.
    with anyio.CancelScope(shield=True):
        outcome = await oauth.complete_callback(state, code, iss, error)
    location = outcome.location
    if location is None:
        return _page(outcome.error)
    return RedirectResponse(location, status_code=303, headers=_HEADERS)


@router.get(
    "/mcp-oauth/client-metadata.json",
    operation_id="getOAuthClientMetadata",
    summary="OAuth client metadata",
    response_model=None,
    responses=problems(404),
)
def client_metadata(request: Request, oauth: OAuthDep) -> JSONResponse:
    """mcpbridge's OAuth client ID metadata document, when `MCPBRIDGE_OAUTH_CLIENT_METADATA_URL` is configured (404
    otherwise)."""
    document = oauth.client_metadata_document(str(request.base_url))
    if document is None:
        return problem(404, "not_found", "no OAuth client metadata document is configured")
    return JSONResponse(document, headers={"Cache-Control": "public, max-age=300"})
