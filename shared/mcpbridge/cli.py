"""The ``mcpbridge`` command.

    mcpbridge init  [--data-dir D] [--json]                  create the default workspace and an admin API key
    mcpbridge serve [--host H] [--port P] [--data-dir D]     run every HTTP surface (initialising on first start)
    mcpbridge keys create --admin [--workspace W] [--user U] [--name N] [--data-dir D] [--json]
                                                             mint an admin API key (the way back from a lost one)
    mcpbridge workspaces list|create NAME|rename ID NAME|disable ID|enable ID|delete ID [--data-dir D] [--json]
                                                             the platform's workspaces, as their operator
    mcpbridge services list [--data-dir D] [--json]          the workspace's external MCP services
    mcpbridge services authorize SERVICE [--user U] [--data-dir D] [--redirected-url URL | --listen] [--port P]
                                         [--timeout S]       OAuth of an external service for a user, headlessly

The backend comes from ``MCPBRIDGE_BACKEND`` (``local`` by default, ``aws`` for DynamoDB/KMS/S3).
"""

# Over 400 lines: every command of the operator's command line, each a few functions over the services.

from __future__ import annotations

import argparse
import functools
import hmac
import json
import queue
import re
import shlex
import socket
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import anyio
from anyio import to_thread

from mcpbridge.bootstrap import Container
from mcpbridge.domain.identity import OPERATOR, Principal, Workspace, acting_for
from mcpbridge.errors import Conflict, InvalidInput, MCPBridgeError, NotFound
from mcpbridge.identity.accounts import Initialization
from mcpbridge.settings import Settings

if TYPE_CHECKING:
    from mcpbridge.domain.external_services import ExternalService
    from mcpbridge.oauth.authorization import AuthorizationStart, OAuthStatus


def _settings(args: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {}
    if getattr(args, "data_dir", None) is not None:
        overrides["data_dir"] = args.data_dir
    return Settings(**overrides)


def _where(settings: Settings) -> str:
    if settings.backend == "aws":
        return f"DynamoDB table {settings.table_name}"
    return str(settings.data_dir.resolve())


def _print_initialization(result: Initialization, settings: Settings) -> None:
    if result.created:
        print(f"Initialised mcpbridge in {_where(settings)}: workspace {result.workspace_id}.")
        print("Admin API key (shown once; store it now):")
        print(f"  {result.api_key}")
    else:
        print(f"Already initialised in {_where(settings)} (workspace {result.workspace_id}); nothing created.")


def cmd_init(args: argparse.Namespace) -> int:
    settings = _settings(args)
    container = Container(settings)
    try:
        result = container.identity.initialize()
    finally:
        container.close()
    if args.json:
        print(json.dumps({"workspace_id": result.workspace_id, "api_key": result.api_key, "created": result.created}))
    else:
        _print_initialization(result, settings)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from mcpbridge.http.apps import create_combined_app
    from mcpbridge.observability import configure_local_logging

    settings = _settings(args)
    configure_local_logging(settings.log_level)
    container = Container(settings)
    try:
        _print_initialization(container.identity.initialize(), settings)
        resumed = container.documents.resume_pending()
        if resumed:
            print(f"Resumed indexing of {resumed} document(s) left pending.", flush=True)
        if container.workspace_purge.resume():
            print("Resumed the deletion of the workspaces left being deleted.", flush=True)
        recover = getattr(container.workflow, "recover", None)  # the embedded workflow picks up paused calls
        if recover is not None and recover():
            print("Resumed the agent tool calls left unfinished.", flush=True)
        print(f"mcpbridge listening on http://{args.host}:{args.port} (Ctrl-C stops it)", flush=True)
        uvicorn.run(
            create_combined_app(container),
            host=args.host,
            port=args.port,
            log_level=settings.log_level.lower(),
            server_header=False,
        )
    finally:
        close = getattr(container.__dict__.get("workflow"), "close", None)
        if close is not None:
            close()
        container.close()
    return 0


# ---------------------------------------------------------------------------------------------------- services
#
# ``services authorize`` drives mcpbridge's own OAuth flow (``container.oauth``) for an operator: it starts an
# authorization for a user and prints the URL to open, then finishes it with the URL the browser was sent back to
# (pasted on stdin, or given later with --redirected-url: the state lives in the store for 10 minutes), or with the
# browser's request itself (--listen: one route on 127.0.0.1 at the redirect URI's port). The redirect URI is
# mcpbridge's callback under MCPBRIDGE_PUBLIC_BASE_URL, else under http://127.0.0.1:<--port, 8080>, where
# ``mcpbridge serve`` listens by default: a dynamic client registration serves one redirect URI, so the CLI and the
# server share it. The default user is the one ``mcpbridge init`` created with the workspace (its admin). Nothing
# printed carries a code, a token or a secret; the state appears only inside the authorization URL, which is meant
# to be opened.

DEFAULT_CALLBACK_PORT = 8080
AUTHORIZE_TIMEOUT = 600.0
"""How long to wait for the browser by default: the lifetime of an authorization's state."""
MAX_AUTHORIZE_TIMEOUT = 3600.0
MAX_REDIRECTED_URL_CHARS = 16_384
_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost"})
_USER_ID = re.compile(r"[A-Za-z0-9_.:@-]{1,128}")
_RESULT_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>mcpbridge authorization</title></head>
<body><h1>{title}</h1><p>{detail}</p></body></html>
"""


def _close(container: Container) -> None:
    """Close the container, and the embedded workflow a stored token may have woken (calls waiting for it)."""
    close = getattr(container.__dict__.get("workflow"), "close", None)
    if close is not None:
        close()
    container.close()


def _installed_workspace(container: Container) -> str:
    workspace_id = container.identity.installed_workspace_id()
    if workspace_id is None:
        raise NotFound("mcpbridge is not initialised here: run `mcpbridge init` first", code="not_initialized")
    return workspace_id


def _admin_user(container: Container, workspace_id: str) -> str:
    """The user ``mcpbridge init`` created with the workspace (named "admin"; its admin API key belongs to it)."""
    from mcpbridge.paging import every_item

    users = every_item(container.store, f"WS#{workspace_id}", sk_prefix="USER#")
    admins = sorted(
        (item for item in users if item.get("name") == "admin"),
        key=lambda item: (str(item.get("created_at", "")), str(item["id"])),
    )
    if not admins:
        raise NotFound("the workspace has no admin user: name the user with --user", code="user_not_found")
    return str(admins[0]["id"])


def _known_user(container: Container, workspace_id: str, user_id: str) -> str:
    """``user_id`` when it is a user of the workspace: one with a user record or an API key."""
    from mcpbridge.identity.accounts import user_key
    from mcpbridge.paging import every_item

    if not _USER_ID.fullmatch(user_id):
        raise InvalidInput("--user must be a user id such as usr_...", code="invalid_user")
    if container.store.get(user_key(workspace_id, user_id)) is not None or any(
        item.get("user_id") == user_id
        for item in every_item(container.store, f"WS#{workspace_id}", sk_prefix="APIKEY#")
    ):
        return user_id
    raise NotFound(f"no user {user_id} in workspace {workspace_id}", code="user_not_found")


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
) -> tuple[bool, str]:
    """Complete the authorization the redirected URL answers: ``(authorized, message)``.

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
            return True, _authorized(service, user_id, status) + " (the callback at the redirect URI completed it)"
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
        return False, f"the authorization of {service.name} failed: {outcome.error}"
    owner = str(pending["principal_id"])
    status = await container.oauth.status(acting_for(workspace_id, owner), service.id, str(pending["attempt_id"]))
    return True, _authorized(service, owner, status)


def _authorized(service: ExternalService, user_id: str, status: OAuthStatus) -> str:
    from mcpbridge.domain.identity import timestamp

    facts: list[str] = [status.status]
    if status.expires_at is not None:
        facts.append(f"the access token expires at {timestamp(status.expires_at)}")
    facts.append("refreshable" if status.refreshable else "not refreshable")
    return f"Authorized {service.name} ({service.id}) for user {user_id}: {', '.join(facts)}."


def _report(result: tuple[bool, str]) -> int:
    authorized, message = result
    if authorized:
        print(message)
        return 0
    print(f"mcpbridge: {message}", file=sys.stderr)
    return 1


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
        self.result: list[tuple[bool, str]] = []

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
        authorized, message = outcome
        title = "Authorization complete" if authorized else "Authorization failed"
        detail = "You can close this window." if authorized else f"{message}. Close this window and retry."
        await _page(200 if authorized else 400, title, detail)(scope, receive, send)
        self.result.append(outcome)
        self.done.set()

    async def _finish(self, redirected: _Redirected) -> tuple[bool, str]:
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
            return False, exc.message
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
) -> tuple[bool, str] | None:
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
) -> int:
    redirect_uri = container.oauth.callback_url(base_url)
    listener = _bind_listener(redirect_uri)
    try:
        started = _start(container, principal, service, base_url)
        print(f"Waiting up to {args.timeout:g} s for the browser to come back to {redirect_uri} ...", flush=True)
        outcome = anyio.run(_listen, container, principal, service, listener, redirect_uri, started, args.timeout)
    finally:
        listener.close()
    if outcome is None:
        print(
            f"mcpbridge: the browser did not come back in time; {_pending_hint(args.service, started)}", file=sys.stderr
        )
        return 1
    return _report(outcome)


def _authorize_pasting(
    container: Container, principal: Principal, service: ExternalService, base_url: str, args: argparse.Namespace
) -> int:
    started = _start(container, principal, service, base_url)
    redirect_uri = container.oauth.callback_url(base_url)
    print(f"Then paste the address the browser was sent to ({redirect_uri}?...) and press Enter:", flush=True)
    line = _read_line(args.timeout)
    if not line:
        reason = "no URL was given" if line == "" else f"no URL came within {args.timeout:g} s"
        print(f"mcpbridge: {reason}; {_pending_hint(args.service, started)}", file=sys.stderr)
        return 1
    finish = functools.partial(_finish, user_id=principal.user_id, attempt_id=started.attempt_id)
    return _report(anyio.run(finish, container, principal.workspace_id, service, _parse_redirected(line)))


def cmd_services_authorize(args: argparse.Namespace) -> int:
    if not 0 < args.timeout <= MAX_AUTHORIZE_TIMEOUT:
        raise InvalidInput(f"--timeout must be from 0 to {MAX_AUTHORIZE_TIMEOUT:g} seconds", code="invalid_timeout")
    settings = _settings(args)
    container = Container(settings)
    try:
        workspace_id = _installed_workspace(container)
        user_id = _known_user(container, workspace_id, args.user) if args.user else _admin_user(container, workspace_id)
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
            redirected = _parse_redirected(args.redirected_url)
            return _report(anyio.run(finish, container, workspace_id, service, redirected))
        base_url = _redirect_base(settings, args.port)
        if args.listen:
            return _authorize_listening(container, principal, service, base_url, args)
        return _authorize_pasting(container, principal, service, base_url, args)
    finally:
        _close(container)


def cmd_services_list(args: argparse.Namespace) -> int:
    container = Container(_settings(args))
    try:
        services = container.services.list(acting_for(_installed_workspace(container), "cli"))
    finally:
        container.close()
    rows: list[dict[str, Any]] = [
        {
            "id": s.id,
            "name": s.name,
            "transport": s.transport,
            "auth_type": s.auth.auth_type,
            "enabled": s.enabled,
            "builtin": s.is_builtin,
        }
        for s in services
    ]
    if args.json:
        print(json.dumps(rows))
        return 0
    if not rows:
        print("No MCP services registered.")
        return 0
    header = {"id": "ID", "name": "NAME", "transport": "TRANSPORT", "auth_type": "AUTH", "enabled": "ENABLED"}
    table: list[dict[str, Any]] = [header, *({**row, "enabled": "yes" if row["enabled"] else "no"} for row in rows)]
    widths = {column: max(len(str(row[column])) for row in table) for column in header}
    for row in table:
        print("  ".join(str(row[column]).ljust(widths[column]) for column in header).rstrip())
    return 0


def cmd_keys_create(args: argparse.Namespace) -> int:
    """An unrestricted admin API key, minted straight in the store: whoever can run this holds the data anyway (the
    SQLite file and key file here, or the table with the operator's AWS credentials)."""
    from mcpbridge.http.routes.api_keys import ApiKeyOut

    settings = _settings(args)
    container = Container(settings)
    try:
        workspace_id = _installed_workspace(container)
        if args.workspace:
            workspace_id = container.workspaces.get(OPERATOR, args.workspace).id
        user_id = _known_user(container, workspace_id, args.user) if args.user else _admin_user(container, workspace_id)
        created = container.identity.recover_admin_key(workspace_id, user_id, name=args.name)
    finally:
        container.close()
    if args.json:
        print(json.dumps({**ApiKeyOut.of(created.record).model_dump(), "key": created.plaintext}))
    else:
        print(f"Admin API key {created.record.id} for user {user_id} in {_where(settings)} (shown once; store it now):")
        print(f"  {created.plaintext}")
    return 0


def cmd_workspaces(args: argparse.Namespace) -> int:
    """The operator's workspace commands: whoever runs them holds the data, so they act with platform authority."""
    from mcpbridge.http.routes.api_keys import CreatedApiKey
    from mcpbridge.http.routes.workspaces import WorkspaceOut

    container = Container(_settings(args))
    try:
        _installed_workspace(container)
        workspaces = container.workspaces
        command = args.workspaces_command
        if command == "list":
            found = _every_workspace(container)
        elif command == "create":
            created = workspaces.create(OPERATOR, name=args.name, admin_name=args.admin_name)
            key = CreatedApiKey.of_new(created.admin_key)
            shown = {**WorkspaceOut.of(created.workspace).model_dump(), "admin_user_id": created.admin_user_id}
            if args.json:
                print(json.dumps({**shown, "admin_api_key": key.model_dump()}))
            else:
                print(f"Workspace {created.workspace.id} ({created.workspace.name}) created.")
                print(f"Admin API key of its user {created.admin_user_id} (shown once; store it now):")
                print(f"  {key.key}")
            return 0
        elif command == "rename":
            found = [workspaces.rename(OPERATOR, args.workspace, name=args.name)]
        else:
            found = [getattr(workspaces, command)(OPERATOR, args.workspace)]
    finally:
        _close(container)  # waits for background jobs: a deletion's purge ends before the command does
    rows = [WorkspaceOut.of(w).model_dump() for w in found]
    if args.json:
        print(json.dumps(rows if command == "list" else rows[0]))
    elif command == "delete":
        print(
            f"Workspace {rows[0]['id']} ({rows[0]['name']}) is being deleted: its keys and tokens are refused; what "
            "it held is purged by a background job (the indexer on AWS; here, before this command returned)."
        )
    else:
        for row in rows:
            print(f"{row['id']}  {row['status']:<8}  {row['name']}")
    return 0


def _every_workspace(container: Container) -> list[Workspace]:
    found: list[Workspace] = []
    cursor: str | None = None
    while True:
        page, cursor = container.workspaces.list(OPERATOR, limit=200, cursor=cursor)
        found += page
        if cursor is None:
            return found


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mcpbridge", description="A two-way MCP hub for knowledge bases.")
    commands = parser.add_subparsers(dest="command", required=True)

    init = commands.add_parser("init", help="create the default workspace and an admin API key (once)")
    init.add_argument("--data-dir", type=Path, help="data directory (default ./.mcpbridge or MCPBRIDGE_DATA_DIR)")
    init.add_argument("--json", action="store_true", help='print {"workspace_id": ..., "api_key": ...}')
    init.set_defaults(run=cmd_init)

    serve = commands.add_parser("serve", help="run every HTTP surface in this process")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument("--data-dir", type=Path, help="data directory (default ./.mcpbridge or MCPBRIDGE_DATA_DIR)")
    serve.set_defaults(run=cmd_serve)

    _add_keys(commands)
    _add_workspaces(commands)
    _add_services(commands)
    return parser


def _add_workspaces(commands: Any) -> None:
    workspaces = commands.add_parser(
        "workspaces",
        help="the platform's workspaces (as their operator: no API key needed on the machine that holds the data)",
    )
    actions = workspaces.add_subparsers(dest="workspaces_command", required=True)
    for name, arguments, help_text in (
        ("list", (), "every workspace with its status"),
        ("create", ("name",), "a workspace, its first user (admin) and that user's admin API key (shown once)"),
        ("rename", ("workspace", "name"), "rename a workspace"),
        ("disable", ("workspace",), "refuse every key and endpoint token of a workspace from the next request on"),
        ("enable", ("workspace",), "enable a disabled workspace"),
        ("delete", ("workspace",), "delete a workspace and everything it holds (keys refused at once)"),
    ):
        action = actions.add_parser(name, help=help_text)
        for argument in arguments:
            action.add_argument(argument, help="the workspace's id (ws_...)" if argument == "workspace" else None)
        if name == "create":
            action.add_argument("--admin-name", default="admin", help="the name of its first user (default admin)")
        action.add_argument("--data-dir", type=Path, help="data directory (default ./.mcpbridge or MCPBRIDGE_DATA_DIR)")
        action.add_argument("--json", action="store_true", help="print JSON")
        action.set_defaults(run=cmd_workspaces)


def _add_keys(commands: Any) -> None:
    keys = commands.add_parser("keys", help="API keys")
    key_commands = keys.add_subparsers(dest="keys_command", required=True)
    key_create = key_commands.add_parser(
        "create",
        help="mint an unrestricted admin API key for the workspace (the way back after losing every admin key)",
        description="Mint an unrestricted admin API key directly in the data this machine holds (the data directory, "
        "or with MCPBRIDGE_BACKEND=aws the table, with the operator's AWS credentials). No API key is needed.",
        epilog="example: mcpbridge keys create --admin --data-dir ./.mcpbridge",
    )
    key_create.add_argument("--admin", action="store_true", required=True, help="an unrestricted admin key")
    key_create.add_argument("--workspace", help="the workspace (default: the platform's own, the one init created)")
    key_create.add_argument("--user", help="the user the key belongs to (default: the workspace's admin user)")
    key_create.add_argument("--name", default="admin (recovered)", help="the key's name")
    key_create.add_argument("--data-dir", type=Path, help="data directory (default ./.mcpbridge or MCPBRIDGE_DATA_DIR)")
    key_create.add_argument("--json", action="store_true", help="print the key as the API shows it, with the key")
    key_create.set_defaults(run=cmd_keys_create)


def _add_services(commands: Any) -> None:
    services = commands.add_parser("services", help="external MCP services (list, OAuth authorization)")
    service_commands = services.add_subparsers(dest="services_command", required=True)
    listing = service_commands.add_parser("list", help="the workspace's external MCP services")
    listing.add_argument("--data-dir", type=Path, help="data directory (default ./.mcpbridge or MCPBRIDGE_DATA_DIR)")
    listing.add_argument("--json", action="store_true", help="print a JSON array")
    listing.set_defaults(run=cmd_services_list)

    authorize = service_commands.add_parser(
        "authorize",
        help="authorize an OAuth service for a user: print the URL to open, then finish with the redirected URL",
        description="Start an OAuth authorization of an external MCP service for a user and print the URL to open. "
        "Finish it by pasting the URL the browser was sent back to (stdin), with --redirected-url later, or with "
        "--listen (the browser comes back to this command on 127.0.0.1).",
    )
    authorize.add_argument("service", help="the service's id (svc_...) or name")
    authorize.add_argument("--user", help="the user to authorize for (default: the workspace's admin user)")
    authorize.add_argument("--data-dir", type=Path, help="data directory (default ./.mcpbridge or MCPBRIDGE_DATA_DIR)")
    finish = authorize.add_mutually_exclusive_group()
    finish.add_argument(
        "--redirected-url", metavar="URL", help="finish an authorization started earlier with the URL it redirected to"
    )
    finish.add_argument(
        "--listen", action="store_true", help="wait for the browser on 127.0.0.1 at the redirect URI's port"
    )
    authorize.add_argument(
        "--port",
        type=int,
        help=f"port of the redirect URI http://127.0.0.1:PORT/api/v1/mcp-oauth/callback when "
        f"MCPBRIDGE_PUBLIC_BASE_URL is unset (default {DEFAULT_CALLBACK_PORT})",
    )
    authorize.add_argument(
        "--timeout",
        type=float,
        default=AUTHORIZE_TIMEOUT,
        help=f"seconds to wait for the browser or the pasted URL (default {AUTHORIZE_TIMEOUT:g})",
    )
    authorize.set_defaults(run=cmd_services_authorize)


def main(argv: Sequence[str] | None = None) -> int:
    from mcpbridge.observability import install_log_redaction

    # Before any command runs: whatever it (or a library) logs, URLs in it have their query values masked.
    install_log_redaction()
    args = build_parser().parse_args(argv)
    try:
        code: int = args.run(args)
    except MCPBridgeError as exc:
        print(f"mcpbridge: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
