"""``mcpbridge webhooks``: receivers of call events through ``/api/v1/webhooks``. The signing secret is printed once,
at creation."""

from __future__ import annotations

import argparse
from typing import Any

from mcpbridge.cli.api import Api, command
from mcpbridge.cli.output import Column, deleted, emit, field, table

WEBHOOKS = "/api/v1/webhooks"
_COLUMNS: list[Column] = [
    ("ID", field("id")),
    ("URL", field("url")),
    ("FORMAT", field("format")),
    ("EVENTS", lambda row: ",".join(row["events"])),
]
_DELIVERY_COLUMNS: list[Column] = [
    ("ID", field("id")),
    ("EVENT", field("event")),
    ("CALL", field("call_id")),
    ("STATUS", field("status")),
    ("ATTEMPTS", lambda row: " ".join(str(a.get("status_code") or a.get("error")) for a in row["attempts"])),
]


@command()
def webhooks_list(api: Api, args: argparse.Namespace) -> None:
    body = api.every(WEBHOOKS)
    emit(args, body, lambda b: table(b["items"], _COLUMNS, empty="No webhooks."))


@command()
def webhook_add(api: Api, args: argparse.Namespace) -> None:
    request: dict[str, Any] = {"url": args.url, "format": args.format, "description": args.description}
    if args.event:
        request["events"] = args.event
    body = api.post(WEBHOOKS, json=request)

    def human(created: dict[str, Any]) -> None:
        print(f"Webhook {created['id']} ({created['format']}) for {', '.join(created['events'])}.")
        print(f"Signing secret (shown once): {created['signing_secret']}")

    emit(args, body, human)


@command()
def webhook_show(api: Api, args: argparse.Namespace) -> None:
    emit(args, api.get(f"{WEBHOOKS}/{args.webhook}"), lambda b: table([b], _COLUMNS, empty=""))


@command()
def webhook_delete(api: Api, args: argparse.Namespace) -> None:
    api.delete(f"{WEBHOOKS}/{args.webhook}")
    deleted(args, "webhook", args.webhook)


@command()
def webhook_deliveries(api: Api, args: argparse.Namespace) -> None:
    body = api.every(f"{WEBHOOKS}/{args.webhook}/deliveries")
    emit(args, body, lambda b: table(b["items"], _DELIVERY_COLUMNS, empty="No deliveries yet."))
