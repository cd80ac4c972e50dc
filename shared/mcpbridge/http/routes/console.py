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
    GET    /console/workspaces              the platform's workspaces (its admins): create, rename, disable, delete
    GET    /console/signin                  the sign-in form (the provider's button where one is configured)
    GET    /console/oidc/start, /callback   sign-in through the OpenID Connect provider (console_oidc.py)
    GET    /console/static/{name}           the pages' scripts and style sheet
    GET    /console/session                 who is signed in: role, capabilities, CSRF token (401 when nobody)
    POST   /console/session                 sign in with an API key ({"api_key": "sk_..."}, JSON only)
    DELETE /console/session                 sign out (ends the session on the server, clears the cookie)

Every answer carries a strict Content-Security-Policy (the pages' own scripts and style sheet only, no inline code,
no framing), ``nosniff`` and no referrer. The pages are static files: one shell (``static/shell.html``, with the
header of ``static/header.html``) filled with each page's main section and script (the table ``PAGES``), put
together once per process; what they show comes from the REST API, called by the pages' scripts with the session
cookie (:mod:`mcpbridge.http.console.session`).
"""

from __future__ import annotations

import hashlib
import html
import re
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Final, Literal
from urllib.parse import quote

from anyio import to_thread
from fastapi import APIRouter, Request
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.responses import JSONResponse, RedirectResponse, Response

from mcpbridge.bootstrap import Container
from mcpbridge.domain.identity import AGENT_CAPABILITY, Principal, is_approver
from mcpbridge.errors import Forbidden, InvalidInput, MCPBridgeError, NotFound
from mcpbridge.http.auth import CONSOLE_COOKIE, container_of, principal_of_key
from mcpbridge.http.console.session import (
    clear_session_cookie,
    end_session,
    principal_of_session,
    seal_session,
    session_of,
    set_session_cookie,
)
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


@dataclass(frozen=True)
class _Page:
    """A page of the console: its route, its main section (``static/<name>.html``), its script (``<name>.js``), its
    title, and the link of the nav it belongs to (``None``: a page without the header, the sign-in form)."""

    path: str
    name: str
    title: str
    nav: str | None


_NAV: Final = (
    (CONSOLE_PATH, "Approvals"),
    (CONSOLE_PATH + "/calls", "Calls"),
    (CONSOLE_PATH + "/kbs", "Knowledge"),
    (CONSOLE_PATH + "/endpoints", "Endpoints"),
    (CONSOLE_PATH + "/services", "Services"),
    (CONSOLE_PATH + "/quarantine", "Quarantine"),
    (CONSOLE_PATH + "/rules", "Rules"),
    (CONSOLE_PATH + "/groups", "Groups"),
    (CONSOLE_PATH + "/webhooks", "Webhooks"),
    (CONSOLE_PATH + "/people", "People"),
    (CONSOLE_PATH + "/workspaces", "Workspaces"),
)
"""The header's links, in order."""
_PLATFORM_ONLY: Final = frozenset({CONSOLE_PATH + "/workspaces"})
"""Links shown only to a platform admin (``layout.js`` reveals them; the REST API refuses anyone else anyway)."""
PAGES: Final = (
    _Page(CONSOLE_PATH, "inbox", "Approvals", CONSOLE_PATH),
    _Page(CONSOLE_PATH + "/approvals/{pending_id}", "call", "Waiting call", CONSOLE_PATH),
    _Page(CONSOLE_PATH + "/calls", "calls", "Calls", CONSOLE_PATH + "/calls"),
    _Page(CONSOLE_PATH + "/kbs", "kbs", "Knowledge bases", CONSOLE_PATH + "/kbs"),
    _Page(CONSOLE_PATH + "/kbs/{item_id}", "kb", "Knowledge base", CONSOLE_PATH + "/kbs"),
    _Page(CONSOLE_PATH + "/endpoints", "endpoints", "Endpoints", CONSOLE_PATH + "/endpoints"),
    _Page(CONSOLE_PATH + "/endpoints/{item_id}", "endpoint", "Endpoint", CONSOLE_PATH + "/endpoints"),
    _Page(CONSOLE_PATH + "/services", "services", "Services", CONSOLE_PATH + "/services"),
    _Page(CONSOLE_PATH + "/services/{item_id}", "service", "Service", CONSOLE_PATH + "/services"),
    _Page(CONSOLE_PATH + "/quarantine", "quarantine", "Quarantine", CONSOLE_PATH + "/quarantine"),
    _Page(CONSOLE_PATH + "/rules", "rules", "Rules", CONSOLE_PATH + "/rules"),
    _Page(CONSOLE_PATH + "/groups", "groups", "Groups", CONSOLE_PATH + "/groups"),
    _Page(CONSOLE_PATH + "/webhooks", "webhooks", "Webhooks", CONSOLE_PATH + "/webhooks"),
    _Page(CONSOLE_PATH + "/people", "people", "People", CONSOLE_PATH + "/people"),
    _Page(CONSOLE_PATH + "/workspaces", "workspaces", "Workspaces", CONSOLE_PATH + "/workspaces"),
    _Page(CONSOLE_PATH + "/signin", "signin", "Sign in", None),
)
"""Every page of the console: each is ``static/shell.html`` filled with the header (``static/header.html``, its
nav's link marked current) and the page's own main section and script."""


class ConsoleRoute(APIRoute):
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


router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)


@cache
def _file(name: str) -> tuple[bytes, str]:
    """A file of ``static/`` and its ETag, read once."""
    data = (STATIC / name).read_bytes()
    return data, '"' + hashlib.sha256(data).hexdigest()[:32] + '"'


def _served(name: str, media_type: str, request: Request) -> Response:
    return _answer(*_file(name), media_type, request)


def _answer(data: bytes, etag: str, media_type: str, request: Request) -> Response:
    headers = {"ETag": etag, "Cache-Control": "no-cache"}
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers=headers)
    return Response(data, media_type=media_type, headers=headers)


@cache
def _assembled(page: _Page) -> tuple[bytes, str]:
    """A page as served (the shell, the header, its main section) and its ETag, put together once."""
    header = ""
    if page.nav is not None:
        current, platform = ' aria-current="page"', " hidden data-platform-admin"
        links = "".join(
            f"<li{platform if href in _PLATFORM_ONLY else ''}>"
            f'<a href="{href}"{current if href == page.nav else ""}>{label}</a></li>\n'
            for href, label in _NAV
        )
        header = _file("header.html")[0].decode().replace("{nav}", links)
    html = (
        _file("shell.html")[0]
        .decode()
        .replace("{title}", page.title)
        .replace("{script}", page.name + ".js")
        .replace("{header}", header)
        .replace("{main}", _file(page.name + ".html")[0].decode())  # last: a main section may hold braces
    )
    data = html.encode()
    return data, '"' + hashlib.sha256(data).hexdigest()[:32] + '"'


_PROVIDER_SLOT: Final = b"<!--oidc-->"


@cache
def _with_provider(page: _Page, provider_name: str) -> tuple[bytes, str]:
    """The sign-in page with the provider's button (``static/signin-oidc.html``), or without it (no name)."""
    data = _assembled(page)[0]
    section = _file("signin-oidc.html")[0].replace(b"{provider}", html.escape(provider_name).encode())
    data = data.replace(_PROVIDER_SLOT, section if provider_name else b"")
    return data, '"' + hashlib.sha256(data).hexdigest()[:32] + '"'


def _page_route(page: _Page) -> Callable[[Request], Coroutine[Any, Any, Response]]:
    async def serve_page(request: Request) -> Response:
        """A page of the console; without a session cookie, the sign-in page first (then back here)."""
        if page.nav is not None and not request.cookies.get(CONSOLE_COOKIE):
            back = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(f"{CONSOLE_PATH}/signin?next={quote(back, safe='/')}", status_code=303)
        if page.name == "signin":
            settings = container_of(request).settings
            name = (settings.oidc_provider_name or "your organisation's sign-in") if settings.oidc_issuer else ""
            return _answer(*_with_provider(page, name), "text/html; charset=utf-8", request)
        return _answer(*_assembled(page), "text/html; charset=utf-8", request)

    return serve_page


@router.api_route("/", methods=["GET", "HEAD"])
async def root() -> Response:
    return RedirectResponse(CONSOLE_PATH, status_code=302)


for _each in PAGES:
    router.add_api_route(_each.path, _page_route(_each), methods=["GET", "HEAD"], name=f"console_{_each.name}")


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
    api_key_id: str = Field(description="Empty for a sign-in through the OpenID Connect provider (no key).")
    signed_in_with: Literal["api_key", "oidc"] = Field(
        description="An API key, or the OpenID Connect provider: then the user's own access as a viewer."
    )
    role: str
    capabilities: list[str] | None = Field(description="None: every capability.")
    knowledge_base_ids: list[str] | None
    can_call_tools: bool = Field(description="Sees and resolves the calls made for its own user.")
    can_approve_calls: bool = Field(description="Sees and resolves every waiting call of the workspace.")
    is_platform_admin: bool = Field(description="Manages the platform's workspaces (/api/v1/workspaces).")
    csrf_token: str = Field(description="Send it as X-CSRF-Token with every change made with this session.")
    expires_at: int = Field(description="When the session ends (seconds since the epoch).")


def _names(container: Container, principal: Principal) -> tuple[str, str | None, bool]:
    """The workspace's and the user's names, and whether the key is a platform admin's (as the REST API decides)."""
    workspace = container.identity.get_workspace(principal.workspace_id).name
    try:
        user: str | None = container.users.find(principal.workspace_id, principal.user_id).name
    except NotFound:
        user = None
    try:
        container.workspaces.require_operator(principal)
        platform_admin = True
    except Forbidden:
        platform_admin = False
    return workspace, user, platform_admin


async def _session_out(request: Request, principal: Principal, csrf_token: str, expires_at: int) -> SessionOut:
    workspace_name, user_name, platform_admin = await to_thread.run_sync(_names, container_of(request), principal)
    capabilities = principal.scope.capabilities
    kbs = principal.scope.knowledge_base_ids
    return SessionOut(
        workspace_id=principal.workspace_id,
        workspace_name=workspace_name,
        user_id=principal.user_id,
        user_name=user_name,
        api_key_id=principal.api_key_id,
        signed_in_with="api_key" if principal.api_key_id else "oidc",
        role=principal.role,
        capabilities=None if capabilities is None else sorted(capabilities),
        knowledge_base_ids=None if kbs is None else sorted(kbs),
        can_call_tools=principal.scope.allows(AGENT_CAPABILITY),
        can_approve_calls=is_approver(principal),
        is_platform_admin=platform_admin,
        csrf_token=csrf_token,
        expires_at=expires_at,
    )


_NO_STORE: Final = {"Cache-Control": "no-store"}


@router.get(CONSOLE_PATH + "/session")
async def get_session(request: Request) -> Response:
    session = await session_of(request)
    principal = await principal_of_session(request, session)
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
    set_session_cookie(response, request, sealed)
    return response


@router.delete(CONSOLE_PATH + "/session")
async def sign_out(request: Request) -> Response:
    """Ends the session on the server (its cookie, copied or not, opens nothing from now on) and clears the cookie.
    Revoking the key ends every session of it too."""
    sealed = request.cookies.get(CONSOLE_COOKIE)
    if sealed:
        await to_thread.run_sync(end_session, container_of(request), sealed)
    response = Response(status_code=204, headers=_NO_STORE)
    clear_session_cookie(response, request)
    return response
