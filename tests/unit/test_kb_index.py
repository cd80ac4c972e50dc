"""The search index of one knowledge base in one SQLite file: keyword (BM25, CJK), vectors, reading, grep, files."""

from __future__ import annotations

import dataclasses
import math
import os
import re
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from mcpbridge.adapters.index_files import kb_index, vector_matrix
from mcpbridge.adapters.index_files.kb_index import KbIndexFile
from mcpbridge.domain.knowledge import Chunk, ChunkType, Hit, IndexAnalysis
from mcpbridge.domain.text_tokens import literal_words
from mcpbridge.errors import Unavailable

KB = "kb_1"
EMBEDDER = "test:embedder"


def chunk(
    document_id: str,
    seq: int,
    text: str,
    *,
    lines: tuple[int, int] | None = None,
    type: ChunkType = "text",
    headings: tuple[str, ...] = (),
) -> Chunk:
    start, end = lines or (seq * 10 + 1, seq * 10 + 9)
    return Chunk(
        id=Chunk.make_id(document_id, seq),
        knowledge_base_id=KB,
        document_id=document_id,
        document_title=f"Title of {document_id}",
        seq=seq,
        text=text,
        start_line=start,
        end_line=end,
        start_offset=seq * 100,
        end_offset=seq * 100 + len(text),
        heading_path=headings,
        type=type,
    )


def document(document_id: str, *texts: str) -> list[Chunk]:
    return [chunk(document_id, seq, text) for seq, text in enumerate(texts)]


def ids(found: Sequence[Hit | Chunk]) -> list[str]:
    return [item.chunk.id if isinstance(item, Hit) else item.id for item in found]


def at_line(index: KbIndexFile, document_id: str, line: int) -> str | None:
    found = index.chunk_at_line(document_id, line)
    return None if found is None else found.id


@pytest.fixture
def index(tmp_path: Path) -> Iterator[KbIndexFile]:
    index = KbIndexFile(tmp_path / "kb.sqlite3")
    yield index
    index.close()


@pytest.fixture
def corpus(index: KbIndexFile) -> KbIndexFile:
    index.replace_document(
        "oauth",
        document(
            "oauth",
            "OAuth 2.0 lets a client obtain an access token from an authorization server.",
            "A refresh token is exchanged for a new access token when the old one expires.",
        ),
        None,
        None,
    )
    index.replace_document(
        "kb_zh",
        document(
            "kb_zh",
            "知识库是存放文档的地方，智能体通过检索知识库回答问题。",
            "向量检索与关键词检索结合，称为混合检索。",
        ),
        None,
        None,
    )
    index.replace_document(
        "mixed",
        document("mixed", "配置 OAuth2 认证流程：先获取 refresh token，再调用 API。"),
        None,
        None,
    )
    return index


# ---------------------------------------------------------------------------------------------- the file


def test_the_file_is_created_on_first_use_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "kb.sqlite3"
    index = KbIndexFile(path)
    assert not path.exists()

    assert index.generation() == 0
    assert index.document_ids() == []

    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    finally:
        conn.close()
    index.close()
    assert meta["schema_version"] == kb_index.SCHEMA_VERSION
    assert meta["generation"] == 0


def test_a_file_of_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "kb.sqlite3"
    first = KbIndexFile(path)
    first.generation()
    first.close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value = 99 WHERE key = 'schema_version'")
    conn.commit()
    conn.close()

    with pytest.raises(Unavailable) as caught:
        KbIndexFile(path).generation()
    assert caught.value.code == "search_index_incompatible"


def test_generation_increases_with_each_write_that_changes_the_file(index: KbIndexFile) -> None:
    assert index.generation() == 0
    index.replace_document("a", document("a", "one"), None, None)
    assert index.generation() == 1
    index.replace_document("a", document("a", "two"), None, None)
    assert index.generation() == 2
    index.delete_document("missing")
    assert index.generation() == 2
    index.delete_document("a")
    assert index.generation() == 3


# ---------------------------------------------------------------------------------------------- keyword


def test_english_words_are_found_whatever_their_case(corpus: KbIndexFile) -> None:
    assert ids(corpus.keyword("AUTHORIZATION server")) == ["oauth#00000"]
    assert ids(corpus.keyword("expires")) == ["oauth#00001"]


def test_a_two_character_chinese_query_matches_inside_longer_words(corpus: KbIndexFile) -> None:
    assert ids(corpus.keyword("知识")) == ["kb_zh#00000"]
    assert ids(corpus.keyword("检索")) == ["kb_zh#00001", "kb_zh#00000"]  # three times in a shorter chunk first


def test_a_chinese_phrase_query_ranks_the_chunk_holding_all_of_it_first(corpus: KbIndexFile) -> None:
    hits = corpus.keyword("混合检索")
    assert ids(hits)[0] == "kb_zh#00001"
    assert hits[0].score > 1.0  # holds every term


def test_a_single_chinese_character_matches_the_words_it_starts(corpus: KbIndexFile) -> None:
    assert "kb_zh#00001" in ids(corpus.keyword("混"))


def test_mixed_chinese_and_latin_text(corpus: KbIndexFile) -> None:
    assert ids(corpus.keyword("OAuth2认证")) == ["mixed#00000"]
    assert ids(corpus.keyword("认证流程"))[0] == "mixed#00000"
    assert "mixed#00000" in ids(corpus.keyword("refresh token"))


def test_bm25_ranks_the_more_relevant_chunk_first(index: KbIndexFile) -> None:
    index.replace_document(
        "d",
        document(
            "d",
            "Deployment notes: the pipeline runs tests, builds images and pushes them; lambda is mentioned once.",
            "Lambda functions: a lambda cold start, lambda layers and lambda SnapStart.",
            "Nothing relevant here at all.",
        ),
        None,
        None,
    )
    hits = index.keyword("lambda")
    assert ids(hits) == ["d#00001", "d#00000"]
    assert hits[0].score > hits[1].score


def test_chunks_holding_every_term_come_before_chunks_holding_some(index: KbIndexFile) -> None:
    index.replace_document(
        "d",
        document(
            "d",
            "token token token token token token token token",
            "the refresh token",
            "refresh refresh refresh refresh",
        ),
        None,
        None,
    )
    hits = index.keyword("refresh token", limit=3)
    assert ids(hits)[0] == "d#00001"
    assert set(ids(hits)[1:]) == {"d#00000", "d#00002"}
    scores = [hit.score for hit in hits]
    assert scores == sorted(scores, reverse=True)
    assert scores[0] > 1.0 > scores[1] > 0.0


def test_a_word_finds_its_other_inflections(index: KbIndexFile) -> None:
    index.replace_document(
        "w", document("w", "Walruses haul themselves out onto the ice.", "Nothing here."), None, None
    )
    assert ids(index.keyword("walrus")) == ["w#00000"]
    assert ids(index.keyword("hauling walrus")) == ["w#00000"]


def test_stop_words_of_a_question_neither_match_nor_rank(index: KbIndexFile) -> None:
    index.replace_document(
        "d",
        document(
            "d",
            "Rotate refresh tokens on every use.",
            "How do I do it? What is the best way to do it? Where is it and how is it done?",
        ),
        None,
        None,
    )
    hits = index.keyword("how do I rotate the refresh tokens?")
    assert ids(hits) == ["d#00000"]
    assert hits[0].score > 1.0  # every term of the question that counts is there: the first tier


def test_terms_no_chunk_holds_do_not_keep_a_question_from_the_first_tier(index: KbIndexFile) -> None:
    index.replace_document(
        "d", document("d", "Refresh token rotation invalidates the old token.", "A refresh is due."), None, None
    )
    hits = index.keyword("refresh token rotation with zebras")
    assert ids(hits) == ["d#00000", "d#00001"]
    assert hits[0].score > 1.0 > hits[1].score
    assert index.keyword("zebras giraffes") == []


def test_terms_most_chunks_hold_do_not_widen_the_second_tier(index: KbIndexFile) -> None:
    index.replace_document(
        "d", document("d", *[f"a common word, and {n}" for n in range(12)], "rare word", "rare and unusual"), None, None
    )
    hits = index.keyword("common rare unusual", limit=3)
    assert ids(hits) == ["d#00013", "d#00012"]  # "common", in 12 of 14 chunks, selects nothing on its own
    assert len(index.keyword("common rare unusual", limit=10)) == 10  # ... unless the limit is not met otherwise


def test_a_query_without_terms_or_limit_finds_nothing(corpus: KbIndexFile) -> None:
    assert corpus.keyword("") == []
    assert corpus.keyword("  ,;!  ") == []
    assert corpus.keyword("token", limit=0) == []
    assert corpus.keyword("token", document_ids=[]) == []


def test_query_syntax_is_not_interpreted(corpus: KbIndexFile) -> None:
    assert corpus.keyword('token" OR NEAR(a b) AND * -') != []
    assert corpus.keyword("NOT") == []


def _crowded(index: KbIndexFile) -> None:
    """Forty documents that match 'invoice' strongly, and one whose single chunk matches it weakly."""
    for n in range(40):
        index.replace_document(
            f"strong{n:02d}", document(f"strong{n:02d}", "invoice invoice invoice payment"), None, None
        )
    index.replace_document(
        "weak",
        document(
            "weak", "A long text about many other things, shipping, customs, taxes and, somewhere, an invoice too."
        ),
        None,
        None,
    )


def test_the_document_filter_applies_before_the_limit(index: KbIndexFile) -> None:
    _crowded(index)
    assert "weak#00000" not in ids(index.keyword("invoice", limit=10))

    assert ids(index.keyword("invoice", document_ids={"weak"}, limit=10)) == ["weak#00000"]
    filtered = index.keyword("invoice payment", document_ids=["weak", "strong07"], limit=1)
    assert ids(filtered) == ["strong07#00000"]
    assert ids(index.keyword("invoice", document_ids=["nowhere"])) == []


def test_keyword_limit(index: KbIndexFile) -> None:
    _crowded(index)
    assert len(index.keyword("invoice", limit=5)) == 5
    assert len(index.keyword("invoice payment shipping", limit=41)) == 41


def test_hits_carry_the_whole_chunk(index: KbIndexFile) -> None:
    stored = chunk("d", 0, "Rotate the signing key.", lines=(12, 14), headings=("Ops", "Keys"), type="summary")
    index.replace_document("d", [stored], None, None)

    assert index.keyword("signing")[0].chunk == stored


# ---------------------------------------------------------------------------------------------- writes


def test_replace_document_replaces_its_chunks(corpus: KbIndexFile) -> None:
    corpus.replace_document("oauth", document("oauth", "Device flow: the user types a code."), None, None)

    assert corpus.keyword("authorization") == []
    assert corpus.keyword("refresh") != []  # still in the mixed document
    assert "oauth#00000" not in ids(corpus.keyword("refresh token"))
    assert ids(corpus.keyword("device flow")) == ["oauth#00000"]
    assert corpus.count("oauth") == 1
    assert [c.text for c in corpus.chunks("oauth")] == ["Device flow: the user types a code."]


def test_delete_document_removes_everything_of_it(index: KbIndexFile) -> None:
    index.replace_document("a", document("a", "alpha words", "more alpha"), [[1.0, 0.0], [0.9, 0.1]], EMBEDDER)
    index.replace_document("b", document("b", "beta words"), [[0.0, 1.0]], EMBEDDER)

    index.delete_document("a")

    assert index.keyword("alpha") == []
    assert ids(index.keyword("words")) == ["b#00000"]
    assert ids(index.semantic([1.0, 0.0])) == ["b#00000"]
    assert index.chunks("a") == []
    assert index.count("a") == 0
    assert index.document_ids() == ["b"]


def test_a_deleted_documents_text_is_not_left_in_the_file(tmp_path: Path) -> None:
    index = KbIndexFile(tmp_path / "kb.sqlite3")
    texts = [f"Walruses rest on floe {i} of the Arctic sea, far from the coast." for i in range(40)]
    index.replace_document("a", document("a", *texts), None, None)
    index.replace_document("b", document("b", "Seals sleep on the beach."), None, None)
    index.delete_document("a")
    index.close()
    with sqlite3.connect(tmp_path / "kb.sqlite3") as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert b"Seals sleep on the beach." in data
    # The text is zeroed (secure_delete, asked for explicitly: some builds do not by default); its words stay in the
    # keyword index's segments until they merge.
    assert b"rest on floe" not in data


def test_a_failed_write_changes_nothing(corpus: KbIndexFile) -> None:
    before = corpus.generation()
    clash = [chunk("oauth", 0, "new text"), chunk("oauth", 1, "other")]
    clash[1] = dataclasses.replace(clash[1], id="kb_zh#00000")  # an id another document already uses

    with pytest.raises(sqlite3.IntegrityError):
        corpus.replace_document("oauth", clash, None, None)

    assert corpus.generation() == before
    assert corpus.count("oauth") == 2
    assert ids(corpus.keyword("authorization")) == ["oauth#00000"]


@pytest.mark.parametrize(
    ("chunks", "message"),
    [
        ([chunk("other", 0, "x")], "belongs to document"),
        ([chunk("d", 0, "x"), chunk("d", 0, "y")], "appears twice"),
    ],
)
def test_invalid_chunks_are_refused(index: KbIndexFile, chunks: list[Chunk], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        index.replace_document("d", chunks, None, None)
    assert index.generation() == 0


def test_chunks_of_another_knowledge_base_are_refused(index: KbIndexFile) -> None:
    index.replace_document("d", document("d", "x"), None, None)
    foreign = dataclasses.replace(chunk("e", 0, "y"), knowledge_base_id="kb_2")

    with pytest.raises(ValueError, match="knowledge base"):
        index.replace_document("e", [foreign], None, None)
    assert index.document_ids() == ["d"]


# ---------------------------------------------------------------------------------------------- semantic


def _unit(*values: float) -> list[float]:
    norm = math.sqrt(sum(v * v for v in values))
    return [v / norm for v in values]


def test_semantic_returns_the_top_k_by_cosine(index: KbIndexFile) -> None:
    vectors = [[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [3.0, 3.0, 0.0], [0.0, 0.0, 1.0], [-1.0, 0.0, 0.0]]
    index.replace_document("d", document("d", "a", "b", "c", "d", "e"), vectors, EMBEDDER)

    hits = index.semantic([2.0, 1.0, 0.0], limit=3)

    query = np.array(_unit(2.0, 1.0, 0.0))
    expected = sorted(((float(query @ np.array(_unit(*v))), n) for n, v in enumerate(vectors)), reverse=True)[:3]
    assert ids(hits) == [f"d#{n:05d}" for _, n in expected]
    assert [hit.score for hit in hits] == pytest.approx([score for score, _ in expected], abs=1e-6)
    assert len(index.semantic([2.0, 1.0, 0.0], limit=10)) == 5


def test_semantic_filters_documents_before_taking_the_top_k(index: KbIndexFile) -> None:
    for n in range(30):
        index.replace_document(f"near{n:02d}", document(f"near{n:02d}", "x"), [[1.0, 0.01 * n]], EMBEDDER)
    index.replace_document("far", document("far", "y", "z"), [[-1.0, 0.2], [0.0, 1.0]], EMBEDDER)
    assert "far#00001" not in ids(index.semantic([1.0, 0.0], limit=10))

    assert ids(index.semantic([1.0, 0.0], document_ids={"far"}, limit=10)) == ["far#00001", "far#00000"]
    assert ids(index.semantic([1.0, 0.0], document_ids=["far", "near05"], limit=1)) == ["near05#00000"]
    assert index.semantic([1.0, 0.0], document_ids=[]) == []
    assert index.semantic([1.0, 0.0], document_ids=["unknown"]) == []


def test_semantic_without_vectors_finds_nothing(corpus: KbIndexFile) -> None:
    assert not corpus.has_vectors()
    assert corpus.semantic([1.0, 0.0]) == []
    assert corpus.embedder_name() is None


def test_query_vectors_of_another_dimension_or_zero_are_refused(index: KbIndexFile) -> None:
    index.replace_document("d", document("d", "a"), [[1.0, 0.0, 0.0]], EMBEDDER)

    with pytest.raises(ValueError, match="dimension"):
        index.semantic([1.0, 0.0])
    with pytest.raises(ValueError, match="non-zero"):
        index.semantic([0.0, 0.0, 0.0])


def test_a_knowledge_base_never_mixes_embedders(index: KbIndexFile) -> None:
    index.replace_document("a", document("a", "x"), [[1.0, 0.0]], EMBEDDER)

    with pytest.raises(ValueError, match="never mixes embedders"):
        index.replace_document("b", document("b", "y"), [[1.0, 0.0]], "other:model")
    with pytest.raises(ValueError, match="never mixes embedders"):
        index.replace_document("b", document("b", "y"), [[1.0, 0.0, 0.0]], EMBEDDER)

    assert index.document_ids() == ["a"]
    assert index.embedder_name() == EMBEDDER
    # Replacing the only embedded document with another model's vectors leaves no mix.
    index.replace_document("a", document("a", "x"), [[0.0, 1.0, 0.0]], "other:model")
    assert index.embedder_name() == "other:model"
    assert ids(index.semantic([0.0, 1.0, 0.0])) == ["a#00000"]


@pytest.mark.parametrize(
    ("vectors", "embedder", "message"),
    [
        ([[1.0, 0.0]], None, "name of the embedder"),
        ([[1.0, 0.0], [0.0, 1.0]], EMBEDDER, "2 vectors for 1 chunks"),
        ([[float("nan"), 0.0]], EMBEDDER, "finite"),
        ([[]], EMBEDDER, "non-empty"),
    ],
)
def test_invalid_vectors_are_refused(
    index: KbIndexFile, vectors: list[list[float]], embedder: str | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        index.replace_document("d", document("d", "x"), vectors, embedder)
    assert index.count("d") == 0


def _counting_loads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    loads: list[int] = []
    load = vector_matrix.load

    def counting(conn: sqlite3.Connection, key: tuple[str, int], dimension: int) -> vector_matrix.VectorSnapshot:
        loads.append(key[1])
        return load(conn, key, dimension)

    monkeypatch.setattr(vector_matrix, "load", counting)
    return loads


def test_vectors_are_loaded_once_and_then_kept_up_to_date_by_writes(
    index: KbIndexFile, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads = _counting_loads(monkeypatch)
    index.replace_document("a", document("a", "x"), [[1.0, 0.0]], EMBEDDER)
    for _ in range(3):
        index.semantic([1.0, 0.0])
    assert loads == [1]

    index.replace_document("b", document("b", "y"), [[0.0, 1.0]], EMBEDDER)
    assert ids(index.semantic([0.0, 1.0], limit=1)) == ["b#00000"]
    index.delete_document("a")
    assert ids(index.semantic([1.0, 0.0])) == ["b#00000"]
    assert loads == [1], "a write of this instance changes the loaded vectors instead of loading them again"


def test_a_write_by_another_instance_loads_the_vectors_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loads = _counting_loads(monkeypatch)
    reader, writer = KbIndexFile(tmp_path / "kb.sqlite3"), KbIndexFile(tmp_path / "kb.sqlite3")
    reader.replace_document("a", document("a", "x"), [[1.0, 0.0]], EMBEDDER)
    assert ids(reader.semantic([0.0, 1.0])) == ["a#00000"]
    writer.replace_document("b", document("b", "y"), [[0.0, 1.0]], EMBEDDER)
    assert ids(reader.semantic([0.0, 1.0])) == ["b#00000", "a#00000"]
    assert loads == [1, 2]
    reader.close()
    writer.close()


@pytest.mark.parametrize(("segments", "dead_share"), [(16, 0.25), (2, 0.25), (16, 0.0), (1, 1.0)])
def test_vectors_changed_by_many_writes_rank_as_vectors_loaded_from_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, segments: int, dead_share: float
) -> None:
    monkeypatch.setattr(vector_matrix, "MAX_SEGMENTS", segments)
    monkeypatch.setattr(vector_matrix, "DEAD_SHARE_MAX", dead_share)
    rng = np.random.default_rng(3)
    path = tmp_path / "kb.sqlite3"
    index = KbIndexFile(path)
    index.replace_document("seed", document("seed", "s"), [[1.0, 0.0, 0.0, 0.0]], EMBEDDER)
    index.semantic([1.0, 0.0, 0.0, 0.0])  # loaded: from here on, writes change the snapshot
    names = [f"d{n}" for n in range(8)]
    for step in range(60):
        name = names[int(rng.integers(len(names)))]
        if step % 7 == 3:
            index.delete_document(name)
            continue
        size = int(rng.integers(1, 4))
        index.replace_document(
            name,
            document(name, *[f"{name} {i}" for i in range(size)]),
            rng.standard_normal((size, 4)).tolist(),
            EMBEDDER,
        )
    fresh = KbIndexFile(path)
    for query in rng.standard_normal((10, 4)).tolist():
        kept, loaded = index.semantic(query, limit=30), fresh.semantic(query, limit=30)
        assert ids(kept) == ids(loaded)
        assert [h.score for h in kept] == pytest.approx([h.score for h in loaded], abs=1e-6)
        only = ["d1", "d4", "seed"]
        assert ids(index.semantic(query, document_ids=only)) == ids(fresh.semantic(query, document_ids=only))
    index.close()
    fresh.close()


def test_a_caller_vector_is_not_modified(index: KbIndexFile) -> None:
    index.replace_document("a", document("a", "x"), [[1.0, 0.0]], EMBEDDER)
    query = np.array([3.0, 4.0], dtype=np.float32)
    index.semantic(query)  # type: ignore[arg-type]  # numpy arrays are what callers often hold
    assert query.tolist() == [3.0, 4.0]


# ---------------------------------------------------------------------------------------------- reading


def test_chunks_come_in_reading_order_and_page_by_offset(index: KbIndexFile) -> None:
    chunks = document("d", *(f"part {n}" for n in range(7)))
    index.replace_document("d", list(reversed(chunks)), None, None)

    assert index.chunks("d") == chunks
    assert index.chunks("d", offset=2, limit=3) == chunks[2:5]
    assert index.chunks("d", offset=5, limit=10) == chunks[5:]
    assert index.chunks("d", offset=7) == []
    assert index.chunks("d", limit=0) == []
    assert index.count("d") == 7
    assert index.chunks("unknown") == []
    with pytest.raises(ValueError, match="negative"):
        index.chunks("d", offset=-1)


def test_chunk_at_line(index: KbIndexFile) -> None:
    index.replace_document(
        "d",
        [
            chunk("d", 0, "summary of everything", lines=(1, 40), type="summary"),
            chunk("d", 1, "intro", lines=(1, 9)),
            chunk("d", 2, "body", lines=(10, 20)),
            chunk("d", 3, "after a gap", lines=(25, 40)),
        ],
        None,
        None,
    )

    assert at_line(index, "d", 5) == "d#00001"
    assert at_line(index, "d", 10) == "d#00002"
    assert at_line(index, "d", 20) == "d#00002"
    assert at_line(index, "d", 22) == "d#00003"  # in the gap: the next one
    assert at_line(index, "d", 0) == "d#00001"
    assert index.chunk_at_line("d", 41) is None
    index.replace_document("s", [chunk("s", 0, "only a summary", lines=(1, 30), type="summary")], None, None)
    assert at_line(index, "s", 12) == "s#00000"
    assert index.chunk_at_line("unknown", 1) is None


# ---------------------------------------------------------------------------------------------- grep candidates


def test_candidates_hold_every_literal_word_of_the_pattern(corpus: KbIndexFile) -> None:
    assert sorted(ids(corpus.candidates(literal_words(r"access\s+token")))) == ["oauth#00000", "oauth#00001"]
    assert ids(corpus.candidates(literal_words(r"refresh\s+token\b.*expires"))) == ["oauth#00001"]
    assert ids(corpus.candidates(literal_words("知识库"))) == ["kb_zh#00000"]
    # Words are looked up as word starts: "oauth" also selects "oauth2"; the regex then decides.
    assert sorted(ids(corpus.candidates(literal_words(r"OAuth\d")))) == ["mixed#00000", "oauth#00000"]


def test_candidates_respect_the_document_filter_and_the_limit(index: KbIndexFile) -> None:
    _crowded(index)
    assert ids(index.candidates(["invoice"], document_ids=["weak"])) == ["weak#00000"]
    assert len(index.candidates(["invoice"], limit=30)) == 30
    assert ids(index.candidates(["invoice"], limit=50))[-1] == "weak#00000"  # best-ranked first
    assert index.candidates([]) == []
    assert index.candidates(["invoice"], document_ids=[]) == []


def test_candidates_for_grep_then_the_regex_decides(corpus: KbIndexFile) -> None:
    pattern = r"refresh\s+token"
    regex = re.compile(pattern, re.IGNORECASE)
    matched = [c.id for c in corpus.candidates(literal_words(pattern)) if regex.search(c.text)]
    assert sorted(matched) == ["mixed#00000", "oauth#00001"]


# ---------------------------------------------------------------------------------------------- replaced files


def _copy_over(source: KbIndexFile, target: Path) -> None:
    """What a replica refresh does: a complete copy next to the target, renamed over it."""
    partial = target.with_name(f".{target.name}.partial")
    partial.unlink(missing_ok=True)
    source.copy_to(partial)
    os.replace(partial, target)


def test_a_read_only_replica_sees_the_newer_copy_renamed_over_it(tmp_path: Path) -> None:
    writer = KbIndexFile(tmp_path / "writer.sqlite3")
    writer.replace_document("a", document("a", "first version"), [[1.0, 0.0]], EMBEDDER)
    replica_path = tmp_path / "replica.sqlite3"
    _copy_over(writer, replica_path)
    replica = KbIndexFile(replica_path, read_only=True)
    assert ids(replica.keyword("first")) == ["a#00000"]
    assert ids(replica.semantic([1.0, 0.0])) == ["a#00000"]
    assert replica.generation() == 1

    writer.replace_document("b", document("b", "second version"), [[0.0, 1.0]], EMBEDDER)
    _copy_over(writer, replica_path)

    assert replica.generation() == 2
    assert sorted(ids(replica.keyword("version"))) == ["a#00000", "b#00000"]
    assert ids(replica.semantic([0.0, 1.0], limit=1)) == ["b#00000"]
    assert list(tmp_path.glob("replica.sqlite3-*")) == []  # immutable: no -wal/-shm to outlive a swap
    replica.close()
    writer.close()


def test_a_read_write_index_reopens_a_file_replaced_by_a_copy(tmp_path: Path) -> None:
    path = tmp_path / "kb.sqlite3"
    index = KbIndexFile(path)
    index.replace_document("a", document("a", "old content"), None, None)
    other = KbIndexFile(tmp_path / "other.sqlite3")
    other.replace_document("a", document("a", "old content"), None, None)
    other.replace_document("b", document("b", "new content"), None, None)
    index.close()  # the writer lets go of the file before it is swapped
    _copy_over(other, path)

    assert index.document_ids() == ["a", "b"]
    assert index.generation() == 2
    index.replace_document("c", document("c", "more"), None, None)
    assert index.generation() == 3
    other.close()
    index.close()


def test_reopen_picks_up_a_copy_written_in_place(tmp_path: Path) -> None:
    source = KbIndexFile(tmp_path / "source.sqlite3")
    source.replace_document("a", document("a", "alpha"), None, None)
    replica_path = tmp_path / "replica.sqlite3"
    _copy_over(source, replica_path)
    replica = KbIndexFile(replica_path, read_only=True)
    assert replica.document_ids() == ["a"]

    source.replace_document("b", document("b", "beta"), None, None)
    fresh = tmp_path / "fresh.sqlite3"
    source.copy_to(fresh)
    replica_path.write_bytes(fresh.read_bytes())  # same inode: only size/mtime or reopen() can tell
    replica.reopen()

    assert replica.document_ids() == ["a", "b"]
    replica.close()
    source.close()


def test_a_read_only_index_refuses_writes_and_missing_files(tmp_path: Path) -> None:
    source = KbIndexFile(tmp_path / "source.sqlite3")
    source.replace_document("a", document("a", "alpha"), None, None)
    source.close()
    replica = KbIndexFile(tmp_path / "source.sqlite3", read_only=True)

    with pytest.raises(PermissionError):
        replica.delete_document("a")
    assert replica.count("a") == 1
    with pytest.raises(Unavailable):
        KbIndexFile(tmp_path / "missing.sqlite3", read_only=True).count("a")
    replica.close()


def test_copy_to_refuses_an_existing_file(index: KbIndexFile, tmp_path: Path) -> None:
    target = tmp_path / "exists.sqlite3"
    target.write_bytes(b"")
    with pytest.raises(FileExistsError):
        index.copy_to(target)


# ---------------------------------------------------------------------------------------------- threads


def test_readers_in_threads_run_while_a_writer_replaces_documents(index: KbIndexFile) -> None:
    index.replace_document("d", document("d", "stable text"), [[1.0, 0.0]], EMBEDDER)
    errors: list[BaseException] = []
    stop = threading.Event()

    def read() -> None:
        try:
            while not stop.is_set():
                assert "d#00000" in ids(index.keyword("stable"))
                assert index.semantic([1.0, 0.0], limit=50)
                assert index.count("d") == 1
        except BaseException as exc:  # reported below
            errors.append(exc)

    readers = [threading.Thread(target=read) for _ in range(4)]
    for reader in readers:
        reader.start()
    for n in range(30):
        index.replace_document(f"w{n % 5}", document(f"w{n % 5}", f"write {n}", "more"), [[0.5, 0.5]] * 2, EMBEDDER)
    stop.set()
    for reader in readers:
        reader.join()

    assert errors == []
    assert index.document_ids() == ["d", "w0", "w1", "w2", "w3", "w4"]
    assert index.generation() == 31


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts open files through /proc")
def test_threads_do_not_each_keep_a_connection_open(index: KbIndexFile) -> None:
    index.replace_document("d", document("d", "alpha"), None, None)
    before = len(os.listdir("/proc/self/fd"))

    for _ in range(16):  # one call in each of 16 threads, one after the other (a server's worker threads)
        thread = threading.Thread(target=index.keyword, args=("alpha",))
        thread.start()
        thread.join()

    # A connection per thread would leave 16 more open databases (and their logs).
    assert len(os.listdir("/proc/self/fd")) - before <= 2
    index.close()
    assert len(os.listdir("/proc/self/fd")) < before


def test_several_instances_opening_a_new_file_at_once(tmp_path: Path) -> None:
    """Three instances open the same brand-new index file at the same moment, thirty times over: each one gets the
    file (SQLite answers "locked" at once to a journal-mode switch racing another, which must be waited out)."""
    failures: list[BaseException] = []
    for attempt in range(30):
        path = tmp_path / f"kb{attempt}.sqlite3"
        barrier = threading.Barrier(3)

        def open_and_read(path: Path = path, barrier: threading.Barrier = barrier) -> None:
            opened = KbIndexFile(path)
            try:
                barrier.wait()
                opened.document_ids()
            except BaseException as exc:
                failures.append(exc)
            finally:
                opened.close()

        threads = [threading.Thread(target=open_and_read) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert failures == []


# ---------------------------------------------------------------------------------------------- analysis


def _as_schema_1(path: Path) -> None:
    """Turn an index file back into what schema 1 wrote: no analysed terms, no chunk count."""
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("DROP TABLE chunks_stems_a")
        conn.execute("DROP TABLE chunks_stems_b")
        conn.execute("DELETE FROM meta WHERE key IN ('analyser', 'language', 'stems', 'chunk_count')")
        conn.execute("UPDATE meta SET value = 1 WHERE key = 'schema_version'")
    conn.close()


def test_a_new_file_takes_the_language_of_its_first_write(tmp_path: Path) -> None:
    index = KbIndexFile(tmp_path / "kb.sqlite3")
    index.replace_document("d", document("d", "Les données des utilisateurs"), None, None, language="french")
    index.replace_document("e", document("e", "Walruses"), None, None, language="english")  # kept: french
    assert index.analysis() == IndexAnalysis("french", up_to_date=True)
    assert ids(index.keyword("donnée")) == ["d#00000"]
    index.close()


def test_a_file_of_schema_1_is_searched_by_its_words_until_it_is_reanalysed(tmp_path: Path) -> None:
    path = tmp_path / "kb.sqlite3"
    index = KbIndexFile(path)
    index.replace_document("w", document("w", "Walruses haul out.", "The walrus dives."), None, None)
    index.close()
    _as_schema_1(path)

    replica = KbIndexFile(path, read_only=True)  # an S3 replica of an old file: read as it is
    assert ids(replica.keyword("walruses")) == ["w#00000"]
    replica.close()

    index = KbIndexFile(path)
    assert index.analysis() == IndexAnalysis(None, up_to_date=False)
    assert ids(index.keyword("walrus")) == ["w#00001"]  # surface words only
    assert ids(index.keyword("the walruses")) == ["w#00000"]  # stop words are dropped all the same
    seen: list[tuple[int, int]] = []
    assert index.reanalyse("auto", progress=lambda done, total: seen.append((done, total))) is True
    assert seen[-1] == (2, 2)
    assert index.analysis() == IndexAnalysis("auto", up_to_date=True)
    assert sorted(ids(index.keyword("walrus"))) == ["w#00000", "w#00001"]
    assert index.reanalyse("auto") is False
    index.close()
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == kb_index.SCHEMA_VERSION
    conn.close()


def test_a_reanalysis_goes_by_batches_and_keeps_the_writes_made_meanwhile(
    index: KbIndexFile, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kb_index, "REANALYSIS_BATCH", 2)
    index.replace_document("a", document("a", "Walruses one.", "Walruses two.", "Walruses three."), None, None)
    index.replace_document("b", document("b", "Données uniques."), None, None)
    progress: list[tuple[int, int]] = []
    during: list[IndexAnalysis] = []

    def meanwhile(done: int, total: int) -> None:
        progress.append((done, total))
        if len(progress) == 1:
            during.append(index.analysis())
            assert ids(index.keyword("walrus"))  # searches go on, with the current analysis
            index.replace_document("c", document("c", "Nouvelles données."), None, None)
            index.delete_document("b")

    assert index.reanalyse("french", progress=meanwhile) is True
    assert during == [IndexAnalysis("auto", True, "french", 2, 4)]
    assert progress[-1] == (3, 3)  # b was deleted meanwhile
    assert index.analysis() == IndexAnalysis("french", up_to_date=True)
    assert ids(index.keyword("donnée")) == ["c#00000"]
    assert sorted(ids(index.keyword("walruses"))) == ["a#00000", "a#00001", "a#00002"]


def test_an_interrupted_reanalysis_resumes(index: KbIndexFile, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kb_index, "REANALYSIS_BATCH", 1)
    index.replace_document("a", document("a", "Données une.", "Données deux.", "Données trois."), None, None)

    def crash(done: int, total: int) -> None:
        raise RuntimeError("the process stopped")

    with pytest.raises(RuntimeError):
        index.reanalyse("french", progress=crash)
    assert index.analysis() == IndexAnalysis("auto", True, "french", 1, 3)
    seen: list[int] = []
    assert index.reanalyse("french", progress=lambda done, total: seen.append(done)) is True
    assert seen == [2, 3, 3]
    assert len(index.keyword("donnée")) == 3


# ---------------------------------------------------------------------------------------------- relevance


def test_keyword_hits_say_how_much_of_the_query_they_hold(index: KbIndexFile) -> None:
    index.replace_document(
        "w",
        document("w", "Walruses use their tusks to haul out.", "Seals dive for fish.", "Mortgage rates and interest."),
        None,
        None,
    )
    index.replace_document("filler", document("filler", *[f"Notes on topic {n}." for n in range(30)]), None, None)
    [full] = index.keyword("what do walruses use their tusks for?")
    assert full.relevance == 1.0
    assert full.relevant
    [partial] = index.keyword("walrus habitat migration range")  # one of four terms, the others unknown here
    assert partial.chunk.id == "w#00000"
    assert partial.relevance is not None
    assert not partial.relevant
    assert index.keyword("What is the capital of France?") == []  # no word of it is in the knowledge base
    assert [h.relevant for h in index.keyword("mortgage interest")] == [True]


def test_semantic_hits_say_how_far_they_stand_above_the_rest(index: KbIndexFile) -> None:
    rng = np.random.default_rng(11)
    vectors = rng.standard_normal((40, 16))
    index.replace_document("d", document("d", *[f"chunk {i}" for i in range(40)]), vectors.tolist(), EMBEDDER)
    [match] = index.semantic(vectors[7].tolist(), limit=1)
    assert match.chunk.id == "d#00007"
    assert match.relevant
    unrelated = index.semantic(rng.standard_normal(16).tolist(), limit=3)
    assert unrelated
    assert not any(hit.relevant for hit in unrelated)
    small = KbIndexFile(index.path.with_name("small.sqlite3"))
    small.replace_document("s", document("s", "one", "two"), vectors[:2].tolist(), EMBEDDER)
    assert all(hit.relevance is None for hit in small.semantic(vectors[0].tolist()))  # too few chunks to tell
    small.close()
