"""Paused tool calls of a user or a workspace being deleted: cancelled, and their workflows resumed so they end."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from mcpbridge.agent.calls import WAITING, ToolCall, ToolCalls
from mcpbridge.agent.steps import ToolCallSteps
from mcpbridge.errors import Conflict, MCPBridgeError

log = logging.getLogger("mcpbridge.tenancy")


def cancel_waiting(calls: ToolCalls, steps: ToolCallSteps, waiting: Iterable[ToolCall], *, code: str, why: str) -> int:
    """Move each call still waiting for a person to ``cancelled`` (``code``, ``why``) and wake its workflow, which
    then finishes it (announcing the outcome, resuming an agent's own callback). How many were cancelled."""
    cancelled = 0
    for call in waiting:
        if call.status not in WAITING.values():
            continue
        try:
            moved = calls.move(call, "cancelled", sets={"error": {"code": code, "message": why}})
        except Conflict:
            continue  # resolved meanwhile
        cancelled += 1
        try:
            steps.resume_waiting(moved)
        except MCPBridgeError as exc:  # the workflow times the pause out by itself, and then finds it cancelled
            log.warning("tool call %s was cancelled but its workflow could not be resumed: %s", call.id, exc.code)
    return cancelled
