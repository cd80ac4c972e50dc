"""The relay of an upstream's questions (:mod:`mcpbridge.client.input_relay`): which questions it takes, how it
recognises one answered before, and that only the task making the call answers with it."""

from __future__ import annotations

from typing import Any

import anyio

from mcpbridge.client.input_relay import InputRelay, answer_for, question_key, relaying

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def _form(message: str = "Your name?", schema: dict[str, Any] | None = None, **more: Any) -> dict[str, Any]:
    return {"message": message, "requestedSchema": schema or SCHEMA, **more}


def test_a_question_answered_before_gets_its_answer_and_a_new_one_is_noted_and_cancelled() -> None:
    key = question_key("Your name?", SCHEMA)
    relay = InputRelay({key: {"name": "Ada"}})
    assert relay.respond(_form(mode="form")) == {"action": "accept", "content": {"name": "Ada"}}
    assert relay.answered == 1
    other = {"type": "object", "properties": {"age": {"type": "integer"}}}
    assert relay.respond(_form("Your age?", other)) == {"action": "cancel"}
    assert relay.unanswered is not None
    assert relay.unanswered.key == question_key("Your age?", other)
    assert relay.unanswered.record()["requested_schema"] == other
    assert relay.respond(_form("Your city?", other)) == {"action": "cancel"}
    assert relay.unanswered.message == "Your age?", "the first question left unanswered is the one asked"


def test_the_same_words_with_another_schema_are_another_question() -> None:
    assert question_key("Your name?", SCHEMA) != question_key("Your name?", {**SCHEMA, "required": []})
    assert question_key("Your name?", SCHEMA) == question_key("Your name?", dict(reversed(list(SCHEMA.items()))))


def test_url_mode_and_malformed_requests_are_not_taken() -> None:
    relay = InputRelay()
    for params in (
        {"mode": "url", "message": "Open", "url": "https://example.com", "elicitationId": "1"},
        {"message": "No schema"},
        _form(schema={"type": "string"}),
        _form("x" * 5000),
        None,
    ):
        assert relay.respond(params) is None
    assert relay.unanswered is None


def test_only_the_task_making_the_call_answers_with_its_relay() -> None:
    relay = InputRelay({question_key("Your name?", SCHEMA): {"name": "Ada"}})
    seen: dict[str, Any] = {}

    async def elsewhere() -> None:  # a task started during the call inherits the context, not the right to answer
        seen["child"] = answer_for(_form())

    async def call() -> None:
        with relaying(relay):
            seen["caller"] = answer_for(_form())
            async with anyio.create_task_group() as group:
                group.start_soon(elsewhere)
        seen["after"] = answer_for(_form())

    anyio.run(call)
    assert seen == {"caller": {"action": "accept", "content": {"name": "Ada"}}, "child": None, "after": None}
