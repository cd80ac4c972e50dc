"""``mcpbridge endpoints``: MCP endpoints through ``/api/v1/mcp-endpoints``. ``create`` and ``rotate`` print the
token once with the client configs the API answers (Claude Code, Cursor, VS Code, OpenCode, and ``mcp-remote`` for
stdio-only clients)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from mcpbridge.cli.api import Api, command
from mcpbridge.cli.knowledge import kb_id
from mcpbridge.cli.output import Column, deleted, emit, field, table
from mcpbridge.cli.services import service_id

ENDPOINTS = "/api/v1/mcp-endpoints"
_COLUMNS: list[Column] = [
    ("ID", field("id")),
    ("NAME", field("name")),
    ("ENABLED", field("enabled")),
    ("KNOWLEDGE BASES", lambda row: row["knowledge_base_ids"] or "all"),
    ("TOKEN", lambda row: f"…{row['token_hint']}"),
    ("LAST USED", field("last_used_at")),
]


def _endpoint_id(api: Api, reference: str) -> str:
    return api.resolve(ENDPOINTS, reference, "ep", "endpoint")


def _print_endpoint(body: dict[str, Any]) -> None:
    state = "enabled" if body["enabled"] else "disabled"
    kbs = ", ".join(body["knowledge_base_ids"]) or "every knowledge base"
    print(f"{body['id']}  {body['name']}  ({state}; {kbs}; {body['rate_limit_per_minute']} calls/min)")
    print(f"  tools: {', '.join(body['tools'])}")
    for published in body.get("services") or []:
        print(f"  external: {published['service_id']}: {', '.join(published['tools'])}")
    if body.get("services") and body.get("external_tool_mode") == "search":
        print("  external tools: search_tools and call_tool (search mode)")


def _services(api: Api, given: list[str]) -> list[dict[str, Any]]:
    """``--service SERVICE[:tool,tool]`` options as the API's ``services`` (no tool list: every enabled tool)."""
    services = []
    for option in given:
        reference, _, tools = option.partition(":")
        names = [name.strip() for name in tools.split(",") if name.strip()] or ["*"]
        services.append({"service_id": service_id(api, reference.strip()), "tools": names})
    return services


def print_issued(body: dict[str, Any], what: str) -> None:
    """An endpoint with its token, as create and rotate answer it: the token once, then the client configs."""
    configs = body["client_configs"]
    print(f"{what}: {body['url']}")
    print("Token (shown once; store it now):")
    print(f"  {body['token']}")
    print("\nClaude Code:")
    print(f"  {configs['claude_code']}")
    for title, name in (
        ("Cursor (~/.cursor/mcp.json)", "cursor"),
        ("VS Code (.vscode/mcp.json)", "vscode"),
        ("OpenCode (opencode.json)", "opencode"),
        ("Other clients, over stdio through mcp-remote (Claude Desktop...)", "mcp_remote"),
    ):
        print(f"\n{title}:")
        print("\n".join(f"  {line}" for line in json.dumps(configs[name], indent=2).splitlines()))


@command()
def endpoints_list(api: Api, args: argparse.Namespace) -> None:
    body = api.every(ENDPOINTS)
    emit(args, body, lambda b: table(b["items"], _COLUMNS, empty="No MCP endpoints."))


@command()
def endpoint_create(api: Api, args: argparse.Namespace) -> None:
    request: dict[str, Any] = {
        "name": args.name,
        "description": args.description,
        "enabled": not args.disabled,
        "knowledge_base_ids": [kb_id(api, kb) for kb in args.kb or []],
        "rate_limit_per_minute": args.rate_limit,
    }
    if args.tool is not None:
        request["tools"] = args.tool
    if args.agent is not None:
        request["default_agent_id"] = args.agent
    if args.service:
        request["services"] = _services(api, args.service)
    if args.external_tools != "list":
        request["external_tool_mode"] = args.external_tools
    body = api.post(ENDPOINTS, json=request)
    emit(args, body, lambda b: print_issued(b, f"Endpoint {b['id']} ({b['name']}) published"))


@command()
def endpoint_update(api: Api, args: argparse.Namespace) -> None:
    request: dict[str, Any] = {}
    if args.no_services or args.service:
        request["services"] = [] if args.no_services else _services(api, args.service)
    if args.external_tools is not None:
        request["external_tool_mode"] = args.external_tools
    body = api.put(f"{ENDPOINTS}/{_endpoint_id(api, args.endpoint)}", json=request)
    emit(args, body, _print_endpoint)


@command()
def endpoint_show(api: Api, args: argparse.Namespace) -> None:
    emit(args, api.get(f"{ENDPOINTS}/{_endpoint_id(api, args.endpoint)}"), _print_endpoint)


@command()
def endpoint_instructions(api: Api, args: argparse.Namespace) -> None:
    target = _endpoint_id(api, args.endpoint)
    body = api.post(
        f"{ENDPOINTS}/{target}/usage-instructions", params={"template": "true" if args.template else "false"}
    )
    emit(args, body, lambda b: print("\n".join([*(f"note: {n}" for n in b["notices"]), b["instructions"]])))


@command()
def endpoint_rotate(api: Api, args: argparse.Namespace) -> None:
    body = api.post(f"{ENDPOINTS}/{_endpoint_id(api, args.endpoint)}/rotate-token")
    refused = "the old one is refused from now on"
    emit(args, body, lambda b: print_issued(b, f"New token of endpoint {b['id']} ({b['name']}); {refused}"))


def _set_enabled(api: Api, args: argparse.Namespace, enabled: bool) -> None:
    body = api.put(f"{ENDPOINTS}/{_endpoint_id(api, args.endpoint)}", json={"enabled": enabled})
    state = "enabled" if enabled else "disabled: its token is refused from the next request on"
    emit(args, body, lambda b: print(f"Endpoint {b['id']} ({b['name']}) {state}."))


@command()
def endpoint_disable(api: Api, args: argparse.Namespace) -> None:
    _set_enabled(api, args, False)


@command()
def endpoint_enable(api: Api, args: argparse.Namespace) -> None:
    _set_enabled(api, args, True)


@command()
def endpoint_delete(api: Api, args: argparse.Namespace) -> None:
    target = _endpoint_id(api, args.endpoint)
    api.delete(f"{ENDPOINTS}/{target}")
    deleted(args, "endpoint", target)
