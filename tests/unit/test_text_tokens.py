"""Index terms for every language, and the literal words grep looks up before running its regex."""

from __future__ import annotations

import re

import pytest

from mcpbridge.domain.text_tokens import (
    ANALYSER_VERSION,
    SNOWBALL_LANGUAGES,
    Analyser,
    is_cjk,
    literal_words,
    query_tokens,
    search_tokens,
)


def test_latin_text_splits_into_folded_words_on_punctuation() -> None:
    assert search_tokens("OAuth2 refresh_token: Expires-In=3600s (see RFC-6749).") == [
        "oauth2",
        "refresh",
        "token",
        "expires",
        "in",
        "3600s",
        "see",
        "rfc",
        "6749",
    ]


def test_nothing_is_dropped() -> None:
    assert search_tokens("To be or not to be, a b") == ["to", "be", "or", "not", "to", "be", "a", "b"]


def test_width_case_and_latin_accents_are_folded() -> None:
    assert search_tokens("ＯＡｕｔｈ Straße CAFÉ naïve Ἀθῆναι") == ["oauth", "strasse", "cafe", "naive", "αθηναι"]
    assert search_tokens("café") == search_tokens("cafe")


def test_cyrillic_and_scripts_with_marks_stay_whole_words() -> None:
    assert search_tokens("Привет, мой мир") == ["привет", "мой", "мир"]
    assert search_tokens("हिन्दी भाषा") == ["हिन्दी", "भाषा"]
    assert search_tokens("العربية لغة") == ["العربية", "لغة"]


def test_cjk_runs_become_overlapping_bigrams() -> None:
    assert search_tokens("知识库") == ["知识", "识库"]
    assert search_tokens("知识库，检索。") == ["知识", "识库", "检索"]


def test_a_lone_cjk_character_is_its_own_token() -> None:
    assert search_tokens("第3章 库") == ["第", "3", "章", "库"]


def test_mixed_text_splits_where_the_script_changes() -> None:
    assert search_tokens("用OAuth2认证流程 API") == ["用", "oauth2", "认证", "证流", "流程", "api"]


def test_kana_and_hangul_are_bigrammed_too() -> None:
    assert search_tokens("カタカナ") == ["カタ", "タカ", "カナ"]
    assert search_tokens("ひらがな") == ["ひら", "らが", "がな"]
    assert search_tokens("한국어") == ["한국", "국어"]
    # Half-width Katakana is widened first, so both spellings meet.
    assert search_tokens("ｶﾀｶﾅ") == search_tokens("カタカナ")


def test_a_two_character_query_is_a_term_of_a_longer_run() -> None:
    assert set(query_tokens("知识")) <= set(search_tokens("我们的知识库很大"))
    assert set(query_tokens("识库")) <= set(search_tokens("我们的知识库很大"))


def test_query_tokens_follow_the_same_rule() -> None:
    text = "Refresh the OAuth2 token 刷新令牌"
    assert query_tokens(text) == search_tokens(text)


def test_is_cjk() -> None:
    assert is_cjk("知识")
    assert is_cjk("カ")
    assert not is_cjk("oauth")


@pytest.mark.parametrize(
    ("pattern", "words"),
    [
        (r"oauth\s+token", ["oauth", "token"]),
        (r"^\d+$", []),
        (r"(foo|bar)baz", ["baz"]),
        ("refresh_token", ["refresh", "token"]),
        ("知识库", ["知识库"]),
        (r"知识.?库", ["知识", "库"]),
        ("OAuth2认证", ["oauth2", "认证"]),
        ("foo|bar", []),
        (r"\bRefresh\b", ["refresh"]),
        (r"(?i)Hello\.World", ["hello", "world"]),
        (r"colou?r", ["colo"]),
        (r"ab+c", ["ab", "bc"]),
        (r"x{2}yz", ["xxyz"]),
        (r"a{0,3}bcd", ["bcd"]),
        ("(token|tokens) expired", ["token", "expired"]),
        (r"[a-z]+_id\d*", ["id"]),
        (r"\x41BC", ["abc"]),
        (r"(?P<n>abc)(?P=n)def", ["abc", "def"]),
        (r"(?=foo)\w+", []),
        (r"(?x) foo bar", []),
        ("Café", ["cafe"]),
        ("a b", []),
    ],
)
def test_literal_words(pattern: str, words: list[str]) -> None:
    assert literal_words(pattern) == words


def test_literal_words_of_an_invalid_pattern_raise() -> None:
    with pytest.raises(re.error):
        literal_words("(unclosed")


def test_literal_words_are_index_terms() -> None:
    text = "Rotate the OAuth refresh_token, then call 知识库 search"
    terms = set(search_tokens(text))
    for pattern in (r"oauth\s+refresh_token", "知识库", r"call\s+\S+\s+search"):
        words = literal_words(pattern)
        assert words
        assert all(set(search_tokens(word)) <= terms for word in words)


@pytest.mark.parametrize(
    ("pattern", "words"),
    [
        (r"\Qrefresh.token\E", ["refresh", "token"]),
        (r"\Qrefresh(", ["refresh"]),
        (r"\Qtokens\E{2}", ["tokenss"]),
        (r"\Qtokens\E?", ["token"]),
        (r"refresh\pL+token", ["refresh", "token"]),
        (r"refresh\p{Han}token", ["refresh", "token"]),
        (r"refresh\P{Greek}token", ["refresh", "token"]),
        (r"lease\z", ["lease"]),
        (r"refresh\Ctoken", ["refresh", "token"]),
        (r"\x{41}BC", ["abc"]),
        (r"\x{77e5}\x{8bc6}", ["知识"]),
        (r"(?<lead>refresh)\s+token", ["refresh", "token"]),
        (r"refresh[[:space:]]+token", ["refresh", "token"]),
        (r"refresh[[:^alpha:]]]token", ["refresh", "token"]),
        (r"(?U)refresh.+token", ["refresh", "token"]),
        (r"(?i-m:Refresh)\s(?s:.)token", ["refresh", "token"]),
    ],
)
def test_literal_words_of_re2_syntax(pattern: str, words: list[str]) -> None:
    # RE2 is what grep runs: \Q...\E is text, \pL and \C are classes, \z matches no text; none is a literal letter.
    assert literal_words(pattern) == words


def test_literal_words_survive_deep_nesting() -> None:
    assert literal_words("refresh" + "(" * 240 + "a" + ")" * 240) == ["refresh"]
    assert literal_words("(" * 20 + "refresh" + ")" * 20) == ["refresh"]


@pytest.mark.parametrize("pattern", ["(unclosed", "closed)", "[unclosed", "trailing\\", r"\x{41", "(" * 300])
def test_literal_words_of_a_malformed_pattern_raise(pattern: str) -> None:
    with pytest.raises(re.error):
        literal_words(pattern)


# ---------------------------------------------------------------------------------------------- analysers


def test_an_analyser_stems_words_outside_cjk_and_keeps_bigrams() -> None:
    analyser = Analyser("auto")
    assert analyser.index_terms("Walruses were running 知识库 OAuth2 3600") == [
        "walrus",
        "were",
        "run",
        "知识",
        "识库",
        "oauth2",
        "3600",
    ]
    assert analyser.index_terms("walrus") == analyser.index_terms("Walruses")


def test_a_query_drops_stop_words_unless_nothing_else_is_left() -> None:
    analyser = Analyser("english")
    assert analyser.query_terms("What do walruses use their tusks for?") == ["walrus", "use", "tusk"]
    assert analyser.query_terms("To be or not to be") == ["to", "be", "or", "not"]
    assert analyser.query_terms("the walrus, the walruses") == ["walrus"]


def test_other_languages_stem_and_stop_by_their_own_rules() -> None:
    assert Analyser("french").query_terms("Où sont les données des utilisateurs ?") == ["donne", "utilis"]
    assert Analyser("german").query_terms("Wie funktioniert die Suche?") == ["funktioniert", "such"]


def test_language_none_keeps_words_as_written() -> None:
    analyser = Analyser("none")
    assert analyser.query_terms("How the walruses") == ["how", "the", "walruses"]
    assert analyser.index_terms("Walruses") == ["walruses"]


def test_every_analyser_has_an_id_that_names_its_rules() -> None:
    assert Analyser("auto").id == Analyser("english").id != Analyser("none").id
    assert str(ANALYSER_VERSION) in Analyser("french").id
    assert set(SNOWBALL_LANGUAGES) >= {"english", "french", "german", "russian"}
    with pytest.raises(ValueError, match="unknown language"):
        Analyser("klingon")


@pytest.mark.parametrize(
    ("question", "previous", "follows"),
    [
        ("and on Windows?", "How do I install it on Linux?", True),
        ("What about the refresh token?", "How long does an access token last?", True),
        ("Does it support Windows?", "How do I install mcpbridge?", True),
        ("How do walruses dive?", "What do walruses eat?", True),
        ("那它的过期时间呢？", "会话怎么保存？", True),
        ("Why?", "What do walruses like?", True),
        ("How so?", "Are secrets sealed at rest?", True),
        ("What is the capital of France?", "How are secrets sealed?", False),
        ("How do I bake sourdough bread at home?", "How do walruses feed?", False),
    ],
)
def test_a_follow_up_relates_to_the_question_before_it(question: str, previous: str, follows: bool) -> None:
    from mcpbridge.knowledge.answers import follows_on

    assert follows_on(question, previous) is follows
