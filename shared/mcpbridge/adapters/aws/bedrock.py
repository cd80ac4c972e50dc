"""Amazon Bedrock adapters: Titan Text Embeddings v2 as an ``Embedder`` and the Converse API as an ``Llm``.

The ``bedrock-runtime`` client is passed in: construction does no I/O, starts no thread and draws no randomness, so
an instance built during a Lambda SnapStart snapshot is safe to restore many times. Configure retries and timeouts
on the client (``botocore.config.Config``); these adapters add no retry loop of their own.

Failures become ``errors.UpstreamError`` (or ``errors.Unavailable`` when the AWS SDK itself cannot be used, e.g.
missing credentials) with a stable ``code``:

    provider_throttled     ThrottlingException, ServiceQuotaExceededException (retry later)
    provider_error         InternalServerException, ServiceUnavailableException, model timeouts/not ready, 5xx
    provider_unreachable   the endpoint could not be reached or did not answer in time
    provider_rejected      ValidationException, AccessDeniedException (model access not granted), unknown model...
    provider_bad_response  a response that is not what the API documents

Messages name the model and the AWS error code; they never contain the input text or credentials.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal, NoReturn

from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError

from mcpbridge.errors import InvalidInput, Unavailable, UpstreamError
from mcpbridge.ports import ChatMessage

DEFAULT_EMBEDDING_MODEL = "amazon.titan-embed-text-v2:0"
DEFAULT_LLM_MODEL = "anthropic.claude-3-5-haiku-20241022-v1:0"
TITAN_V2_DIMENSIONS = frozenset({256, 512, 1024})
TITAN_V2_DEFAULT_DIMENSIONS = 1024
COHERE_DIMENSIONS = 1024
COHERE_MAX_CHARS = 2048  # Cohere Embed v3 on Bedrock: at most 2,048 characters per text

# Titan Text Embeddings v2 accepts at most 8,192 tokens (and 50,000 characters) per input. Texts are cut, before
# they are sent, to an estimated budget of 7,500 tokens: an ASCII character counts as a quarter of a token (so plain
# English keeps its first 30,000 characters) and any other character as a whole token (so CJK text keeps about
# 7,500 characters). Should Titan still report too many tokens, the text is halved and sent again, at most twice.
# Only the embedding sees the cut text; the stored chunk is untouched. Chunks are far smaller than this in practice.
TITAN_TOKEN_BUDGET = 7_500
TITAN_MAX_CHARS = 30_000
_TOKEN_RETRIES = 2
_MIN_HALVABLE_CHARS = 1_000

_MAX_WORKERS = 4
_MAX_PROVIDER_MESSAGE = 200
_FRAGMENT_CHARS = 40

_THROTTLED = frozenset({"ThrottlingException", "ServiceQuotaExceededException", "TooManyRequestsException"})
_TRANSIENT = frozenset(
    {
        "InternalServerException",
        "ServiceUnavailableException",
        "ServiceUnavailable",
        "ModelNotReadyException",
        "ModelTimeoutException",
        "ModelErrorException",
    }
)
_HINTS = {
    "AccessDeniedException": (
        "access denied: grant access to this model in the Bedrock console (Model access) for this region, "
        "and allow bedrock:InvokeModel on it to the function's role"
    ),
    "ResourceNotFoundException": "model not found: check the model id and that the model is offered in this region",
    "UnrecognizedClientException": "the AWS credentials were rejected",
    "InvalidSignatureException": "the AWS credentials were rejected",
    "ExpiredTokenException": "the AWS credentials have expired",
}


def truncate_for_titan(text: str) -> str:
    """``text`` cut to Titan v2's input limit, by the estimate described above (unchanged when it fits)."""
    if len(text) <= TITAN_TOKEN_BUDGET:  # fits whatever the characters are
        return text
    budget = float(TITAN_TOKEN_BUDGET)
    for position, char in enumerate(text[:TITAN_MAX_CHARS]):
        budget -= 0.25 if char < "\x80" else 1.0
        if budget < 0:
            return text[:position]
    return text[:TITAN_MAX_CHARS]


class BedrockEmbedder:
    """Embeddings through ``InvokeModel``: one call per text, run on up to ``max_workers`` threads for a batch, in
    input order.

    Titan Text Embeddings v2 (the default) embeds queries and documents alike; its vectors have 1024 dimensions
    unless ``dimensions`` asks for 256 or 512. Cohere Embed v3 (``cohere.embed-english-v3``,
    ``cohere.embed-multilingual-v3``, 1024 dimensions) is told the role of each text (``input_type``
    ``search_query`` or ``search_document``), as it expects. Retries and timeouts are the client's
    (``botocore.config.Config``).
    """

    def __init__(
        self,
        client: Any,
        model_id: str = DEFAULT_EMBEDDING_MODEL,
        dimensions: int | None = None,
        *,
        max_workers: int = _MAX_WORKERS,
    ) -> None:
        self._cohere = model_id.startswith("cohere.embed") or ".cohere.embed" in model_id
        own = COHERE_DIMENSIONS if self._cohere else TITAN_V2_DEFAULT_DIMENSIONS
        if dimensions is None:
            if not self._cohere and "titan-embed-text-v2" not in model_id:
                raise ValueError(f"give the dimensions of {model_id}'s vectors")
            dimensions = own
        if "titan-embed-text-v2" in model_id and dimensions not in TITAN_V2_DIMENSIONS:
            raise ValueError(f"{model_id} makes vectors of 256, 512 or 1024 dimensions, not {dimensions}")
        if self._cohere and dimensions != COHERE_DIMENSIONS:
            raise ValueError(f"{model_id} makes vectors of {COHERE_DIMENSIONS} dimensions, not {dimensions}")
        if dimensions <= 0:
            raise ValueError("dimensions must be positive")
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self._client = client
        self._model_id = model_id
        self._dimensions = dimensions
        self._max_workers = max_workers

    @property
    def name(self) -> str:
        return f"bedrock:{self._model_id}:{self._dimensions}"

    @property
    def dimensions(self) -> int:
        return self._dimensions

    def embed(self, texts: Sequence[str], *, purpose: Literal["document", "query"]) -> list[list[float]]:
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not a single string")
        for position, text in enumerate(texts):
            if not text.strip():
                raise InvalidInput(f"text #{position} is empty: there is nothing to embed", code="empty_text")
        if not texts:
            return []
        if len(texts) == 1 or self._max_workers == 1:
            return [self._embed_one(text, purpose) for text in texts]
        workers = min(self._max_workers, len(texts))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bedrock-embed") as pool:
            futures = [pool.submit(self._embed_one, text, purpose) for text in texts]
            try:
                return [future.result() for future in futures]
            except BaseException:
                for future in futures:
                    future.cancel()
                raise

    def _body(self, text: str, purpose: Literal["document", "query"]) -> str:
        if self._cohere:
            role = "search_query" if purpose == "query" else "search_document"
            return json.dumps({"texts": [text], "input_type": role, "truncate": "END"})
        return json.dumps({"inputText": text, "dimensions": self._dimensions, "normalize": True})

    def _embed_one(self, text: str, purpose: Literal["document", "query"]) -> list[float]:
        text = text[:COHERE_MAX_CHARS] if self._cohere else truncate_for_titan(text)
        for attempt in range(_TOKEN_RETRIES + 1):
            body = self._body(text, purpose)
            try:
                response = self._client.invoke_model(
                    modelId=self._model_id, body=body, contentType="application/json", accept="application/json"
                )
            except ClientError as exc:
                if (
                    attempt < _TOKEN_RETRIES
                    and _error_code(exc) == "ValidationException"
                    and "token" in _aws_message(exc).lower()
                    and len(text) >= _MIN_HALVABLE_CHARS
                ):
                    text = text[: len(text) // 2]
                    continue
                _raise_client_error(exc, self._model_id, "InvokeModel", [text])
            except BotoCoreError as exc:
                _raise_botocore_error(exc, self._model_id, "InvokeModel")
            return self._parse(response)
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def _parse(self, response: Any) -> list[float]:
        try:
            payload = json.loads(response["body"].read())
            vector = payload["embeddings"][0] if self._cohere else payload["embedding"]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise _bad_response(self._model_id, "InvokeModel", "no embedding in the response body") from exc
        if not isinstance(vector, list) or len(vector) != self._dimensions:
            got = len(vector) if isinstance(vector, list) else type(vector).__name__
            raise _bad_response(self._model_id, "InvokeModel", f"expected {self._dimensions} numbers, got {got}")
        if not all(_is_number(value) for value in vector):
            raise _bad_response(self._model_id, "InvokeModel", "the embedding holds values that are not numbers")
        return [float(value) for value in vector]


class BedrockLlm:
    """A chat model through the Converse API (any model Converse supports; Claude 3.5 Haiku by default)."""

    def __init__(self, client: Any, model_id: str = DEFAULT_LLM_MODEL) -> None:
        self._client = client
        self._model_id = model_id

    @property
    def name(self) -> str:
        return f"bedrock:{self._model_id}"

    def complete(self, system: str, messages: Sequence[ChatMessage], *, max_tokens: int = 1024) -> str:
        if not messages:
            raise InvalidInput("a conversation needs at least one message", code="empty_conversation")
        if max_tokens < 1:
            raise InvalidInput("max_tokens must be at least 1")
        kwargs: dict[str, Any] = {
            "modelId": self._model_id,
            "messages": [{"role": message.role, "content": [{"text": message.content}]} for message in messages],
            "inferenceConfig": {"maxTokens": max_tokens},
        }
        if system:  # Converse rejects an empty system text block
            kwargs["system"] = [{"text": system}]
        return self._converse(kwargs, [system, *(m.content for m in messages)])

    def describe_image(self, image: bytes, content_type: str, *, instruction: str, max_tokens: int = 300) -> str:
        """A caption of ``image`` (``ports.ImageDescriber``): Converse's image block (Claude 3 and later, Nova)."""
        image_block = {"format": content_type.removeprefix("image/"), "source": {"bytes": image}}
        kwargs: dict[str, Any] = {
            "modelId": self._model_id,
            "messages": [{"role": "user", "content": [{"text": instruction}, {"image": image_block}]}],
            "inferenceConfig": {"maxTokens": max_tokens},
        }
        return self._converse(kwargs, [instruction])

    def _converse(self, kwargs: dict[str, Any], inputs: list[str]) -> str:
        try:
            response = self._client.converse(**kwargs)
        except ClientError as exc:
            _raise_client_error(exc, self._model_id, "Converse", inputs)
        except BotoCoreError as exc:
            _raise_botocore_error(exc, self._model_id, "Converse")
        try:
            content = response["output"]["message"]["content"]
            return "".join(block["text"] for block in content if isinstance(block, dict) and "text" in block)
        except (KeyError, TypeError) as exc:
            raise _bad_response(self._model_id, "Converse", "no output message in the response") from exc


# ------------------------------------------------------------------------------------------------ errors


def _error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _aws_message(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Message", ""))


def _status(exc: ClientError) -> int:
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    return status if isinstance(status, int) else 0


def _safe_message(message: str, inputs: Sequence[str]) -> str:
    """The provider's message when it is short, on one line and quotes none of the inputs; else ``""``."""
    message = message.strip()
    if not message or len(message) > _MAX_PROVIDER_MESSAGE or "\n" in message:
        return ""
    for text in inputs:
        fragment = text.strip()[:_FRAGMENT_CHARS]
        if len(fragment) >= 4 and fragment in message:
            return ""
    return message


def _raise_client_error(exc: ClientError, model_id: str, operation: str, inputs: Sequence[str]) -> NoReturn:
    code = _error_code(exc) or "UnknownError"
    status = _status(exc)
    details = {"provider": "bedrock", "model": model_id, "aws_error": code, "status": status}
    if code in _THROTTLED or (status == 429 and code not in _TRANSIENT and code not in _HINTS):
        raise UpstreamError(
            f"Bedrock is throttling requests to {model_id} ({code}); retry later",
            code="provider_throttled",
            details=details,
        ) from exc
    if code in _TRANSIENT or status >= 500:
        raise UpstreamError(
            f"Bedrock {operation} on {model_id} failed ({code}); retry later", code="provider_error", details=details
        ) from exc
    explanation = _HINTS.get(code) or _safe_message(_aws_message(exc), inputs) or "the request was rejected"
    raise UpstreamError(
        f"Bedrock {operation} on {model_id} failed ({code}): {explanation}", code="provider_rejected", details=details
    ) from exc


def _raise_botocore_error(exc: BotoCoreError, model_id: str, operation: str) -> NoReturn:
    details = {"provider": "bedrock", "model": model_id, "sdk_error": type(exc).__name__}
    if isinstance(
        exc, BotoConnectionError | HTTPClientError
    ):  # connection refused/closed, DNS, TLS, connect or read timeout
        raise UpstreamError(
            f"Bedrock {operation} on {model_id} could not be completed ({type(exc).__name__})",
            code="provider_unreachable",
            details=details,
        ) from exc
    # No credentials or region, an invalid parameter: the deployment, not the model, is at fault.
    raise Unavailable(
        f"Bedrock {operation} on {model_id} could not be called ({type(exc).__name__})",
        code="provider_unavailable",
        details=details,
    ) from exc


def _bad_response(model_id: str, operation: str, reason: str) -> UpstreamError:
    return UpstreamError(
        f"Bedrock {operation} on {model_id} returned an unexpected response: {reason}",
        code="provider_bad_response",
        details={"provider": "bedrock", "model": model_id},
    )


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
