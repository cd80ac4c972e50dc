"""Running a parsed command: its function imported on use, its failures turned into a message on standard error
and an exit status: 0 success, 1 the command failed (bad input, not found, refused...: the message says what), 2 the
command line could not be parsed (argparse's own), 130 interrupted. With ``--json``, a failure is written as the REST
API's problem+json body, on standard error."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from typing import Any

FAILED, INTERRUPTED = 1, 130
_ON_THE_DATA = frozenset({"serving", "authorize"})
"""The modules of the commands that act on the data itself (the others only send HTTP requests)."""


def run(args: argparse.Namespace) -> int:
    from mcpbridge.cli.api import Problem
    from mcpbridge.errors import MCPBridgeError

    module, _, name = str(args.run).partition(":")
    if module in _ON_THE_DATA:
        from mcpbridge.observability import install_log_redaction

        # Before such a command runs: whatever it (or a library) logs, URLs in it have their query values masked.
        install_log_redaction()
    function = getattr(importlib.import_module(f"mcpbridge.cli.{module}"), name)
    try:
        code: int = function(args)
    except Problem as problem:
        return _failed(args, problem.body, problem.message)
    except MCPBridgeError as error:
        return _failed(args, _problem_body(error), error.message)
    except KeyboardInterrupt:
        print("mcpbridge: interrupted", file=sys.stderr)
        return INTERRUPTED
    return code


def _failed(args: argparse.Namespace, body: dict[str, Any], message: str) -> int:
    if getattr(args, "json", False):
        print(json.dumps(body, ensure_ascii=False), file=sys.stderr)
    else:
        print(f"mcpbridge: {message}", file=sys.stderr)
    return FAILED


def _problem_body(error: Any) -> dict[str, Any]:
    """The problem+json body the REST API answers for ``error`` (the shape of :mod:`mcpbridge.http.problems`)."""
    body: dict[str, Any] = {
        "type": f"urn:mcpbridge:problem:{error.code}",
        "title": error.code.replace("_", " ").capitalize(),
        "status": error.status,
        "code": error.code,
        "detail": error.message,
        "retryable": error.retryable,
    }
    if error.details:
        body["details"] = error.details
    return body
