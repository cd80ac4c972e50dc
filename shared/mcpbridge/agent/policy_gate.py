"""Where the workspace's rules meet a call: judged when it is made, its result screened when it comes back.

:class:`PolicyGate` reads the current rule set (:class:`~mcpbridge.rules.rule_sets.RuleSets`), builds what a rule
may look at about the call (:class:`~mcpbridge.rules.evaluate.CallFacts`) and counts history through
:class:`~mcpbridge.rules.history.HistoryLog`. It never raises for a workspace without rules (no decision). For
``ask`` it resolves who may approve (``routing``): the rule's users and the members of its groups, less the call's
own user and the user whose key made it, since nobody approves their own call.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcpbridge.domain.identity import Principal
from mcpbridge.ports import Clock
from mcpbridge.rules.evaluate import CallFacts, Decision, ResultScreen, decide, screen_result
from mcpbridge.rules.history import HistoryLog
from mcpbridge.rules.rule_sets import RuleSets


@dataclass(frozen=True)
class Routing:
    """Who decides a call a rule asks about: any ``required`` of ``users`` (the caller never among them)."""

    users: tuple[str, ...]
    required: int
    rule_id: str

    def as_item(self) -> dict[str, Any]:
        return {"users": list(self.users), "required": self.required, "rule_id": self.rule_id}


class PolicyGate:
    def __init__(self, rule_sets: RuleSets, history: HistoryLog, clock: Clock) -> None:
        self._rule_sets = rule_sets
        self._history = history
        self._clock = clock

    @property
    def reads_are_local(self) -> bool:
        """Whether reading the rules is a local read (SQLite), cheap enough to make on the event loop."""
        return self._rule_sets.reads_are_local

    def judge(
        self,
        principal: Principal,
        *,
        service_id: str,
        service_name: str,
        tool_name: str,
        user_id: str,
        agent_id: str | None,
        arguments: dict[str, Any],
    ) -> Decision | None:
        """The decision of the workspace's rules for a call about to be recorded (None: the workspace has none)."""
        rule_set = self._rule_sets.current(principal.workspace_id)
        if rule_set is None:
            return None
        facts = self._facts(principal.workspace_id, service_id, service_name, tool_name, user_id, agent_id, arguments)
        facts.role, facts.api_key_id = principal.role, principal.api_key_id
        return decide(rule_set, facts, self._history)

    def routing(self, principal: Principal, decision: Decision, owner_user_id: str) -> Routing | None:
        """Who may approve a call an ``ask`` rule stopped (None for the default's ask: the usual approvers)."""
        if decision.approvers is None or decision.rule_id is None:
            return None
        eligible = set(decision.approvers.users) | self._rule_sets.members(
            principal.workspace_id, decision.approvers.groups
        )
        eligible -= {owner_user_id, principal.user_id}
        return Routing(tuple(sorted(eligible)), decision.approvers.required, decision.rule_id)

    def screen(
        self,
        workspace_id: str,
        *,
        service_id: str,
        service_name: str,
        tool_name: str,
        user_id: str,
        agent_id: str | None,
        arguments: dict[str, Any],
        result: Mapping[str, Any],
    ) -> tuple[dict[str, Any], ResultScreen] | None:
        """An upstream result after the rules on results: masked, or withheld by a deny rule (when enforced).
        None when no rule looked at it."""
        rule_set = self._rule_sets.current(workspace_id)
        if rule_set is None or not any(_on_results(rule) for rule in rule_set.rules):
            return None
        facts = self._facts(workspace_id, service_id, service_name, tool_name, user_id, agent_id, arguments)
        texts = _text_parts(result)
        screened = screen_result(rule_set, facts, texts)
        if not screened.acted:
            return None
        shown = dict(result)
        if screened.enforced and screened.denied_by is not None:
            shown = {"content": [{"type": "text", "text": screened.reason}], "isError": True}
        elif screened.enforced and screened.redacted_by:
            shown = _with_text_parts(result, screened.result)
        return shown, screened

    def _facts(
        self,
        workspace_id: str,
        service_id: str,
        service_name: str,
        tool_name: str,
        user_id: str,
        agent_id: str | None,
        arguments: dict[str, Any],
    ) -> CallFacts:
        return CallFacts(
            workspace_id=workspace_id,
            service_id=service_id,
            service_name=service_name,
            tool_name=tool_name,
            user_id=user_id,
            role="viewer",
            api_key_id="",
            agent_id=agent_id,
            arguments=arguments,
            now=self._clock.now(),
            groups=lambda: self._rule_sets.groups_of(workspace_id, user_id),
        )


def _on_results(rule: Any) -> bool:
    return bool(
        rule.on_results
        or (rule.outcome == "redact" and rule.redaction is not None and rule.redaction.where in ("results", "both"))
    )


def _text_parts(result: Mapping[str, Any]) -> dict[str, Any]:
    """What detectors read of a result: its text blocks and its structured content (never base64 payloads)."""
    content = result.get("content")
    blocks = content if isinstance(content, list) else []
    texts = [b.get("text") if isinstance(b, Mapping) and b.get("type") == "text" else None for b in blocks]
    return {"texts": texts, "structured": result.get("structuredContent")}


def _with_text_parts(result: Mapping[str, Any], parts: Mapping[str, Any]) -> dict[str, Any]:
    shown = copy.deepcopy(dict(result))
    content = shown.get("content")
    for block, text in zip(content if isinstance(content, list) else [], parts["texts"], strict=False):
        if text is not None and isinstance(block, dict):
            block["text"] = text
    if "structuredContent" in shown:
        shown["structuredContent"] = parts["structured"]
    return shown
