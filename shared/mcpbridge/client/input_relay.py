"""An upstream's own requests for input during a ``tools/call`` (form-mode ``elicitation/create``), relayed.

mcpbridge declares the elicitation capability to the services it connects to. A call made on behalf of a person
runs inside an :class:`InputRelay` (:func:`relaying`); when the upstream asks a form question during that call:

* a question answered before (the same message and the same requested schema, :func:`question_key`) is answered
  with that answer, the answer given for it up front;
* any other question is answered ``cancel`` (nobody can answer within this request) and noted as the relay's
  :attr:`InputRelay.unanswered`: the caller pauses the call, asks a person, and runs the call again with the answer.

The upstream's call is not held open while a person answers: a Streamable HTTP request cannot outlive the function
that sent it on AWS Lambda. So the tool runs once up to its question, and once more with the answer; the call's record
counts the runs. A URL-mode request, or one outside a relay, is declined as before ("Elicitation not supported").
Answers are never logged.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import anyio

MAX_MESSAGE_CHARS: Final = 2000
MAX_SCHEMA_BYTES: Final = 32 * 1024
NOT_SUPPORTED: Final = "Elicitation not supported"


@dataclass(frozen=True)
class UpstreamQuestion:
    """A form-mode question an upstream put during a call: its message and requested schema, and its key."""

    message: str
    requested_schema: dict[str, Any]
    key: str

    def record(self) -> dict[str, Any]:
        return {"message": self.message, "requested_schema": self.requested_schema, "key": self.key}


def question_key(message: str, requested_schema: Mapping[str, Any]) -> str:
    """Names a question by what it asks: the same message and schema are the same question on a later run."""
    canonical = json.dumps({"m": message, "s": requested_schema}, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:24]


def question_of(params: Any) -> UpstreamQuestion | None:
    """The form question in an ``elicitation/create`` request's params (a mapping), or None for anything else (a
    URL-mode request, a malformed or oversized one)."""
    if not isinstance(params, Mapping) or params.get("mode", "form") != "form":
        return None
    message, schema = params.get("message"), params.get("requestedSchema")
    if not isinstance(message, str) or not isinstance(schema, Mapping) or schema.get("type") != "object":
        return None
    if len(message) > MAX_MESSAGE_CHARS or len(json.dumps(schema, default=str)) > MAX_SCHEMA_BYTES:
        return None
    return UpstreamQuestion(message, dict(schema), question_key(message, schema))


@dataclass
class InputRelay:
    """The answers a call may give its upstream (question key -> the answer's content), and the first question it
    could not answer."""

    answers: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    unanswered: UpstreamQuestion | None = None
    answered: int = 0
    task_id: int | None = None
    """The task making the call: a task it starts (a session's reader, opened again during the call and kept in the
    pool for other calls) inherits the relay, and must not answer with it."""

    def respond(self, params: Any) -> dict[str, Any] | None:
        """The ``ElicitResult`` (as JSON) for a request's params; None: not a question this relay takes."""
        question = question_of(params)
        if question is None:
            return None
        content = self.answers.get(question.key)
        if content is not None:
            self.answered += 1
            return {"action": "accept", "content": dict(content)}
        if self.unanswered is None:
            self.unanswered = question
        return {"action": "cancel"}


_current: contextvars.ContextVar[InputRelay | None] = contextvars.ContextVar("mcpbridge_input_relay", default=None)


@contextlib.contextmanager
def relaying(relay: InputRelay | None) -> Iterator[None]:
    """Within the block, the upstream's form questions on this task (and this task only) go to ``relay``."""
    if relay is not None:
        relay.task_id = anyio.get_current_task().id
    token = _current.set(relay)
    try:
        yield
    finally:
        _current.reset(token)


def answer_for(params: Any) -> dict[str, Any] | None:
    """The current relay's answer to an ``elicitation/create`` request, or None (decline as not supported)."""
    relay = _current.get()
    if relay is None or relay.task_id != anyio.get_current_task().id:
        return None
    return relay.respond(params)
