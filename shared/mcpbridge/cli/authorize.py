"""``mcpbridge services authorize``: the OAuth authorization of an external MCP service for a user, headlessly.

It drives mcpbridge's own OAuth flow (``container.oauth``) for an operator: it starts an authorization for a user and
prints the URL to open, then finishes it with the URL the browser was sent back to (pasted on stdin, or given later
with --redirected-url: the state lives in the store for 10 minutes), or with the browser's request itself (--listen:
one route on 127.0.0.1 at the redirect URI's port). The redirect URI is mcpbridge's callback under
MCPBRIDGE_PUBLIC_BASE_URL, else under http://127.0.0.1:<--port, 8080>, where ``mcpbridge serve`` listens by default:
a dynamic client registration serves one redirect URI, so the CLI and the server share it. The default user is the
one created with the workspace (its first admin). Nothing printed carries a code, a token or a secret; the state
appears only inside the authorization URL, which is meant to be opened.
"""

# Over 400 lines: the three ways to finish an authorization (paste, --redirected-url, --listen) and their checks.

from __future__ import annotations

import argparse
import contextlib
import functools
import hmac
import json
import queue
import shlex
import socket
import sys
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import anyio
from anyio import to_thread

from mcpbridge.bootstrap import Container
from mcpbridge.cli.context import acting_workspace, admin_user, close, known_user, settings_of
from mcpbridge.cli.parser import DEFAULT_CALLBACK_PORT
from mcpbridge.domain.identity import Principal, acting_for
from mcpbridge.errors import Conflict, InvalidInput, MCPBridgeError, NotFound
from mcpbridge.settings import Settings

if TYPE_CHECKING:
    from mcpbridge.domain.external_services import ExternalService
    from mcpbridge.oauth.authorization import AuthorizationStart, OAuthStatus

MAX_AUTHORIZE_TIMEOUT = 3600.0
MAX_REDIRECTED_URL_CHARS = 16_384
_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost"})
_RESULT_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>mcpbridge authorization</title></head>
<body><h1>{title}</h1><p>{detail}</p></body></html>
"""


def _find_service(container: Container, principal: Principal, reference: str) -> ExternalService:
    """A service of the workspace (or a builtin one) by id, else by name (case-insensitive; the workspace's own
    first)."""
    from mcpbridge.domain.names import fold

    services = container.services.list(principal)
    for service in services:
        if service.id == reference:
            return service
    named = sorted((s for s in services if fold(s.name) == fold(reference)), key=lambda s: s.is_builtin)
    if named:
        return named[0]
    raise NotFound(
        f"no MCP service with the id or name {reference[:80]!r} in workspace {principal.workspace_id} "
        "(`mcpbridge services list` shows them)",
        code="service_not_found",
    )


def _redirect_base(settings: Settings, port: int | None) -> str:
    if settings.public_base_url:
        if port is not None:
            raise InvalidInput(
                "--port applies only without MCPBRIDGE_PUBLIC_BASE_URL (the redirect URI is under that URL)",
                code="invalid_port",
            )
        return settings.public_base_url
    return f"http://127.0.0.1:{port or DEFAULT_CALLBACK_PORT}"


def _bind_listener(redirect_uri: str) -> socket.socket:
    """A socket bound on 127.0.0.1 at the redirect URI's port (bound before the authorization starts)."""
    parts = urlsplit(redirect_uri)
    if parts.scheme != "http" or parts.hostname not in _LOOPBACK_HOSTS:
        raise InvalidInput(
            "--listen needs the redirect URI on this machine (http://127.0.0.1:PORT), but MCPBRIDGE_PUBLIC_BASE_URL "
            "points elsewhere: leave out --listen and paste the URL the browser was sent to",
            code="listen_unavailable",
        )
    port = parts.port or 80
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind(("127.0.0.1", port))
    except OSError as exc:
        listener.close()
        raise InvalidInput(
            f"cannot listen on 127.0.0.1:{port} ({exc.strerror}); if `mcpbridge serve` runs there, it completes the "
            "authorization itself: leave out --listen, or choose another --port",
            code="listen_unavailable",
        ) from None
    return listener


@dataclass(frozen=True)
class Outcome:
    """How an authorization ended: for whom, and what to tell the operator (never a code or a token)."""

    authorized: bool
    message: str
    user_id: str | None = None


@dataclass(frozen=True)
class _Redirected:
    """The parameters of the URL the authorization server sent the browser to (never printed)."""

    url: str = field(repr=False)
    state: str | None = field(repr=False)
    code: str | None = field(repr=False)
    iss: str | None
    error: str | None


def _parse_redirected(url: str) -> _Redirected:
    text = url.strip()
    if not text or len(text) > MAX_REDIRECTED_URL_CHARS:
        raise InvalidInput("the redirected URL is empty or too long", code="invalid_redirected_url")
    try:
        query = parse_qs(urlsplit(text).query, keep_blank_values=True, max_num_fields=20)
    except ValueError:
        raise InvalidInput("the redirected URL cannot be parsed", code="invalid_redirected_url") from None
    if any(len(values) > 1 for values in query.values()):
        raise InvalidInput("the redirected URL repeats a parameter", code="invalid_redirected_url")
    values = {name: found[0] for name, found in query.items()}
    return _Redirected(text, values.get("state"), values.get("code"), values.get("iss"), values.get("error"))


def _same_endpoint(url: str, redirect_uri: str) -> bool:
    from mcpbridge.oauth.redirects import origin_of

    return (origin_of(url), urlsplit(url).path) == (origin_of(redirect_uri), urlsplit(redirect_uri).path)


async def _finish(
    container: Container,
    workspace_id: str,
    service: ExternalService,
    redirected: _Redirected,
    *,
    user_id: str | None = None,
    attempt_id: str | None = None,
) -> Outcome:
    """Complete the authorization the redirected URL answers.

    The state is looked at (not taken) first, so a URL of another service, user or attempt, or one that is not at
    the attempt's redirect URI, is refused without using up anyone's authorization."""
    from mcpbridge.oauth.attempts import state_key

    if not redirected.state or not (redirected.code or redirected.error):
        raise InvalidInput(
            "this is not the URL the browser was sent back to (it has no code and state): copy the whole address "
            "shown by the browser after approving",
            code="invalid_redirected_url",
        )
    pending = await to_thread.run_sync(container.store.get, state_key(redirected.state))
    if pending is None and attempt_id is not None and user_id is not None:
        # A server at the redirect URI (``mcpbridge serve``) may have taken the browser's answer already.
        status = await container.oauth.status(acting_for(workspace_id, user_id), service.id, attempt_id)
        if status.attempt is not None and status.attempt.status == "completed":
            message = _authorized(service, user_id, status) + " (the callback at the redirect URI completed it)"
            return Outcome(True, message, user_id)
    if pending is None:
        raise InvalidInput(
            "unknown, used or expired authorization state: the URL was altered, already used, or is older than "
            "10 minutes",
            code="oauth_state_invalid",
        )
    if pending.get("service_id") != service.id or pending.get("workspace_id") != workspace_id:
        raise InvalidInput(
            f"this URL answers an authorization of another MCP service, not {service.name}; nothing was used",
            code="oauth_state_mismatch",
        )
    if (user_id is not None and pending.get("principal_id") != user_id) or (
        attempt_id is not None and pending.get("attempt_id") != attempt_id
    ):
        raise InvalidInput(
            "this URL answers another authorization attempt (another user or an earlier run); nothing was used",
            code="oauth_state_mismatch",
        )
    if not _same_endpoint(redirected.url, str(pending.get("redirect_uri", ""))):
        raise InvalidInput(
            "this URL is not at the authorization's redirect URI (mcpbridge's callback); nothing was used",
            code="invalid_redirected_url",
        )
    outcome = await container.oauth.complete_callback(
        redirected.state, redirected.code, redirected.iss, redirected.error
    )
    if outcome.error is not None:
        return Outcome(False, f"the authorization of {service.name} failed: {outcome.error}")
    owner = str(pending["principal_id"])
    status = await container.oauth.status(acting_for(workspace_id, owner), service.id, str(pending["attempt_id"]))
    return Outcome(True, _authorized(service, owner, status), owner)


def _authorized(service: ExternalService, user_id: str, status: OAuthStatus) -> str:
    from mcpbridge.domain.identity import timestamp

    facts: list[str] = [status.status]
    if status.expires_at is not None:
        facts.append(f"the access token expires at {timestamp(status.expires_at)}")
    facts.append("refreshable" if status.refreshable else "not refreshable")
    return f"Authorized {service.name} ({service.id}) for user {user_id}: {', '.join(facts)}."


def _report(outcome: Outcome) -> str:
    """The outcome's message when a token is stored; a failure is raised (exit status 1, the reason on stderr)."""
    if not outcome.authorized:
        raise Conflict(outcome.message, code="oauth_authorization_failed")
    return outcome.message


def _read_line(timeout: float) -> str | None:
    """A line of stdin within ``timeout`` seconds: "" at the end of input, None when none came in time."""
    lines: queue.Queue[str] = queue.Queue(maxsize=1)
    # A daemon thread: a read still blocked when the command gives up must not keep the process alive.
    threading.Thread(target=lambda: lines.put(sys.stdin.readline()), daemon=True).start()
    try:
        return lines.get(timeout=timeout).strip()
    except queue.Empty:
        return None


class _CallbackApp:
    """The one route a listening ``services authorize`` serves: the browser's answer to this command's
    authorization (any other request is refused and the wait goes on)."""

    def __init__(
        self,
        container: Container,
        principal: Principal,
        service: ExternalService,
        redirect_uri: str,
        started: AuthorizationStart,
    ) -> None:
        self._container = container
        self._principal = principal
        self._service = service
        self._redirect_uri = redirect_uri
        self._path = urlsplit(redirect_uri).path
        self._started = started
        self._expected_state = parse_qs(urlsplit(started.authorization_url).query).get("state", [""])[0]
        self.done = anyio.Event()
        self.result: list[Outcome] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        from starlette.requests import Request

        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        if request.method != "GET" or request.url.path != self._path or self.done.is_set():
            await _page(404, "Not found", "Nothing to see here.")(scope, receive, send)
            return
        query = scope.get("query_string", b"").decode("latin-1")
        try:
            redirected = _parse_redirected(f"{self._redirect_uri}?{query}")
        except MCPBridgeError as exc:
            await _page(400, "Authorization failed", exc.message)(scope, receive, send)
            return
        if not hmac.compare_digest((redirected.state or "").encode(), self._expected_state.encode()):
            # Not the answer to this command's authorization (a stray or forged request): keep waiting for it.
            await _page(400, "Authorization failed", "This is not the authorization this command started.")(
                scope, receive, send
            )
            return
        outcome = await self._finish(redirected)
        authorized, message = outcome.authorized, outcome.message
        title = "Authorization complete" if authorized else "Authorization failed"
        detail = "You can close this window." if authorized else f"{message}. Close this window and retry."
        await _page(200 if authorized else 400, title, detail)(scope, receive, send)
        self.result.append(outcome)
        self.done.set()

    async def _finish(self, redirected: _Redirected) -> Outcome:
        try:
            # The browser's request must not cancel a half-done exchange (the state is single use).
            with anyio.CancelScope(shield=True):
                outcome = await _finish(
                    self._container,
                    self._principal.workspace_id,
                    self._service,
                    redirected,
                    user_id=self._principal.user_id,
                    attempt_id=self._started.attempt_id,
                )
        except MCPBridgeError as exc:
            return Outcome(False, exc.message)
        return outcome


def _page(status: int, title: str, detail: str) -> Any:
    import html

    from starlette.responses import HTMLResponse

    body = _RESULT_PAGE.format(title=html.escape(title), detail=html.escape(detail))
    return HTMLResponse(
        body, status_code=status, headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}
    )


async def _listen(
    container: Container,
    principal: Principal,
    service: ExternalService,
    listener: socket.socket,
    redirect_uri: str,
    started: AuthorizationStart,
    timeout: float,
) -> Outcome | None:
    """Serve the callback route on ``listener`` until the browser brings this attempt's answer (None on timeout)."""
    import uvicorn

    app = _CallbackApp(container, principal, service, redirect_uri, started)
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="off", server_header=False, timeout_graceful_shutdown=5
    )
    server = uvicorn.Server(config)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(server.serve, [listener])
        with anyio.move_on_after(timeout):
            while not app.done.is_set() and not server.should_exit:
                await anyio.sleep(0.05)
        server.should_exit = True
    return app.result[0] if app.result else None


def _pending_hint(reference: str, started: AuthorizationStart) -> str:
    from mcpbridge.domain.identity import timestamp

    return (
        f"the authorization stays open until {timestamp(started.expires_at)}: finish it with "
        f"`mcpbridge services authorize {shlex.quote(reference)} --redirected-url '<URL>'`"
    )


def _start(container: Container, principal: Principal, service: ExternalService, base_url: str) -> AuthorizationStart:
    start = functools.partial(container.oauth.start_authorization, base_url=base_url)
    started = anyio.run(start, principal, service.id)
    print(f"Authorizing {service.name} ({service.id}) for user {principal.user_id}.")
    print("Open this URL in a browser and approve the access:")
    print(f"  {started.authorization_url}", flush=True)
    return started


def _authorize_listening(
    container: Container, principal: Principal, service: ExternalService, base_url: str, args: argparse.Namespace
) -> Outcome:
    redirect_uri = container.oauth.callback_url(base_url)
    listener = _bind_listener(redirect_uri)
    try:
        started = _start(container, principal, service, base_url)
        print(f"Waiting up to {args.timeout:g} s for the browser to come back to {redirect_uri} ...", flush=True)
        outcome = anyio.run(_listen, container, principal, service, listener, redirect_uri, started, args.timeout)
    finally:
        listener.close()
    if outcome is None:
        raise Conflict(
            f"the browser did not come back in time; {_pending_hint(args.service, started)}",
            code="authorization_pending",
        )
    return outcome


def _authorize_pasting(
    container: Container, principal: Principal, service: ExternalService, base_url: str, args: argparse.Namespace
) -> Outcome:
    started = _start(container, principal, service, base_url)
    redirect_uri = container.oauth.callback_url(base_url)
    print(f"Then paste the address the browser was sent to ({redirect_uri}?...) and press Enter:", flush=True)
    line = _read_line(args.timeout)
    if not line:
        reason = "no URL was given" if line == "" else f"no URL came within {args.timeout:g} s"
        raise Conflict(f"{reason}; {_pending_hint(args.service, started)}", code="authorization_pending")
    finish = functools.partial(_finish, user_id=principal.user_id, attempt_id=started.attempt_id)
    return anyio.run(finish, container, principal.workspace_id, service, _parse_redirected(line))


def cmd_services_authorize(args: argparse.Namespace) -> int:
    if not 0 < args.timeout <= MAX_AUTHORIZE_TIMEOUT:
        raise InvalidInput(f"--timeout must be from 0 to {MAX_AUTHORIZE_TIMEOUT:g} seconds", code="invalid_timeout")
    settings = settings_of(args)
    container = Container(settings)
    try:
        # With --json, what a person reads (the URL to open, the prompts) goes to stderr; stdout holds the JSON.
        with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():
            service, outcome = _authorize(container, settings, args)
            message = _report(outcome)
        if not args.json:
            print(message)
            return 0
        assert outcome.user_id is not None
        print(json.dumps(anyio.run(_status_body, container, args, service, outcome.user_id)))
        return 0
    finally:
        close(container)


def _authorize(container: Container, settings: Settings, args: argparse.Namespace) -> tuple[ExternalService, Outcome]:
    workspace_id = acting_workspace(container, args.workspace)
    user_id = known_user(container, workspace_id, args.user) if args.user else admin_user(container, workspace_id)
    principal = acting_for(workspace_id, user_id)
    service = _find_service(container, principal, args.service)
    if service.auth.auth_type != "oauth":
        raise Conflict(
            f"the MCP service {service.name} does not use OAuth (its auth type is {service.auth.auth_type}): "
            "there is nothing to authorize",
            code="service_not_oauth",
        )
    if args.redirected_url is not None:
        finish = functools.partial(_finish, user_id=args.user)
        return service, anyio.run(finish, container, workspace_id, service, _parse_redirected(args.redirected_url))
    base_url = _redirect_base(settings, args.port)
    if args.listen:
        return service, _authorize_listening(container, principal, service, base_url, args)
    return service, _authorize_pasting(container, principal, service, base_url, args)


async def _status_body(container: Container, args: argparse.Namespace, service: ExternalService, user_id: str) -> Any:
    """The REST API's OAuth status of the service for the user the token was stored for."""
    from mcpbridge.cli.inprocess import connect

    async with connect(container, args, user=user_id, operator=True) as api:
        return await api.get(f"/api/v1/mcp-services/{service.id}/oauth/status")
