"""The recent history a rule counts: exact across instances, by one conditional write per counted call.

Item ``RULEHIST#<ws>#<rule_id> / <user id or *>``: ``entries`` = ``[[ms, amount], ...]`` of the calls the rule let by
within its window (older ones dropped on each write), ``version``. A call reads the item, drops the entries a window
older than now, and is over the limit when ``count + 1 > max_count`` or ``total + amount > max_total``; if not, it
writes the item back with its own entry on condition that ``version`` is still the one read (or the item still
absent). A lost race is decided again against the winner's item, which the failed write returns. So every counted
call moved the log by one version, once: no window ever holds more calls (or more total) than the rule allows, on
SQLite as on DynamoDB. A call over the limit writes nothing. The log of a rule whose window passes empties itself;
``expires_at`` lets the store forget it a window after its latest call.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from typing import Any

from mcpbridge.domain.items import Compare, Condition, Item, ItemExists, Key, all_of
from mcpbridge.errors import ConditionFailed, Unavailable
from mcpbridge.ports import Clock, Store
from mcpbridge.rules.evaluate import CallFacts
from mcpbridge.rules.model import History, Rule

MAX_ATTEMPTS = 200
MAX_ENTRIES = 2000
"""A log holding this many calls in its window counts no more (the rule then matches: it fails closed)."""


def history_key(workspace_id: str, rule_id: str, per: str, user_id: str) -> Key:
    return Key(f"RULEHIST#{workspace_id}#{rule_id}", user_id if per == "user" else "*")


class HistoryLog:
    def __init__(self, store: Store, clock: Clock, *, sleep: Callable[[float], None] = time.sleep) -> None:
        self._store = store
        self._clock = clock
        self._sleep = sleep

    def admit(self, rule: Rule, history: History, facts: CallFacts, amount: float) -> bool:
        """Count the call unless it would go over the rule's limits; True when it would (and nothing is counted)."""
        key = history_key(facts.workspace_id, rule.id, history.per, facts.user_id)
        current = self._store.get(key)
        for attempt in range(MAX_ATTEMPTS):
            if attempt > 3:
                self._sleep(random.uniform(0, min(0.05, 0.001 * 2**attempt)))
            now_ms = math.floor(self._clock.now() * 1000)
            since = now_ms - history.window_seconds * 1000
            kept = [e for e in (current or {}).get("entries", []) if int(e[0]) > since]
            if _over(history, kept, amount):
                return True
            written: Item = {
                **key.as_dict(),
                "entries": [*kept, [now_ms, amount]],
                "version": int((current or {}).get("version", 0)) + 1,
                "expires_at": now_ms // 1000 + history.window_seconds + 60,
            }
            try:
                self._store.put(written, condition=_unchanged(current))
            except ConditionFailed as lost:
                current = lost.current
                continue
            return False
        raise Unavailable("the rule's history is too contended right now; retry shortly", code="rule_history_busy")

    def forget_rule(self, workspace_id: str, rule_id: str) -> None:
        """Nothing to do eagerly: a log expires a window after its latest call."""


def _over(history: History, kept: list[Any], amount: float) -> bool:
    if len(kept) >= MAX_ENTRIES:
        return True
    if history.max_count is not None and len(kept) + 1 > history.max_count:
        return True
    if history.max_total is not None:
        total = sum(float(e[1]) for e in kept) + amount
        if total > history.max_total:
            return True
    return False


def _unchanged(current: Item | None) -> Condition:
    if current is None:
        return Condition.absent("rule_history_new")
    return Condition("rule_history_unchanged", all_of(ItemExists(), Compare("version", "=", int(current["version"]))))
