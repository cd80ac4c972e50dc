"""``mcpbridge kb share|shares|unshare|shared``: knowledge bases shared across workspaces, through
``/api/v1/knowledge-bases/{kb}/shares`` and ``/api/v1/shared-knowledge-bases``."""

from __future__ import annotations

import argparse
from typing import Any
from urllib.parse import quote

from mcpbridge.cli.api import Api, command
from mcpbridge.cli.knowledge import KNOWLEDGE_BASES, kb_id
from mcpbridge.cli.output import Column, emit, field, table

_SHARE_COLUMNS: list[Column] = [
    ("WORKSPACE", field("workspace_id")),
    ("PERMISSION", field("permission")),
    ("SINCE", field("created_at")),
]
_SHARED_COLUMNS: list[Column] = [
    ("ID", field("id")),
    ("NAME", field("name")),
    ("OWNER", field("owner_workspace_id")),
    ("PERMISSION", field("permission")),
    ("DOCUMENTS", field("document_count")),
]


def _shares_of(api: Api, kb: str) -> str:
    return f"{KNOWLEDGE_BASES}/{kb_id(api, kb)}/shares"


@command()
def kb_share(api: Api, args: argparse.Namespace) -> None:
    path = f"{_shares_of(api, args.kb)}/{quote(args.target, safe='')}"
    body = api.put(path, json={"permission": args.permission})
    emit(
        args,
        body,
        lambda b: print(
            f"Knowledge base {b['knowledge_base_id']} shared with workspace {b['workspace_id']} ({b['permission']})."
        ),
    )


@command()
def kb_shares(api: Api, args: argparse.Namespace) -> None:
    body: dict[str, Any] = api.get(_shares_of(api, args.kb))
    emit(args, body, lambda b: table(b["items"], _SHARE_COLUMNS, empty="Not shared with any workspace."))


@command()
def kb_unshare(api: Api, args: argparse.Namespace) -> None:
    target = kb_id(api, args.kb)
    api.delete(f"{KNOWLEDGE_BASES}/{target}/shares/{quote(args.target, safe='')}")
    body = {"knowledge_base_id": target, "workspace_id": args.target, "shared": False}
    emit(args, body, lambda b: print(f"Knowledge base {target} is no longer shared with workspace {args.target}."))


@command()
def kb_shared(api: Api, args: argparse.Namespace) -> None:
    body: dict[str, Any] = api.get("/api/v1/shared-knowledge-bases")
    emit(args, body, lambda b: table(b["items"], _SHARED_COLUMNS, empty="No knowledge base is shared with you."))
