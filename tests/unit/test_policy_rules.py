"""The rules' pure parts: detectors (secrets by detect-secrets, personal data with their checksums), time windows
across time zones and midnight, argument tests, and the order in which a rule set decides."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from mcpbridge.errors import InvalidInput
from mcpbridge.rules import guardrails
from mcpbridge.rules.evaluate import CallFacts, decide, in_window
from mcpbridge.rules.model import parse_rule_set


def test_secrets_and_personal_data_are_found_by_kind_and_masked() -> None:
    found = guardrails.detect(
        {
            "key": "AKIAIOSFODNN7EXAMPLE",
            "pem": "-----BEGIN RSA PRIVATE KEY-----\nMIIB\n-----END RSA PRIVATE KEY-----",
            "to": ["ana.lima@example.org"],
            "call": "ring +44 20 7946 0958 today",
            "card": "4111 1111 1111 1111",
            "iban": "GB82 WEST 1234 5698 7654 32",
        }
    )
    assert found == {"aws_access_key", "private_key", "email", "phone", "card_number", "iban"}
    masked, kinds = guardrails.redact(
        {"note": "pay 4111111111111111 to ana.lima@example.org"}, ["card_number", "email"]
    )
    assert masked == {"note": "pay [redacted:card_number] to [redacted:email]"}
    assert kinds == {"card_number", "email"}


@pytest.mark.parametrize(
    "text",
    [
        "order 4111111111111112 (fails Luhn)",
        "GB82 WEST 1234 5698 7654 33",  # fails mod 97
        "version 1.2.3, amount 900, id 12345678",
        "akiaiosfodnn7example",
    ],
)
def test_look_alikes_are_not_reported(text: str) -> None:
    assert guardrails.detect({"text": text}) == frozenset()


def _window(**fields: Any) -> Any:
    return parse_rule_set({"rules": [{"id": "w", "outcome": "deny", "match": {"time": fields}}]}, 1).rules[0].time


def _at(iso: str, zone: Any) -> datetime:
    return datetime.fromisoformat(iso).replace(tzinfo=UTC).astimezone(zone)


def test_time_windows_in_their_zone_overnight_and_outside() -> None:
    paris = _window(
        days=["mon", "tue", "wed", "thu", "fri"], **{"from": "09:00", "to": "18:00"}, time_zone="Europe/Paris"
    )
    assert in_window(paris, _at("2027-01-15T08:30:00", paris.zone))  # Friday 09:30 in Paris
    assert not in_window(paris, _at("2027-01-15T07:30:00", paris.zone))  # 08:30 in Paris
    assert not in_window(paris, _at("2027-01-16T10:00:00", paris.zone))  # Saturday
    night = _window(days=["fri"], **{"from": "22:00", "to": "06:00"})
    assert in_window(night, _at("2027-01-15T23:00:00", night.zone))
    assert in_window(night, _at("2027-01-16T05:59:00", night.zone))  # Saturday morning: Friday's night
    assert not in_window(night, _at("2027-01-16T23:00:00", night.zone))
    outside = _window(**{"from": "09:00", "to": "18:00"}, when="outside")
    assert in_window(outside, _at("2027-01-15T20:00:00", outside.zone))


def _facts(arguments: dict[str, Any], **fields: Any) -> CallFacts:
    base: dict[str, Any] = {
        "workspace_id": "ws",
        "service_id": "svc_1",
        "service_name": "payments",
        "tool_name": "refund",
        "user_id": "usr_a",
        "role": "viewer",
        "api_key_id": "key_a",
        "agent_id": None,
        "arguments": arguments,
        "now": 1_800_005_400.0,
    }
    return CallFacts(**{**base, **fields})


class NoHistory:
    def admit(self, *args: Any) -> bool:
        raise AssertionError("no history rule here")


def test_redact_rules_go_on_and_the_first_deciding_rule_wins() -> None:
    rule_set = parse_rule_set(
        {
            "default": "deny",
            "rules": [
                {"id": "mask", "outcome": "redact", "redact": {"kinds": ["email"], "in": "arguments"}},
                {
                    "id": "small",
                    "outcome": "allow",
                    "match": {
                        "services": ["pay*"],
                        "arguments": [{"path": "$.lines[0].amount", "op": "lte", "value": 500}],
                    },
                },
                {
                    "id": "sets",
                    "outcome": "ask",
                    "match": {"arguments": [{"path": "$.currency", "op": "in", "value": ["EUR"]}]},
                    "approvers": {"users": ["usr_b"]},
                },
            ],
        },
        3,
    )
    small = decide(rule_set, _facts({"lines": [{"amount": 400}], "to": "a@example.org"}), NoHistory())
    assert (small.outcome, small.rule_id, small.version) == ("allow", "small", 3)
    assert small.redacted_by == ("mask",)
    assert small.arguments == {"lines": [{"amount": 400}], "to": "[redacted:email]"}
    euros = decide(rule_set, _facts({"lines": [{"amount": 900}], "currency": "EUR"}), NoHistory())
    assert (euros.outcome, euros.rule_id) == ("ask", "sets")
    other = decide(rule_set, _facts({"lines": [{"amount": "900"}]}), NoHistory())
    assert (other.outcome, other.rule_id, other.reason) == ("deny", None, "refused by the workspace's rules")


def test_a_rule_set_is_checked_whole() -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_rule_set({"rules": [{"id": "x", "outcome": "ask", "match": {}}]}, 1)
    assert refused.value.details["field"] == "rules[0].approvers"
    with pytest.raises(InvalidInput) as refused:
        parse_rule_set(
            {
                "rules": [
                    {
                        "id": "x",
                        "outcome": "ask",
                        "match": {"detected": {"kinds": ["email"], "in": "results"}},
                        "approvers": {"users": ["u"]},
                    }
                ]
            },
            1,
        )
    assert refused.value.details["field"] == "rules[0].outcome"
    with pytest.raises(InvalidInput) as refused:
        parse_rule_set(
            {
                "rules": [
                    {
                        "id": "x",
                        "outcome": "deny",
                        "match": {"arguments": [{"path": "$.a", "op": "between", "value": [5, 1]}]},
                    }
                ]
            },
            1,
        )
    assert "low is above high" in refused.value.message
