"""Reciprocal-rank fusion: merge rankings whose scores are not comparable (BM25 and cosine)."""

from __future__ import annotations

from collections.abc import Sequence

from mcpbridge.domain.knowledge import Hit

RRF_K = 60


def reciprocal_rank_fusion(rankings: Sequence[Sequence[Hit]], *, limit: int, k: int = RRF_K) -> list[Hit]:
    """Each chunk scores the sum of 1 / (k + rank) over the rankings it appears in (rank from 1); its relevance is
    the best the rankings gave it (any one method's evidence is enough; a known one over an unknown one)."""
    scores: dict[str, float] = {}
    chunks: dict[str, Hit] = {}
    relevance: dict[str, float | None] = {}
    for ranking in rankings:
        for rank, hit in enumerate(ranking, start=1):
            scores[hit.chunk.id] = scores.get(hit.chunk.id, 0.0) + 1.0 / (k + rank)
            chunks.setdefault(hit.chunk.id, hit)
            relevance[hit.chunk.id] = _best(relevance.get(hit.chunk.id, -1.0), hit.relevance)
    fused = sorted(scores, key=lambda cid: (-scores[cid], cid))
    return [Hit(chunk=chunks[cid].chunk, score=scores[cid], relevance=relevance[cid]) for cid in fused[:limit]]


def _best(current: float | None, new: float | None) -> float | None:
    """The higher of two relevances, a known one over an unknown (None) one; -1 stands for "not seen yet"."""
    if current is None or new is None:
        known = new if current is None else current
        return None if known is None or known < 0 else known
    return max(current, new)
