"""The ``mcpbridge`` command.

    mcpbridge init  [--data-dir D] [--json]                  create the default workspace and an admin API key
    mcpbridge serve [--host H] [--port P] [--data-dir D]     run every HTTP surface (initialising on first start)

The backend comes from ``MCPBRIDGE_BACKEND`` (``local`` by default, ``aws`` for DynamoDB/KMS/S3).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mcpbridge.bootstrap import Container
from mcpbridge.errors import MCPBridgeError
from mcpbridge.identity.service import Initialization
from mcpbridge.settings import Settings


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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
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
