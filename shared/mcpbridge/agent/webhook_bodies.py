"""What a webhook sends and how: the event a call event makes, its body (a plain JSON event, or a Slack / Teams
incoming-webhook message), its signature, and one POST through the SSRF-guarded client."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any, Final

from mcpbridge.errors import UpstreamError
from mcpbridge.outbound.http import guarded_client
from mcpbridge.outbound.json_http import require_https
from mcpbridge.outbound.policy import EgressPolicy

APPROVAL_PAGE: Final = "/console/approvals/{call_id}"
ATTEMPT_TIMEOUT_SECONDS: Final = 10.0
MAX_ANSWER_BYTES: Final = 64 * 1024
_TIMEOUT_CODES: Final = frozenset({"approval_timeout", "authorization_timeout", "input_timeout"})


def signature(secret: str, sent_at: str, body: bytes) -> str:
    """``v1=`` + hex HMAC-SHA256 over ``<timestamp>.<body>``."""
    digest = hmac.new(secret.encode(), sent_at.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"v1={digest}"


def event_of(kind: str, detail: Mapping[str, Any]) -> str | None:
    """The webhook event of a call event, or None (not one webhooks hear)."""
    if kind in ("tool_call.approval_required", "tool_call.oauth_required"):
        return "call.waiting"
    if kind == "tool_call.approval_resolved":
        return "call.decided"
    if kind == "tool_call.resolved" and detail.get("error_code") in _TIMEOUT_CODES:
        return "call.timed_out"
    return None


def render(
    format: str, event: str, delivery_id: str, occurred_at: str, detail: Mapping[str, Any], base_url: str
) -> bytes:
    """The body of a delivery: a plain JSON event, or a Slack / Teams incoming-webhook message."""
    call_id = str(detail.get("pending_id") or "")
    link = base_url + APPROVAL_PAGE.format(call_id=call_id)
    call = {
        "id": call_id,
        "status": detail.get("status"),
        "waiting_for": detail.get("kind"),
        "service_id": detail.get("service_id"),
        "service_name": detail.get("service_name"),
        "tool": detail.get("tool"),
        "user_id": detail.get("user_id"),
        "deadline_at": detail.get("deadline_at"),
    }
    text = _sentence(event, call, link)
    if format == "slack":
        body: dict[str, Any] = {
            "text": text,
            "blocks": [
                {"type": "section", "text": {"type": "mrkdwn", "text": text}},
                {
                    "type": "actions",
                    "elements": [
                        {"type": "button", "text": {"type": "plain_text", "text": "Open the call"}, "url": link}
                    ],
                },
            ],
        }
    elif format == "teams":
        body = {
            "@type": "MessageCard",
            "@context": "https://schema.org/extensions",
            "summary": text,
            "title": f"mcpbridge: {event}",
            "text": text,
            "potentialAction": [
                {"@type": "OpenUri", "name": "Open the call", "targets": [{"os": "default", "uri": link}]}
            ],
        }
    else:
        body = {
            "id": delivery_id,
            "type": event,
            "occurred_at": occurred_at,
            "workspace_id": detail.get("workspace_id"),
            "call": call,
            "url": link,
        }
    return json.dumps(body, ensure_ascii=False, sort_keys=True).encode()


def _sentence(event: str, call: Mapping[str, Any], link: str) -> str:
    what = f"{call['tool']} of {call['service_name']}"
    if event == "call.waiting":
        who = "an approval" if call["waiting_for"] == "approval" else "its user's authorization"
        return f"A call of {what} waits for {who}: {link}"
    if event == "call.decided":
        return f"A call of {what} was {call['status']}: {link}"
    return f"A call of {what} timed out without a decision: {link}"


class GuardedSender:
    """One POST through the SSRF-guarded client (:func:`~mcpbridge.outbound.http.guarded_client`): ``https``
    unless allowlisted, every address checked when the connection opens, no redirect followed, a small answer."""

    def __init__(self, policy: EgressPolicy, timeout: float = ATTEMPT_TIMEOUT_SECONDS) -> None:
        self._policy = policy
        self._timeout = timeout

    def check(self, url: str) -> None:
        """The SSRF guard's verdict on a receiver (raises InvalidInput ``url_*``)."""
        self._policy.resolve(self._policy.check_url(url))  # private addresses first: the more useful refusal
        require_https(self._policy, url, "webhook")

    def __call__(self, url: str, body: bytes, headers: Mapping[str, str]) -> int:
        import httpx2

        require_https(self._policy, url, "webhook")
        with guarded_client(self._policy, timeout=self._timeout, max_answer_bytes=MAX_ANSWER_BYTES) as http:
            try:
                with http.stream("POST", url, content=body, headers=dict(headers)) as answer:
                    answer.read()
                    return answer.status_code
            except httpx2.TimeoutException:
                raise UpstreamError("the webhook's receiver did not answer in time", code="webhook_timeout") from None
            except httpx2.HTTPError:
                raise UpstreamError("the webhook's receiver could not be reached", code="webhook_unreachable") from None
