"""OpenAIEmbedder and OpenAIChat against a real HTTP server on 127.0.0.1 that speaks the OpenAI API.

The fake server answers ``/v1/embeddings`` with deterministic vectors (listed in a shuffled order, each carrying its
``index``) and ``/v1/chat/completions`` with an echo of the last user message; it records every request. Tests push
scripted answers (errors, garbage, slow replies) that it serves first, one per request.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import socket
import struct
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx2
import pytest

from mcpbridge import errors
from mcpbridge.adapters.openai_compatible import OpenAIChat, OpenAIEmbedder
from mcpbridge.ports import ChatMessage

API_KEY = "sk-test-SECRET-0123456789abcdef"
NATIVE_DIMS = 8

Answer = tuple[int, Any]  # status, and a JSON-able body (bytes are sent as they are)


def fake_vector(text: str, dims: int) -> list[float]:
    """What the fake server embeds ``text`` as: deterministic, distinct per text."""
    digest = hashlib.blake2b(text.encode(), digest_size=64).digest()
    return [round(digest[i % 64] / 255 - 0.5, 6) for i in range(dims)]


@dataclass(frozen=True)
class Request:
    path: str
    headers: dict[str, str]
    body: Any


class FakeOpenAI:
    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.script: deque[Callable[[Any], Answer]] = deque()
        self.stop = threading.Event()
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = raw
                with fake._lock:
                    fake.requests.append(Request(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                    scripted = fake.script.popleft() if fake.script else None
                status, payload = scripted(body) if scripted else fake.default(self.path, body)
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that timed out and hung up

        self.server = Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def default(self, path: str, body: Any) -> Answer:
        if path == "/v1/embeddings":
            inputs = body["input"]
            dims = body.get("dimensions", NATIVE_DIMS)
            data = [
                {"object": "embedding", "index": i, "embedding": fake_vector(text, dims)}
                for i, text in enumerate(inputs)
            ]
            random.Random(len(inputs)).shuffle(data)
            return 200, {"object": "list", "data": data, "model": body["model"], "usage": {"prompt_tokens": 1}}
        if path == "/v1/chat/completions":
            last = body["messages"][-1]["content"]
            return 200, {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "model": body["model"],
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": f"echo: {last}"}, "finish_reason": "stop"}
                ],
            }
        return 404, {"error": {"message": f"Unknown path {path}", "type": "invalid_request_error"}}

    def then(self, *answers: Answer | Callable[[Any], Answer]) -> None:
        for answer in answers:
            self.script.append(answer if callable(answer) else _constant(answer))

    def paths(self) -> list[str]:
        return [request.path for request in self.requests]


def _constant(answer: Answer) -> Callable[[Any], Answer]:
    return lambda _body: answer


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    fake.thread.start()
    try:
        yield fake
    finally:
        fake.stop.set()
        fake.server.shutdown()
        fake.server.server_close()
        fake.thread.join(timeout=5)


@pytest.fixture
def http() -> Iterator[httpx2.Client]:
    with httpx2.Client() as client:
        yield client


def embedder(server: FakeOpenAI, http: httpx2.Client, **kwargs: Any) -> OpenAIEmbedder:
    kwargs.setdefault("retry_backoff", 0.01)
    kwargs.setdefault("model", "text-embedding-3-small")
    return OpenAIEmbedder(server.base_url, kwargs.pop("api_key", API_KEY), client=http, **kwargs)


def chat(server: FakeOpenAI, http: httpx2.Client, **kwargs: Any) -> OpenAIChat:
    kwargs.setdefault("retry_backoff", 0.01)
    return OpenAIChat(server.base_url, kwargs.pop("api_key", API_KEY), client=http, **kwargs)


# ------------------------------------------------------------------------------------------------ embeddings


def test_embeddings_come_back_in_input_order(server: FakeOpenAI, http: httpx2.Client) -> None:
    texts = [f"passage number {i}" for i in range(10)]

    vectors = embedder(server, http).embed(texts, purpose="document")

    assert vectors == [fake_vector(text, NATIVE_DIMS) for text in texts]
    [request] = server.requests
    assert request.path == "/v1/embeddings"
    assert request.body == {
        "model": "text-embedding-3-small",
        "input": texts,
        "encoding_format": "float",
        "input_type": "passage",
    }


def test_texts_are_sent_in_batches(server: FakeOpenAI, http: httpx2.Client) -> None:
    texts = [f"text {i}" for i in range(130)]

    vectors = embedder(server, http).embed(texts, purpose="document")

    assert [len(request.body["input"]) for request in server.requests] == [64, 64, 2]
    assert [text for request in server.requests for text in request.body["input"]] == texts
    assert vectors == [fake_vector(text, NATIVE_DIMS) for text in texts]


def test_batch_size_is_configurable(server: FakeOpenAI, http: httpx2.Client) -> None:
    embedder(server, http, batch_size=4).embed([f"t{i}" for i in range(9)], purpose="query")
    assert [len(request.body["input"]) for request in server.requests] == [4, 4, 1]


def test_authorization_only_with_a_key(server: FakeOpenAI, http: httpx2.Client) -> None:
    embedder(server, http).embed(["with key"], purpose="query")
    embedder(server, http, api_key="").embed(["without key"], purpose="query")

    with_key, without_key = server.requests
    assert with_key.headers["authorization"] == f"Bearer {API_KEY}"
    assert "authorization" not in without_key.headers


def test_dimensions_are_passed_and_named(server: FakeOpenAI, http: httpx2.Client) -> None:
    sized = embedder(server, http, dimensions=16)
    native = embedder(server, http, model="nomic-embed-text")

    [vector] = sized.embed(["hello"], purpose="query")
    native.embed(["hello"], purpose="query")

    assert len(vector) == 16
    assert server.requests[0].body["dimensions"] == 16
    assert "dimensions" not in server.requests[1].body
    assert sized.name == "openai:text-embedding-3-small:16"
    assert native.name == "openai:nomic-embed-text"


def test_empty_input_makes_no_request(server: FakeOpenAI, http: httpx2.Client) -> None:
    assert embedder(server, http).embed([], purpose="document") == []
    assert server.requests == []


def test_blank_text_is_invalid_input(server: FakeOpenAI, http: httpx2.Client) -> None:
    with pytest.raises(errors.InvalidInput):
        embedder(server, http).embed(["ok", ""], purpose="document")
    assert server.requests == []


def test_429_then_200_is_retried_once(server: FakeOpenAI, http: httpx2.Client) -> None:
    server.then((429, {"error": {"message": "Rate limit reached", "type": "requests"}}))

    [vector] = embedder(server, http).embed(["again"], purpose="query")

    assert vector == fake_vector("again", NATIVE_DIMS)
    assert server.paths() == ["/v1/embeddings", "/v1/embeddings"]


def test_5xx_is_tried_again_with_backoff(server: FakeOpenAI, http: httpx2.Client) -> None:
    server.then((500, {}), (502, b"<html>Bad gateway</html>"), (503, {"error": "model is loading"}))

    [vector] = embedder(server, http).embed(["again"], purpose="query")

    assert vector == fake_vector("again", NATIVE_DIMS)
    assert len(server.requests) == 4


def test_5xx_until_the_last_attempt_is_an_upstream_error(server: FakeOpenAI, http: httpx2.Client) -> None:
    server.then((500, {"error": {"message": "boom"}}), (502, b"<html>Bad gateway</html>"))

    with pytest.raises(errors.UpstreamError) as caught:
        embedder(server, http, attempts=2).embed(["x"], purpose="query")

    assert caught.value.code == "provider_error"
    assert caught.value.retryable
    assert "502" in caught.value.message
    assert caught.value.details["status"] == 502
    assert len(server.requests) == 2


def test_429_twice_is_throttled(server: FakeOpenAI, http: httpx2.Client) -> None:
    server.then((429, {}), (429, {"error": {"message": "Rate limit reached"}}))
    with pytest.raises(errors.UpstreamError) as caught:
        embedder(server, http, attempts=2).embed(["x"], purpose="query")
    assert caught.value.code == "provider_throttled"
    assert "429" in caught.value.message
    assert "Rate limit reached" in caught.value.message


def test_401_names_the_status_but_never_the_key(server: FakeOpenAI, http: httpx2.Client) -> None:
    server.then(
        (
            401,
            {
                "error": {
                    "message": "Incorrect API key provided: sk-test-***********cdef. You can find your API key at "
                    "https://platform.openai.com/account/api-keys.",
                    "type": "invalid_request_error",
                    "code": "invalid_api_key",
                }
            },
        )
    )

    with pytest.raises(errors.UpstreamError) as caught:
        embedder(server, http).embed(["my secret document"], purpose="document")

    error = caught.value
    assert "401" in error.message
    assert "Incorrect API key provided" in error.message
    assert API_KEY not in error.message
    assert "cdef" not in error.message
    assert "SECRET" not in error.message
    assert "secret document" not in error.message
    assert API_KEY not in repr(error.details)
    assert error.code == "provider_rejected"
    assert len(server.requests) == 1  # not retried


def test_provider_message_quoting_the_input_is_left_out(server: FakeOpenAI, http: httpx2.Client) -> None:
    server.then((400, {"detail": "Input 'the quarterly board minutes' is too long"}))
    with pytest.raises(errors.UpstreamError) as caught:
        embedder(server, http).embed(["the quarterly board minutes"], purpose="document")
    assert "400" in caught.value.message
    assert "board minutes" not in caught.value.message


def test_wrong_base_url_is_a_404(server: FakeOpenAI, http: httpx2.Client) -> None:
    wrong = OpenAIEmbedder(server.base_url.removesuffix("/v1"), "", client=http)
    with pytest.raises(errors.UpstreamError) as caught:
        wrong.embed(["x"], purpose="query")
    assert "404" in caught.value.message
    assert caught.value.code == "provider_rejected"


@pytest.mark.parametrize(
    "answer",
    [
        (200, b"this is not json {"),
        (200, b"\xff\xfe\x00garbage"),
        (200, {"data": "nope"}),
        (200, {"data": [{"index": 0, "embedding": [0.1, 0.2]}]}),  # one vector for two texts
        (200, {"data": [{"index": 0, "embedding": [0.1]}, {"index": 0, "embedding": [0.2]}]}),  # duplicate index
        (200, {"data": [{"index": 0, "embedding": [0.1]}, {"index": 1, "embedding": ["a"]}]}),
        (200, {"data": [{"index": 0, "embedding": [0.1]}, {"index": 1, "embedding": None}]}),
        (200, [1, 2, 3]),
    ],
)
def test_malformed_responses(server: FakeOpenAI, http: httpx2.Client, answer: Answer) -> None:
    server.then(answer)
    with pytest.raises(errors.UpstreamError) as caught:
        embedder(server, http).embed(["one", "two"], purpose="document")
    assert caught.value.code == "provider_bad_response"


def test_mismatched_vector_lengths_are_an_error(server: FakeOpenAI, http: httpx2.Client) -> None:
    server.then((200, {"data": [{"index": 0, "embedding": [0.1, 0.2, 0.3]}, {"index": 1, "embedding": [0.1, 0.2]}]}))
    with pytest.raises(errors.UpstreamError) as caught:
        embedder(server, http).embed(["one", "two"], purpose="document")
    assert caught.value.code == "provider_bad_response"


def test_mismatched_lengths_across_batches_are_an_error(server: FakeOpenAI, http: httpx2.Client) -> None:
    server.then(lambda body: (200, {"data": [{"index": 0, "embedding": [0.1, 0.2]}]}))
    server.then(lambda body: (200, {"data": [{"index": 0, "embedding": [0.1, 0.2, 0.3]}]}))
    with pytest.raises(errors.UpstreamError, match="3 numbers where 2"):
        embedder(server, http, batch_size=1).embed(["one", "two"], purpose="document")


def test_ignored_dimensions_fail_loudly(server: FakeOpenAI, http: httpx2.Client) -> None:
    """A server that ignores ``dimensions`` must not get its vectors stored under another size's name."""
    server.then(lambda body: (200, {"data": [{"index": 0, "embedding": fake_vector("x", NATIVE_DIMS)}]}))
    with pytest.raises(errors.UpstreamError, match="8 numbers where 16 were requested"):
        embedder(server, http, dimensions=16).embed(["x"], purpose="query")


def test_base64_vectors_and_missing_indexes_are_accepted(server: FakeOpenAI, http: httpx2.Client) -> None:
    def packed(values: list[float]) -> str:
        return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode()

    server.then((200, {"data": [{"embedding": packed([0.5, -0.25])}, {"embedding": [1.0, 2.0]}]}))

    assert embedder(server, http).embed(["a", "b"], purpose="document") == [[0.5, -0.25], [1.0, 2.0]]


def test_a_single_text_that_times_out_every_time_is_an_upstream_error(server: FakeOpenAI, http: httpx2.Client) -> None:
    def slow(body: Any) -> Answer:
        server.stop.wait(2.0)
        return 200, {}

    server.then(slow, slow)
    with pytest.raises(errors.UpstreamError) as caught:
        embedder(server, http, timeout=0.2, timeout_per_text=0.0, attempts=2).embed(["x"], purpose="query")
    assert caught.value.code == "provider_timeout"
    assert len(server.requests) == 2


def test_a_batch_that_times_out_is_split_until_it_answers(server: FakeOpenAI, http: httpx2.Client) -> None:
    def slow_when_long(body: Any) -> Answer:
        if len(body["input"]) > 1:
            server.stop.wait(2.0)
        return server.default("/v1/embeddings", body)

    server.then(*[slow_when_long] * 7)
    texts = ["a", "b", "c", "d"]
    vectors = embedder(server, http, timeout=0.2, timeout_per_text=0.0).embed(texts, purpose="document")
    assert vectors == [fake_vector(t, NATIVE_DIMS) for t in texts]
    assert [r.body["input"] for r in server.requests] == [texts, ["a", "b"], ["a"], ["b"], ["c", "d"], ["c"], ["d"]]


def test_the_timeout_grows_with_the_batch() -> None:
    seen: list[float] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        seen.append(request.extensions["timeout"]["read"])
        inputs = json.loads(request.content)["input"]
        return httpx2.Response(200, json={"data": [{"index": i, "embedding": [1.0]} for i in range(len(inputs))]})

    with httpx2.Client(transport=httpx2.MockTransport(answer)) as client:
        sized = OpenAIEmbedder(
            "http://embed.test/v1", "", client=client, timeout=10, timeout_per_text=0.5, batch_size=8
        )
        sized.embed([f"t{i}" for i in range(10)], purpose="document")
    assert seen == [14.0, 11.0]


def test_roles_go_to_servers_that_take_them_and_never_to_openai() -> None:
    bodies: list[dict[str, Any]] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        if body.get("input_type") and request.url.host == "strict.test":
            return httpx2.Response(400, json={"error": {"message": "Unrecognized request argument: input_type"}})
        bodies.append({"host": request.url.host, **body})
        return httpx2.Response(200, json={"data": [{"index": 0, "embedding": [1.0]}]})

    with httpx2.Client(transport=httpx2.MockTransport(answer)) as client:
        for base in ("http://local.test/v1", "https://api.openai.com/v1", "http://strict.test/v1"):
            made = OpenAIEmbedder(base, "", client=client)
            made.embed(["q"], purpose="query")
            made.embed(["p"], purpose="document")
        OpenAIEmbedder("http://local.test/v1", "", client=client, roles="none").embed(["n"], purpose="query")
        prefixed = OpenAIEmbedder(
            "http://e5.test/v1", "", client=client, query_prefix="query: ", passage_prefix="passage: "
        )
        prefixed.embed(["q"], purpose="query")
        prefixed.embed(["p"], purpose="document")
    assert [(b["host"], b["input"], b.get("input_type")) for b in bodies] == [
        ("local.test", ["q"], "query"),
        ("local.test", ["p"], "passage"),
        ("api.openai.com", ["q"], None),
        ("api.openai.com", ["p"], None),
        ("strict.test", ["q"], None),  # refused by name once: asked again without it, and never sent again
        ("strict.test", ["p"], None),
        ("local.test", ["n"], None),
        ("e5.test", ["query: q"], "query"),
        ("e5.test", ["passage: p"], "passage"),
    ]


def test_refused_connection_is_retried_then_reported(http: httpx2.Client) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    closed = OpenAIEmbedder(f"http://127.0.0.1:{port}/v1", API_KEY, client=http, retry_backoff=0.01)
    with pytest.raises(errors.UpstreamError) as caught:
        closed.embed(["x"], purpose="query")
    assert caught.value.code == "provider_unreachable"
    assert API_KEY not in caught.value.message


def test_own_client_is_made_lazily_and_closed(server: FakeOpenAI) -> None:
    own = OpenAIEmbedder(server.base_url + "/", "", retry_backoff=0.01)  # a trailing slash is fine
    try:
        assert own.embed(["x"], purpose="query") == [fake_vector("x", NATIVE_DIMS)]
    finally:
        own.close()
    assert server.paths() == ["/v1/embeddings"]
    assert "SECRET" not in repr(OpenAIEmbedder(server.base_url, API_KEY))


def test_injected_client_is_left_open(server: FakeOpenAI, http: httpx2.Client) -> None:
    adapter = embedder(server, http)
    adapter.close()
    assert not http.is_closed
    adapter.embed(["still works"], purpose="query")


def test_configuration_is_checked() -> None:
    with pytest.raises(ValueError, match="http"):
        OpenAIEmbedder("api.openai.com/v1", "")
    with pytest.raises(ValueError, match="dimensions"):
        OpenAIEmbedder("https://api.openai.com/v1", "", dimensions=0)
    with pytest.raises(ValueError, match="batch_size"):
        OpenAIEmbedder("https://api.openai.com/v1", "", batch_size=0)


# ------------------------------------------------------------------------------------------------ chat


def test_chat_round_trip(server: FakeOpenAI, http: httpx2.Client) -> None:
    llm = chat(server, http, model="llama3.2")
    conversation = [
        ChatMessage("user", "What is 2 + 2?"),
        ChatMessage("assistant", "4."),
        ChatMessage("user", "And times three?"),
    ]

    reply = llm.complete("You are terse.", conversation, max_tokens=50)

    assert reply == "echo: And times three?"
    assert llm.name == "openai:llama3.2"
    [request] = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.body == {
        "model": "llama3.2",
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "What is 2 + 2?"},
            {"role": "assistant", "content": "4."},
            {"role": "user", "content": "And times three?"},
        ],
        "max_tokens": 50,
        "stream": False,
    }


def test_chat_without_system_prompt_or_key(server: FakeOpenAI, http: httpx2.Client) -> None:
    assert chat(server, http, api_key="").complete("", [ChatMessage("user", "hi")]) == "echo: hi"
    [request] = server.requests
    assert request.body["messages"] == [{"role": "user", "content": "hi"}]
    assert request.body["model"] == "gpt-4o-mini"
    assert "authorization" not in request.headers


def test_chat_retries_a_503_once(server: FakeOpenAI, http: httpx2.Client) -> None:
    server.then((503, {"error": "model is loading"}))
    assert chat(server, http).complete("s", [ChatMessage("user", "ping")]) == "echo: ping"
    assert len(server.requests) == 2


def test_chat_errors(server: FakeOpenAI, http: httpx2.Client) -> None:
    server.then(
        (403, {"error": {"message": "Project does not have access to model gpt-4o-mini"}}),
        (200, {"choices": []}),
        (200, b"<html>"),
    )
    llm = chat(server, http)
    conversation = [ChatMessage("user", "confidential question")]

    with pytest.raises(errors.UpstreamError) as forbidden:
        llm.complete("hidden system prompt", conversation)
    assert "403" in forbidden.value.message
    assert "does not have access" in forbidden.value.message
    assert "confidential" not in forbidden.value.message
    assert "hidden system prompt" not in forbidden.value.message
    for _ in range(2):
        with pytest.raises(errors.UpstreamError) as bad:
            llm.complete("s", conversation)
        assert bad.value.code == "provider_bad_response"


def test_chat_content_variants(server: FakeOpenAI, http: httpx2.Client) -> None:
    def reply(content: Any) -> Answer:
        return 200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}

    server.then(reply(None), reply([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]))
    llm = chat(server, http)
    assert llm.complete("s", [ChatMessage("user", "q")]) == ""
    assert llm.complete("s", [ChatMessage("user", "q")]) == "ab"
