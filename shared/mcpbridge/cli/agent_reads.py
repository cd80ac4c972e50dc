"""``mcpbridge agents resources|read|prompts|prompt|refresh``: what an agent reads from external services besides
tools, through ``/api/v1/agent/resources``, ``/api/v1/agent/resources/read``, ``/api/v1/agent/prompts``,
``/api/v1/agent/prompts/get`` and ``/api/v1/agent/catalog/refresh``. Everything read comes from third-party servers:
it is printed as data, marked untrusted by the API."""

from __future__ import annotations

import argparse
from typing import Any

from mcpbridge.cli.agents import _agent_id, _service_id
from mcpbridge.cli.api import Api, command
from mcpbridge.cli.calls import modified_arguments
from mcpbridge.cli.output import Column, emit, field, shorten, table

RESOURCES = "/api/v1/agent/resources"
PROMPTS = "/api/v1/agent/prompts"
REFRESH = "/api/v1/agent/catalog/refresh"
_RESOURCE_COLUMNS: list[Column] = [
    ("URI", field("uri")),
    ("NAME", field("name")),
    ("TYPE", lambda row: row["mime_type"] or ""),
    ("DESCRIPTION", lambda row: shorten(row["description"] or "", 60)),
]
_PROMPT_COLUMNS: list[Column] = [
    ("NAME", field("name")),
    ("ARGUMENTS", lambda row: ", ".join(a["name"] + ("" if a["required"] else "?") for a in row["arguments"])),
    ("DESCRIPTION", lambda row: shorten(row["description"] or "", 60)),
]
_REFRESH_COLUMNS: list[Column] = [
    ("SERVICE", field("name")),
    ("OUTCOME", field("outcome")),
    ("TOOLS", lambda row: "" if row["tool_count"] is None else str(row["tool_count"])),
    ("ERROR", lambda row: "" if row["error"] is None else shorten(row["error"]["message"], 60)),
]


def _params(api: Api, args: argparse.Namespace) -> dict[str, Any]:
    params: dict[str, Any] = {"service_id": _service_id(api, args.service)}
    agent = _agent_id(api, args.agent)
    if agent is not None:
        params["agent_id"] = agent
    return params


@command()
def agents_resources(api: Api, args: argparse.Namespace) -> None:
    body = api.every(RESOURCES, _params(api, args))
    emit(args, body, lambda b: table(b["items"], _RESOURCE_COLUMNS, empty="The service lists no resource."))


@command()
def agents_read(api: Api, args: argparse.Namespace) -> None:
    body: dict[str, Any] = api.get(f"{RESOURCES}/read", params={**_params(api, args), "uri": args.uri})

    def human(read: dict[str, Any]) -> None:
        for part in read["contents"]:
            kind = part.get("mimeType") or "unknown type"
            if "text" in part:
                print(part["text"])
            else:
                print(f"[{part['uri']}: binary, {kind}, {len(part.get('blob', ''))} base64 characters; --json for it]")
        print(f"note: {read['notice']}")

    emit(args, body, human)


@command()
def agents_prompts(api: Api, args: argparse.Namespace) -> None:
    body = api.every(PROMPTS, _params(api, args))
    emit(args, body, lambda b: table(b["items"], _PROMPT_COLUMNS, empty="The service lists no prompt."))


@command()
def agents_prompt(api: Api, args: argparse.Namespace) -> None:
    arguments = modified_arguments(args.args, code="invalid_prompt_arguments") if args.args is not None else {}
    request = {**_params(api, args), "name": args.name, "arguments": arguments}
    body: dict[str, Any] = api.post(f"{PROMPTS}/get", json=request)

    def human(got: dict[str, Any]) -> None:
        for message in got["messages"]:
            content = message.get("content") or {}
            text = content.get("text") if isinstance(content, dict) else None
            print(f"{message.get('role')}: {text if text is not None else content}")
        print(f"note: {got['notice']}")

    emit(args, body, human)


@command()
def agents_refresh(api: Api, args: argparse.Namespace) -> int:
    request: dict[str, Any] = {}
    if args.service:
        request["service_id"] = _service_id(api, args.service)
    agent = _agent_id(api, args.agent)
    if agent is not None:
        request["agent_id"] = agent
    body: dict[str, Any] = api.post(REFRESH, json=request)
    emit(args, body, lambda b: table(b["items"], _REFRESH_COLUMNS, empty="The agent selects no enabled service."))
    return 0 if all(item["outcome"] == "refreshed" for item in body["items"]) else 1
