"""``mcpbridge workspaces``, ``users`` and ``keys``: the REST routes of ``/api/v1/workspaces``, ``/users`` and
``/api-keys``, plus ``keys create --admin``, the way back after every admin key is lost (minted straight in the data
this machine holds: whoever can run it holds the data anyway)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from mcpbridge.cli.api import Api, command, user_id_of
from mcpbridge.cli.output import Column, deleted, emit, field, table
from mcpbridge.errors import InvalidInput

WORKSPACES = "/api/v1/workspaces"
USERS = "/api/v1/users"
KEYS = "/api/v1/api-keys"
_STATUS_COLUMNS: list[Column] = [("ID", field("id")), ("STATUS", field("status")), ("NAME", field("name"))]


def _one_line(body: dict[str, Any]) -> None:
    print(f"{body['id']}  {body['status']:<8}  {body['name']}")


# ---------------------------------------------------------------------------------------------------- workspaces


def _workspace_id(api: Api, reference: str) -> str:
    return api.resolve(WORKSPACES, reference, "ws", "workspace")


@command()
def workspaces_list(api: Api, args: argparse.Namespace) -> None:
    body = api.every(WORKSPACES)
    emit(args, body, lambda b: table(b["items"], _STATUS_COLUMNS, empty="No workspaces."))


@command()
def workspace_show(api: Api, args: argparse.Namespace) -> None:
    emit(args, api.get(f"{WORKSPACES}/{_workspace_id(api, args.target)}"), _one_line)


@command()
def workspace_create(api: Api, args: argparse.Namespace) -> None:
    body = api.post(WORKSPACES, json={"name": args.name, "admin_name": args.admin_name})

    def human(created: dict[str, Any]) -> None:
        print(f"Workspace {created['id']} ({created['name']}) created.")
        print(f"Admin API key of its user {created['admin_user_id']} (shown once; store it now):")
        print(f"  {created['admin_api_key']['key']}")

    emit(args, body, human)


@command()
def workspace_rename(api: Api, args: argparse.Namespace) -> None:
    target = _workspace_id(api, args.target)
    emit(args, api.put(f"{WORKSPACES}/{target}", json={"name": args.name}), _one_line)


@command()
def workspace_disable(api: Api, args: argparse.Namespace) -> None:
    emit(args, api.post(f"{WORKSPACES}/{_workspace_id(api, args.target)}/disable"), _one_line)


@command()
def workspace_enable(api: Api, args: argparse.Namespace) -> None:
    emit(args, api.post(f"{WORKSPACES}/{_workspace_id(api, args.target)}/enable"), _one_line)


@command()
def workspace_delete(api: Api, args: argparse.Namespace) -> None:
    body = api.delete(f"{WORKSPACES}/{_workspace_id(api, args.target)}")

    def human(shown: dict[str, Any]) -> None:
        print(
            f"Workspace {shown['id']} ({shown['name']}) is being deleted: its keys and tokens are refused; what it "
            "held is purged by a background job of the server."
        )

    emit(args, body, human)


# ---------------------------------------------------------------------------------------------------- users


@command()
def users_list(api: Api, args: argparse.Namespace) -> None:
    body = api.every(USERS)
    emit(args, body, lambda b: table(b["items"], _STATUS_COLUMNS, empty="No users."))


@command()
def user_create(api: Api, args: argparse.Namespace) -> None:
    body = api.post(USERS, json={"name": args.name})
    hint = "give it a key: mcpbridge keys create --user"  # by id or by name
    emit(args, body, lambda b: print(f"User {b['id']} ({b['name']}) created; {hint} {b['id']}"))


@command()
def user_show(api: Api, args: argparse.Namespace) -> None:
    emit(args, api.get(f"{USERS}/{user_id_of(api, args.user)}"), _one_line)


@command()
def user_disable(api: Api, args: argparse.Namespace) -> None:
    emit(args, api.post(f"{USERS}/{user_id_of(api, args.user)}/disable"), _one_line)


@command()
def user_enable(api: Api, args: argparse.Namespace) -> None:
    emit(args, api.post(f"{USERS}/{user_id_of(api, args.user)}/enable"), _one_line)


@command()
def user_delete(api: Api, args: argparse.Namespace) -> None:
    target = user_id_of(api, args.user)
    api.delete(f"{USERS}/{target}")
    deleted(args, "user", target, " Its keys, OAuth tokens and sessions are gone; its paused calls cancelled.")


# ---------------------------------------------------------------------------------------------------- keys

_KEY_COLUMNS: list[Column] = [
    ("ID", field("id")),
    ("USER", field("user_id")),
    ("ROLE", field("role")),
    ("STATUS", field("status")),
    ("CAPABILITIES", lambda row: "all" if row["capabilities"] is None else row["capabilities"]),
    ("HINT", field("hint")),
    ("NAME", field("name")),
]


@command()
def keys_list(api: Api, args: argparse.Namespace) -> None:
    body = api.every(KEYS)
    if args.user:
        user = user_id_of(api, args.user)
        body = {**body, "items": [key for key in body["items"] if key["user_id"] == user]}
    emit(args, body, lambda b: table(b["items"], _KEY_COLUMNS, empty="No API keys."))


def key_create(args: argparse.Namespace) -> int:
    if args.admin:
        return _recover_admin_key(args)
    if not args.user:
        raise InvalidInput(
            "name the key's user with --user (its id usr_... or its name), or mint an unrestricted admin key with "
            "--admin",
            code="invalid_arguments",
        )
    return _mint_key(args)


@command()
def _mint_key(api: Api, args: argparse.Namespace) -> None:
    from mcpbridge.cli.knowledge import KNOWLEDGE_BASES

    request: dict[str, Any] = {"name": args.name or "cli", "role": args.role or "viewer"}
    if args.capability is not None:
        request["capabilities"] = args.capability
    if args.kb is not None:
        request["knowledge_base_ids"] = [api.resolve(KNOWLEDGE_BASES, kb, "kb", "knowledge base") for kb in args.kb]
    body = api.post(f"{USERS}/{user_id_of(api, args.user)}/api-keys", json=request)
    emit(args, body, lambda b: _print_key(b, f"API key {b['id']} ({b['role']}) for user {b['user_id']}"))


def _print_key(body: dict[str, Any], what: str) -> None:
    print(f"{what} (shown once; store it now):")
    print(f"  {body['key']}")


def _recover_admin_key(args: argparse.Namespace) -> int:
    """An unrestricted admin API key, minted straight in the store, whatever keys exist."""
    from mcpbridge.cli.context import acting_workspace, admin_user, known_user, opened, where
    from mcpbridge.http.routes.api_keys import CreatedApiKey
    from mcpbridge.observability import install_log_redaction

    install_log_redaction()

    if args.role or args.capability or args.kb:
        raise InvalidInput(
            "--admin mints an unrestricted admin key: leave out --role, --capability and --kb (or leave out --admin)",
            code="invalid_arguments",
        )
    with opened(args) as container:
        workspace_id = acting_workspace(container, args.workspace)
        user_id = known_user(container, workspace_id, args.user) if args.user else admin_user(container, workspace_id)
        created = container.identity.recover_admin_key(workspace_id, user_id, name=args.name or "admin (recovered)")
        settings = container.settings
    body = CreatedApiKey.of_new(created).model_dump(mode="json")
    if args.json:
        print(json.dumps(body))
    else:
        _print_key(body, f"Admin API key {body['id']} for user {user_id} in {where(settings)}")
    return 0


@command()
def key_revoke(api: Api, args: argparse.Namespace) -> None:
    api.delete(f"{KEYS}/{args.key}")
    body = api.get(f"{KEYS}/{args.key}")
    emit(args, body, lambda b: print(f"API key {b['id']} of user {b['user_id']} revoked: it is refused from now on."))
