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

from mcpbridge.cli.api import WORKSPACE_HEADER, Api, Problem, command
from mcpbridge.cli.output import Column, emit, field, table
from mcpbridge.errors import InvalidInput

PENDING = "/api/v1/agent/pending"
WAITING_BY_WORKSPACE = "/api/v1/workspaces/pending-calls"
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
def calls_pending(api: Api, args: argparse.Namespace) -> None:
    if args.all_workspaces:
        if args.workspace:
            raise InvalidInput("--all-workspaces and --workspace exclude each other", code="invalid_arguments")
        _pending_everywhere(api, args)
        return
    body = api.every(PENDING)
    elsewhere = [] if args.json else _waiting_elsewhere(api)

    def human(listed: dict[str, Any]) -> None:
        table(listed["items"], _COLUMNS, empty="No tool call is waiting here.")
        for workspace in elsewhere:
            print(
                f"{workspace['pending']} call(s) wait in workspace {workspace['workspace_name']} "
                f"({workspace['workspace_id']}): mcpbridge calls pending --workspace {workspace['workspace_id']}"
            )
        if elsewhere:
            print("Every workspace's: mcpbridge calls pending --all-workspaces")

    emit(args, body, human)


def _waiting_elsewhere(api: Api) -> list[dict[str, Any]]:
    """For a platform admin, the other workspaces where calls wait (nothing for any other key)."""
    try:
        counted = api.every(WAITING_BY_WORKSPACE)
    except Problem as problem:
        if problem.status == 403:
            return []
        raise
    here = api.header(WORKSPACE_HEADER) or (api.get("/api/v1/me"))["workspace_id"]
    return [workspace for workspace in counted["items"] if workspace["workspace_id"] != here]


def _pending_everywhere(api: Api, args: argparse.Namespace) -> None:
    """Every waiting call of every workspace (a platform admin's key), each with its workspace."""
    counted = api.every(WAITING_BY_WORKSPACE)
    items: list[dict[str, Any]] = []
    for workspace in counted["items"]:
        api.address(workspace_id=workspace["workspace_id"])
        listed = api.every(PENDING)
        there = {"workspace_id": workspace["workspace_id"], "workspace_name": workspace["workspace_name"]}
        items += [{**there, **item} for item in listed["items"]]
    items.sort(key=lambda item: (item["created_at"], item["pending_id"]))
    columns: list[Column] = [("WORKSPACE", field("workspace_name")), *_COLUMNS]
    emit(args, {"items": items, "next_cursor": None}, lambda b: table(b["items"], columns, empty=_NONE_ANYWHERE))


_NONE_ANYWHERE = "No tool call is waiting in any workspace."


@command()
def call_show(api: Api, args: argparse.Namespace) -> None:
    emit(args, api.get(f"{CALLS}/{args.call}"), _print_call)


def modified_arguments(text: str, *, code: str = "invalid_modified_args") -> dict[str, Any]:
    """``--args``: a JSON object (checked here, then against the tool's schema by the API)."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise InvalidInput(f"--args is not JSON ({exc}): nothing was changed", code=code) from None
    if not isinstance(value, dict):
        raise InvalidInput("--args must be a JSON object: nothing was changed", code=code)
    return value


@command()
def call_approve(api: Api, args: argparse.Namespace) -> None:
    decision: dict[str, Any] = {"decision": "approve"}
    if args.args is not None:
        decision["modified_args"] = modified_arguments(args.args)
    if args.reason:
        decision["reason"] = args.reason
    body = api.post(f"{APPROVALS}/{args.call}", json=decision)
    emit(args, body, _print_approved)


def _print_approved(body: dict[str, Any]) -> None:
    print(
        f"Approved {body['pending_id']} ({body['service_name']}.{body['tool']}): it runs next; "
        f"`mcpbridge calls show {body['pending_id']}` shows its outcome."
    )


@command()
def call_reject(api: Api, args: argparse.Namespace) -> None:
    current = api.get(f"{CALLS}/{args.call}")
    if current["status"] == "awaiting_oauth":
        body = api.post(f"{OAUTH_RESOLUTIONS}/{args.call}/cancel")
        verb = "Cancelled"
    else:
        decision = {"decision": "reject", **({"reason": args.reason} if args.reason else {})}
        body = api.post(f"{APPROVALS}/{args.call}", json=decision)
        verb = "Rejected"
    emit(args, body, lambda b: print(f"{verb} {b['pending_id']} ({b['service_name']}.{b['tool']})."))


AUDIT = "/api/v1/calls"
_AUDIT_COLUMNS: list[Column] = [
    ("ID", field("call_id")),
    ("CREATED", field("created_at")),
    ("USER", field("user_id")),
    ("THROUGH", lambda row: row["endpoint_id"] or row["agent_id"] or "default agent"),
    ("SERVICE", field("service_name")),
    ("TOOL", field("tool")),
    ("OUTCOME", field("outcome")),
    ("APPROVED BY", lambda row: (row["approval"] or {}).get("by") or ""),
    ("MS", field("duration_ms")),
]
_AUDIT_FILTERS = (
    "since",
    "until",
    "user_id",
    "service_id",
    "tool",
    "outcome",
    "endpoint_id",
    "agent_id",
    "rule_id",
)


@command()
def calls_list(api: Api, args: argparse.Namespace) -> None:
    params = {name: getattr(args, name) for name in _AUDIT_FILTERS if getattr(args, name) is not None}
    body = api.every(AUDIT, params)
    emit(args, body, lambda b: table(b["items"], _AUDIT_COLUMNS, empty="No calls."))
