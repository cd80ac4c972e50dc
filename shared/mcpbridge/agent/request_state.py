"""The ``requestState`` of a paused gateway call (MCP 2026-07-28's multi-round-trip answers).

A published external tool whose call waits for a person answers an ``InputRequiredResult``; the client sends the
same ``tools/call`` again with the ``requestState`` it got, and gets the tool's result once the call has run. The
state is the call's id, sealed by mcpbridge's secret box (KMS on AWS, the key file locally) and bound to:

* **the endpoint and the caller**: the seal's context is the endpoint id and the caller's identity (the OAuth user,
  or the endpoint's own for a static token), so a state used by anyone else, or through another endpoint, does not
  open;
* **the request**: the tool's listed name and a digest of the arguments, so a retry that changes either is refused;
* **what the client was asked** (the approval page or the consent URL), so the same question is not asked again
  while the call still waits for it.

A state that does not open or does not match is ``-32602`` (``Invalid or expired requestState``), whatever the
reason: the reason is logged, never answered. Nothing is stored for a state; the call's record is the truth.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from mcpbridge.domain.identity import Principal
from mcpbridge.domain.secrets import SecretContext, SecretUnreadable
from mcpbridge.ports import SecretBox

log = logging.getLogger("mcpbridge.gateway")

SEALED_KIND: Final = "mcp_request_state"
VERSION: Final = 1


class InvalidRequestState(Exception):
    """A ``requestState`` this caller may not use for this request; the message is for the log only."""


@dataclass(frozen=True)
class PausedCall:
    """What a ``requestState`` carries: the call, the request it answers, what the client was asked."""

    call_id: str
    tool: str
    arguments_digest: str
    asked: str | None
    """``"approval"`` or ``"oauth"``: the URL the client was sent to; ``"input_<n>"``: the upstream's n-th question
    it was asked; or None."""


def arguments_digest(arguments: Mapping[str, Any]) -> str:
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return base64.urlsafe_b64encode(hashlib.sha256(canonical.encode()).digest()[:16]).decode().rstrip("=")


def _context(endpoint_id: str, principal: Principal) -> SecretContext:
    return SecretContext(principal.workspace_id, SEALED_KIND, f"{endpoint_id}\x1f{principal.user_id}")


def seal(box: SecretBox, endpoint_id: str, principal: Principal, paused: PausedCall) -> str:
    payload = {
        "v": VERSION,
        "call": paused.call_id,
        "tool": paused.tool,
        "args": paused.arguments_digest,
        "asked": paused.asked,
    }
    return box.seal(json.dumps(payload, separators=(",", ":")), _context(endpoint_id, principal))


def open_state(
    box: SecretBox,
    endpoint_id: str,
    principal: Principal,
    state: str,
    tool: str,
    arguments: Mapping[str, Any],
) -> PausedCall:
    """The paused call a client's ``requestState`` names, checked against this request; raises
    :class:`InvalidRequestState`. ``errors.Unavailable`` (the key cannot be reached) propagates."""
    try:
        payload = json.loads(box.open(state, _context(endpoint_id, principal)))
    except SecretUnreadable:
        raise InvalidRequestState("the state does not open for this endpoint and caller") from None
    except ValueError:
        raise InvalidRequestState("the state is not a JSON object") from None
    if not isinstance(payload, dict) or payload.get("v") != VERSION:
        raise InvalidRequestState("unknown state version")
    if payload.get("tool") != tool:
        raise InvalidRequestState("the state was issued for another tool")
    if payload.get("args") != arguments_digest(arguments):
        raise InvalidRequestState("the state was issued for other arguments")
    call_id, asked = payload.get("call"), payload.get("asked")
    if not isinstance(call_id, str) or not (asked in (None, "approval", "oauth") or _asks_input(asked)):
        raise InvalidRequestState("malformed state")
    return PausedCall(call_id, tool, str(payload["args"]), asked)


def _asks_input(asked: Any) -> bool:
    return isinstance(asked, str) and asked.startswith("input_") and asked[6:].isdigit()
