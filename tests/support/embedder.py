"""A deterministic, offline embedder for tests, matching ``ports.Embedder``.

``HashingEmbedder`` lower-cases the text (after NFKC), splits it into words and, for Chinese, Japanese and Korean
script, into single characters plus adjacent-character bigrams, then hashes every token into one of ``dimensions``
buckets with a sign (signed feature hashing on blake2b) and L2-normalises the sum. Texts that share words get a high
cosine similarity, texts that share none a similarity near zero; the same text always gives the same vector, in
every process. A text without any token gives the zero vector.
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
import unicodedata
from collections.abc import Sequence
from typing import Literal

_CJK = (
    "\u2e80-\u2fdf"  # CJK radicals
    "\u3040-\u30ff"  # hiragana, katakana
    "\u3100-\u312f\u31a0-\u31bf"  # bopomofo
    "\u3130-\u318f\uac00-\ud7af"  # hangul
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # CJK ideographs
    "\U00020000-\U0002fa1f"
)
_TOKENS = re.compile(rf"([{_CJK}]+)|((?:(?![{_CJK}])[^\W_])+)")


def tokens(text: str) -> list[str]:
    """The hashed features of ``text``: ``w:word``, ``c:字`` and ``b:字字``."""
    out: list[str] = []
    for cjk, word in _TOKENS.findall(unicodedata.normalize("NFKC", text).lower()):
        if word:
            out.append(f"w:{word}")
        else:
            out.extend(f"c:{char}" for char in cjk)
            out.extend(f"b:{cjk[i : i + 2]}" for i in range(len(cjk) - 1))
    return out


class HashingEmbedder:
    def __init__(self, dimensions: int = 64) -> None:
        if dimensions < 1:
            raise ValueError("dimensions must be positive")
        self.dimensions = dimensions
        self.calls = 0
        """How many times ``embed`` ran (tests assert on caching and batching with it)."""
        self.texts_embedded = 0
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return f"test:hashing:{self.dimensions}"

    def embed(self, texts: Sequence[str], *, purpose: Literal["document", "query"]) -> list[list[float]]:
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not a single string")
        with self._lock:
            self.calls += 1
            self.texts_embedded += len(texts)
        return [self.vector(text) for text in texts]

    def vector(self, text: str) -> list[float]:
        vector = [0.0] * self.dimensions
        for token in tokens(text):
            digest = int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest(), "big")
            vector[digest % self.dimensions] += 1.0 if (digest >> 63) & 1 else -1.0
        norm = math.sqrt(sum(value * value for value in vector))
        return [value / norm for value in vector] if norm else vector


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity (0.0 when either vector is zero)."""
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0
