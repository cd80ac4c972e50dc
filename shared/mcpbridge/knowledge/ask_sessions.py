"""``ask`` sessions as things people manage: list, read (with their turns), delete.

A caller reaches exactly the sessions it could continue: those its owner started through the same credential (API
key or endpoint) and within the same knowledge-base scope (see ``knowledge.answers``). Anything else is reported as
not found, so a session's existence never leaks to a caller that may not read it.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcpbridge.domain.identity import timestamp
from mcpbridge.domain.ids import is_id
from mcpbridge.domain.items import Condition, Item
from mcpbridge.domain.knowledge import KnowledgeAccess
from mcpbridge.errors import ConditionFailed, InvalidInput
from mcpbridge.knowledge.answers import SessionBinding, session_key, session_not_found, sessions_partition
from mcpbridge.paging import every_item
from mcpbridge.ports import Clock, Store

SESSION_ID_PREFIX = "ses"


@dataclass(frozen=True)
class Turn:
    question: str
    answer: str


@dataclass(frozen=True)
class AskSession:
    id: str
    title: str
    turn_count: int
    created_at: str | None
    updated_at: str
    expires_at: str
    turns: tuple[Turn, ...]


class AskSessions:
    """The sessions one caller (owner + credential + knowledge-base scope) started."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    def list(self, access: KnowledgeAccess, *, owner: str, credential: str) -> list[AskSession]:
        """The caller's live sessions, most recently used first (turns left out)."""
        binding = SessionBinding.of(access, owner=owner, credential=credential)
        items = every_item(self._store, sessions_partition(access.workspace_id, binding), index="gsi1")
        sessions = [_session_of(item, with_turns=False) for item in items if self._visible(item, binding)]
        return sorted(sessions, key=lambda s: (s.updated_at, s.id), reverse=True)

    def get(self, access: KnowledgeAccess, session_id: str, *, owner: str, credential: str) -> AskSession:
        """One session with its turns (404 ``session_not_found`` when the caller may not read it)."""
        binding = SessionBinding.of(access, owner=owner, credential=credential)
        item = self._store.get(session_key(access.workspace_id, _checked(session_id)))
        if item is None or not self._visible(item, binding):
            raise session_not_found(session_id)
        return _session_of(item, with_turns=True)

    def delete(self, access: KnowledgeAccess, session_id: str, *, owner: str, credential: str) -> AskSession:
        """Delete one session; the caller's later ``ask`` with its id is refused as an unknown session."""
        binding = SessionBinding.of(access, owner=owner, credential=credential)
        try:
            item = self._store.delete(
                session_key(access.workspace_id, _checked(session_id)),
                condition=Condition("session_bound", binding.condition()),
            )
        except ConditionFailed:
            raise session_not_found(session_id) from None
        if item is None:
            raise session_not_found(session_id)
        return _session_of(item, with_turns=False)

    def _visible(self, item: Item, binding: SessionBinding) -> bool:
        return binding.holds_for(item) and int(item.get("expires_at", 0)) > self._clock.now()


def _checked(session_id: str) -> str:
    session_id = session_id.strip()
    if not is_id(session_id, SESSION_ID_PREFIX):
        raise InvalidInput(
            f"session_id must be a session id ({SESSION_ID_PREFIX}_ and 26 letters or digits), as ask returns it",
            code="invalid_session_id",
        )
    return session_id


def _session_of(item: Item, *, with_turns: bool) -> AskSession:
    turns = item.get("turns", [])
    first = turns[0]["question"] if turns else ""
    return AskSession(
        id=str(item["sk"]).removeprefix("SESSION#"),
        title=str(item.get("title") or first[:100]),
        turn_count=len(turns),
        created_at=item.get("created_at"),
        updated_at=str(item.get("updated_at", "")),
        expires_at=timestamp(int(item.get("expires_at", 0))),
        turns=tuple(Turn(t["question"], t["answer"]) for t in turns) if with_turns else (),
    )
