"""Judging one call by a rule set: which rule decides, what it masks, and (for ask) who approves.

:func:`decide` runs when the call is made, over its arguments; :func:`screen_result` once its result is known, for
the rules that look at results. Both are pure but for the history log (:class:`HistoryCounter`), which a rule
with a ``history`` condition consults last, only when everything else about it matched: a call it lets by is
counted there, exactly, in the same conditional write that checked the limit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

from mcpbridge.rules import guardrails
from mcpbridge.rules.model import Approvers, ArgumentTest, History, Rule, RuleSet, TimeWindow

_MISSING = object()


@dataclass
class CallFacts:
    """What a rule may look at about a call."""

    workspace_id: str
    service_id: str
    service_name: str
    tool_name: str
    user_id: str
    role: str
    api_key_id: str
    agent_id: str | None
    arguments: dict[str, Any]
    now: float
    groups: Callable[[], frozenset[str]] = field(default=lambda: frozenset())
    """The groups the caller belongs to (read on first use only)."""
    _groups: frozenset[str] | None = None
    _local: dict[str, datetime] = field(default_factory=dict)

    def local_time(self, zone: Any) -> datetime:
        """``now`` in ``zone`` (worked out once per zone and call)."""
        key = str(zone)
        if key not in self._local:
            self._local[key] = datetime.fromtimestamp(self.now, zone)
        return self._local[key]

    def caller_groups(self) -> frozenset[str]:
        if self._groups is None:
            self._groups = self.groups()
        return self._groups


class HistoryCounter(Protocol):
    """The log of calls a history rule let by (:class:`~mcpbridge.rules.history.HistoryLog`)."""

    def admit(self, rule: Rule, history: History, facts: CallFacts, amount: float) -> bool:
        """Count this call unless it would take the log over the rule's limits; True when it would (the rule
        matches, nothing is counted)."""
        ...


@dataclass(frozen=True)
class Decision:
    outcome: Literal["allow", "deny", "ask"]
    rule_id: str | None
    """The rule that decided; None for the rule set's default."""
    version: int
    enforced: bool
    reason: str | None = None
    approvers: Approvers | None = None
    arguments: dict[str, Any] | None = None
    """The arguments with what redact rules masked (None: unchanged)."""
    redacted_by: tuple[str, ...] = ()
    detected: frozenset[str] = frozenset()

    def record(self) -> dict[str, Any]:
        """As the call's record keeps it: rule and version, never a value found."""
        return {
            "rule_id": self.rule_id,
            "rule_set_version": self.version,
            "outcome": self.outcome,
            "enforced": self.enforced,
            "redacted_by": list(self.redacted_by),
            "detected": sorted(self.detected),
        }


def value_at(value: Any, steps: tuple[str | int, ...]) -> Any:
    for step in steps:
        at_index = isinstance(step, int) and isinstance(value, list) and step < len(value)
        at_key = isinstance(step, str) and isinstance(value, dict) and step in value
        if at_index or at_key:
            value = value[step]
        else:
            return _MISSING
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _argument_holds(test: ArgumentTest, arguments: Mapping[str, Any]) -> bool:
    found = value_at(arguments, test.steps)
    if test.op == "exists":
        return bool((found is not _MISSING) == test.value)
    if found is _MISSING:
        return test.op in ("ne", "not_in")
    op, wanted = test.op, test.value
    if op == "eq":
        return bool(found == wanted)
    if op == "ne":
        return bool(found != wanted)
    if op == "in":
        return found in wanted
    if op == "not_in":
        return found not in wanted
    if op == "matches":
        return isinstance(found, str) and test.pattern is not None and test.pattern(found)
    if not _is_number(found):
        return False
    number = float(found)
    if op == "between":
        return bool(wanted[0] <= number <= wanted[1])
    return bool({"gt": number > wanted, "gte": number >= wanted, "lt": number < wanted, "lte": number <= wanted}[op])


def in_window(window: TimeWindow, local: datetime) -> bool:
    """Whether the time ``local`` (in the window's zone) matches the window (inside it, or outside for "outside")."""
    moment = local.time().replace(second=0, microsecond=0)
    if window.start <= window.end:
        inside = local.weekday() in window.days and window.start <= moment < window.end
    else:  # overnight (22:00 to 06:00): the day is the one the window starts on
        yesterday = (local.weekday() - 1) % 7
        inside = (local.weekday() in window.days and moment >= window.start) or (
            yesterday in window.days and moment < window.end
        )
    return inside == window.inside


def _caller_matches(callers: Mapping[str, frozenset[str]], facts: CallFacts) -> bool:
    if not callers:
        return True
    agent = facts.agent_id or ""
    return bool(
        facts.user_id in callers.get("users", ())
        or facts.role in callers.get("roles", ())
        or facts.api_key_id in callers.get("api_keys", ())
        or (agent.startswith("ep_") and agent in callers.get("endpoints", ()))
        or (agent and not agent.startswith("ep_") and agent in callers.get("agents", ()))
        or ("groups" in callers and callers["groups"] & facts.caller_groups())
    )


def matches_call(rule: Rule, facts: CallFacts, arguments: Mapping[str, Any]) -> bool:
    """Everything but history and result detectors."""
    return (
        rule.tool_names.matches(facts.tool_name)
        and rule.service_names.matches(facts.service_name, facts.service_id)
        and all(_argument_holds(test, arguments) for test in rule.arguments)
        and (rule.time is None or in_window(rule.time, facts.local_time(rule.time.zone)))
        and _caller_matches(rule.callers, facts)
    )


def _amount(history: History, arguments: Mapping[str, Any]) -> float:
    if history.total_steps is None:
        return 0.0
    found = value_at(arguments, history.total_steps)
    return float(found) if _is_number(found) else 0.0


def decide(rule_set: RuleSet, facts: CallFacts, history: HistoryCounter) -> Decision:
    """The decision for a call as it is made (see :mod:`mcpbridge.rules.model` for the order)."""
    arguments: dict[str, Any] = facts.arguments
    redacted_by: list[str] = []
    detected: set[str] = set()
    for rule in rule_set.rules:
        if rule.on_results or not matches_call(rule, facts, arguments):
            continue
        if rule.detected is not None:
            found = guardrails.detect(arguments, rule.detected.kinds)
            detected |= found
            if not found:
                continue
        if rule.outcome == "redact":
            assert rule.redaction is not None
            if rule.redaction.where in ("arguments", "both"):
                masked, kinds = guardrails.redact(arguments, rule.redaction.kinds)
                if kinds:
                    arguments, detected = masked, detected | kinds
                    redacted_by.append(rule.id)
            continue
        if rule.history is not None and not history.admit(rule, rule.history, facts, _amount(rule.history, arguments)):
            continue
        return _decision(rule_set, rule.outcome, rule, arguments, facts, redacted_by, detected)
    return _decision(rule_set, rule_set.default, None, arguments, facts, redacted_by, detected)


def _decision(
    rule_set: RuleSet,
    outcome: Literal["allow", "deny", "ask"],
    rule: Rule | None,
    arguments: dict[str, Any],
    facts: CallFacts,
    redacted_by: list[str],
    detected: set[str],
) -> Decision:
    reason = None
    if outcome == "deny":
        reason = (rule.reason if rule is not None else None) or "refused by the workspace's rules"
    return Decision(
        outcome=outcome,
        rule_id=None if rule is None else rule.id,
        version=rule_set.version,
        enforced=rule_set.enforced,
        reason=reason,
        approvers=None if rule is None else rule.approvers,
        arguments=arguments if arguments is not facts.arguments else None,
        redacted_by=tuple(redacted_by),
        detected=frozenset(detected),
    )


@dataclass(frozen=True)
class ResultScreen:
    """What the rules on results did to a result."""

    result: Any
    denied_by: str | None
    reason: str | None
    redacted_by: tuple[str, ...]
    detected: frozenset[str]
    version: int
    enforced: bool

    def record(self) -> dict[str, Any]:
        return {
            "rule_set_version": self.version,
            "enforced": self.enforced,
            "denied_by": self.denied_by,
            "redacted_by": list(self.redacted_by),
            "detected": sorted(self.detected),
        }

    @property
    def acted(self) -> bool:
        return bool(self.denied_by or self.redacted_by or self.detected)


def screen_result(rule_set: RuleSet, facts: CallFacts, result: Any) -> ResultScreen:
    """Rules on results, in order: a redact rule masks and goes on; the first deny rule that finds what it looks for
    withholds the result."""
    redacted_by: list[str] = []
    detected: set[str] = set()
    for rule in rule_set.rules:
        looks = rule.on_results or (
            rule.outcome == "redact" and rule.redaction is not None and rule.redaction.where in ("results", "both")
        )
        if not looks or not matches_call(rule, facts, facts.arguments):
            continue
        if rule.outcome == "redact":
            assert rule.redaction is not None
            if rule.detected is not None and not guardrails.detect(result, rule.detected.kinds):
                continue
            masked, kinds = guardrails.redact(result, rule.redaction.kinds)
            if kinds:
                detected |= kinds
                redacted_by.append(rule.id)
                if rule_set.enforced:
                    result = masked
            continue
        assert rule.detected is not None
        found = guardrails.detect(result, rule.detected.kinds)
        if found:
            detected |= found
            reason = rule.reason or "the result was withheld by the workspace's rules"
            return ResultScreen(
                result, rule.id, reason, tuple(redacted_by), frozenset(detected), rule_set.version, rule_set.enforced
            )
    return ResultScreen(
        result, None, None, tuple(redacted_by), frozenset(detected), rule_set.version, rule_set.enforced
    )
