"""The console's session: the API key a person signed in with, sealed in a cookie with an expiry and a CSRF token.

Signing in (``POST /console/session``) checks the key exactly as a REST request does, then sets the cookie
``mcpbridge_console`` (HttpOnly, SameSite=Strict, Secure over https, Path=/) to the JSON ``{"key", "exp", "csrf"}``
sealed with the container's SecretBox (context ``console_session``): the browser holds the key only in a form no
page can read nor anyone but this deployment open. The server keeps one small record per session, under the
workspace (``CONSOLE#`` + the SHA-256 of the session's random id, expiring with it): signing out deletes it, so the
cookie, even copied elsewhere before, opens nothing from the next request on. A REST request that carries
no key but the cookie acts with the key inside, checked as any key is on every request (revoking the key ends its
sessions at once); a change (POST, PUT, PATCH, DELETE) must also carry ``X-CSRF-Token`` equal to the session's random
token, which only the console's own pages can read (``GET /console/session``). Another site can neither read it nor,
the cookie being SameSite=Strict, make a browser send the cookie with its requests.

A person may instead sign in through the OpenID Connect provider the endpoints' sign-in uses
(:mod:`mcpbridge.http.routes.console_oidc`): the cookie then carries no key but the user's id (``"uid"``, the key
empty), and so does the session's record. Such a session acts as that user with the user's own ``access`` scope, the
authority an OAuth sign-in of the user gets at an endpoint, as a viewer: no key is minted, and admin work needs an
admin API key. Every request reads the user again (:func:`mcpbridge.identity.sign_in.signed_in_principal`): a
user removed or disabled since, or a workspace no longer active, ends the session at once (401).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass
from typing import Any, Final

from anyio import to_thread
from starlette.requests import Request
from starlette.responses import Response

from mcpbridge.bootstrap import Container
from mcpbridge.domain.identity import Principal
from mcpbridge.domain.items import Condition, Key
from mcpbridge.domain.secrets import SecretContext, SecretUnreadable
from mcpbridge.errors import Forbidden, Unauthenticated
from mcpbridge.http.auth import CONSOLE_COOKIE, container_of, principal_of_key

SESSION_SECONDS: Final = 8 * 3600
"""How long a sign-in lasts (a working day); signing in again starts a new session."""
CSRF_HEADER: Final = "x-csrf-token"
SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
_CONTEXT: Final = SecretContext("console", "console_session", "v1")


@dataclass(frozen=True)
class Session:
    key: str
    expires_at: int
    csrf_token: str
    workspace_id: str
    session_id: str
    user_id: str = ""
    """Set for a sign-in through the OpenID Connect provider (the key is then empty)."""


def _record(session: Session) -> Key:
    """The session's record on the server: its presence is what keeps the session open."""
    return Key(f"WS#{session.workspace_id}", "CONSOLE#" + hashlib.sha256(session.session_id.encode()).hexdigest())


def seal_session(container: Container, key: str, workspace_id: str, *, user_id: str = "") -> tuple[str, Session]:
    """A new session for ``key`` (already checked, of ``workspace_id``), or with no key for the user ``user_id``
    signed in through the provider: its record stored, and the cookie value that carries it. A write: call it off
    the event loop."""
    now = int(container.clock.now())
    session = Session(
        key, now + SESSION_SECONDS, secrets.token_urlsafe(32), workspace_id, secrets.token_urlsafe(16), user_id
    )
    record = {**_record(session).as_dict(), "expires_at": session.expires_at}
    if user_id:
        record["user_id"] = user_id
    container.store.put(record, condition=Condition.absent("session_new"))
    fields = {
        "key": session.key,
        "exp": session.expires_at,
        "csrf": session.csrf_token,
        "ws": session.workspace_id,
        "sid": session.session_id,
    }
    if user_id:
        fields["uid"] = user_id
    return container.secrets.seal(json.dumps(fields), _CONTEXT), session


def _unsealed(container: Container, sealed: str) -> Session:
    try:
        fields = json.loads(container.secrets.open(sealed, _CONTEXT))
        return Session(
            str(fields["key"]),
            int(fields["exp"]),
            str(fields["csrf"]),
            str(fields["ws"]),
            str(fields["sid"]),
            str(fields.get("uid") or ""),
        )
    except (SecretUnreadable, ValueError, TypeError, KeyError):
        raise Unauthenticated(
            "the console session is not valid: sign in again", code="invalid_console_session"
        ) from None


def open_session(container: Container, sealed: str) -> Session:
    """The session a cookie value carries; 401 when it cannot be opened, has expired or was signed out."""
    session = _unsealed(container, sealed)
    if session.expires_at <= container.clock.now():
        raise Unauthenticated("the console session has expired: sign in again", code="console_session_expired")
    record = container.store.get(_record(session))
    if record is None or str(record.get("user_id") or "") != session.user_id:
        raise Unauthenticated("the console session was signed out: sign in again", code="console_session_ended")
    return session


def end_session(container: Container, sealed: str) -> None:
    """Signs a session out: its record goes, and its cookie opens nothing any more (wherever a copy of it is). A
    cookie that cannot be opened has no session to end. A write: call it off the event loop."""
    try:
        session = _unsealed(container, sealed)
    except Unauthenticated:
        return
    container.store.delete(_record(session))


async def session_of(request: Request) -> Session:
    """The request's console session (401 without a valid one). Opening it may call the key service: off the
    event loop unless the keys are local."""
    sealed = request.cookies.get(CONSOLE_COOKIE)
    if not sealed:
        raise Unauthenticated("sign in to the console first", code="console_session_missing")
    container = container_of(request)
    if container.settings.backend == "local":
        return open_session(container, sealed)
    return await to_thread.run_sync(open_session, container, sealed)


async def checked_session(request: Request) -> Session:
    """The request's console session, once a change's CSRF token is checked (403 naming what is wrong, before
    anything runs)."""
    session = await session_of(request)
    if request.method not in SAFE_METHODS:
        presented = request.headers.get(CSRF_HEADER)
        if not presented:
            raise Forbidden(
                "a change made with the console's session needs its X-CSRF-Token header", code="csrf_token_missing"
            )
        if not hmac.compare_digest(presented.encode(), session.csrf_token.encode()):
            raise Forbidden("the X-CSRF-Token header is not this console session's", code="csrf_token_invalid")
    return session


async def principal_of_session(request: Request, session: Session) -> Principal:
    """Who a console session acts as: its key's principal, checked as any key is, or the signed-in user's (read
    again now: 401 ``console_session_ended`` once the user is removed or disabled)."""
    if not session.user_id:
        return await principal_of_key(request, session.key)
    from mcpbridge.identity.sign_in import signed_in_principal

    container = container_of(request)
    if container.settings.backend == "local":
        return signed_in_principal(container.store, session.workspace_id, session.user_id)
    return await to_thread.run_sync(signed_in_principal, container.store, session.workspace_id, session.user_id)


def set_session_cookie(response: Response, request: Request, sealed: str) -> None:
    """Give the browser a session's sealed cookie (HttpOnly, SameSite=Strict, Secure over https, for the whole site,
    for as long as a session lasts): every sign-in sets it with these attributes, and sign-out clears it with them."""
    response.set_cookie(CONSOLE_COOKIE, sealed, max_age=SESSION_SECONDS, **_cookie_attributes(request))


def clear_session_cookie(response: Response, request: Request) -> None:
    response.delete_cookie(CONSOLE_COOKIE, **_cookie_attributes(request))


def _cookie_attributes(request: Request) -> dict[str, Any]:
    return {"path": "/", "secure": request.url.scheme == "https", "httponly": True, "samesite": "strict"}
