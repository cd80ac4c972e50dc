"""``mcpbridge init`` and ``mcpbridge serve``.

``serve`` binds its port first: a port already taken is reported (exit status 1) before anything is initialised,
resumed or printed as listening; the bound socket is the one uvicorn then serves on. While it runs, the sweep that
EventBridge Scheduler runs on AWS runs in a thread of its own (every ``sweep_interval_seconds``): documents and
deletions whose jobs never ended are submitted again without waiting for the next start.

``serve --workers N`` (N > 1) serves from N processes on the one bound socket (uvicorn's supervisor starts them,
replaces one that dies and stops them all on SIGINT/SIGTERM): one interpreter lock bounds a process to about one
core. Each builds its own container on the same data (:func:`worker_app`): the store, the key file and the blobs
are shared, as with the CLI while ``serve`` runs; a call paused in one process and resolved through another goes on
within a second (the embedded workflow reads the call's record). Initialising, resuming what an earlier run left
unfinished, and the sweep stay in the process that was started, which serves no request.

Clients reach ``serve`` directly, with no API Gateway to receive their requests whole first: a request's head must
arrive within ``serve_head_timeout_seconds`` (:mod:`mcpbridge.cli.request_head`, in uvicorn's protocol), and its
body within ``serve_body_timeout_seconds`` plus a second for every ``serve_body_min_bytes_per_second`` bytes of it
(:mod:`mcpbridge.http.body_deadline`, in the app), or the connection is closed (answered 408). A connection
trickling bytes holds nothing longer than that; no limit on concurrent connections is set (uvicorn's
``limit_concurrency`` would answer 503 to every request, ``/healthz`` included, while slow connections are open,
and it counts them only once their head has arrived).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import socket
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from mcpbridge.bootstrap import Container
from mcpbridge.cli.context import close, settings_of, where
from mcpbridge.errors import Conflict, InvalidInput
from mcpbridge.identity.accounts import Initialization
from mcpbridge.settings import Settings

if TYPE_CHECKING:
    from starlette.types import ASGIApp

_BACKLOG = 2048  # uvicorn's default
MAX_WORKERS = 64
log = logging.getLogger("mcpbridge.maintenance")


def _print_initialization(result: Initialization, settings: Settings) -> None:
    if result.created:
        print(f"Initialised mcpbridge in {where(settings)}: workspace {result.workspace_id}.")
        print("Admin API key (shown once; store it now):")
        print(f"  {result.api_key}")
    else:
        print(f"Already initialised in {where(settings)} (workspace {result.workspace_id}); nothing created.")


def _initialization_fields(result: Initialization) -> dict[str, Any]:
    return {"workspace_id": result.workspace_id, "api_key": result.api_key, "created": result.created}


def init(args: argparse.Namespace) -> int:
    settings = settings_of(args)
    container = Container(settings)
    try:
        result = container.identity.initialize()
    finally:
        container.close()
    if args.json:
        print(json.dumps(_initialization_fields(result)))
    else:
        _print_initialization(result, settings)
    return 0


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``, or a clear error when the address cannot be had (the port is taken)."""
    if not 0 <= port <= 65535:
        raise InvalidInput(f"--port must be from 0 to 65535, not {port}", code="invalid_port")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise InvalidInput(f"cannot listen on {host!r}: {exc.strerror}", code="invalid_host") from None
    listener = socket.socket(family, kind, proto)
    # As uvicorn does: a restart right after a stop binds again (a port another socket listens on stays refused).
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(address)
        listener.listen(_BACKLOG)
    except OSError as exc:
        listener.close()
        reason = exc.strerror or str(exc)
        raise Conflict(
            f"cannot listen on {host}:{port}: {reason}. Another program (perhaps another `mcpbridge serve`) holds "
            "it: stop it, or choose another port with --port",
            code="port_unavailable",
        ) from None
    return listener


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from mcpbridge.cli.request_head import ServeConfig
    from mcpbridge.heap import freeze_startup_objects
    from mcpbridge.http.apps import create_combined_app
    from mcpbridge.observability import configure_local_logging

    workers = getattr(args, "workers", 1)
    if not 1 <= workers <= MAX_WORKERS:
        raise InvalidInput(f"--workers must be from 1 to {MAX_WORKERS}, not {workers}", code="invalid_workers")
    listener = bind(args.host, args.port)
    try:
        settings = settings_of(args)
        configure_local_logging(settings.log_level)
        container = Container(settings)
        try:
            host, port = listener.getsockname()[:2]
            url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
            initialization = container.identity.initialize()
            if args.json:  # one line a script can read: where it listens, and the admin key of a first start
                shown = {"url": url, **_initialization_fields(initialization)}
                print(json.dumps(shown), flush=True)
            else:
                _print_initialization(initialization, settings)
            _resume(container, quiet=args.json)
            if not args.json:
                print(f"mcpbridge listening on {url} (Ctrl-C stops it)", flush=True)
            # log_config=None: uvicorn's own lines (start, stop, the access log) go through the logging set up
            # above, in its format, each with its request id, rather than through uvicorn's handlers on stdout.
            options: dict[str, Any] = {
                "log_level": settings.log_level.lower(),
                "log_config": None,
                "server_header": False,
                "head_timeout": settings.serve_head_timeout_seconds,
            }
            with _sweeping(container, settings.sweep_interval_seconds), contextlib.suppress(KeyboardInterrupt):
                if workers > 1:
                    _serve_from_processes(listener, settings, workers, options)
                else:
                    app = create_combined_app(container, body_deadline=body_deadline(settings))
                    freeze_startup_objects(collect=True)  # mcpbridge.heap: full collections skip start-up's objects
                    # uvicorn shuts down gracefully on SIGINT/SIGTERM, then raises the signal again: a clean stop.
                    config = ServeConfig(app, **options)
                    uvicorn.Server(config).run(sockets=[listener])
        finally:
            close(container)
    finally:
        listener.close()
    return 0


def body_deadline(settings: Settings) -> tuple[float, int]:
    """What a request's body is given (:func:`mcpbridge.http.apps.create_combined_app`)."""
    return settings.serve_body_timeout_seconds, settings.serve_body_min_bytes_per_second


def _serve_from_processes(listener: socket.socket, settings: Settings, workers: int, options: dict[str, Any]) -> None:
    from uvicorn.supervisors import Multiprocess

    from mcpbridge.cli.request_head import ServeConfig

    # The processes start afresh (spawned, not forked: this one has threads) and read their settings from the
    # environment, which the data directory chosen on the command line joins.
    os.environ["MCPBRIDGE_DATA_DIR"] = str(settings.data_dir.resolve())
    config = ServeConfig(f"{__name__}:worker_app", factory=True, workers=workers, **options)
    Multiprocess(config, sockets=[listener]).run()


def worker_app() -> ASGIApp:
    """The app of one of ``serve --workers N``'s processes: a container of its own on the data ``serve`` set up."""
    import atexit

    from mcpbridge.heap import freeze_startup_objects
    from mcpbridge.http.apps import create_combined_app
    from mcpbridge.observability import configure_local_logging

    settings = Settings()
    configure_local_logging(settings.log_level)
    container = Container(settings)
    atexit.register(close, container)
    app = create_combined_app(container, body_deadline=body_deadline(settings))
    freeze_startup_objects(collect=True)
    return app


@contextlib.contextmanager
def _sweeping(container: Container, interval: float) -> Iterator[None]:
    """The periodic sweep in a daemon thread while the block runs (none when ``interval`` is 0)."""
    if interval <= 0:
        yield
        return
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(interval):
            try:
                report = container.sweep.run()
            except Exception:  # the next round tries again; a failing sweep must not stop serve
                log.exception("the periodic sweep failed")
                continue
            if report.redriven or report.failed or report.deletions_redriven:
                log.info(
                    "sweep: %s document job(s) and %s deletion(s) submitted again, %s document(s) failed",
                    report.redriven,
                    report.deletions_redriven,
                    report.failed,
                )

    thread = threading.Thread(target=loop, name="mcpbridge-sweep", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=30)


def _resume(container: Container, *, quiet: bool) -> None:
    """Resume what an earlier run left unfinished (said on stdout, unless ``quiet``)."""
    said: list[str] = []
    resumed = container.documents.resume_pending()
    if resumed:
        said.append(f"Resumed indexing of {resumed} document(s) left pending.")
    if container.workspace_purge.resume():
        said.append("Resumed the deletion of the workspaces left being deleted.")
    recover = getattr(container.workflow, "recover", None)  # the embedded workflow picks up paused calls
    if recover is not None and recover():
        said.append("Resumed the agent tool calls left unfinished.")
    for line in [] if quiet else said:
        print(line, flush=True)
