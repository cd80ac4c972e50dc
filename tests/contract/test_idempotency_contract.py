"""Idempotency keys of tool calls on SQLite and on DynamoDB alike: claimed once, replayed for the same request,
refused for another, gone when their call's retention ends."""

from __future__ import annotations

import pytest

from mcpbridge.agent.calls import RETENTION_SECONDS
from mcpbridge.agent.idempotency import IdempotencyKeys, request_digest
from mcpbridge.errors import Conflict
from mcpbridge.ports import Store
from tests.support.clock import FakeClock


def test_a_key_is_claimed_once_and_replayed_for_the_same_request_only(store: Store, clock: FakeClock) -> None:
    keys = IdempotencyKeys(store, clock)
    asked = request_digest("svc_1", "echo", None, {"text": "hi"})
    assert keys.claim("ws", "alice", "k1", asked, "call_first") is None
    assert keys.claim("ws", "alice", "k1", asked, "call_second") == "call_first"
    with pytest.raises(Conflict) as reused:
        keys.claim("ws", "alice", "k1", request_digest("svc_1", "echo", None, {"text": "bye"}), "call_third")
    assert reused.value.code == "idempotency_key_reused"
    assert keys.claim("ws", "bob", "k1", asked, "call_bobs") is None, "keys are per caller"
    assert keys.claim("ws", "alice", "k1", asked, "call_again") == "call_first"


def test_a_key_expires_with_its_call(store: Store, clock: FakeClock) -> None:
    keys = IdempotencyKeys(store, clock)
    asked = request_digest("svc_1", "echo", "agt_1", {"text": "hi"})
    assert keys.claim("ws", "alice", "k", asked, "call_old") is None
    clock.advance(RETENTION_SECONDS + 1)
    assert keys.claim("ws", "alice", "k", asked, "call_new") is None


def test_a_released_key_can_be_claimed_again(store: Store, clock: FakeClock) -> None:
    keys = IdempotencyKeys(store, clock)
    asked = request_digest("svc_1", "echo", None, {})
    assert keys.claim("ws", "alice", "k", asked, "call_lost") is None
    keys.release("ws", "alice", "k")
    assert keys.claim("ws", "alice", "k", asked, "call_kept") is None


def test_keys_follow_the_calls_retention_setting(store: Store, clock: FakeClock) -> None:
    keys = IdempotencyKeys(store, clock, retention_seconds=3600)
    asked = request_digest("svc_1", "echo", None, {})
    assert keys.claim("ws", "alice", "k", asked, "call_hour") is None
    clock.advance(3000)
    assert keys.claim("ws", "alice", "k", asked, "call_later") == "call_hour"
    clock.advance(601)
    assert keys.claim("ws", "alice", "k", asked, "call_next") is None
