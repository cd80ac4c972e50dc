"""A workspace's rule set as admins write it, checked in full before it is stored.

A rule set is ``{"mode", "default", "rules": [...]}``. Rules are evaluated in their order: ``redact`` rules that
match mask what they name and evaluation goes on; the first ``allow``, ``deny`` or ``ask`` rule that matches
decides; when none does, ``default`` (allow, deny or ask) decides. ``mode`` is ``enforce`` or ``log_only`` (every
decision is recorded on the call, none changes what the call does).

A rule::

    {"id": "big-refunds", "outcome": "ask", "description": "...",
     "match": {
        "services": ["payments", "pay*"], "tools": ["refund"],              # names or glob patterns (* and ?)
        "callers": {"users": [], "roles": ["viewer"], "groups": ["finance"], "api_keys": [], "endpoints": [],
                    "agents": []},                                          # any listed field matching is enough
        "arguments": [{"path": "$.amount", "op": "gt", "value": 500}],      # every condition must hold
        "time": {"days": ["mon", "tue"], "from": "09:00", "to": "18:00", "time_zone": "Europe/Paris",
                 "when": "inside"},                                         # or "outside" the window
        "detected": {"kinds": ["secret"], "in": "arguments"},               # guardrails (see rules.guardrails)
        "history": {"window_seconds": 86400, "per": "user", "max_count": 3,
                    "total_of": "$.amount", "max_total": 2000}},            # this call would go over the limit
     "reason": "shown to the caller when denied",
     "approvers": {"users": ["usr_..."], "groups": ["finance"], "required": 2},   # ask only
     "redact": {"kinds": ["personal"], "in": "results"}}                   # redact only

Argument operators: ``eq``, ``ne``, ``gt``, ``gte``, ``lt``, ``lte`` (numbers), ``between`` (``[low, high]``,
inclusive), ``in`` / ``not_in`` (a list), ``matches`` (an RE2 pattern, linear time), ``exists`` (true/false).
Paths are ``$``, ``$.a.b``, ``$.items[0].sku`` (dots and list indexes).
"""

# Over 400 lines: every field of a rule is checked here, each refusal naming the field it is about.

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import time as day_time
from typing import Any, Final, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from mcpbridge.errors import InvalidInput
from mcpbridge.rules import guardrails

Outcome = Literal["allow", "deny", "ask", "redact"]
Mode = Literal["enforce", "log_only"]
OUTCOMES: Final = ("allow", "deny", "ask", "redact")
DEFAULTS: Final = ("allow", "deny", "ask")
MODES: Final = ("enforce", "log_only")
DAYS: Final = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
OPS: Final = ("eq", "ne", "gt", "gte", "lt", "lte", "between", "in", "not_in", "matches", "exists")
CALLER_FIELDS: Final = ("users", "roles", "groups", "api_keys", "endpoints", "agents")
MAX_RULES: Final = 500
MAX_LIST: Final = 200
MAX_COUNT: Final = 1000
MAX_WINDOW_SECONDS: Final = 31 * 86400
_ID = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
_PATH = re.compile(r"\$((?:\.[A-Za-z_][A-Za-z0-9_-]*|\[\d{1,4}\])*)")
_PATH_PART = re.compile(r"\.([A-Za-z_][A-Za-z0-9_-]*)|\[(\d{1,4})\]")
_CLOCK = re.compile(r"([01]\d|2[0-3]):([0-5]\d)")
_NAME = re.compile(r"[^\x00-\x1f\x7f]{1,256}")


@dataclass(frozen=True)
class Names:
    """Service or tool names a rule lists: exact names, and glob patterns (``*``, ``?``) compiled once."""

    exact: frozenset[str] = frozenset()
    pattern: re.Pattern[str] | None = None

    @classmethod
    def of(cls, listed: tuple[str, ...]) -> Names:
        globs = [name for name in listed if any(c in name for c in "*?[")]
        exact = frozenset(name for name in listed if name not in globs)
        pattern = re.compile("|".join(fnmatch.translate(g) for g in globs)) if globs else None
        return cls(exact, pattern)

    @property
    def any_name(self) -> bool:
        return not self.exact and self.pattern is None

    def matches(self, *names: str) -> bool:
        if self.any_name:
            return True
        return any(name in self.exact or (self.pattern is not None and self.pattern.match(name)) for name in names)


@dataclass(frozen=True)
class ArgumentTest:
    path: str
    steps: tuple[str | int, ...]
    op: str
    value: Any
    pattern: Callable[[str], bool] | None = None


@dataclass(frozen=True)
class TimeWindow:
    days: frozenset[int]
    start: day_time
    end: day_time
    zone: ZoneInfo
    inside: bool


@dataclass(frozen=True)
class History:
    window_seconds: int
    per: Literal["user", "workspace"]
    max_count: int | None
    total_steps: tuple[str | int, ...] | None
    total_of: str | None
    max_total: float | None


@dataclass(frozen=True)
class Detected:
    kinds: frozenset[str]
    where: Literal["arguments", "results"]


@dataclass(frozen=True)
class Approvers:
    users: tuple[str, ...]
    groups: tuple[str, ...]
    required: int


@dataclass(frozen=True)
class Redaction:
    kinds: frozenset[str]
    where: Literal["arguments", "results", "both"]


@dataclass(frozen=True)
class Rule:
    id: str
    outcome: Outcome
    description: str = ""
    services: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    callers: Mapping[str, frozenset[str]] = field(default_factory=dict)
    arguments: tuple[ArgumentTest, ...] = ()
    time: TimeWindow | None = None
    detected: Detected | None = None
    history: History | None = None
    reason: str | None = None
    approvers: Approvers | None = None
    redaction: Redaction | None = None
    service_names: Names = field(default_factory=Names)
    tool_names: Names = field(default_factory=Names)

    @property
    def on_results(self) -> bool:
        """Judged once the result is known (it looks at results) rather than when the call is made."""
        return self.detected is not None and self.detected.where == "results"


@dataclass(frozen=True)
class RuleSet:
    version: int
    mode: Mode
    default: Literal["allow", "deny", "ask"]
    rules: tuple[Rule, ...]

    @property
    def enforced(self) -> bool:
        return self.mode == "enforce"


def _bad(where: str, what: str) -> InvalidInput:
    return InvalidInput(f"{where}: {what}", code="invalid_rule", details={"field": where})


def _choice(value: Any, allowed: tuple[str, ...], where: str) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise _bad(where, f"must be one of {', '.join(allowed)}")
    return value


def _strings(value: Any, where: str, *, pattern: re.Pattern[str] = _NAME) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_LIST:
        raise _bad(where, f"must be a list of at most {MAX_LIST} strings")
    for item in value:
        if not isinstance(item, str) or not pattern.fullmatch(item):
            raise _bad(where, "each entry must be a non-empty string of at most 256 characters")
    return tuple(value)


def _only(body: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise _bad(f"{where}.{unknown[0]}", f"unknown field (known: {', '.join(allowed)})")


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise _bad(where, "must be a JSON object")
    return value


def parse_path(value: Any, where: str) -> tuple[str | int, ...]:
    if not isinstance(value, str) or not _PATH.fullmatch(value):
        raise _bad(where, 'must be a JSON path such as "$.amount" or "$.items[0].sku"')
    return tuple(m.group(1) if m.group(1) is not None else int(m.group(2)) for m in _PATH_PART.finditer(value))


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad(where, "must be a number")
    return float(value)


def _argument(raw: Any, where: str) -> ArgumentTest:
    body = _object(raw, where)
    _only(body, ("path", "op", "value"), where)
    steps = parse_path(body.get("path"), f"{where}.path")
    op = _choice(body.get("op"), OPS, f"{where}.op")
    value = body.get("value")
    pattern = None
    if op in ("gt", "gte", "lt", "lte"):
        value = _number(value, f"{where}.value")
    elif op == "between":
        if not isinstance(value, list) or len(value) != 2:
            raise _bad(f"{where}.value", "must be [low, high]")
        low, high = (_number(v, f"{where}.value") for v in value)
        if low > high:
            raise _bad(f"{where}.value", "low is above high")
        value = (low, high)
    elif op in ("in", "not_in"):
        if not isinstance(value, list) or not value or len(value) > MAX_LIST:
            raise _bad(f"{where}.value", f"must be a list of 1 to {MAX_LIST} values")
    elif op == "matches":
        pattern = _pattern(value, f"{where}.value")
    elif op == "exists":
        if not isinstance(value, bool):
            raise _bad(f"{where}.value", "must be true or false")
    elif "value" not in body:
        raise _bad(f"{where}.value", "is required")
    return ArgumentTest(body["path"], steps, op, value, pattern)


def _pattern(value: Any, where: str) -> Callable[[str], bool]:
    from mcpbridge.knowledge.patterns import value_pattern

    if not isinstance(value, str):
        raise _bad(where, "must be an RE2 pattern (a string)")
    try:
        return value_pattern(value)
    except InvalidInput as refused:
        raise _bad(where, refused.message) from None


def _time(raw: Any, where: str) -> TimeWindow:
    body = _object(raw, where)
    _only(body, ("days", "from", "to", "time_zone", "when"), where)
    days = _strings(body.get("days", list(DAYS)), f"{where}.days")
    if not days or any(d not in DAYS for d in days):
        raise _bad(f"{where}.days", f"must list days among {', '.join(DAYS)}")
    bounds = []
    for name, fallback in (("from", "00:00"), ("to", "23:59")):
        text = body.get(name, fallback)
        match = _CLOCK.fullmatch(text) if isinstance(text, str) else None
        if match is None:
            raise _bad(f"{where}.{name}", 'must be a time of day "HH:MM" (24 h)')
        bounds.append(day_time(int(match.group(1)), int(match.group(2))))
    zone_name = body.get("time_zone", "UTC")
    try:
        zone = ZoneInfo(zone_name) if isinstance(zone_name, str) and zone_name else None
    except (ZoneInfoNotFoundError, ValueError):
        zone = None
    if zone is None:
        raise _bad(f"{where}.time_zone", "must be an IANA time zone such as Europe/Paris or UTC")
    when = _choice(body.get("when", "inside"), ("inside", "outside"), f"{where}.when")
    return TimeWindow(frozenset(DAYS.index(d) for d in days), bounds[0], bounds[1], zone, when == "inside")


def _history(raw: Any, where: str) -> History:
    body = _object(raw, where)
    _only(body, ("window_seconds", "per", "max_count", "total_of", "max_total"), where)
    window = body.get("window_seconds")
    if isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= MAX_WINDOW_SECONDS:
        raise _bad(f"{where}.window_seconds", f"must be a whole number of seconds from 1 to {MAX_WINDOW_SECONDS}")
    per = _choice(body.get("per", "user"), ("user", "workspace"), f"{where}.per")
    max_count = body.get("max_count")
    if max_count is not None and (
        isinstance(max_count, bool) or not isinstance(max_count, int) or not 0 <= max_count <= MAX_COUNT
    ):
        raise _bad(f"{where}.max_count", f"must be a whole number from 0 to {MAX_COUNT}")
    total_of, max_total = body.get("total_of"), body.get("max_total")
    if (total_of is None) != (max_total is None):
        raise _bad(f"{where}.max_total", "total_of and max_total go together")
    if max_count is None and total_of is None:
        raise _bad(where, "give max_count, or total_of with max_total")
    steps = None if total_of is None else parse_path(total_of, f"{where}.total_of")
    limit = None if max_total is None else _number(max_total, f"{where}.max_total")
    return History(window, per, max_count, steps, total_of, limit)  # type: ignore[arg-type]


def _kinds(value: Any, where: str) -> frozenset[str]:
    names = _strings(value, where)
    if not names:
        raise _bad(where, "must name at least one kind")
    try:
        return guardrails.expand_kinds(names)
    except KeyError as unknown:
        known = ", ".join(sorted(guardrails.KINDS | set(guardrails.GROUPS)))
        raise _bad(where, f"unknown kind {unknown.args[0]!r} (known: {known})") from None


def _detected(raw: Any, where: str) -> Detected:
    body = _object(raw, where)
    _only(body, ("kinds", "in"), where)
    place = _choice(body.get("in", "arguments"), ("arguments", "results"), f"{where}.in")
    return Detected(_kinds(body.get("kinds"), f"{where}.kinds"), place)  # type: ignore[arg-type]


def _callers(raw: Any, where: str) -> dict[str, frozenset[str]]:
    body = _object(raw, where)
    _only(body, CALLER_FIELDS, where)
    callers = {name: frozenset(_strings(body.get(name), f"{where}.{name}")) for name in CALLER_FIELDS if name in body}
    for role in callers.get("roles", frozenset()):
        if role not in ("viewer", "admin"):
            raise _bad(f"{where}.roles", "roles are viewer and admin")
    return {name: values for name, values in callers.items() if values}


def _match(rule: dict[str, Any], raw: Any, where: str) -> None:
    body = _object(raw if raw is not None else {}, where)
    _only(body, ("services", "tools", "callers", "arguments", "time", "detected", "history"), where)
    rule["services"] = _strings(body.get("services"), f"{where}.services")
    rule["tools"] = _strings(body.get("tools"), f"{where}.tools")
    rule["service_names"], rule["tool_names"] = Names.of(rule["services"]), Names.of(rule["tools"])
    if "callers" in body:
        rule["callers"] = _callers(body["callers"], f"{where}.callers")
    arguments = body.get("arguments", [])
    if not isinstance(arguments, list) or len(arguments) > 50:
        raise _bad(f"{where}.arguments", "must be a list of at most 50 conditions")
    rule["arguments"] = tuple(_argument(a, f"{where}.arguments[{i}]") for i, a in enumerate(arguments))
    if "time" in body:
        rule["time"] = _time(body["time"], f"{where}.time")
    if "detected" in body:
        rule["detected"] = _detected(body["detected"], f"{where}.detected")
    if "history" in body:
        rule["history"] = _history(body["history"], f"{where}.history")


def _approvers(raw: Any, where: str) -> Approvers:
    body = _object(raw, where)
    _only(body, ("users", "groups", "required"), where)
    users = _strings(body.get("users"), f"{where}.users")
    groups = _strings(body.get("groups"), f"{where}.groups")
    if not users and not groups:
        raise _bad(where, "name at least one user or group")
    required = body.get("required", 1)
    if isinstance(required, bool) or not isinstance(required, int) or not 1 <= required <= 20:
        raise _bad(f"{where}.required", "must be a whole number from 1 to 20")
    return Approvers(users, groups, required)


def parse_rule(raw: Any, where: str) -> Rule:
    body = _object(raw, where)
    _only(body, ("id", "outcome", "description", "match", "reason", "approvers", "redact"), where)
    rule_id = body.get("id")
    if not isinstance(rule_id, str) or not _ID.fullmatch(rule_id):
        raise _bad(f"{where}.id", "must be 1 to 64 characters: lower-case letters, digits, '_', '.', '-'")
    outcome = _choice(body.get("outcome"), OUTCOMES, f"{where}.outcome")
    description = body.get("description", "")
    if not isinstance(description, str) or len(description) > 1000:
        raise _bad(f"{where}.description", "must be a string of at most 1000 characters")
    fields: dict[str, Any] = {"id": rule_id, "outcome": outcome, "description": description}
    _match(fields, body.get("match"), f"{where}.match")
    reason = body.get("reason")
    if reason is not None and (not isinstance(reason, str) or not 1 <= len(reason) <= 500):
        raise _bad(f"{where}.reason", "must be a string of 1 to 500 characters")
    fields["reason"] = reason
    if outcome == "ask":
        fields["approvers"] = _approvers(body.get("approvers"), f"{where}.approvers")
    elif "approvers" in body:
        raise _bad(f"{where}.approvers", "only an ask rule names approvers")
    if outcome == "redact":
        redaction = _object(body.get("redact"), f"{where}.redact")
        _only(redaction, ("kinds", "in"), f"{where}.redact")
        place = _choice(redaction.get("in", "both"), ("arguments", "results", "both"), f"{where}.redact.in")
        fields["redaction"] = Redaction(_kinds(redaction.get("kinds"), f"{where}.redact.kinds"), place)  # type: ignore[arg-type]
    elif "redact" in body:
        raise _bad(f"{where}.redact", "only a redact rule says what it masks")
    made = Rule(**fields)
    if made.on_results and outcome not in ("deny", "redact"):
        raise _bad(f"{where}.outcome", "a rule on results (detected.in = results) may only deny or redact")
    if made.on_results and made.history is not None:
        raise _bad(f"{where}.match.history", "a rule on results cannot count calls")
    return made


def parse_rule_set(body: Any, version: int) -> RuleSet:
    """A rule set from its JSON form; ``InvalidInput`` (400 ``invalid_rule``) naming the first wrong field."""
    body = _object(body, "rule set")
    _only(body, ("mode", "default", "rules"), "rule set")
    mode = _choice(body.get("mode", "enforce"), MODES, "mode")
    default = _choice(body.get("default", "allow"), DEFAULTS, "default")
    raw_rules = body.get("rules", [])
    if not isinstance(raw_rules, list) or len(raw_rules) > MAX_RULES:
        raise _bad("rules", f"must be a list of at most {MAX_RULES} rules")
    rules = tuple(parse_rule(raw, f"rules[{i}]") for i, raw in enumerate(raw_rules))
    seen: set[str] = set()
    for index, rule in enumerate(rules):
        if rule.id in seen:
            raise _bad(f"rules[{index}].id", f"{rule.id!r} is used by an earlier rule")
        seen.add(rule.id)
    return RuleSet(version, mode, default, rules)  # type: ignore[arg-type]
