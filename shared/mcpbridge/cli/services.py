"""``mcpbridge services`` (but ``authorize``, in :mod:`mcpbridge.cli.authorize`): external MCP services through
``/api/v1/mcp-services``. Secrets are read from standard input (``services credentials``), never taken from the
command line, where other users of the machine could read them."""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from typing import Any

from mcpbridge.cli.api import Api, command
from mcpbridge.cli.output import Column, deleted, emit, field, shorten, table
from mcpbridge.errors import InvalidInput

SERVICES = "/api/v1/mcp-services"
MAX_IMPORT_BYTES = 1024 * 1024
_COLUMNS: list[Column] = [
    ("ID", field("id")),
    ("NAME", field("name")),
    ("TRANSPORT", field("transport")),
    ("AUTH", lambda row: "builtin" if row["builtin"] else row["auth_config"]["auth_type"]),
    ("ENABLED", field("enabled")),
]
_TOOL_COLUMNS: list[Column] = [
    ("NAME", field("name")),
    ("ENABLED", field("enabled")),
    ("APPROVAL", field("require_approval")),
    ("DESCRIPTION", lambda row: shorten(row["description"], 70)),
]


def service_id(api: Api, reference: str) -> str:
    return api.resolve(SERVICES, reference, "svc", "service")


def _print_service(body: dict[str, Any]) -> None:
    state = "enabled" if body["enabled"] else "disabled"
    print(f"{body['id']}  {body['name']}  ({state}; {body['transport']})")
    if body["url"] is not None:
        print(f"  url: {body['url']}")
    if body["auth_config"] is not None:
        print(f"  auth: {body['auth_config']['auth_type']}")
    for name, status in body["credentials"].items():
        print(f"  {name}: {'set' if status['configured'] else 'not set'}")
    for warning in body.get("warnings", []):
        print(f"  warning: {warning}")


@command()
def services_list(api: Api, args: argparse.Namespace) -> None:
    body = api.every(SERVICES)
    emit(args, body, lambda b: table(b["items"], _COLUMNS, empty="No MCP services registered."))


@command()
def service_show(api: Api, args: argparse.Namespace) -> None:
    emit(args, api.get(f"{SERVICES}/{service_id(api, args.service)}"), _print_service)


def _headers(given: list[str] | None) -> dict[str, str]:
    headers: dict[str, str] = {}
    for raw in given or []:
        name, colon, value = raw.partition(":")
        if not colon or not name.strip():
            raise InvalidInput(f"--header takes NAME:VALUE, not {raw.split(':')[0][:60]!r}", code="invalid_header")
        headers[name.strip()] = value.strip()
    return headers


@command()
def service_add(api: Api, args: argparse.Namespace) -> None:
    auth: dict[str, Any] = {"auth_type": args.auth}
    for name, value in (("api_key_header", args.api_key_header), ("scopes", args.scope), ("client_id", args.client_id)):
        if value is not None:
            auth[name] = value
    request = {
        "name": args.name,
        "url": args.url,
        "transport": args.transport,
        "description": args.description,
        "enabled": not args.disabled,
        "headers": _headers(args.header),
        "auth_config": auth,
    }
    body = api.post(SERVICES, json=request)

    def human(saved: dict[str, Any]) -> None:
        print(f"Service {saved['id']} ({saved['name']}) registered.")
        for warning in saved["warnings"]:
            print(f"  warning: {warning}")
        if args.auth in ("api_key", "bearer"):
            field_name = "api_key" if args.auth == "api_key" else "token"
            print(f"Set its secret: mcpbridge services credentials {saved['id']} {field_name} < secret.txt")
        elif args.auth == "oauth":
            print(f"Authorize it for a user: mcpbridge services authorize {saved['id']} --user usr_...")
        print(f"Check it: mcpbridge services test {saved['id']}")

    emit(args, body, human)


def _read_import(path: str) -> dict[str, Any]:
    try:
        text = sys.stdin.read(MAX_IMPORT_BYTES + 1) if path == "-" else _read_bounded(path)
    except OSError as exc:
        raise InvalidInput(f"{path}: {exc.strerror or exc}", code="invalid_file") from None
    if len(text) > MAX_IMPORT_BYTES:
        raise InvalidInput(f"{path}: larger than {MAX_IMPORT_BYTES} bytes", code="invalid_file")
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise InvalidInput(f"{path} is not JSON ({exc})", code="invalid_file") from None
    if not isinstance(document, dict) or not isinstance(document.get("mcpServers"), dict):
        raise InvalidInput(f'{path} has no "mcpServers" object', code="invalid_file")
    return {"mcpServers": document["mcpServers"]}


def _read_bounded(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read(MAX_IMPORT_BYTES + 1)


@command()
def service_import(api: Api, args: argparse.Namespace) -> int:
    body = api.post(f"{SERVICES}/import", json=_read_import(str(args.file)))

    def human(result: dict[str, Any]) -> None:
        for created in result["created"]:
            print(f"registered  {created['id']}  {created['name']}")
        for refused in result["refused"]:
            print(f"refused     {refused['name']}: {refused['reason']}")
        for warning in result["warnings"]:
            print(f"warning: {warning}")

    emit(args, body, human)
    if body["refused"]:
        print(f"mcpbridge: {len(body['refused'])} server(s) were not registered (see above)", file=sys.stderr)
        return 1
    return 0


@command(acting_user=True)
def service_test(api: Api, args: argparse.Namespace) -> int:
    body = api.post(f"{SERVICES}/{service_id(api, args.service)}/test")

    def human(result: dict[str, Any]) -> None:
        server = " ".join(part for part in (result["server_name"], result["server_version"]) if part)
        print(f"{'OK' if result['success'] else 'FAILED'}: {result['message']}")
        if server:
            print(f"  server: {server} (protocol {result['protocol_version']})")
        print(f"  tools: {', '.join(t['name'] for t in result['tools']) or 'none'}")
        print(f"  resources: {len(result['resources'])}")
        for warning in result["warnings"]:
            print(f"  warning: {warning}")

    emit(args, body, human)
    if not body["success"]:
        print(f"mcpbridge: the test of the service failed: {body['message']}", file=sys.stderr)
        return 1
    return 0


@command(acting_user=True)
def service_refresh(api: Api, args: argparse.Namespace) -> int:
    body = api.post(f"{SERVICES}/{service_id(api, args.service)}/metadata/refresh")

    def human(view: dict[str, Any]) -> None:
        snapshot = view["data"]
        if snapshot is None:
            return
        changes = snapshot["changes"]
        print(f"Catalog synced at {snapshot['synced_at']}: {len(snapshot['tools'])} tool(s).")
        for label in ("added", "changed", "removed"):
            if changes[label]:
                print(f"  {label}: {', '.join(changes[label])}")

    emit(args, body, human)
    if body["last_error"] is not None:
        print(f"mcpbridge: the refresh failed: {body['last_error']['message']}", file=sys.stderr)
        return 1
    return 0


@command(acting_user=True)
def service_tools(api: Api, args: argparse.Namespace) -> None:
    body = api.get(f"{SERVICES}/{service_id(api, args.service)}/tools")
    emit(args, body, lambda b: table(b["items"], _TOOL_COLUMNS, empty="The service lists no tools."))


@command()
def service_policy(api: Api, args: argparse.Namespace) -> None:
    if args.enabled is None and args.approval is None:
        raise InvalidInput(
            "say what to set: --enable or --disable, and/or --require-approval or --no-approval",
            code="invalid_arguments",
        )
    request: dict[str, Any] = {"pre_register": args.pre_register}
    if args.enabled is not None:
        request["enabled"] = args.enabled
    if args.approval is not None:
        request["require_approval"] = args.approval
    target = service_id(api, args.service)
    body = api.put(f"{SERVICES}/{target}/tool-approvals/{args.tool}", json=request)

    def human(policy: dict[str, Any]) -> None:
        state = "enabled" if policy["enabled"] else "disabled"
        approval = "needs approval" if policy["require_approval"] else "runs without approval"
        print(f"Tool {policy['tool_name']}: {state}, {approval}.")

    emit(args, body, human)


def _read_secret(field_name: str) -> str:
    # Never echoed on a terminal; elsewhere (a pipe, a file) read as it comes.
    value = getpass.getpass(f"{field_name}: ") if sys.stdin.isatty() else sys.stdin.read(64 * 1024)
    value = value.strip()
    if not value:
        raise InvalidInput(f"no {field_name} on standard input: nothing was changed", code="invalid_credentials")
    return value


@command()
def service_credentials(api: Api, args: argparse.Namespace) -> None:
    target = service_id(api, args.service)
    api.get(f"{SERVICES}/{target}")  # an unknown service is reported before the secret is asked for
    secret = _read_secret(args.field)  # from the terminal or standard input: nothing else runs meanwhile
    body = api.put(f"{SERVICES}/{target}/credentials", json={args.field: secret})
    emit(args, body, lambda b: print(f"The {args.field} of {b['name']} ({b['id']}) is set (sealed; never shown)."))


@command()
def service_delete(api: Api, args: argparse.Namespace) -> None:
    target = service_id(api, args.service)
    api.delete(f"{SERVICES}/{target}")
    deleted(args, "service", target)
