"""Hybrid fusion: merge a keyword and a semantic ranking whose scores are not on one scale (BM25 and cosine).

Each ranking's scores are min-max normalised over the hits it returned (its best 1, its worst 0; a ranking whose
hits all score alike gives them 1), and a chunk scores the weighted sum of its normalised scores, 0 from a ranking
that did not return it: ``KEYWORD_WEIGHT`` for keyword, the rest for semantic. Unlike reciprocal ranks, this keeps
how far apart the scores are: a chunk far ahead on one side stays ahead, and one that both sides place high but
not first can win. On tests/bench/search_quality (weight chosen there, 0.2-0.4 all doing as well) hybrid MRR@10
went from 0.955 with reciprocal-rank fusion (k=60) to 0.972, and on the paraphrased set it was not chosen on from
0.929 to 0.946 (see tests/bench/README.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from mcpbridge.domain.knowledge import Hit

KEYWORD_WEIGHT = 0.3


def fuse(
    keyword: Sequence[Hit], semantic: Sequence[Hit], *, limit: int, keyword_weight: float = KEYWORD_WEIGHT
) -> list[Hit]:
    """The best ``limit`` chunks of both rankings by their weighted normalised scores (see the module docstring),
    ties by chunk id. A hit's relevance is the best the rankings gave it (any one method's evidence is enough; a
    known one over an unknown one)."""
    scores: dict[str, float] = {}
    chunks: dict[str, Hit] = {}
    relevance: dict[str, float | None] = {}
    for ranking, weight in ((keyword, keyword_weight), (semantic, 1.0 - keyword_weight)):
        for hit, normalised in zip(ranking, _min_max([hit.score for hit in ranking]), strict=True):
            scores[hit.chunk.id] = scores.get(hit.chunk.id, 0.0) + weight * normalised
            chunks.setdefault(hit.chunk.id, hit)
            relevance[hit.chunk.id] = _best(relevance.get(hit.chunk.id, -1.0), hit.relevance)
    fused = sorted(scores, key=lambda cid: (-scores[cid], cid))
    return [Hit(chunk=chunks[cid].chunk, score=scores[cid], relevance=relevance[cid]) for cid in fused[:limit]]


def _min_max(scores: Sequence[float]) -> list[float]:
    if not scores:
        return []
    low, high = min(scores), max(scores)
    if high - low <= 1e-12:
        return [1.0] * len(scores)
    return [(score - low) / (high - low) for score in scores]


def _best(current: float | None, new: float | None) -> float | None:
    """The higher of two relevances, a known one over an unknown (None) one; -1 stands for "not seen yet"."""
    if current is None or new is None:
        known = new if current is None else current
        return None if known is None or known < 0 else known
    return max(current, new)
