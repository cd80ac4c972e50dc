"""Reciprocal-rank fusion of keyword and semantic rankings."""

from __future__ import annotations

from mcpbridge.domain.knowledge import Chunk, Hit
from mcpbridge.domain.ranking import reciprocal_rank_fusion


def hit(name: str, relevance: float | None) -> Hit:
    chunk = Chunk(name, "kb", "d", "D", int(name[1:]), name, 1, 1, 0, 1)
    return Hit(chunk, 1.0, relevance)


def test_fusion_ranks_by_reciprocal_rank_and_keeps_the_best_known_relevance() -> None:
    keyword = [hit("c1", 0.9), hit("c2", 0.2)]
    semantic = [hit("c2", 0.7), hit("c3", None), hit("c1", None)]
    fused = reciprocal_rank_fusion([keyword, semantic], limit=10)
    assert [h.chunk.id for h in fused] == ["c2", "c1", "c3"]
    assert [h.relevance for h in fused] == [0.7, 0.9, None]
    assert fused[0].score == 1 / 62 + 1 / 61
    assert len(reciprocal_rank_fusion([keyword, semantic], limit=1)) == 1
