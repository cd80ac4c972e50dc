"""A workspace's rule set (versioned) and its groups of users, as stored; what the broker asks of them.

Items:

    WS#<ws> / RULESET                  the current rule set: body (as written), version, mode, updated_at, updated_by
    WS#<ws> / RULESET#V#<000001>       every version as it was saved (what a call's decision names can be read back)
    WS#<ws> / GROUP#<name>             a group: name, description, members (user ids), version

Saving a rule set is a conditional write on the version the admin read (``expected_version``; 0 for the first), so
two admins never overwrite each other silently (409 ``version_conflict``). Switching the mode (enforce / log-only)
keeps the rules and their version: it changes only whether decisions are acted on. A group named by a rule must
exist when the rule set is saved, and a group a rule names cannot be deleted (409 ``group_in_use``).
"""

from __future__ import annotations

import builtins
import logging
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mcpbridge.client.registry import require_reader, require_writer
from mcpbridge.domain.identity import Principal, timestamp
from mcpbridge.domain.items import Compare, Condition, Item, ItemExists, Key, Put, Update, all_of
from mcpbridge.errors import ConditionFailed, Conflict, InvalidInput, NotFound
from mcpbridge.paging import every_item
from mcpbridge.ports import Clock, Store
from mcpbridge.rules.model import MODES, RuleSet, parse_rule_set

log = logging.getLogger("mcpbridge.rules")

GROUP_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
MAX_MEMBERS = 500
_CACHED = 256


def rule_set_key(workspace_id: str) -> Key:
    return Key(f"WS#{workspace_id}", "RULESET")


def rule_set_version_key(workspace_id: str, version: int) -> Key:
    return Key(f"WS#{workspace_id}", f"RULESET#V#{version:06d}")


def group_key(workspace_id: str, name: str) -> Key:
    return Key(f"WS#{workspace_id}", f"GROUP#{name}")


@dataclass(frozen=True)
class StoredRuleSet:
    version: int
    mode: str
    body: dict[str, Any]
    updated_at: str | None
    updated_by: str | None


@dataclass(frozen=True)
class Group:
    name: str
    description: str
    members: tuple[str, ...]
    version: int
    updated_at: str


class RuleSets:
    """Read and save the workspace's rule set; :meth:`current` is what the broker judges calls by."""

    def __init__(self, store: Store, clock: Clock, user_exists: Callable[[str, str], bool]) -> None:
        """``user_exists(workspace_id, user_id)``: whether a user named as a member or approver exists."""
        self._store = store
        self._clock = clock
        self._user_exists = user_exists
        self._parsed: dict[tuple[str, int, str], RuleSet] = {}
        self._lock = threading.Lock()

    @property
    def reads_are_local(self) -> bool:
        return bool(self._store.reads_are_local)

    # -- rule sets --------------------------------------------------------------------------------------------

    def get(self, principal: Principal) -> StoredRuleSet:
        require_reader(principal)
        item = self._store.get(rule_set_key(principal.workspace_id))
        if item is None:
            return StoredRuleSet(0, "enforce", {"mode": "enforce", "default": "allow", "rules": []}, None, None)
        return _stored(item)

    def version(self, principal: Principal, version: int) -> StoredRuleSet:
        require_reader(principal)
        item = self._store.get(rule_set_version_key(principal.workspace_id, version))
        if item is None:
            raise NotFound(f"the rule set has no version {version}", code="rule_set_version_not_found")
        return _stored(item)

    def save(self, principal: Principal, body: Any, expected_version: Any) -> StoredRuleSet:
        """Check the whole rule set (400 ``invalid_rule`` naming the field), then store it as the next version."""
        require_writer(principal)
        if isinstance(expected_version, bool) or not isinstance(expected_version, int) or expected_version < 0:
            raise InvalidInput(
                "expected_version must be the version you read (0 when there is none yet)", code="invalid_version"
            )
        parsed = parse_rule_set(body, expected_version + 1)
        self._check_names(principal.workspace_id, parsed)
        now = timestamp(self._clock.now())
        version = expected_version + 1
        canonical = _canonical(body)
        fields = {
            "body": canonical,
            "version": version,
            "mode": parsed.mode,
            "updated_at": now,
            "updated_by": principal.user_id,
        }
        current = Condition.absent("rule_set_new") if expected_version == 0 else _at_version(expected_version)
        try:
            self._store.transact(
                [
                    Put({**rule_set_key(principal.workspace_id).as_dict(), **fields}, condition=current),
                    Put({**rule_set_version_key(principal.workspace_id, version).as_dict(), **fields}),
                ]
            )
        except ConditionFailed:
            raise _version_conflict() from None
        log.info(
            "saved rule set version %d of workspace %s (%d rules)", version, principal.workspace_id, len(parsed.rules)
        )
        return StoredRuleSet(version, parsed.mode, canonical, now, principal.user_id)

    def set_mode(self, principal: Principal, mode: Any) -> StoredRuleSet:
        """Enforce the rules or only record what they would do; the rules and their version stay as they are."""
        require_writer(principal)
        if mode not in MODES:
            raise InvalidInput(f"mode must be one of {', '.join(MODES)}", code="invalid_mode")
        try:
            item = self._store.update(
                rule_set_key(principal.workspace_id),
                Update(set={"mode": mode, "mode_changed_at": timestamp(self._clock.now())}),
                condition=Condition.exists("rule_set_exists"),
            )
        except ConditionFailed:
            raise NotFound("the workspace has no rule set yet: save one first", code="rule_set_not_found") from None
        return _stored(item)

    def current(self, workspace_id: str) -> RuleSet | None:
        """The rule set calls are judged by (parsed once per version and mode), or None when there is none."""
        item = self._store.get(rule_set_key(workspace_id))
        if item is None:
            return None
        version, mode = int(item["version"]), str(item.get("mode", "enforce"))
        key = (workspace_id, version, mode)
        with self._lock:
            found = self._parsed.get(key)
        if found is None:
            found = parse_rule_set({**item["body"], "mode": mode}, version)
            with self._lock:
                if len(self._parsed) >= _CACHED:
                    self._parsed.clear()
                self._parsed[key] = found
        return found

    def _check_names(self, workspace_id: str, parsed: RuleSet) -> None:
        for index, rule in enumerate(parsed.rules):
            named_groups = set(rule.callers.get("groups", ()))
            if rule.approvers is not None:
                named_groups |= set(rule.approvers.groups)
                for user_id in rule.approvers.users:
                    if not self._user_exists(workspace_id, user_id):
                        raise InvalidInput(
                            f"rules[{index}].approvers.users: no user {user_id!r} in this workspace",
                            code="invalid_rule",
                            details={"field": f"rules[{index}].approvers.users"},
                        )
            for name in sorted(named_groups):
                if self._store.get(group_key(workspace_id, name)) is None:
                    raise InvalidInput(
                        f"rules[{index}]: no group named {name!r} (create it first)",
                        code="invalid_rule",
                        details={"field": f"rules[{index}]"},
                    )

    # -- groups -----------------------------------------------------------------------------------------------

    def groups(self, principal: Principal) -> builtins.list[Group]:
        require_reader(principal)
        return [_group(item) for item in every_item(self._store, f"WS#{principal.workspace_id}", sk_prefix="GROUP#")]

    def group(self, principal: Principal, name: str) -> Group:
        require_reader(principal)
        return self.find_group(principal.workspace_id, name)

    def find_group(self, workspace_id: str, name: str) -> Group:
        item = self._store.get(group_key(workspace_id, name)) if isinstance(name, str) else None
        if item is None:
            raise NotFound("no such group", code="group_not_found")
        return _group(item)

    def put_group(self, principal: Principal, name: str, body: Mapping[str, Any], *, create: bool) -> Group:
        """Create a group (409 ``group_exists``) or replace its description and members (404 if absent)."""
        require_writer(principal)
        if not isinstance(name, str) or not GROUP_NAME.fullmatch(name):
            raise InvalidInput(
                "a group name is 1 to 64 characters: lower-case letters, digits, '_', '.', '-'", code="invalid_group"
            )
        members = self._members(principal.workspace_id, body.get("members", []))
        description = body.get("description", "")
        if not isinstance(description, str) or len(description) > 1000:
            raise InvalidInput("description must be a string of at most 1000 characters", code="invalid_group")
        now = timestamp(self._clock.now())
        key = group_key(principal.workspace_id, name)
        fields = {"name": name, "description": description, "members": list(members), "updated_at": now}
        try:
            if create:
                self._store.put({**key.as_dict(), **fields, "version": 1}, condition=Condition.absent("group_new"))
                return Group(name, description, members, 1, now)
            item = self._store.update(key, Update(set=fields, add={"version": 1}), condition=Condition.exists("group"))
        except ConditionFailed:
            if create:
                raise Conflict(f"a group named {name!r} exists already", code="group_exists") from None
            raise NotFound("no such group", code="group_not_found") from None
        return _group(item)

    def delete_group(self, principal: Principal, name: str) -> None:
        require_writer(principal)
        current = self.current(principal.workspace_id)
        for rule in current.rules if current is not None else ():
            named = set(rule.callers.get("groups", ())) | set(rule.approvers.groups if rule.approvers else ())
            if name in named:
                raise Conflict(f"rule {rule.id!r} names this group: change the rules first", code="group_in_use")
        if self._store.delete(group_key(principal.workspace_id, name)) is None:
            raise NotFound("no such group", code="group_not_found")

    def groups_of(self, workspace_id: str, user_id: str) -> frozenset[str]:
        """The names of the groups ``user_id`` belongs to."""
        items = every_item(self._store, f"WS#{workspace_id}", sk_prefix="GROUP#")
        return frozenset(item["name"] for item in items if user_id in item.get("members", ()))

    def members(self, workspace_id: str, names: tuple[str, ...]) -> set[str]:
        found: set[str] = set()
        for name in names:
            item = self._store.get(group_key(workspace_id, name))
            found |= set(item.get("members", ())) if item is not None else set()
        return found

    def _members(self, workspace_id: str, raw: Any) -> tuple[str, ...]:
        if not isinstance(raw, list) or len(raw) > MAX_MEMBERS or not all(isinstance(m, str) for m in raw):
            raise InvalidInput(f"members must be a list of at most {MAX_MEMBERS} user ids", code="invalid_group")
        for user_id in raw:
            if not self._user_exists(workspace_id, user_id):
                raise InvalidInput(f"members: no user {user_id[:64]!r} in this workspace", code="unknown_member")
        return tuple(dict.fromkeys(raw))


def _at_version(version: int) -> Condition:
    return Condition("rule_set_unchanged", all_of(ItemExists(), Compare("version", "=", version)))


def _version_conflict() -> Conflict:
    return Conflict(
        "the rule set changed since you read it: read it again, and save on its current version",
        code="version_conflict",
    )


def _canonical(body: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "mode": body.get("mode", "enforce"),
        "default": body.get("default", "allow"),
        "rules": body.get("rules", []),
    }


def _stored(item: Item) -> StoredRuleSet:
    body = {**item["body"], "mode": item.get("mode", "enforce")}
    return StoredRuleSet(
        int(item["version"]), str(item.get("mode", "enforce")), body, item.get("updated_at"), item.get("updated_by")
    )


def _group(item: Item) -> Group:
    return Group(
        item["name"],
        item.get("description", ""),
        tuple(item.get("members", ())),
        int(item.get("version", 1)),
        item.get("updated_at", ""),
    )
