"""``mcpbridge login`` and ``mcpbridge whoami``: the server and API key the other commands use.

``login URL`` reads the key (asked for on a terminal, never echoed; else read from standard input), checks it with
``GET /api/v1/me`` and stores it with the URL as a profile of the config file (:mod:`mcpbridge.cli.profiles`).
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from typing import Any

from mcpbridge.cli.api import Api, Problem, command
from mcpbridge.cli.profiles import Target, clean_url, config_path, profile_name, save_profile
from mcpbridge.errors import InvalidInput

ME = "/api/v1/me"


def _read_key() -> str:
    value = getpass.getpass("API key (sk_...): ") if sys.stdin.isatty() else sys.stdin.readline(4096)
    value = value.strip()
    if not value:
        raise InvalidInput("no API key on standard input: nothing was saved", code="invalid_api_key")
    return value


def login(args: argparse.Namespace) -> int:
    url = clean_url(args.url)
    name = profile_name(args.profile, os.environ)
    key = _read_key()
    target = Target(url, key, f"the URL given to login ({url})")
    path = config_path()

    def check() -> Any:
        api = Api(target)
        try:
            return api.get(ME)
        finally:
            api.close()

    try:
        me = check()
    except Problem as problem:
        problem.body["detail"] = f"{url} refused the key: {problem.message}. Nothing was saved"
        raise
    save_profile(path, name, url, key)
    if args.json:
        print(json.dumps({**me, "url": url, "profile": name, "config": str(path)}))
    else:
        who = me.get("user_name") or me["user_id"]
        print(f"Logged in to {url} as {who} ({me['role']}) in workspace {me['workspace_name']} ({me['workspace_id']}).")
        print(f"Saved as profile {name!r} in {path} (readable by you only).")
    return 0


@command()
def whoami(api: Api, args: argparse.Namespace) -> None:
    body = api.get(ME)

    def human(me: dict[str, Any]) -> None:
        who = me.get("user_name") or me["user_id"]
        print(f"{who} ({me['user_id']}, {me['role']}) in workspace {me['workspace_name']} ({me['workspace_id']})")
        print(f"  server: {api.base_url} ({api.target.source})")
        print(f"  key: {me['api_key_id']}; capabilities: {', '.join(me['capabilities'] or ['all'])}")

    emit_body(args, body, human)


def emit_body(args: argparse.Namespace, body: Any, human: Any) -> None:
    from mcpbridge.cli.output import emit

    emit(args, body, human)
