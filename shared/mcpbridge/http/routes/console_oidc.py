"""Signing in to the console through the OpenID Connect provider the endpoints' sign-in already uses.

    GET /console/oidc/start      to the provider (query: ``workspace``, an id or name, optional; ``next``, a page)
    GET /console/oidc/callback   back from the provider: the console session set, then the sign-in page goes on

The sign-in page shows the provider's button only where a provider is configured (``MCPBRIDGE_OIDC_ISSUER``);
elsewhere both routes answer 404 ``oidc_not_configured``. The provider must allow ``<base>/console/oidc/callback``
as a redirect URI beside the endpoints' ``<base>/oauth/oidc/callback``.

- **Workspace.** The platform's own workspace unless ``workspace`` names another. The person is found among its
  users exactly as an endpoint's sign-in finds them (:class:`mcpbridge.identity.sign_in.SignInIdentities`: the
  identity linked before, else the verified e-mail address); the console creates no user: someone the workspace
  does not know is sent back to the sign-in page with a message, and nothing is written.
- **Authority.** The session acts as that user with the user's own ``access`` scope, as a viewer (the authority an
  OAuth sign-in of the user has at an endpoint, :func:`mcpbridge.identity.sign_in.signed_in_principal`); no
  key is minted or shown. Admin work still needs an admin API key. The calls waiting for the user are theirs to
  decide, as the REST API allows that principal.
- **Ending.** The session's record holds the user's id; every request reads the user again, and a user removed or
  disabled since ends the session (401). Signing out deletes the record, as for a key's session.
- **State.** State, nonce and PKCE as the endpoints' flow (:mod:`mcpbridge.authserver.oidc`), the state made for the
  console only (an endpoint's state is refused here, and a console's there) and bound to the browser that started
  it (a random cookie, ``Path=/console/oidc``, whose digest the state holds), so nobody can hand a person a
  callback link that signs them in as someone else.

Failures send the browser back to ``/console/signin?oidc_error=<code>``, where the page explains the code; no state,
code or token is ever in an answer or a log line (the access log's query strings of these paths are blanked).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from typing import TYPE_CHECKING, Final
from urllib.parse import urlencode

from anyio import to_thread
from fastapi import APIRouter, Request
from starlette.responses import RedirectResponse, Response

from mcpbridge.bootstrap import Container
from mcpbridge.errors import MCPBridgeError, NotFound
from mcpbridge.http.auth import container_of, service_of
from mcpbridge.http.console.session import seal_session, set_session_cookie
from mcpbridge.http.routes.console import CONSOLE_PATH, ConsoleRoute
from mcpbridge.identity.sign_in import signed_in_principal

if TYPE_CHECKING:
    from mcpbridge.authserver.oidc import OidcSignIn

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)

BROWSER_COOKIE: Final = "mcpbridge_console_oidc"
"""The random value that binds a console sign-in in progress to the browser that started it."""
_COOKIE_PATH: Final = CONSOLE_PATH + "/oidc"
_NEXT: Final = re.compile(r"/console(?:[/?][A-Za-z0-9_\-/.%?=&]*)?")
_NO_STORE: Final = {"Cache-Control": "no-store"}


def _not_configured() -> NotFound:
    return NotFound("this server has no OpenID Connect provider to sign in with", code="oidc_not_configured")


def _base_url(request: Request, container: Container) -> str | None:
    # Imported here: the authorization server's module (its access-log redaction of these paths too) is loaded by
    # a sign-in, not by the console's pages.
    from mcpbridge.http.routes.oauth_server import base_url

    return base_url(request, container.settings)


async def _provider(request: Request) -> OidcSignIn:
    if not container_of(request).settings.oidc_issuer:
        raise _not_configured()
    oidc: OidcSignIn | None = (await service_of(request, "authorization")).oidc
    if oidc is None:
        raise _not_configured()
    return oidc


def _next_path(value: str | None) -> str:
    """A page of the console to go on to; anything else (another site, a path climbing out) is the inbox."""
    if value and _NEXT.fullmatch(value) and not value.startswith("//") and ".." not in value:
        return value
    return CONSOLE_PATH


def _back_to_sign_in(request: Request, **query: str) -> Response:
    response = RedirectResponse(f"{CONSOLE_PATH}/signin?{urlencode(query)}", status_code=303, headers=_NO_STORE)
    response.delete_cookie(BROWSER_COOKIE, path=_COOKIE_PATH, secure=request.url.scheme == "https", httponly=True)
    return response


def _workspace_id(container: Container, wanted: str) -> str:
    """The workspace a sign-in is for: the one named, else the platform's own. 404, 400 or 409 by code."""
    if not wanted.strip():
        installed = container.identity.installed_workspace_id()
        if installed is None:
            raise NotFound("no such workspace", code="workspace_not_found")
        return installed
    workspace = container.workspaces.find_for_sign_in(wanted)
    if workspace.status != "active":
        raise NotFound("no such workspace", code="workspace_inactive")
    return workspace.id


@router.get(_COOKIE_PATH + "/start")
async def start(request: Request) -> Response:
    """To the provider, for a sign-in to the workspace named (or the platform's own)."""
    oidc = await _provider(request)
    container = container_of(request)
    base = _base_url(request, container)
    next_path = _next_path(request.query_params.get("next"))
    if base is None:
        return _back_to_sign_in(request, oidc_error="host_not_served", next=next_path)
    wanted = request.query_params.get("workspace") or ""
    if len(wanted) > 200:
        return _back_to_sign_in(request, oidc_error="workspace_not_found", next=next_path)
    try:
        workspace_id = await to_thread.run_sync(_workspace_id, container, wanted)
    except MCPBridgeError as error:
        return _back_to_sign_in(request, oidc_error=error.code, next=next_path)
    browser = secrets.token_urlsafe(32)
    try:
        location = await oidc.start_console(
            workspace_id=workspace_id,
            browser_sha256=hashlib.sha256(browser.encode()).hexdigest(),
            next_path=next_path,
            base_url=base,
        )
    except MCPBridgeError:
        return _back_to_sign_in(request, oidc_error="oidc_unavailable", next=next_path)
    response = RedirectResponse(location, status_code=303, headers=_NO_STORE)
    response.set_cookie(
        BROWSER_COOKIE,
        browser,
        max_age=600,
        path=_COOKIE_PATH,
        secure=request.url.scheme == "https",
        httponly=True,
        samesite="lax",  # the provider's redirect back is a top-level navigation from its site
    )
    return response


@router.get(_COOKIE_PATH + "/callback")
async def callback(request: Request) -> Response:
    """Back from the provider: the user found, the session cookie set, and the sign-in page goes on to ``next``
    (this answer is a redirect from the provider's site, which a SameSite=Strict cookie does not follow: the
    sign-in page, opened here, makes the first request that carries it)."""
    oidc = await _provider(request)
    container = container_of(request)
    params = request.query_params
    base = _base_url(request, container)
    state = params.get("state")
    if base is None or not state:
        return _back_to_sign_in(request, oidc_error="oidc_state_invalid")
    try:
        returned = await oidc.finish(
            state=state,
            code=params.get("code"),
            error=params.get("error"),
            iss=params.get("iss"),
            base_url=base,
            purpose="console",
        )
    except MCPBridgeError as error:
        return _back_to_sign_in(request, oidc_error=error.code)
    browser = request.cookies.get(BROWSER_COOKIE) or ""
    presented = hashlib.sha256(browser.encode()).hexdigest()
    if not browser or not hmac.compare_digest(presented.encode(), returned.browser_sha256.encode()):
        return _back_to_sign_in(request, oidc_error="oidc_browser_mismatch")
    identity, settings = returned.identity, oidc.settings
    identities = (await service_of(request, "authorization")).identities

    def signed_in() -> tuple[str, int]:
        user = identities.user_for(
            returned.workspace_id,
            issuer=identity.issuer,
            subject=identity.subject,
            email=identity.email,
            name=identity.name,
            match=settings.match,
            provision=False,  # the console finds people; it creates none
            allowed_domains=settings.allowed_domains,
        )
        signed_in_principal(container.store, returned.workspace_id, user.id)  # its workspace still active
        sealed, session = seal_session(container, "", returned.workspace_id, user_id=user.id)
        return sealed, session.expires_at

    try:
        sealed, _ = await to_thread.run_sync(signed_in)
    except MCPBridgeError as error:
        return _back_to_sign_in(request, oidc_error=error.code)
    response = _back_to_sign_in(request, next=_next_path(returned.next_path))
    set_session_cookie(response, request, sealed)
    return response
