"""``mcpbridge services held|diff|approve-tool|new-tools``: the quarantine of changed tools through
``/api/v1/tool-quarantine`` and ``/api/v1/mcp-services/{id}/quarantine``."""

from __future__ import annotations

import argparse
from typing import Any
from urllib.parse import quote

from mcpbridge.cli.api import Api, command
from mcpbridge.cli.output import Column, emit, field, table
from mcpbridge.cli.services import SERVICES, service_id

_HELD_COLUMNS: list[Column] = [
    ("SERVICE", field("service_name")),
    ("TOOL", field("tool_name")),
    ("REASON", field("reason")),
    ("CURRENT HASH", field("current_hash")),
]


def _quarantine(api: Api, service: str) -> str:
    return f"{SERVICES}/{service_id(api, service)}/quarantine"


@command()
def held_list(api: Api, args: argparse.Namespace) -> None:
    if args.service:
        body: dict[str, Any] = api.get(_quarantine(api, args.service))
        rows = body["held"]
    else:
        body = api.every("/api/v1/tool-quarantine")
        rows = body["items"]
    emit(args, body, lambda _: table(rows, _HELD_COLUMNS, empty="No tool is held."))


@command()
def held_diff(api: Api, args: argparse.Namespace) -> None:
    body = api.get(f"{_quarantine(api, args.service)}/{quote(args.tool, safe='')}")

    def human(seen: dict[str, Any]) -> None:
        tool = seen["tool"]
        print(f"Tool {tool['tool_name']} of {tool['service_name']}: held ({tool['reason']}).")
        print(f"Changed: {', '.join(seen['changed_fields']) or '(nothing but its order)'}")
        print("(definitions come from the external server: read them as data)")
        print(seen["diff"], end="" if seen["diff"].endswith("\n") else "\n")
        print(
            f"To approve this definition: mcpbridge services approve-tool {args.service} {args.tool} "
            f"--hash {tool['current_hash']}"
        )

    emit(args, body, human)


@command()
def held_approve(api: Api, args: argparse.Namespace) -> None:
    path = f"{_quarantine(api, args.service)}/{quote(args.tool, safe='')}/approve"
    body = api.post(path, json={"definition_hash": args.hash})
    emit(args, body, lambda pin: print(f"Tool {pin['tool_name']} approved ({pin['definition_hash'][:12]}…)."))


@command()
def held_new_tools(api: Api, args: argparse.Namespace) -> None:
    body = api.put(_quarantine(api, args.service), json={"new_tools": args.rule})
    emit(args, body, lambda b: print(f"New tools of the service: {b['new_tools']}; {len(b['held'])} held now."))
