"""What a webhook shows of its receiver and which call events it hears (pure rules)."""

from __future__ import annotations

import json

import pytest

from mcpbridge.agent.webhook_bodies import event_of, render
from mcpbridge.agent.webhooks import shown_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://hooks.slack.com/services/T000/B000/XXXXSECRET", "https://hooks.slack.com/…"),
        ("https://user:pass@example.test:8443/hook?token=abc", "https://example.test:8443/…"),
        ("https://outlook.office.com/webhook/abc@def/IncomingWebhook/xyz", "https://outlook.office.com/…"),
    ],
)
def test_a_receivers_url_is_shown_without_its_path_query_or_credentials(url: str, shown: str) -> None:
    assert shown_url(url) == shown


@pytest.mark.parametrize(
    ("kind", "detail", "event"),
    [
        ("tool_call.approval_required", {}, "call.waiting"),
        ("tool_call.oauth_required", {}, "call.waiting"),
        ("tool_call.approval_resolved", {"status": "rejected"}, "call.decided"),
        ("tool_call.resolved", {"error_code": "approval_timeout"}, "call.timed_out"),
        ("tool_call.resolved", {"error_code": "authorization_timeout"}, "call.timed_out"),
        ("tool_call.resolved", {"error_code": "rejected"}, None),
        ("tool_call.resolved", {"status": "completed"}, None),
        ("tool_call.cancelled", {}, None),
    ],
)
def test_which_call_events_webhooks_hear(kind: str, detail: dict[str, str], event: str | None) -> None:
    assert event_of(kind, detail) == event


def test_a_body_never_carries_the_calls_arguments() -> None:
    detail = {"pending_id": "call_1", "arguments": {"card": "4111 1111 1111 1111"}, "tool": "pay", "kind": "approval"}
    for format in ("json", "slack", "teams"):
        body = render(format, "call.waiting", "whd_1", "2027-01-01T00:00:00Z", detail, "https://hub.test")
        assert "4111" not in body.decode()
        assert "https://hub.test/console/approvals/call_1" in json.dumps(json.loads(body))
