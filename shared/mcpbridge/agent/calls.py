"""Records of agent tool calls: one item per call, its status moved only by conditional writes.

Item ``WS#<ws> / CALL#<id>``. While a call waits for a person it is also in the workspace's pending list
(``gsi1pk = PENDING#<ws>``, ``gsi1sk = <user>#<created_at>#<id>``: one user's calls are a prefix of it, the
workspace's approvers read all of it); the attributes go when it stops waiting. Calls that started waiting before this
layout (``PENDING#<ws>#<user>``, ``<created_at>#<id>``) are still read from their old partition. Until
it finishes it is in the open list (``gsi2pk = OPENCALLS#<shard>``, one of 16 shards, see ``domain.shards``; calls
opened before the shards are in ``OPENCALLS``, read too), which a restart of the embedded workflow resumes.

Statuses::

    awaiting_approval --approve--> approved --(OAuth needed)--> awaiting_oauth --authorize--> ready
           |                          \\--------------------------------------------------> ready --> running
           +--reject / timeout--> rejected          awaiting_oauth --cancel / timeout--> cancelled
           +--withdrawn by its caller--> cancelled   awaiting_oauth --withdrawn by its caller--> cancelled
    ready --> running --> completed | failed | uncertain           (anything not terminal) --> failed
    running --(403 insufficient_scope, once)--> awaiting_oauth

``completed`` holds the upstream result (``isError`` may be true); ``failed`` means nothing ran upstream (refused
before sending, or checks failed); ``uncertain`` means the request may have run and its answer was lost: it is
never replayed. A call the server refused for its token's scope (SEP-835 step-up: a 403 ``insufficient_scope``,
answered before anything ran) waits once for the user's authorization of the wider scope (``oauth.step_up_scope``).
Every transition names the status it leaves, so the first resolution wins and a second one gets
``already_resolved``.

Nothing secret is stored in clear: the workflow's task token and the agent's callback token are sealed with the
SecretBox (context ``(ws, "tool_call", id)``); results are stored with image data redacted.
"""

# Over 400 lines: every write of a call record (moves, approvals counted one by one, notes) is conditional here.

from __future__ import annotations

import builtins
import json
import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from mcpbridge.domain.identity import timestamp
from mcpbridge.domain.ids import is_id
from mcpbridge.domain.items import AnyOf, Compare, Condition, Item, Key, Update, all_of, encode_cursor
from mcpbridge.domain.secrets import SecretContext
from mcpbridge.domain.shards import list_partitions, shard_partition
from mcpbridge.errors import ConditionFailed, Conflict, NotFound
from mcpbridge.observability import NoTelemetry
from mcpbridge.paging import every_item
from mcpbridge.ports import Clock, SecretBox, Store, Telemetry
from mcpbridge.sealing import open_secret_or_none

log = logging.getLogger("mcpbridge.agent")

ID_PREFIX = "call"
SECRET_KIND = "tool_call"  # noqa: S105 - a SecretContext kind
RETENTION_SECONDS = 30 * 24 * 3600

Status = Literal[
    "awaiting_approval",
    "awaiting_oauth",
    "approved",
    "ready",
    "running",
    "completed",
    "failed",
    "rejected",
    "cancelled",
    "uncertain",
]
PendingKind = Literal["approval", "oauth"]
Next = Literal["approval", "oauth", "invoke", "finish"]
"""What a call's workflow does next, as the ``prepare`` step answers."""
WAITING: Final[dict[PendingKind, Status]] = {"approval": "awaiting_approval", "oauth": "awaiting_oauth"}
TERMINAL: Final[frozenset[str]] = frozenset({"completed", "failed", "rejected", "cancelled", "uncertain"})


OPEN_PARTITION = "OPENCALLS"
"""gsi2 list of the calls not finished yet, every workspace (what a restart resumes), sharded by call id."""


def call_key(workspace_id: str, call_id: str) -> Key:
    return Key(f"WS#{workspace_id}", f"CALL#{call_id}")


def pending_partition(workspace_id: str) -> str:
    return f"PENDING#{workspace_id}"


def _legacy_pending_partition(workspace_id: str, user_id: str) -> str:
    return f"PENDING#{workspace_id}#{user_id}"


@dataclass(frozen=True)
class ToolCall:
    """A call as stored (tokens stay sealed in ``item``; use :meth:`ToolCalls.task_token` to open one)."""

    id: str
    workspace_id: str
    owner_user_id: str
    agent_id: str | None
    session_id: str | None
    interactive: bool
    service_id: str
    service_name: str
    tool_name: str
    function_name: str
    tool_ref: str
    definition_hash: str
    arguments: dict[str, Any]
    original_arguments: dict[str, Any] | None
    """The arguments the call was made with, when its approver replaced them (``arguments`` are the approved ones)."""
    status: Status
    pending_kind: PendingKind | None
    deadline_at: float | None
    approval: dict[str, Any] | None
    oauth: dict[str, Any] | None
    result: dict[str, Any] | None
    error: dict[str, Any] | None
    approval_timeout_seconds: int
    oauth_timeout_seconds: int
    created_at: str
    updated_at: str
    finished_at: str | None
    item: Item

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def stepped_up(self) -> bool:
        """Whether the call has already waited for a wider authorization (SEP-835): it does so once only."""
        return bool((self.oauth or {}).get("step_up"))

    @property
    def step_up_scope(self) -> str | None:
        """The scope the server asked for when it refused the user's token as too narrow, if it did."""
        scope = (self.oauth or {}).get("step_up_scope")
        return scope if isinstance(scope, str) and scope else None

    @property
    def input_request(self) -> dict[str, Any] | None:
        """The upstream's question this call waits on (message, requested_schema, key), while it waits for it."""
        request = self.item.get("input_request")
        return request if self.status == "awaiting_approval" and isinstance(request, dict) else None

    @property
    def secret_context(self) -> SecretContext:
        return SecretContext(self.workspace_id, SECRET_KIND, self.id)


class ToolCalls:
    """Reading and moving call records. Every move is conditional on the status it leaves."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        secrets: SecretBox,
        telemetry: Telemetry | None = None,
        *,
        retention_seconds: int = RETENTION_SECONDS,
    ) -> None:
        """``telemetry`` counts calls as they end (``ToolCalls``, by ``outcome``); ``retention_seconds``: how long a
        call's record is kept after it was made (the audit trail)."""
        self.retention_seconds = retention_seconds
        self._store = store
        self._clock = clock
        self._secrets = secrets
        self._telemetry = telemetry or NoTelemetry()

    # -- reading ----------------------------------------------------------------------------------------------

    def find(self, workspace_id: str, call_id: str) -> ToolCall:
        if not is_id(call_id, ID_PREFIX):
            raise _not_found()
        item = self._store.get(call_key(workspace_id, call_id))
        if item is None:
            raise _not_found()
        return _call_of(item)

    def pending_of(self, workspace_id: str, user_id: str) -> builtins.list[ToolCall]:
        """The user's calls waiting for a person, oldest first."""
        items = [
            *every_item(self._store, _legacy_pending_partition(workspace_id, user_id), index="gsi1"),
            *every_item(self._store, pending_partition(workspace_id), sk_prefix=f"{user_id}#", index="gsi1"),
        ]
        return self._waiting(items)

    def pending_in(self, workspace_id: str) -> builtins.list[ToolCall]:
        """Every call of the workspace waiting for a person, oldest first (for its approvers)."""
        return self._waiting(list(every_item(self._store, pending_partition(workspace_id), index="gsi1")))

    def _waiting(self, entries: builtins.list[Item]) -> builtins.list[ToolCall]:
        # The index may lag: the base item, read consistently, says whether the call still waits.
        calls = [_call_of(self._store.get(Key(i["pk"], i["sk"])) or i) for i in entries]
        waiting = {c.id: c for c in calls if c.status in WAITING.values()}
        return sorted(waiting.values(), key=lambda c: (c.created_at, c.id))

    def every_call(self, workspace_id: str) -> builtins.list[ToolCall]:
        """Every call record of the workspace still kept, oldest first."""
        return [_call_of(item) for item in every_item(self._store, f"WS#{workspace_id}", sk_prefix="CALL#")]

    def newest_first(self, workspace_id: str, *, before: str | None = None) -> Iterator[ToolCall]:
        """The workspace's call records, newest first (ids are time-ordered), read a page at a time as they are
        consumed; with ``before``, only the calls older than that call id (for the audit trail's pages)."""
        partition = f"WS#{workspace_id}"
        cursor = encode_cursor({"pk": partition, "sk": f"CALL#{before}"}) if before else None
        while True:
            page = self._store.query(partition, sk_prefix="CALL#", limit=100, cursor=cursor, descending=True)
            yield from (_call_of(item) for item in page.items)
            if page.cursor is None:
                return
            cursor = page.cursor

    def unfinished(self) -> builtins.list[ToolCall]:
        """Every call not in a final status, all workspaces (for recovery after a restart)."""
        calls = []
        for partition in list_partitions(OPEN_PARTITION):
            for entry in every_item(self._store, partition, index="gsi2"):
                item = self._store.get(Key(entry["pk"], entry["sk"]))
                if item is not None and item.get("status") not in TERMINAL:
                    calls.append(_call_of(item))
        return calls

    def count_waiting(self, status: Status, cap: int = 10_000) -> int:
        """How many calls, every workspace, are in ``status`` by the open list (its entries may lag a moment)."""
        found = 0
        for partition in list_partitions(OPEN_PARTITION):
            for entry in every_item(self._store, partition, index="gsi2", page_size=500):
                found += entry.get("status") == status
                if found >= cap:
                    return found
        return found

    def task_token(self, call: ToolCall, name: Literal["task_token", "callback_task_token"]) -> str | None:
        return open_secret_or_none(self._secrets, call.item.get(f"sealed_{name}"), call.secret_context)

    def authorization_url(self, call: ToolCall) -> str | None:
        """The OAuth authorization URL of a call waiting for it (sealed at rest: its state is a secret)."""
        return open_secret_or_none(self._secrets, call.item.get("sealed_authorization_url"), call.secret_context)

    def oauth_pause(
        self, call: ToolCall, authorization_url: str | None, *, step_up: bool = False, scope: str | None = None
    ) -> dict[str, Any]:
        """The attributes of a move to ``awaiting_oauth``; ``step_up``: after a 403 ``insufficient_scope``, whose
        ``scope`` the new authorization asks for."""
        oauth: dict[str, Any] = {"requested_at": timestamp(self._clock.now())}
        if step_up:
            oauth["step_up"] = True
            if scope:
                oauth["step_up_scope"] = scope
        sets: dict[str, Any] = {"oauth": oauth}
        if authorization_url:
            sets["sealed_authorization_url"] = self._secrets.seal(authorization_url, call.secret_context)
        return sets

    def input_answers(self, call: ToolCall) -> dict[str, dict[str, Any]]:
        """The answers given to the upstream's questions (question key -> content), sealed at rest."""
        opened = open_secret_or_none(self._secrets, call.item.get("sealed_input_answers"), call.secret_context)
        answers = json.loads(opened) if opened else {}
        return answers if isinstance(answers, dict) else {}

    def input_pause(self, call: ToolCall, question: dict[str, Any]) -> dict[str, Any]:
        """The attributes of a move to ``awaiting_approval`` for the upstream's ``question``."""
        return {"input_request": question, "input_rounds": int(call.item.get("input_rounds") or 0) + 1}

    def answer_sets(self, call: ToolCall, key: str, content: dict[str, Any]) -> dict[str, Any]:
        """The attributes that add ``content`` as the answer to the question ``key`` (sealed: never in clear)."""
        answers = self.input_answers(call) | {key: content}
        return {"sealed_input_answers": self._secrets.seal(json.dumps(answers), call.secret_context)}

    # -- writing ----------------------------------------------------------------------------------------------

    def create(self, item: Item, *, callback_task_token: str | None = None, durable: bool = True) -> ToolCall:
        """Store a new call (``item`` built by the broker: id, owner, tool, arguments, status...). ``durable=False``
        for a call about to run at once: see ``ToolCallBroker.submit``."""
        now = self._clock.now()
        record = dict(item)
        record |= {
            **call_key(record["workspace_id"], record["id"]).as_dict(),
            "created_at": timestamp(now),
            "updated_at": timestamp(now),
            "expires_at": int(now) + self.retention_seconds,
            "version": 1,
        }
        if callback_task_token:
            context = SecretContext(record["workspace_id"], SECRET_KIND, record["id"])
            record["sealed_callback_task_token"] = self._secrets.seal(callback_task_token, context)
        if record["status"] in WAITING.values():
            record |= _pending_index(record, timestamp(now))
            record["pending_kind"] = "approval" if record["status"] == "awaiting_approval" else "oauth"
            record["deadline_at"] = now + _wait_seconds(record, record["pending_kind"])
        if record["status"] not in TERMINAL:
            record |= {
                "gsi2pk": shard_partition(OPEN_PARTITION, record["id"]),
                "gsi2sk": f"{timestamp(now)}#{record['id']}",
            }
        self._store.put(record, condition=Condition.absent("call_new"), durable=durable)
        if record["status"] in TERMINAL:
            self._telemetry.count("ToolCalls", outcome=record["status"])
        return _call_of(record)

    def move(
        self,
        call: ToolCall,
        to: Status,
        *,
        leaving: Iterable[Status] | None = None,
        sets: Mapping[str, Any] | None = None,
        removes: Iterable[str] = (),
        at_version: int | None = None,
        durable: bool = True,
    ) -> ToolCall:
        """Move ``call`` to ``to`` if it is still in one of ``leaving`` (default: its current status) and, with
        ``at_version``, still at that version (``durable`` as for :meth:`~mcpbridge.ports.Store.update`).

        Raises Conflict ``already_resolved`` when another move got there first.
        """
        statuses = list(leaving) if leaving is not None else [call.status]
        now = self._clock.now()
        changes: dict[str, Any] = {"status": to, "updated_at": timestamp(now), **(sets or {})}
        dropped = set(removes)
        if to in WAITING.values():
            kind: PendingKind = "approval" if to == "awaiting_approval" else "oauth"
            changes |= {"pending_kind": kind} | _pending_index(call.item, call.created_at)
            # Each wait has its own deadline from its start (an OAuth wait after an approval too), known at once.
            changes.setdefault("deadline_at", now + _wait_seconds(call.item, kind))
        else:
            dropped |= {"gsi1pk", "gsi1sk", "pending_kind"} & set(call.item)
        if to in TERMINAL:
            changes["finished_at"] = timestamp(now)
            dropped |= {"gsi2pk", "gsi2sk"} & set(call.item)
        dropped -= set(changes)
        clause: Any = AnyOf(tuple(Compare("status", "=", status) for status in statuses))
        if at_version is not None:
            clause = all_of(clause, Compare("version", "=", at_version))
        condition = Condition("call_status_unchanged", clause)
        try:
            item = self._store.update(
                call_key(call.workspace_id, call.id),
                Update(set=changes, remove=sorted(dropped), add={"version": 1}),
                condition=condition,
                durable=durable,
            )
        except ConditionFailed:
            raise Conflict("this call was already resolved", code="already_resolved") from None
        moved = _call_of(item)
        log.info("tool call %s: %s -> %s", call.id, call.status, to)
        if to in TERMINAL and call.status not in TERMINAL:
            self._telemetry.count("ToolCalls", outcome=to)
        return moved

    def add_approval(self, call: ToolCall, entry: dict[str, Any], required: int) -> ToolCall:
        """Record one approver's decision on a call waiting for ``required`` approvals: a rejection ends it, an
        approval counts once per approver (a second one from the same person: 409 ``already_approved``) and the
        ``required``-th moves it to ``approved``. Each write is conditional on the call's version, so approvals
        given at once are each counted, once, and the call is approved once."""
        for _ in range(50):
            given = list(call.item.get("approvals") or [])
            if any(a.get("by") == entry["by"] for a in given):
                raise Conflict("you have already decided on this call", code="already_approved")
            given.append(entry)
            approvals = [a for a in given if a.get("decision") == "approve"]
            sets: dict[str, Any] = {"approvals": given}
            version = int(call.item.get("version", 1))
            try:
                if entry["decision"] == "reject":
                    error = {"code": "rejected", "message": (entry.get("reason") or "rejected by an approver")[:500]}
                    return self.move(
                        call, "rejected", sets={**sets, "approval": entry, "error": error}, at_version=version
                    )
                if len(approvals) >= required:
                    return self.move(call, "approved", sets={**sets, "approval": entry}, at_version=version)
                item = self._store.update(
                    call_key(call.workspace_id, call.id),
                    Update(set={**sets, "updated_at": timestamp(self._clock.now())}, add={"version": 1}),
                    condition=Condition(
                        "call_unchanged",
                        all_of(Compare("status", "=", "awaiting_approval"), Compare("version", "=", version)),
                    ),
                )
                return _call_of(item)
            except (Conflict, ConditionFailed):
                call = self.find(call.workspace_id, call.id)
                if call.status != "awaiting_approval":
                    raise Conflict("this call was already resolved", code="already_resolved") from None
        raise Conflict("this call is being decided by others right now; retry", code="approval_contended")

    def note(self, call: ToolCall, sets: Mapping[str, Any]) -> ToolCall:
        """Set ``sets`` on the call whatever its status (facts about it, never a move); the call as written."""
        try:
            item = self._store.update(
                call_key(call.workspace_id, call.id), Update(set=dict(sets)), condition=Condition.exists("call_exists")
            )
        except ConditionFailed:
            raise _not_found() from None
        return _call_of(item)

    def store_task_token(self, call: ToolCall, kind: PendingKind, token: str, deadline_at: float) -> ToolCall | None:
        """Seal the workflow's token onto a call still waiting for ``kind``; None when it no longer waits (the
        caller then resumes the workflow itself)."""
        sealed = self._secrets.seal(token, call.secret_context)
        sets: dict[str, Any] = {"sealed_task_token": sealed, "updated_at": timestamp(self._clock.now())}
        if call.deadline_at is None or call.pending_kind != kind:
            sets["deadline_at"] = deadline_at
        try:
            item = self._store.update(
                call_key(call.workspace_id, call.id),
                Update(set=sets),
                condition=Condition.equals("call_waiting", "status", WAITING[kind]),
            )
        except ConditionFailed:
            return None
        return _call_of(item)


def _wait_seconds(item: Mapping[str, Any], kind: PendingKind) -> int:
    """How long a wait of ``kind`` lasts for this call (its agent profile's timeout, as recorded on the call)."""
    return int(item.get("approval_timeout_seconds" if kind == "approval" else "oauth_timeout_seconds", 600))


def _pending_index(item: Mapping[str, Any], created_at: str) -> dict[str, str]:
    return {
        "gsi1pk": pending_partition(item["workspace_id"]),
        "gsi1sk": f"{item['owner_user_id']}#{created_at}#{item['id']}",
    }


def _not_found() -> NotFound:
    return NotFound("no such tool call", code="pending_not_found")


def _call_of(item: Item) -> ToolCall:
    return ToolCall(
        id=item["id"],
        workspace_id=item["workspace_id"],
        owner_user_id=item["owner_user_id"],
        agent_id=item.get("agent_id"),
        session_id=item.get("session_id"),
        interactive=bool(item.get("interactive", True)),
        service_id=item["service_id"],
        service_name=item.get("service_name", ""),
        tool_name=item["tool_name"],
        function_name=item.get("function_name", ""),
        tool_ref=item["tool_ref"],
        definition_hash=item.get("definition_hash", ""),
        arguments=dict(item.get("arguments") or {}),
        original_arguments=dict(item["original_arguments"]) if item.get("original_arguments") is not None else None,
        status=item["status"],
        pending_kind=item.get("pending_kind"),
        deadline_at=float(item["deadline_at"]) if item.get("deadline_at") is not None else None,
        approval=item.get("approval"),
        oauth=item.get("oauth"),
        result=item.get("result"),
        error=item.get("error"),
        approval_timeout_seconds=int(item.get("approval_timeout_seconds", 600)),
        oauth_timeout_seconds=int(item.get("oauth_timeout_seconds", 600)),
        created_at=item.get("created_at", ""),
        updated_at=item.get("updated_at", ""),
        finished_at=item.get("finished_at"),
        item=item,
    )
