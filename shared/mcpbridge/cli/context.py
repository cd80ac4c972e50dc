"""What every command starts from: the settings (``--data-dir`` over ``MCPBRIDGE_*``), the container, the platform's
workspace, the workspace and user a command names."""

from __future__ import annotations

import argparse
import contextlib
import re
from collections.abc import Iterator
from typing import Any

from mcpbridge.bootstrap import Container
from mcpbridge.domain.identity import OPERATOR, Workspace
from mcpbridge.errors import Conflict, InvalidInput, NotFound
from mcpbridge.settings import Settings

_USER_ID = re.compile(r"[A-Za-z0-9_.:@-]{1,128}")


def settings_of(args: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {}
    if getattr(args, "data_dir", None) is not None:
        overrides["data_dir"] = args.data_dir
    return Settings(**overrides)


def where(settings: Settings) -> str:
    if settings.backend == "aws":
        return f"DynamoDB table {settings.table_name}"
    return str(settings.data_dir.resolve())


@contextlib.contextmanager
def opened(args: argparse.Namespace) -> Iterator[Container]:
    """The container of the settings; closed at the end, once the jobs it started (indexing, a purge) are done."""
    container = Container(settings_of(args))
    try:
        yield container
    finally:
        close(container)


def close(container: Container) -> None:
    """Close the container, and the embedded workflow a stored token may have woken (calls waiting for it)."""
    stop = getattr(container.__dict__.get("workflow"), "close", None)
    if stop is not None:
        stop()
    container.close()


def installed_workspace(container: Container) -> str:
    workspace_id = container.identity.installed_workspace_id()
    if workspace_id is None:
        raise NotFound("mcpbridge is not initialised here: run `mcpbridge init` first", code="not_initialized")
    return workspace_id


def workspace_named(container: Container, reference: str) -> Workspace:
    """A workspace by id (ws_...), else by its name (case-insensitive; two workspaces of that name: refused)."""
    from mcpbridge.domain.names import fold

    installed_workspace(container)
    if reference.startswith("ws_"):
        return container.workspaces.get(OPERATOR, reference)
    found: list[Workspace] = []
    cursor: str | None = None
    while True:
        page, cursor = container.workspaces.list(OPERATOR, limit=200, cursor=cursor)
        found += [w for w in page if fold(w.name) == fold(reference)]
        if cursor is None:
            break
    if not found:
        raise NotFound(
            f"no workspace with the id or name {reference[:80]!r} (`mcpbridge workspaces list` shows them)",
            code="workspace_not_found",
        )
    if len(found) > 1:
        raise Conflict(
            f"{len(found)} workspaces are named {reference[:80]!r}: name it by id ({', '.join(w.id for w in found)})",
            code="ambiguous_name",
        )
    return found[0]


def acting_workspace(container: Container, reference: str | None) -> str:
    """The workspace a command acts in: ``--workspace`` (not one being deleted), else the platform's."""
    if reference is None:
        return installed_workspace(container)
    workspace = workspace_named(container, reference)
    if workspace.status == "deleting":
        raise Conflict(f"workspace {workspace.id} is being deleted", code="workspace_deleting")
    return workspace.id


def admin_user(container: Container, workspace_id: str) -> str:
    """The user created with the workspace (``init``'s, or ``workspaces create``'s): the oldest holder of an
    unrestricted admin key that is still active, else the oldest user named "admin"."""
    from mcpbridge.identity.records import api_key_of, status_of, user_key
    from mcpbridge.paging import every_item

    keys = sorted(
        (api_key_of(item) for item in every_item(container.store, f"WS#{workspace_id}", sk_prefix="APIKEY#")),
        key=lambda key: (key.created_at, key.id),
    )
    for key in keys:
        if key.active and key.unrestricted_admin:
            user = container.store.get(user_key(workspace_id, key.user_id))
            if user is None or status_of(user) == "active":
                return key.user_id
    users = every_item(container.store, f"WS#{workspace_id}", sk_prefix="USER#")
    admins = sorted(
        (item for item in users if item.get("name") == "admin"),
        key=lambda item: (str(item.get("created_at", "")), str(item["id"])),
    )
    if not admins:
        raise NotFound("the workspace has no admin user: name the user with --user", code="user_not_found")
    return str(admins[0]["id"])


def known_user(container: Container, workspace_id: str, reference: str) -> str:
    """A user of the workspace by id (one with a user record or an API key), else by its unique name."""
    from mcpbridge.domain.names import fold
    from mcpbridge.identity.records import user_key
    from mcpbridge.paging import every_item

    if not _USER_ID.fullmatch(reference) and not reference.strip():
        raise InvalidInput("--user must be a user's id (usr_...) or name", code="invalid_user")
    if _USER_ID.fullmatch(reference) and (
        container.store.get(user_key(workspace_id, reference)) is not None
        or any(
            item.get("user_id") == reference
            for item in every_item(container.store, f"WS#{workspace_id}", sk_prefix="APIKEY#")
        )
    ):
        return reference
    named = [
        str(item["id"])
        for item in every_item(container.store, f"WS#{workspace_id}", sk_prefix="USER#")
        if fold(str(item.get("name", ""))) == fold(reference)
    ]
    if len(named) == 1:
        return named[0]
    if named:
        raise Conflict(
            f"{len(named)} users are named {reference[:80]!r}: name it by id ({', '.join(named)})",
            code="ambiguous_name",
        )
    raise NotFound(f"no user with the id or name {reference[:80]!r} in workspace {workspace_id}", code="user_not_found")
