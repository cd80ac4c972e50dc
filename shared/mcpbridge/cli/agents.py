"""``mcpbridge agents`` and ``mcpbridge call``: the agent tool broker from the terminal, through
``/api/v1/agents``, ``/api/v1/agent/tools``, ``/api/v1/agent/tools/describe`` and ``/api/v1/agent/tool-calls``.

``call SERVICE TOOL`` describes the tool (its ``tool_ref``), calls it and, when the call pauses for an approval or an
OAuth authorization, waits for it (``--wait`` seconds) or prints how to resolve it. Tool metadata and results come
from third-party servers: they are printed as data, marked untrusted by the API.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from mcpbridge.cli.api import Api, command, user_id_of
from mcpbridge.cli.calls import CALLS, modified_arguments
from mcpbridge.cli.output import Column, emit, field, shorten, table
from mcpbridge.errors import InvalidInput, NotFound

AGENTS = "/api/v1/agents"
TOOLS = "/api/v1/agent/tools"
SERVERS = "/api/v1/agent/servers"
_WAITING = frozenset({"awaiting_approval", "awaiting_oauth", "approved", "ready", "running"})
_FINAL = frozenset({"completed", "failed", "rejected", "cancelled", "uncertain"})
_AGENT_COLUMNS: list[Column] = [
    ("ID", field("id")),
    ("NAME", field("name")),
    ("SERVICES", lambda row: "all" if row["mcp_selection_mode"] == "all" else row["mcp_services"] or "none"),
    ("APPROVAL WAIT", lambda row: f"{row['approval_timeout_seconds']} s"),
    ("DESCRIPTION", lambda row: shorten(row["description"], 50)),
]
_TOOL_COLUMNS: list[Column] = [
    ("SERVICE", field("service_name")),
    ("TOOL", field("name")),
    ("APPROVAL", field("require_approval")),
    ("DESCRIPTION", lambda row: shorten(row["description"], 70)),
]


def _agent_id(api: Api, reference: str | None) -> str | None:
    """An agent profile by id (agt_...) or name; None (or "default"): the default profile, every service."""
    if reference is None or reference.casefold() == "default":
        return None
    return api.resolve(AGENTS, reference, "agt", "agent")


def _service_id(api: Api, reference: str) -> str:
    """A service the agent catalog shows, by id or name: read with call_tools, as agents do (not manage_services)."""
    if reference.startswith("svc_"):
        return reference
    listed = api.every(SERVERS)
    named = [s for s in listed["items"] if " ".join(str(s["name"]).split()).casefold() == reference.casefold().strip()]
    if not named:
        raise NotFound(
            f"no MCP service with the id or name {reference[:80]!r} for agents (`mcpbridge agents tools` lists them)",
            code="service_not_found",
        )
    return str(sorted(named, key=lambda s: bool(s["builtin"]))[0]["service_id"])  # the workspace's own first


@command()
def agents_list(api: Api, args: argparse.Namespace) -> None:
    body = api.every(AGENTS)

    def human(listed: dict[str, Any]) -> None:
        table(listed["items"], _AGENT_COLUMNS, empty="No agent profiles: agents use the default one (every service).")

    emit(args, body, human)


@command()
def agents_tools(api: Api, args: argparse.Namespace) -> None:
    params: dict[str, Any] = {}
    agent = _agent_id(api, args.agent)
    if agent is not None:
        params["agent_id"] = agent
    if args.service:
        params["service_id"] = _service_id(api, args.service)
    if args.query:
        # A search: one page of the best matches, ranked; a listing: every page.
        body: dict[str, Any] = api.get(
            TOOLS, params={**params, "query": args.query, "mode": args.mode, "limit": args.limit}
        )
    else:
        body = api.every(TOOLS, params)
    emit(args, body, lambda b: table(b["items"], _TOOL_COLUMNS, empty="This agent can call no tool."))


def _described(api: Api, args: argparse.Namespace) -> dict[str, Any]:
    params: dict[str, Any] = {"service_id": _service_id(api, args.service), "tool_name": args.tool}
    agent = _agent_id(api, args.agent)
    if agent is not None:
        params["agent_id"] = agent
    body: dict[str, Any] = api.get(f"{TOOLS}/describe", params=params)
    return body


@command()
def agents_describe(api: Api, args: argparse.Namespace) -> None:
    body = _described(api, args)

    def human(tool: dict[str, Any]) -> None:
        print(f"{tool['service_name']}.{tool['name']}  ({tool['function_name']})")
        print(f"  {tool['description']}")
        print(f"  approval: {'required' if tool['require_approval'] else 'not required'}")
        print("  input schema:")
        print("\n".join(f"    {line}" for line in json.dumps(tool["input_schema"], indent=2).splitlines()))
        print(f"  note: {tool['notice']}")

    emit(args, body, human)


@command()
def call(api: Api, args: argparse.Namespace) -> int:
    if not 0 <= args.wait <= 86_400:
        raise InvalidInput("--wait must be from 0 to 86400 seconds", code="invalid_wait")
    arguments = modified_arguments(args.args, code="invalid_arguments") if args.args is not None else {}
    tool = _described(api, args)
    request: dict[str, Any] = {"tool_ref": tool["tool_ref"], "arguments": arguments}
    agent = _agent_id(api, args.agent)
    if agent is not None:
        request["agent_id"] = agent
    if args.as_user:
        request["principal"] = {"user_id": user_id_of(api, args.as_user)}
    body = api.post(CALLS, json=request)
    deadline = time.monotonic() + args.wait
    notified = False
    while body["status"] in _WAITING and time.monotonic() < deadline:
        if not notified and not args.json and body["status"].startswith("awaiting_"):
            print(_pause(body, waiting=True), file=sys.stderr)
            notified = True
        time.sleep(0.5)
        body = api.get(f"{CALLS}/{body['pending_id']}")
    emit(args, body, _print_outcome)
    if body["status"] == "completed":
        return 0
    if body["status"] in _FINAL:
        return 1
    return 3  # still waiting: the pause was printed with how to resolve it


def _pause(body: dict[str, Any], *, waiting: bool) -> str:
    call_id = body["pending_id"]
    what = f"{body['service_name']}.{body['tool']}"
    until = f" until {body['expires_at']}" if body.get("expires_at") else ""
    if body["status"] == "awaiting_oauth":
        link = body.get("authorization_url") or f"the console's page of the call {call_id}"
        return (
            f"Call {call_id} ({what}) waits for the user's OAuth authorization{until}: open {link}; "
            f"or cancel it: mcpbridge calls reject {call_id}" + ("; waiting..." if waiting else "")
        )
    return (
        f"Call {call_id} ({what}) waits for an approval{until}: mcpbridge calls approve {call_id} "
        f"(or reject {call_id}); then `mcpbridge calls show {call_id}` shows its outcome"
        + ("; waiting..." if waiting else "")
    )


def _print_outcome(body: dict[str, Any]) -> None:
    if body["status"].startswith("awaiting_"):
        print(_pause(body, waiting=False))
        return
    print(f"{body['pending_id']}  {body['status']}  {body['service_name']}.{body['tool']}")
    if body.get("notice"):
        print(f"  note: {body['notice']}")
    if body.get("error"):
        print(f"  error: {body['error'].get('message') or body['error'].get('code')}")
    if body.get("outcome_uncertain"):
        print("  the outcome is uncertain: the tool may have run (it is not called again)")
    if body.get("result") is not None:
        print(f"  result: {json.dumps(body['result'], ensure_ascii=False)[:4000]}")
