"""The REST API of a running mcpbridge, as the commands call it.

A command is a few HTTP requests to the server the operator logged in to (``mcpbridge login URL``, a profile of the
config file) or that ``MCPBRIDGE_URL`` and ``MCPBRIDGE_API_KEY`` name: a local ``mcpbridge serve`` or a deployed
stack's API URL. The server applies its own rules (validation, authority, SSRF guard) and, with ``--json``, the
command prints exactly its bodies. No application, store or settings of the server is built in this process.

``--workspace`` (a platform admin's key only) sends ``X-MCPBridge-Workspace``; ``--user`` on the commands that act
for a user sends ``X-MCPBridge-User``: the server checks that the key may do so.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
from collections.abc import Callable
from typing import Any

from mcpbridge.cli.profiles import Target, target_of
from mcpbridge.cli.transport import (
    AnswerTooLarge,
    HttpxTransport,
    Request,
    Transport,
    Unreachable,
    absolute,
    chosen,
)
from mcpbridge.errors import InvalidInput, NotFound, Unavailable

REQUEST_SECONDS = 28.0
"""A bound on one request, inside the 29 s an API Gateway request may take."""
CONNECT_SECONDS = 5.0
WORKSPACE_HEADER = "X-MCPBridge-Workspace"
USER_HEADER = "X-MCPBridge-User"
_MAX_PAGES = 10_000


class Problem(Exception):
    """A REST answer of status 400 or more, with its problem+json body."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(body.get("detail") or body.get("title") or f"HTTP {status}")
        self.status = status
        self.body = body

    @property
    def message(self) -> str:
        detail = str(self.body.get("detail") or self.body.get("title") or f"the request failed (HTTP {self.status})")
        problems = [
            f"{'.'.join(str(part) for part in error.get('loc', ())[1:]) or '(body)'}: {error.get('msg', '')}"
            for error in self.body.get("errors", []) or []
            if isinstance(error, dict)
        ]
        return "; ".join([detail, *problems])


def _fold(name: str) -> str:
    return " ".join(name.split()).casefold()


class RestCalls:
    """The verbs and the paging over :meth:`request` (an answer of 400 or more raises :class:`Problem`)."""

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        raise NotImplementedError

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> Any:
        return self.request("POST", path, **kwargs)

    def put(self, path: str, **kwargs: Any) -> Any:
        return self.request("PUT", path, **kwargs)

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)

    def every(self, path: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """A list route's body with the items of every page (``next_cursor`` followed, or ``page`` for routes that
        number their pages): the same shape as one page, with nothing left to fetch."""
        params = dict(params or {})
        body: dict[str, Any] = self.get(path, params=params)
        if body.get("next_cursor"):
            items = list(body["items"])
            cursor = body["next_cursor"]
            for _ in range(_MAX_PAGES):
                page = self.get(path, params={**params, "cursor": cursor})
                items += page["items"]
                cursor = page.get("next_cursor")
                if not cursor:
                    break
            return {**body, "items": items, "next_cursor": None}
        if body.get("has_more") and "page" in body:  # numbered pages: ``documents`` and ``has_more``
            listed = next(name for name in ("items", "documents") if name in body)
            items, number = list(body[listed]), int(body["page"])
            for _ in range(_MAX_PAGES):
                number += 1
                page = self.get(path, params={**params, "page": number})
                items += page[listed]
                if not page.get("has_more"):
                    break
            return {**body, listed: items, "page": 1, "page_size": len(items), "has_more": False}
        return body

    def resolve(self, path: str, reference: str, prefix: str, kind: str, *, where: str = "") -> str:
        """The id of an item of a list route, given its id (``prefix_...``) or its name (case-insensitively)."""
        if reference.startswith(f"{prefix}_"):
            return reference
        listed = self.every(path)
        named = [item for item in listed["items"] if _fold(str(item.get("name", ""))) == _fold(reference)]
        if len(named) == 1:
            return str(named[0]["id"])
        if named:
            ids = ", ".join(str(item["id"]) for item in named)
            raise InvalidInput(
                f"{len(named)} {kind}s are named {reference[:80]!r}: name it by id ({ids})", code="ambiguous_name"
            )
        raise NotFound(
            f"no {kind} with the id or name {reference[:80]!r}{where or ' in this workspace'}",
            code=f"{kind.replace(' ', '_')}_not_found",
        )


class Api(RestCalls):
    """Requests to the server's REST routes; an answer of 400 or more raises :class:`Problem`.

    The requests are sent one at a time, each blocking until answered: a command has nothing else to do meanwhile.
    """

    def __init__(self, target: Target, transport: Transport | None = None) -> None:
        self.target = target
        self._insecure_scheme = target.url.lower().startswith("http://")
        self._transport = transport or chosen(self._insecure_scheme)
        self._forms: Transport | None = None
        self._headers = {"Authorization": f"Bearer {target.api_key}", "User-Agent": "mcpbridge-cli"}

    @property
    def base_url(self) -> str:
        return self.target.url

    def header(self, name: str) -> str | None:
        return self._headers.get(name)

    def address(self, workspace_id: str | None = None, user_id: str | None = None) -> None:
        """Act in this workspace (and as this user) on the following requests."""
        if workspace_id is not None:
            self._headers[WORKSPACE_HEADER] = workspace_id
        if user_id is not None:
            self._headers[USER_HEADER] = user_id

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        request = Request(method, absolute(self.target.url, path), dict(self._headers), **kwargs)
        transport = self._transport
        if request.is_form:  # multipart: httpx2 encodes it
            if self._forms is None:
                self._forms = HttpxTransport(insecure_scheme=self._insecure_scheme)
            transport = self._forms
        try:
            answer = transport.send(request, seconds=REQUEST_SECONDS, connect_seconds=CONNECT_SECONDS)
        except TimeoutError:
            raise Unavailable(
                f"{self.target.url} did not answer {method} {path} within {REQUEST_SECONDS:g} s", code="timeout"
            ) from None
        except Unreachable as exc:
            raise unreachable(self.target, exc.reason) from None
        except AnswerTooLarge:
            raise Unavailable(
                f"{self.target.url} answered {method} {path} with more than the command reads", code="answer_too_large"
            ) from None
        body: Any = None
        if answer.content:
            try:
                body = json.loads(answer.content)
            except ValueError:
                body = {"detail": answer.content[:500].decode("utf-8", "replace")}
        if answer.status >= 400:
            shown = body if isinstance(body, dict) else {}
            raise Problem(answer.status, {"status": answer.status, **shown})
        return body

    def close(self) -> None:
        self._transport.close()
        if self._forms is not None:
            self._forms.close()


def unreachable(target: Target, reason: str) -> Unavailable:
    """Why the server could not be reached, and how to reach another one."""
    return Unavailable(
        f"cannot reach {target.url} ({reason}; from {target.source}). Is `mcpbridge serve` running there? "
        "Log in to a server with `mcpbridge login URL`, or set MCPBRIDGE_URL and MCPBRIDGE_API_KEY",
        code="server_unreachable",
    )


def addressed(api: Api, args: argparse.Namespace, *, acting_user: bool) -> None:
    """``--workspace`` and (``acting_user``) ``--user``, by id or name, as the headers of the following requests."""
    reference = getattr(args, "workspace", None)
    workspace_id = None
    if reference:
        where = " (`mcpbridge workspaces list` shows them)"
        workspace_id = api.resolve("/api/v1/workspaces", reference, "ws", "workspace", where=where)
        api.address(workspace_id=workspace_id)
    user = getattr(args, "user", None) if acting_user else None
    if user:
        api.address(user_id=user_id_of(api, user))


def user_id_of(api: Api, reference: str) -> str:
    """A user of the workspace the requests act in, by id (``usr_...``) or unique name."""
    return api.resolve("/api/v1/users", reference, "usr", "user")


Handler = Callable[[Api, argparse.Namespace], int | None]


def command(*, acting_user: bool = False) -> Callable[[Handler], Callable[[argparse.Namespace], int]]:
    """A command made of REST requests: ``handler(api, args)`` runs against the server the
    profile (or ``MCPBRIDGE_URL``) names. ``acting_user``: ``--user`` names whom it acts as."""

    def wrap(handler: Handler) -> Callable[[argparse.Namespace], int]:
        @functools.wraps(handler)
        def run(args: argparse.Namespace) -> int:
            target = target_of(getattr(args, "profile", None), os.environ)

            api = Api(target)
            try:
                addressed(api, args, acting_user=acting_user)
                return handler(api, args) or 0
            finally:
                api.close()

        return run

    return wrap
