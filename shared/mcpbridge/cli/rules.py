"""``mcpbridge rules`` and ``mcpbridge groups``: the workspace's rules for tool calls and the groups of users they
name, through ``/api/v1/policy-rules`` and ``/api/v1/groups``.

``rules set FILE`` saves a rule set written as JSON (``{"mode", "default", "rules"}``; ``-`` reads standard input)
on the version it reads first, so it never overwrites a change it has not seen unless ``--expected-version`` says
which version the file was written against.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from mcpbridge.cli.api import Api, command
from mcpbridge.cli.output import Column, emit, field, shorten, table
from mcpbridge.errors import InvalidInput

RULES = "/api/v1/policy-rules"
GROUPS = "/api/v1/groups"
_RULE_COLUMNS: list[Column] = [
    ("#", field("position")),
    ("ID", field("id")),
    ("OUTCOME", field("outcome")),
    ("DESCRIPTION", lambda row: shorten(str(row.get("description") or row.get("reason") or ""), 60)),
]
_GROUP_COLUMNS: list[Column] = [
    ("NAME", field("name")),
    ("MEMBERS", lambda row: len(row["members"])),
    ("DESCRIPTION", lambda row: shorten(row["description"], 60)),
]


def _print_rules(body: dict[str, Any]) -> None:
    print(f"version {body['version']}, {body['mode']}, default {body['default']}")
    rows = [{"position": n + 1, **rule} for n, rule in enumerate(body["rules"])]
    table(rows, _RULE_COLUMNS, empty="No rules: every call gets the default.")


@command()
def rules_show(api: Api, args: argparse.Namespace) -> None:
    path = RULES if args.version is None else f"{RULES}/versions/{args.version}"
    emit(args, api.get(path), _print_rules)


@command()
def rules_set(api: Api, args: argparse.Namespace) -> None:
    text = sys.stdin.read() if args.file == "-" else _read(Path(args.file))
    try:
        body = json.loads(text)
    except json.JSONDecodeError as bad:
        raise InvalidInput(
            f"the rule set is not valid JSON: {bad.msg} (line {bad.lineno})", code="invalid_rule"
        ) from None
    if not isinstance(body, dict):
        raise InvalidInput('the rule set is a JSON object: {"mode", "default", "rules"}', code="invalid_rule")
    expected = args.expected_version if args.expected_version is not None else api.get(RULES)["version"]
    body = {key: value for key, value in body.items() if key not in ("version", "updated_at", "updated_by")}
    emit(args, api.put(RULES, json={**body, "expected_version": expected}), _print_rules)


@command()
def rules_mode(api: Api, args: argparse.Namespace) -> None:
    emit(args, api.put(f"{RULES}/mode", json={"mode": args.mode}), _print_rules)


@command()
def groups_list(api: Api, args: argparse.Namespace) -> None:
    emit(args, api.get(GROUPS), lambda body: table(body["items"], _GROUP_COLUMNS, empty="No groups."))


@command()
def groups_show(api: Api, args: argparse.Namespace) -> None:
    def human(group: dict[str, Any]) -> None:
        print(f"{group['name']}: {group['description']}".rstrip(": "))
        for member in group["members"]:
            print(f"  {member}")

    emit(args, api.get(f"{GROUPS}/{args.name}"), human)


@command()
def groups_create(api: Api, args: argparse.Namespace) -> None:
    body = {"name": args.name, "description": args.description or "", "members": args.member or []}
    emit(args, api.post(GROUPS, json=body), lambda g: print(f"created group {g['name']} ({len(g['members'])} members)"))


@command()
def groups_set(api: Api, args: argparse.Namespace) -> None:
    current = api.get(f"{GROUPS}/{args.name}")
    description = current["description"] if args.description is None else args.description
    body = {"description": description, "members": args.member or []}
    emit(
        args, api.put(f"{GROUPS}/{args.name}", json=body), lambda g: print(f"{g['name']}: {len(g['members'])} members")
    )


@command()
def groups_delete(api: Api, args: argparse.Namespace) -> None:
    api.delete(f"{GROUPS}/{args.name}")
    emit(args, {"deleted": args.name}, lambda body: print(f"deleted group {body['deleted']}"))


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as failed:
        raise InvalidInput(f"cannot read {path}: {failed.strerror}", code="invalid_rule") from None
