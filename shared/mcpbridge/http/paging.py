"""The one paging convention of every REST list: ``?limit=&cursor=`` in, ``{"items": [...], "next_cursor": ...}`` out.

``next_cursor`` is null on the last page; passed back as ``cursor`` it gives the page after. A cursor is opaque
(base64url) and belongs to one listing: another listing's, or a forged one, is refused with 400 ``invalid_cursor``.

Most lists are read whole by their service (they are filtered by the caller's authority first) and paged here by
:func:`page_of`, on a key that follows the list's order: the cursor holds the last key shown, so an item created or
deleted between two pages neither repeats nor hides another one. The lists the store pages itself (API keys, users,
workspaces) and the agent catalog's tools pass their own cursors through.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from fastapi import Query
from pydantic import Field

from mcpbridge.errors import InvalidInput

T = TypeVar("T")

DEFAULT_LIMIT = 50
MAX_LIMIT = 200
MAX_CURSOR_CHARS = 2048

NEXT_CURSOR_HELP = "Pass it as `cursor` to get the next page; null on the last page."


def limit_query(default: int = DEFAULT_LIMIT, maximum: int = MAX_LIMIT) -> Any:
    """The ``limit`` query parameter of a list route."""
    return Query(default=default, ge=1, le=maximum, description=f"Items per page, 1 to {maximum} (default {default}).")


def cursor_query() -> Any:
    """The ``cursor`` query parameter of a list route."""
    return Query(
        default=None,
        max_length=MAX_CURSOR_CHARS,
        description="The `next_cursor` of the previous page, to get the page after it; omit it for the first page.",
    )


def next_cursor_field() -> Any:
    """The ``next_cursor`` field of a list response."""
    return Field(description=NEXT_CURSOR_HELP)


def page_of(
    items: Iterable[T],
    *,
    key: Callable[[T], tuple[str, ...]],
    limit: int,
    cursor: str | None,
    listing: str,
    descending: bool = False,
) -> tuple[list[T], str | None]:
    """One page of ``items`` in ``key`` order (unique per item), after the one ``cursor`` names, and the cursor of
    the page after it (None when there is none). ``listing`` names the list and its filters: a cursor made for
    another listing is refused."""
    ordered = sorted(items, key=key, reverse=descending)
    tag = _tag(listing)
    if cursor:
        last = _decode(cursor, tag)
        ordered = [i for i in ordered if (key(i) < last if descending else key(i) > last)]
    page = ordered[:limit]
    more = len(ordered) > limit
    return page, _encode(key(page[-1]), tag) if more and page else None


def position_cursor(position: tuple[str, ...], listing: str) -> str:
    """The cursor of a page that follows ``position`` in ``listing`` (for lists that page themselves by a key)."""
    return _encode(position, _tag(listing))


def cursor_position(cursor: str, listing: str) -> tuple[str, ...]:
    """The position a cursor made by :func:`position_cursor` for ``listing`` holds; 400 ``invalid_cursor`` for any
    other cursor."""
    return _decode(cursor, _tag(listing))


def _tag(listing: str) -> str:
    return hashlib.sha256(listing.encode()).hexdigest()[:16]


def _encode(position: tuple[str, ...], tag: str) -> str:
    raw = json.dumps({"l": tag, "k": list(position)}, separators=(",", ":"), ensure_ascii=False).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(cursor: str, tag: str) -> tuple[str, ...]:
    try:
        decoded = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, binascii.Error):
        decoded = None
    position = decoded.get("k") if isinstance(decoded, dict) and decoded.get("l") == tag else None
    if not isinstance(position, list) or not position or not all(isinstance(part, str) for part in position):
        raise InvalidInput("the cursor does not belong to this listing", code="invalid_cursor")
    return tuple(position)
