"""Reciprocal-rank fusion: merge rankings whose scores are not comparable (BM25 and cosine)."""

from __future__ import annotations

from collections.abc import Sequence

from mcpbridge.domain.knowledge import Hit

RRF_K = 60


def reciprocal_rank_fusion(rankings: Sequence[Sequence[Hit]], *, limit: int, k: int = RRF_K) -> list[Hit]:
    """Each chunk scores the sum of 1 / (k + rank) over the rankings it appears in (rank from 1)."""
    scores: dict[str, float] = {}
    chunks: dict[str, Hit] = {}
    for ranking in rankings:
        for rank, hit in enumerate(ranking, start=1):
            scores[hit.chunk.id] = scores.get(hit.chunk.id, 0.0) + 1.0 / (k + rank)
            chunks.setdefault(hit.chunk.id, hit)
    fused = sorted(scores, key=lambda cid: (-scores[cid], cid))
    return [Hit(chunk=chunks[cid].chunk, score=scores[cid]) for cid in fused[:limit]]
