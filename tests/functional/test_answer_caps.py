"""Every client the hub reads a peer's answer with counts it as it arrives and stops at its cap.

A server on 127.0.0.1 answers with bodies that do not end (a ``Content-Length`` of 300 MB, chunked, one event that
never ends) and with an event stream of many small events. The guarded clients (async and sync), the OAuth JSON
client and the model-API adapter refuse the oversize ones with the error of their layer, and the server sees its
client leave well before :data:`CEILING` (the connection is closed, not drained); an event stream is capped per
event, so a long stream of small events is read whole.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from mcpbridge.adapters.openai_compatible import MAX_ANSWER_BYTES, OpenAIEmbedder
from mcpbridge.errors import UpstreamError
from mcpbridge.outbound import json_http
from mcpbridge.outbound.http import AnswerTooLarge, guarded_async_client, guarded_client
from mcpbridge.outbound.policy import EgressPolicy
from tests.support.everything import serve

pytestmark = [pytest.mark.slow]

CAP = 64 * 1024
CEILING = 96 * 1024 * 1024
"""What an oversize answer writes at most before giving up by itself (above the model API's 32 MiB cap)."""
CHUNK = b"[" + b"0," * 32767


class Peer:
    """``/length``, ``/chunked``: JSON that goes on until the client leaves; ``/event``: one event without end;
    ``/events``: 2,000 events of 1 KiB each, then the end."""

    def __init__(self) -> None:
        self.sent = 0
        self.left = anyio.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        while (await receive()).get("more_body"):
            pass
        path = scope["path"]
        if path.endswith("/events"):
            await self._events(send)
            return
        headers = [(b"content-type", b"text/event-stream" if path.endswith("/event") else b"application/json")]
        if path.endswith("/length"):
            headers.append((b"content-length", b"300000000"))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        if path.endswith("/event"):
            await send({"type": "http.response.body", "body": b"event: message\ndata: ", "more_body": True})

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            self.left.set()

        async with anyio.create_task_group() as group:
            group.start_soon(watch)
            while not self.left.is_set() and self.sent < CEILING:
                await send({"type": "http.response.body", "body": CHUNK, "more_body": True})
                self.sent += len(CHUNK)
            group.cancel_scope.cancel()

    async def _events(self, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        event = b"event: message\ndata: " + b"x" * 1000 + b"\n\n"
        for _ in range(2000):
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


@pytest.fixture
def peer() -> Iterator[tuple[Peer, str]]:
    served = Peer()
    with serve(served, lifespan="off") as base:
        yield served, base


def policy() -> EgressPolicy:
    return EgressPolicy(allowlist=["127.0.0.1"], max_answer_bytes=CAP)


def assert_client_left(peer: Peer) -> None:
    for _ in range(3000):
        if peer.left.is_set():
            break
        time.sleep(0.02)
    assert peer.left.is_set(), "the connection stayed open"
    assert peer.sent < CEILING, "the answer was read to its end, not stopped at the cap"


async def read_async(url: str) -> bytes:
    async with guarded_async_client(policy(), timeout=60) as client, client.stream("GET", url) as answer:
        return await answer.aread()


@pytest.mark.parametrize("path", ["/length", "/chunked", "/event"])
def test_the_async_client_stops_at_the_cap(peer: tuple[Peer, str], path: str) -> None:
    served, base = peer
    with pytest.raises(AnswerTooLarge) as refused:
        anyio.run(read_async, base + path)
    assert refused.value.limit == CAP
    assert_client_left(served)


@pytest.mark.parametrize("path", ["/length", "/chunked"])
def test_the_sync_client_stops_at_the_cap(peer: tuple[Peer, str], path: str) -> None:
    served, base = peer
    with guarded_client(policy(), timeout=60) as client, pytest.raises(AnswerTooLarge):
        client.get(base + path)
    assert_client_left(served)


def test_an_event_stream_is_capped_per_event_not_per_stream(peer: tuple[Peer, str]) -> None:
    _, base = peer
    body = anyio.run(read_async, base + "/events")
    assert len(body) > 30 * CAP
    assert body.count(b"\n\n") == 2000


def test_an_oauth_document_past_its_cap_is_refused(peer: tuple[Peer, str]) -> None:
    served, base = peer

    async def fetch() -> json_http.Answer:
        return await json_http.get_json(
            EgressPolicy(allowlist=["127.0.0.1"]), base + "/chunked", what="metadata", timeout=60, max_bytes=CAP
        )

    with pytest.raises(UpstreamError) as refused:
        anyio.run(fetch)
    assert refused.value.code == "oauth_answer_too_large"
    assert refused.value.details["max_bytes"] == CAP
    assert_client_left(served)


def test_a_model_api_answer_past_its_cap_is_refused(peer: tuple[Peer, str]) -> None:
    served, base = peer
    embedder = OpenAIEmbedder(base + "/length", "sk-test-not-a-real-key", timeout=60, attempts=1)
    try:
        with pytest.raises(UpstreamError) as refused:
            embedder.embed(["hello"], purpose="query")
    finally:
        embedder.close()
    assert refused.value.code == "provider_bad_response"
    assert f"larger than {MAX_ANSWER_BYTES} bytes" in refused.value.message
    assert "sk-test" not in refused.value.message
    assert_client_left(served)


def test_a_cap_is_a_positive_number_of_bytes() -> None:
    with pytest.raises(ValueError, match="max_answer_bytes"):
        EgressPolicy(max_answer_bytes=0)
