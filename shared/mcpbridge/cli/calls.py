"""``mcpbridge calls``: agents' tool calls waiting for a person, through ``/api/v1/agent/pending``,
``/api/v1/agent/tool-calls/{id}``, ``/api/v1/agent/tool-approvals/{id}`` and
``/api/v1/agent/mcp-oauth-resolutions/{id}/cancel``.

A resolved call runs next where its workflow waits: the Step Functions state machine on AWS, else the process that
holds the call (``mcpbridge serve``, at once if it is running, else when it next starts).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from mcpbridge.cli.api import Api, command
from mcpbridge.cli.output import Column, emit, field, table
from mcpbridge.errors import InvalidInput

PENDING = "/api/v1/agent/pending"
CALLS = "/api/v1/agent/tool-calls"
APPROVALS = "/api/v1/agent/tool-approvals"
OAUTH_RESOLUTIONS = "/api/v1/agent/mcp-oauth-resolutions"
_COLUMNS: list[Column] = [
    ("ID", field("pending_id")),
    ("USER", field("user_id")),
    ("WAITS FOR", field("kind")),
    ("SERVICE", field("service_name")),
    ("TOOL", field("tool")),
    ("CREATED", field("created_at")),
    ("EXPIRES", field("expires_at")),
]


def _print_call(body: dict[str, Any]) -> None:
    print(f"{body['pending_id']}  {body['status']}  {body['service_name']}.{body['tool']}  for {body['user_id']}")
    print(f"  arguments: {json.dumps(body['arguments'], ensure_ascii=False)}")
    if body["approval"]:
        print(f"  approval: {body['approval'].get('decision')} by {body['approval'].get('by')}")
    if body["error"]:
        print(f"  error: {body['error'].get('message') or body['error'].get('code')}")
    if body["result"] is not None:
        print(f"  result: {json.dumps(body['result'], ensure_ascii=False)[:2000]}")


@command()
async def calls_pending(api: Api, args: argparse.Namespace) -> None:
    body = await api.get(PENDING)
    emit(args, body, lambda b: table(b["items"], _COLUMNS, empty="No tool call is waiting."))


@command()
async def call_show(api: Api, args: argparse.Namespace) -> None:
    emit(args, await api.get(f"{CALLS}/{args.call}"), _print_call)


def modified_arguments(text: str) -> dict[str, Any]:
    """``--args``: a JSON object (checked here, then against the tool's schema by the API)."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise InvalidInput(f"--args is not JSON ({exc}): nothing was changed", code="invalid_modified_args") from None
    if not isinstance(value, dict):
        raise InvalidInput("--args must be a JSON object: nothing was changed", code="invalid_modified_args")
    return value


@command()
async def call_approve(api: Api, args: argparse.Namespace) -> None:
    decision: dict[str, Any] = {"decision": "approve"}
    if args.args is not None:
        decision["modified_args"] = modified_arguments(args.args)
    if args.reason:
        decision["reason"] = args.reason
    body = await api.post(f"{APPROVALS}/{args.call}", json=decision)
    emit(args, body, _print_approved)


def _print_approved(body: dict[str, Any]) -> None:
    print(
        f"Approved {body['pending_id']} ({body['service_name']}.{body['tool']}): it runs next; "
        f"`mcpbridge calls show {body['pending_id']}` shows its outcome."
    )


@command()
async def call_reject(api: Api, args: argparse.Namespace) -> None:
    current = await api.get(f"{CALLS}/{args.call}")
    if current["status"] == "awaiting_oauth":
        body = await api.post(f"{OAUTH_RESOLUTIONS}/{args.call}/cancel")
        verb = "Cancelled"
    else:
        decision = {"decision": "reject", **({"reason": args.reason} if args.reason else {})}
        body = await api.post(f"{APPROVALS}/{args.call}", json=decision)
        verb = "Rejected"
    emit(args, body, lambda b: print(f"{verb} {b['pending_id']} ({b['service_name']}.{b['tool']})."))
