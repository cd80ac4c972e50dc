"""``/console``: the web console's pages, their assets and its session; ``/`` leads a browser there.

    GET    /                                redirect to /console
    GET    /console                         the approvals inbox
    GET    /console/approvals/{pending_id}  one waiting call's page (the link a pause carries)
    GET    /console/calls                   the calls' history
    GET    /console/kbs                     the knowledge bases; /console/kbs/{kb_id} one, its documents, a search
    GET    /console/endpoints               the published MCP endpoints; /console/endpoints/{id} one of them
    GET    /console/services                the external MCP services; /console/services/{id} one, its tools
    GET    /console/quarantine              the tools held by the quarantine, their differences, their approval
    GET    /console/rules                   the workspace's rules for tool calls: read, edit as JSON, enforce or log
    GET    /console/groups                  the groups of users rules name: create, members, delete
    GET    /console/webhooks                the webhooks: add (the signing secret shown once), delete, deliveries
    GET    /console/people                  the users and API keys (admins), the signed-in user's OAuth connections
    GET    /console/signin                  the sign-in form
    GET    /console/static/{name}           the pages' scripts and style sheet
    GET    /console/session                 who is signed in: role, capabilities, CSRF token (401 when nobody)
    POST   /console/session                 sign in with an API key ({"api_key": "sk_..."}, JSON only)
    DELETE /console/session                 sign out (ends the session on the server, clears the cookie)

Every answer carries a strict Content-Security-Policy (the pages' own scripts and style sheet only, no inline code,
no framing), ``nosniff`` and no referrer. The pages are static files; what they show comes from the REST API,
called by the pages' scripts with the session cookie (:mod:`mcpbridge.http.console.session`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Coroutine
from functools import cache
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

from anyio import to_thread
from fastapi import APIRouter, Request
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.responses import JSONResponse, RedirectResponse, Response

from mcpbridge.bootstrap import Container
from mcpbridge.domain.identity import AGENT_CAPABILITY, Principal, is_approver
from mcpbridge.errors import InvalidInput, MCPBridgeError, NotFound
from mcpbridge.http.auth import CONSOLE_COOKIE, container_of, principal_of_key
from mcpbridge.http.console.session import SESSION_SECONDS, end_session, seal_session, session_of
from mcpbridge.http.problems import problem, problem_from_error

CONSOLE_PATH: Final = "/console"
STATIC: Final = Path(__file__).resolve().parents[1] / "console" / "static"
CONTENT_SECURITY_POLICY: Final = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
SECURITY_HEADERS: Final = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}
_MEDIA_TYPES: Final = {
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
_ASSET_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*\.[a-z]+")
_PAGES: Final = {
    "inbox": "inbox.html",
    "call": "call.html",
    "calls": "calls.html",
    "signin": "signin.html",
    "kbs": "kbs.html",
    "kb": "kb.html",
    "endpoints": "endpoints.html",
    "endpoint": "endpoint.html",
    "services": "services.html",
    "service": "service.html",
    "people": "people.html",
    "quarantine": "quarantine.html",
    "rules": "rules.html",
    "groups": "groups.html",
    "webhooks": "webhooks.html",
}


class _ConsoleRoute(APIRoute):
    """A route whose every answer, an error's too, carries the console's security headers."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def secured(request: Request) -> Response:
            try:
                response = await handler(request)
            except MCPBridgeError as error:
                response = problem_from_error(error)
            response.headers.update(SECURITY_HEADERS)
            return response

        return secured


router = APIRouter(route_class=_ConsoleRoute, include_in_schema=False)


@cache
def _file(name: str) -> tuple[bytes, str]:
    """A file of ``static/`` and its ETag, read once."""
    data = (STATIC / name).read_bytes()
    return data, '"' + hashlib.sha256(data).hexdigest()[:32] + '"'


def _served(name: str, media_type: str, request: Request) -> Response:
    data, etag = _file(name)
    headers = {"ETag": etag, "Cache-Control": "no-cache"}
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers=headers)
    return Response(data, media_type=media_type, headers=headers)


def _page(page: str, request: Request) -> Response:
    """A page of the console; without a session cookie, the sign-in page first (then back here)."""
    if page != "signin" and not request.cookies.get(CONSOLE_COOKIE):
        back = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"{CONSOLE_PATH}/signin?next={quote(back, safe='/')}", status_code=303)
    return _served(_PAGES[page], "text/html; charset=utf-8", request)


@router.api_route("/", methods=["GET", "HEAD"])
async def root() -> Response:
    return RedirectResponse(CONSOLE_PATH, status_code=302)


@router.api_route(CONSOLE_PATH, methods=["GET", "HEAD"])
async def inbox_page(request: Request) -> Response:
    return _page("inbox", request)


@router.api_route(CONSOLE_PATH + "/approvals/{pending_id}", methods=["GET", "HEAD"])
async def call_page(pending_id: str, request: Request) -> Response:
    return _page("call", request)


@router.api_route(CONSOLE_PATH + "/calls", methods=["GET", "HEAD"])
async def calls_page(request: Request) -> Response:
    return _page("calls", request)


@router.api_route(CONSOLE_PATH + "/people", methods=["GET", "HEAD"])
async def people_page(request: Request) -> Response:
    return _page("people", request)


@router.api_route(CONSOLE_PATH + "/kbs", methods=["GET", "HEAD"])
async def kbs_page(request: Request) -> Response:
    return _page("kbs", request)


@router.api_route(CONSOLE_PATH + "/kbs/{item_id}", methods=["GET", "HEAD"])
async def kb_page(item_id: str, request: Request) -> Response:
    return _page("kb", request)


@router.api_route(CONSOLE_PATH + "/endpoints", methods=["GET", "HEAD"])
async def endpoints_page(request: Request) -> Response:
    return _page("endpoints", request)


@router.api_route(CONSOLE_PATH + "/endpoints/{item_id}", methods=["GET", "HEAD"])
async def endpoint_page(item_id: str, request: Request) -> Response:
    return _page("endpoint", request)


@router.api_route(CONSOLE_PATH + "/services", methods=["GET", "HEAD"])
async def services_page(request: Request) -> Response:
    return _page("services", request)


@router.api_route(CONSOLE_PATH + "/services/{item_id}", methods=["GET", "HEAD"])
async def service_page(item_id: str, request: Request) -> Response:
    return _page("service", request)


@router.api_route(CONSOLE_PATH + "/quarantine", methods=["GET", "HEAD"])
async def quarantine_page(request: Request) -> Response:
    return _page("quarantine", request)


@router.api_route(CONSOLE_PATH + "/rules", methods=["GET", "HEAD"])
async def rules_page(request: Request) -> Response:
    return _page("rules", request)


@router.api_route(CONSOLE_PATH + "/groups", methods=["GET", "HEAD"])
async def groups_page(request: Request) -> Response:
    return _page("groups", request)


@router.api_route(CONSOLE_PATH + "/webhooks", methods=["GET", "HEAD"])
async def webhooks_page(request: Request) -> Response:
    return _page("webhooks", request)


@router.api_route(CONSOLE_PATH + "/signin", methods=["GET", "HEAD"])
async def signin_page(request: Request) -> Response:
    return _page("signin", request)


@router.api_route(CONSOLE_PATH + "/static/{name}", methods=["GET", "HEAD"])
async def asset(name: str, request: Request) -> Response:
    media_type = _MEDIA_TYPES.get(Path(name).suffix)
    if media_type is None or not _ASSET_NAME.fullmatch(name) or not (STATIC / name).is_file():
        raise NotFound("no such file of the console", code="not_found")
    return _served(name, media_type, request)


# ------------------------------------------------------------------------------------------------ the session


class SignIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    api_key: str = Field(min_length=1, max_length=512)


class SessionOut(BaseModel):
    """Who is signed in, what the key may do (as the REST API decides it), and the CSRF token for changes."""

    workspace_id: str
    workspace_name: str
    user_id: str
    user_name: str | None
    api_key_id: str
    role: str
    capabilities: list[str] | None = Field(description="None: every capability.")
    knowledge_base_ids: list[str] | None
    can_call_tools: bool = Field(description="Sees and resolves the calls made for its own user.")
    can_approve_calls: bool = Field(description="Sees and resolves every waiting call of the workspace.")
    csrf_token: str = Field(description="Send it as X-CSRF-Token with every change made with this session.")
    expires_at: int = Field(description="When the session ends (seconds since the epoch).")


def _names(container: Container, principal: Principal) -> tuple[str, str | None]:
    workspace = container.identity.get_workspace(principal.workspace_id).name
    try:
        user: str | None = container.users.find(principal.workspace_id, principal.user_id).name
    except NotFound:
        user = None
    return workspace, user


async def _session_out(request: Request, principal: Principal, csrf_token: str, expires_at: int) -> SessionOut:
    workspace_name, user_name = await to_thread.run_sync(_names, container_of(request), principal)
    capabilities = principal.scope.capabilities
    kbs = principal.scope.knowledge_base_ids
    return SessionOut(
        workspace_id=principal.workspace_id,
        workspace_name=workspace_name,
        user_id=principal.user_id,
        user_name=user_name,
        api_key_id=principal.api_key_id,
        role=principal.role,
        capabilities=None if capabilities is None else sorted(capabilities),
        knowledge_base_ids=None if kbs is None else sorted(kbs),
        can_call_tools=principal.scope.allows(AGENT_CAPABILITY),
        can_approve_calls=is_approver(principal),
        csrf_token=csrf_token,
        expires_at=expires_at,
    )


_NO_STORE: Final = {"Cache-Control": "no-store"}


@router.get(CONSOLE_PATH + "/session")
async def get_session(request: Request) -> Response:
    session = await session_of(request)
    principal = await principal_of_key(request, session.key)
    shown = await _session_out(request, principal, session.csrf_token, session.expires_at)
    return JSONResponse(shown.model_dump(), headers=_NO_STORE)


@router.post(CONSOLE_PATH + "/session")
async def sign_in(request: Request) -> Response:
    """Checks the key as every REST request does, then sets the session cookie. JSON only: a form of another site
    cannot sign a browser in with its own key."""
    if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
        return problem(415, "unsupported_media_type", 'send the API key as JSON: {"api_key": "sk_..."}')
    try:
        body = SignIn.model_validate_json(await request.body())
    except ValidationError:
        raise InvalidInput('the body must be {"api_key": "sk_..."}', code="invalid_sign_in") from None
    principal = await principal_of_key(request, body.api_key)
    container = container_of(request)
    sealed, session = await to_thread.run_sync(seal_session, container, body.api_key, principal.workspace_id)
    shown = await _session_out(request, principal, session.csrf_token, session.expires_at)
    response = JSONResponse(shown.model_dump(), headers=_NO_STORE)
    response.set_cookie(
        CONSOLE_COOKIE,
        sealed,
        max_age=SESSION_SECONDS,
        path="/",
        secure=request.url.scheme == "https",
        httponly=True,
        samesite="strict",
    )
    return response


@router.delete(CONSOLE_PATH + "/session")
async def sign_out(request: Request) -> Response:
    """Ends the session on the server (its cookie, copied or not, opens nothing from now on) and clears the cookie.
    Revoking the key ends every session of it too."""
    sealed = request.cookies.get(CONSOLE_COOKIE)
    if sealed:
        await to_thread.run_sync(end_session, container_of(request), sealed)
    response = Response(status_code=204, headers=_NO_STORE)
    response.delete_cookie(
        CONSOLE_COOKIE, path="/", secure=request.url.scheme == "https", httponly=True, samesite="strict"
    )
    return response
