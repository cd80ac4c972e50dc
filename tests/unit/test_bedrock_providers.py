"""BedrockEmbedder and BedrockLlm on a real bedrock-runtime client whose calls are stubbed (no network).

moto's bedrock-runtime answers ``InvokeModel`` with an empty body and has no ``Converse``, so ``botocore.stub.Stubber``
checks request parameters and serves responses and errors; the concurrency test answers through a ``before-call``
hook instead, so that each answer depends on its request whatever order the threads run in.
"""

from __future__ import annotations

import io
import json
import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse, HTTPHeaders
from botocore.config import Config
from botocore.response import StreamingBody
from botocore.stub import ANY, Stubber

from mcpbridge import errors
from mcpbridge.adapters.aws.bedrock import (
    TITAN_MAX_CHARS,
    TITAN_TOKEN_BUDGET,
    BedrockEmbedder,
    BedrockLlm,
    truncate_for_titan,
)
from mcpbridge.ports import ChatMessage

REGION = "eu-west-1"
TITAN = "amazon.titan-embed-text-v2:0"
HAIKU = "anthropic.claude-3-5-haiku-20241022-v1:0"


def _vector(seed: float, dims: int) -> list[float]:
    return [seed + i / 1000 for i in range(dims)]


def _body(payload: dict[str, Any]) -> StreamingBody:
    raw = json.dumps(payload).encode()
    return StreamingBody(io.BytesIO(raw), len(raw))


def _titan_response(vector: list[float]) -> dict[str, Any]:
    return {"body": _body({"embedding": vector, "inputTextTokenCount": 3}), "contentType": "application/json"}


class Recorder:
    """Collects the parameters of every call the client makes (the Stubber checks them too, against ANY)."""

    def __init__(self, client: Any) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        client.meta.events.register("provide-client-params.bedrock-runtime.*", self._record)

    def _record(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        self.calls.append((model.name, dict(params)))

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(params["body"]) for name, params in self.calls if name == "InvokeModel"]


@pytest.fixture
def client(aws_credentials: None) -> Any:
    return boto3.client("bedrock-runtime", region_name=REGION)


@pytest.fixture
def stubber(client: Any) -> Iterator[Stubber]:
    with Stubber(client) as stub:
        yield stub
        stub.assert_no_pending_responses()


@pytest.fixture
def recorder(client: Any) -> Recorder:
    return Recorder(client)


INVOKE_PARAMS = {"modelId": TITAN, "body": ANY, "contentType": "application/json", "accept": "application/json"}


# ------------------------------------------------------------------------------------------------ embedder


def test_construction_touches_nothing() -> None:
    class Untouchable:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"the client was used in __init__ ({name})")

    embedder = BedrockEmbedder(Untouchable())
    assert embedder.name == "bedrock:amazon.titan-embed-text-v2:0:1024"  # the model's own size by default
    assert BedrockLlm(Untouchable()).name == f"bedrock:{HAIKU}"
    assert BedrockEmbedder(Untouchable(), dimensions=512).name.endswith(":512")


def test_titan_dimensions_are_checked() -> None:
    with pytest.raises(ValueError, match="256, 512 or 1024"):
        BedrockEmbedder(object(), dimensions=300)


def test_embed_sends_model_dimensions_and_normalize(client: Any, stubber: Stubber, recorder: Recorder) -> None:
    stubber.add_response("invoke_model", _titan_response(_vector(0.5, 256)), INVOKE_PARAMS)

    [vector] = BedrockEmbedder(client, dimensions=256).embed(["hello world"], purpose="query")

    assert vector == _vector(0.5, 256)
    assert recorder.bodies() == [{"inputText": "hello world", "dimensions": 256, "normalize": True}]
    assert recorder.calls[0][1]["modelId"] == TITAN


def test_batch_keeps_input_order_sequentially(client: Any, stubber: Stubber, recorder: Recorder) -> None:
    texts = [f"text number {i}" for i in range(5)]
    for i in range(5):
        stubber.add_response("invoke_model", _titan_response(_vector(float(i), 512)), INVOKE_PARAMS)

    vectors = BedrockEmbedder(client, dimensions=512, max_workers=1).embed(texts, purpose="document")

    assert [v[0] for v in vectors] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert [body["inputText"] for body in recorder.bodies()] == texts


def test_empty_batch_makes_no_call(client: Any, stubber: Stubber) -> None:
    assert BedrockEmbedder(client, dimensions=512).embed([], purpose="document") == []


def test_blank_text_is_invalid_input(client: Any, stubber: Stubber) -> None:
    with pytest.raises(errors.InvalidInput, match="#1"):
        BedrockEmbedder(client, dimensions=512).embed(["fine", "  \n"], purpose="document")


def test_a_single_string_is_a_type_error(client: Any) -> None:
    with pytest.raises(TypeError):
        BedrockEmbedder(client, dimensions=512).embed("oops", purpose="query")


def test_concurrent_batch_keeps_input_order(client: Any) -> None:
    """Answers depend on the request and arrive in a shuffled order; vectors still line up with their texts."""
    seen_threads: set[str] = set()
    lock = threading.Lock()
    rng = random.Random(7)
    delays = [rng.uniform(0, 0.02) for _ in range(20)]

    def answer(params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        request = json.loads(params["body"])
        number = int(request["inputText"].rsplit(" ", 1)[1])
        time.sleep(delays[number])
        with lock:
            seen_threads.add(threading.current_thread().name)
        http = AWSResponse("https://bedrock-runtime.eu-west-1.amazonaws.com", 200, HTTPHeaders(), None)
        return http, _titan_response(_vector(float(number), request["dimensions"]))

    client.meta.events.register("before-call.bedrock-runtime.InvokeModel", answer)
    texts = [f"chunk {i}" for i in range(20)]

    vectors = BedrockEmbedder(client, dimensions=256).embed(texts, purpose="document")

    assert [v[0] for v in vectors] == [float(i) for i in range(20)]
    assert all(len(v) == 256 for v in vectors)
    assert 1 < len(seen_threads) <= 4


def test_long_text_is_truncated_before_sending(client: Any, stubber: Stubber, recorder: Recorder) -> None:
    english = "word " * 10_000  # 50,000 ASCII characters
    cjk = "漢" * 10_000
    stubber.add_response("invoke_model", _titan_response(_vector(0.0, 512)), INVOKE_PARAMS)
    stubber.add_response("invoke_model", _titan_response(_vector(1.0, 512)), INVOKE_PARAMS)

    BedrockEmbedder(client, dimensions=512, max_workers=1).embed([english, cjk], purpose="document")

    sent = [body["inputText"] for body in recorder.bodies()]
    assert sent[0] == english[:TITAN_MAX_CHARS]
    assert sent[1] == cjk[:TITAN_TOKEN_BUDGET]


def test_truncation_estimate() -> None:
    assert truncate_for_titan("short") == "short"
    assert len(truncate_for_titan("a" * 29_999)) == 29_999
    assert len(truncate_for_titan("a" * 30_001)) == 30_000
    mixed = "é" * 4_000 + "a" * 20_000  # 4,000 + 5,000 estimated tokens
    assert truncate_for_titan(mixed) == mixed[: 4_000 + 14_000]


def test_too_many_tokens_halves_the_text_and_retries(client: Any, stubber: Stubber, recorder: Recorder) -> None:
    text = "x" * 20_000
    stubber.add_client_error(
        "invoke_model",
        service_error_code="ValidationException",
        service_message="Too many input tokens. Max input tokens: 8192, request input token count: 9001",
        http_status_code=400,
        expected_params=INVOKE_PARAMS,
    )
    stubber.add_response("invoke_model", _titan_response(_vector(2.0, 512)), INVOKE_PARAMS)

    [vector] = BedrockEmbedder(client, dimensions=512).embed([text], purpose="document")

    assert vector[0] == 2.0
    assert [len(body["inputText"]) for body in recorder.bodies()] == [20_000, 10_000]


def test_wrong_vector_length_is_a_bad_response(client: Any, stubber: Stubber) -> None:
    stubber.add_response("invoke_model", _titan_response(_vector(0.0, 256)), INVOKE_PARAMS)
    with pytest.raises(errors.UpstreamError) as caught:
        BedrockEmbedder(client, dimensions=512).embed(["hello"], purpose="query")
    assert caught.value.code == "provider_bad_response"
    assert "512" in caught.value.message


def test_body_without_embedding_is_a_bad_response(client: Any, stubber: Stubber) -> None:
    stubber.add_response("invoke_model", {"body": _body({"message": "?"}), "contentType": "application/json"})
    with pytest.raises(errors.UpstreamError) as caught:
        BedrockEmbedder(client, dimensions=512).embed(["hello"], purpose="query")
    assert caught.value.code == "provider_bad_response"


@pytest.mark.parametrize(
    ("aws_code", "status", "error_class", "code"),
    [
        ("ThrottlingException", 429, errors.UpstreamError, "provider_throttled"),
        ("ServiceQuotaExceededException", 400, errors.UpstreamError, "provider_throttled"),
        ("InternalServerException", 500, errors.UpstreamError, "provider_error"),
        ("ServiceUnavailableException", 503, errors.UpstreamError, "provider_error"),
        ("ModelTimeoutException", 408, errors.UpstreamError, "provider_error"),
        ("ModelNotReadyException", 429, errors.UpstreamError, "provider_error"),
        ("ValidationException", 400, errors.UpstreamError, "provider_rejected"),
        ("AccessDeniedException", 403, errors.UpstreamError, "provider_rejected"),
        ("ResourceNotFoundException", 404, errors.UpstreamError, "provider_rejected"),
        ("SomethingNew", 502, errors.UpstreamError, "provider_error"),
        ("SomethingElse", 400, errors.UpstreamError, "provider_rejected"),
    ],
)
def test_embed_errors_are_mapped(
    client: Any, stubber: Stubber, aws_code: str, status: int, error_class: type[errors.MCPBridgeError], code: str
) -> None:
    secret_text = "the confidential paragraph about project nightingale"
    stubber.add_client_error(
        "invoke_model", service_error_code=aws_code, service_message=f"{aws_code} happened", http_status_code=status
    )

    with pytest.raises(error_class) as caught:
        BedrockEmbedder(client, dimensions=512).embed([secret_text], purpose="document")

    error = caught.value
    assert error.code == code
    assert TITAN in error.message
    assert aws_code in error.message
    assert "nightingale" not in error.message
    assert "testing" not in error.message  # the fake credentials
    assert error.details["model"] == TITAN


def test_access_denied_explains_model_access(client: Any, stubber: Stubber) -> None:
    stubber.add_client_error(
        "invoke_model",
        service_error_code="AccessDeniedException",
        service_message="You don't have access to the model with the specified model ID.",
        http_status_code=403,
    )
    with pytest.raises(errors.UpstreamError, match="Model access"):
        BedrockEmbedder(client, dimensions=512).embed(["hello"], purpose="query")


def test_validation_message_is_kept_unless_it_quotes_the_input(client: Any, stubber: Stubber) -> None:
    stubber.add_client_error(
        "invoke_model", service_error_code="ValidationException", service_message="Malformed input request: #: bad"
    )
    stubber.add_client_error(
        "invoke_model",
        service_error_code="ValidationException",
        service_message="Malformed input request: 'private notes on the merger' is not allowed",
    )
    embedder = BedrockEmbedder(client, dimensions=512)

    with pytest.raises(errors.UpstreamError, match="Malformed input request: #: bad"):
        embedder.embed(["hello"], purpose="query")
    with pytest.raises(errors.UpstreamError) as caught:
        embedder.embed(["private notes on the merger"], purpose="query")
    assert "merger" not in caught.value.message
    assert caught.value.code == "provider_rejected"


def test_a_failing_text_in_a_concurrent_batch_fails_the_batch(client: Any) -> None:
    def answer(params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        request = json.loads(params["body"])
        if request["inputText"] == "chunk 3":
            http = AWSResponse("https://bedrock-runtime.eu-west-1.amazonaws.com", 429, HTTPHeaders(), None)
            return http, {"Error": {"Code": "ThrottlingException", "Message": "Too many requests"}}
        http = AWSResponse("https://bedrock-runtime.eu-west-1.amazonaws.com", 200, HTTPHeaders(), None)
        return http, _titan_response(_vector(0.0, 512))

    client.meta.events.register("before-call.bedrock-runtime.InvokeModel", answer)

    with pytest.raises(errors.UpstreamError) as caught:
        BedrockEmbedder(client, dimensions=512).embed([f"chunk {i}" for i in range(8)], purpose="document")
    assert caught.value.code == "provider_throttled"


def test_unreachable_endpoint(aws_credentials: None) -> None:
    unreachable = boto3.client(
        "bedrock-runtime",
        region_name=REGION,
        endpoint_url="http://127.0.0.1:9",
        config=Config(retries={"total_max_attempts": 1}, connect_timeout=2, read_timeout=2),
    )
    with pytest.raises(errors.UpstreamError) as caught:
        BedrockEmbedder(unreachable, dimensions=512).embed(["hello"], purpose="query")
    assert caught.value.code == "provider_unreachable"
    assert "hello" not in caught.value.message


def test_missing_credentials_is_unavailable(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_SECURITY_TOKEN",
        "AWS_PROFILE",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    session = boto3.session.Session(region_name=REGION)
    with pytest.raises(errors.Unavailable) as caught:
        BedrockEmbedder(session.client("bedrock-runtime"), dimensions=512).embed(["hello"], purpose="query")
    assert caught.value.code == "provider_unavailable"
    assert "NoCredentialsError" in caught.value.message


# ------------------------------------------------------------------------------------------------ llm


def _converse_response(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {
        "output": {"message": {"role": "assistant", "content": list(blocks)}},
        "stopReason": "end_turn",
        "usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15},
        "metrics": {"latencyMs": 12},
    }


def test_converse_request_and_reply(client: Any, stubber: Stubber) -> None:
    stubber.add_response(
        "converse",
        _converse_response({"text": "Paris "}, {"text": "is the capital."}),
        {
            "modelId": HAIKU,
            "system": [{"text": "Answer briefly."}],
            "messages": [
                {"role": "user", "content": [{"text": "Capital of France?"}]},
                {"role": "assistant", "content": [{"text": "Which aspect?"}]},
                {"role": "user", "content": [{"text": "Just the city."}]},
            ],
            "inferenceConfig": {"maxTokens": 200},
        },
    )
    llm = BedrockLlm(client)

    reply = llm.complete(
        "Answer briefly.",
        [
            ChatMessage("user", "Capital of France?"),
            ChatMessage("assistant", "Which aspect?"),
            ChatMessage("user", "Just the city."),
        ],
        max_tokens=200,
    )

    assert reply == "Paris is the capital."


def test_converse_without_system_prompt_and_non_text_blocks(client: Any, stubber: Stubber) -> None:
    stubber.add_response(
        "converse",
        _converse_response({"reasoningContent": {"reasoningText": {"text": "thinking..."}}}, {"text": "42"}),
        {"modelId": "custom-model", "messages": ANY, "inferenceConfig": {"maxTokens": 1024}},
    )
    assert BedrockLlm(client, "custom-model").complete("", [ChatMessage("user", "?")]) == "42"


def test_converse_errors_are_mapped(client: Any, stubber: Stubber) -> None:
    stubber.add_client_error(
        "converse",
        service_error_code="AccessDeniedException",
        service_message="You don't have access to the model with the specified model ID.",
        http_status_code=403,
    )
    stubber.add_client_error("converse", service_error_code="ThrottlingException", http_status_code=429)
    llm = BedrockLlm(client)

    with pytest.raises(errors.UpstreamError) as denied:
        llm.complete("system secret prompt", [ChatMessage("user", "my private question")])
    assert denied.value.code == "provider_rejected"
    assert HAIKU in denied.value.message
    assert "private question" not in denied.value.message
    assert "secret prompt" not in denied.value.message
    with pytest.raises(errors.UpstreamError) as throttled:
        llm.complete("s", [ChatMessage("user", "q")])
    assert throttled.value.code == "provider_throttled"


def test_converse_rejects_an_empty_conversation(client: Any) -> None:
    with pytest.raises(errors.InvalidInput):
        BedrockLlm(client).complete("system", [])


def test_cohere_is_told_whether_a_text_is_a_query_or_a_document(
    client: Any, stubber: Stubber, recorder: Recorder
) -> None:
    cohere = "cohere.embed-multilingual-v3"
    params = {**INVOKE_PARAMS, "modelId": cohere}
    for seed in (1.0, 2.0):
        answer = {"body": _body({"embeddings": [_vector(seed, 1024)]}), "contentType": "application/json"}
        stubber.add_response("invoke_model", answer, params)
    embedder = BedrockEmbedder(client, model_id=cohere, max_workers=1)
    assert embedder.name == f"bedrock:{cohere}:1024"

    assert embedder.embed(["what is hybrid search"], purpose="query") == [_vector(1.0, 1024)]
    assert embedder.embed(["x" * 3000], purpose="document") == [_vector(2.0, 1024)]
    assert recorder.bodies() == [
        {"texts": ["what is hybrid search"], "input_type": "search_query", "truncate": "END"},
        {"texts": ["x" * 2048], "input_type": "search_document", "truncate": "END"},
    ]
    with pytest.raises(ValueError, match="1024"):
        BedrockEmbedder(client, model_id=cohere, dimensions=512)
    with pytest.raises(ValueError, match="dimensions"):
        BedrockEmbedder(client, model_id="amazon.titan-embed-text-v1")
