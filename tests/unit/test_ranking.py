"""Hybrid fusion of keyword and semantic rankings by their normalised scores."""

from __future__ import annotations

import pytest

from mcpbridge.domain.knowledge import Chunk, Hit
from mcpbridge.domain.ranking import KEYWORD_WEIGHT, fuse


def hit(name: str, score: float, relevance: float | None = None) -> Hit:
    chunk = Chunk(name, "kb", "d", "D", 0, name, 1, 1, 0, 1)
    return Hit(chunk, score, relevance)


def ids(hits: list[Hit]) -> list[str]:
    return [h.chunk.id for h in hits]


def test_a_chunk_far_ahead_on_one_side_beats_one_a_hair_ahead_on_the_other() -> None:
    # Ranks alone tie these two sides (first and third against second and first) and put b first; the scores say
    # the semantic side is sure of a and the keyword side hardly prefers b.
    keyword = [hit("b", 5.0), hit("c", 4.99), hit("a", 4.98)]
    semantic = [hit("a", 0.95), hit("b", 0.60), hit("c", 0.59)]
    fused = fuse(keyword, semantic, limit=10)
    assert ids(fused) == ["a", "b", "c"]
    assert fused[0].score == pytest.approx(1 - KEYWORD_WEIGHT)


def test_scores_are_normalised_per_ranking_and_weighted() -> None:
    keyword = [hit("k", 30.0), hit("both", 10.0), hit("low", 5.0)]
    semantic = [hit("both", 0.9), hit("s", 0.8)]
    fused = {h.chunk.id: h.score for h in fuse(keyword, semantic, limit=10)}
    assert fused == pytest.approx(
        {"both": KEYWORD_WEIGHT * 0.2 + (1 - KEYWORD_WEIGHT), "k": KEYWORD_WEIGHT, "s": 0.0, "low": 0.0}
    )


def test_a_lone_hit_or_equal_scores_count_fully_and_an_empty_side_adds_nothing() -> None:
    assert ids(fuse([hit("only", 0.1)], [], limit=5)) == ["only"]
    assert fuse([hit("only", 0.1)], [], limit=5)[0].score == pytest.approx(KEYWORD_WEIGHT)
    tied = fuse([], [hit("x", 0.5), hit("y", 0.5)], limit=5)
    assert [(h.chunk.id, h.score) for h in tied] == [("x", pytest.approx(0.7)), ("y", pytest.approx(0.7))]
    assert fuse([], [], limit=5) == []


def test_fusion_keeps_the_best_known_relevance_and_the_limit() -> None:
    keyword = [hit("c1", 2.0, 0.9), hit("c2", 1.0, 0.2)]
    semantic = [hit("c2", 0.9, 0.7), hit("c3", 0.8, None), hit("c1", 0.7, None)]
    fused = fuse(keyword, semantic, limit=10)
    assert {h.chunk.id: h.relevance for h in fused} == {"c1": 0.9, "c2": 0.7, "c3": None}
    assert len(fuse(keyword, semantic, limit=1)) == 1
