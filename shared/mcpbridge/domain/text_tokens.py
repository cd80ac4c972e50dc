"""Words as the keyword index sees them, for every language a knowledge base may hold.

``search_tokens`` is the one rule, applied alike to chunk text (when it is indexed) and to queries:

* the text is NFKC-normalised and case-folded, so full-width ``ＡＢＣ`` is ``abc`` and ``Straße`` is ``strasse``;
* letters, digits and combining marks form words; anything else (space, punctuation, ``_``, symbols) separates
  them: ``OAuth2-token`` is ``oauth2``, ``token``. Accents are stripped from Latin and Greek letters (``café`` is
  ``cafe``), so a query typed without them still matches; other scripts keep their marks (a Devanagari vowel sign
  is part of its word);
* a run of CJK characters (Han, Hiragana, Katakana, Hangul), which has no spaces between words, becomes its
  overlapping character bigrams: ``知识库`` is ``知识``, ``识库``, so a two-character query matches inside a longer
  run and a longer query matches through its bigrams; a run of one character is that character. Mixed text splits
  where the script changes: ``OAuth2认证`` is ``oauth2``, ``认证``;
* nothing is dropped: no stop words, no minimum length, no stemming.

Languages written without spaces outside CJK (Thai, Lao, Khmer, Myanmar) come out as one token per run: searching
them needs a dictionary segmenter this module does not have.

An ``Analyser`` turns those words into the terms keyword search ranks, for one knowledge base's language: each word
outside CJK is reduced to its Snowball stem (``walruses`` and ``walrus`` are both ``walrus``; PyStemmer), CJK
bigrams stay as they are, and a query drops the language's stop words (``how``, ``the``, ``of``) unless nothing else
is left. Indexed text keeps its stop words, so a query made only of them ("to be or not to be") still finds its
text, and a stop list can change without re-indexing. ``search_tokens`` (surface words, no stemming) stays what grep
looks words up in: a literal word of a regex must find the words it starts, which a stem cannot promise
(``runn`` starts ``running``, whose stem is ``run``).

``literal_words`` serves grep: it finds the words that every match of a regular expression (RE2's syntax, which grep
runs, or Python's) contains, so the keyword index can pick candidate chunks before the regex checks them.
"""

# Over 400 lines: the analysers (tokens, stems, stop words, CJK) and the reading of a pattern's words.

from __future__ import annotations

import functools
import re
import threading
import unicodedata
from dataclasses import dataclass, field

import Stemmer  # type: ignore[import-not-found,unused-ignore]

# Hangul Jamo; 々〆〇 and the Suzhou numerals; Hiragana (with the combining sound marks); Katakana without the
# middle dot ・; Hangul compatibility Jamo; Katakana extensions; CJK ideographs (extension A, unified, compatibility);
# Hangul syllables and Jamo extensions; half-width Katakana (NFKC widens it anyway); the supplementary ideograph planes.
_CJK = (
    "\u1100-\u11ff\u3005-\u3007\u3021-\u3029\u3038-\u303b\u3041-\u3096\u3099-\u309f\u30a1-\u30fa\u30fc-\u30ff"
    "\u3131-\u318e\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\ua960-\ua97f\uac00-\ud7a3\ud7b0-\ud7ff\uf900-\ufaff"
    "\uff66-\uff9f\U00020000-\U0003ffff"
)
# The combining marks (Unicode category M) of the Basic Multilingual Plane, as ranges: generated from
# ``unicodedata`` by merging consecutive marks across letters, digits and unassigned code points, which are word
# characters anyway. Python's ``\w`` leaves marks out, which would cut ``हिन्दी`` at its vowel signs.
_MARKS = (
    "\u0300-\u036f\u0483-\u0489\u0591-\u05bd\u05bf\u05c1-\u05c2\u05c4-\u05c5\u05c7\u0610-\u061a\u064b-\u065f\u0670"
    "\u06d6-\u06dc\u06df-\u06e8\u06ea-\u06ed\u0711-\u07f3\u07fd\u0816-\u082d\u0859-\u085b\u0898-\u08e1\u08e3-\u0963"
    "\u0981-\u09e3\u09fe-\u0a75\u0a81-\u0ae3\u0afa-\u0b63\u0b82-\u0bd7\u0c00-\u0c63\u0c81-\u0c83\u0cbc-\u0d4d"
    "\u0d57-\u0d63\u0d81-\u0df3\u0e31-\u0e3a\u0e47-\u0e4e\u0eb1-\u0ecd\u0f18-\u0f19\u0f35\u0f37\u0f39\u0f3e-\u0f84"
    "\u0f86-\u0fbc\u0fc6\u102b-\u103e\u1056-\u109d\u135d-\u135f\u1712-\u1734\u1752-\u17d3\u17dd\u180b-\u180d"
    "\u180f-\u193b\u1a17-\u1a1b\u1a55-\u1a7f\u1ab0-\u1b44\u1b6b-\u1b73\u1b80-\u1bf3\u1c24-\u1c37\u1cd0-\u1cd2"
    "\u1cd4-\u1dff\u20d0-\u20f0\u2cef-\u2cf1\u2d7f-\u2dff\u302a-\u302f\ua66f-\ua672\ua674-\ua67d\ua69e-\ua6f1"
    "\ua802-\ua827\ua82c\ua880-\ua8c5\ua8e0-\ua8f1\ua8ff-\ua92d\ua947-\ua953\ua980-\ua9c0\ua9e5-\uaa4d\uaa7b-\uaac1"
    "\uaaeb-\uaaef\uaaf5-\uaaf6\uabe3-\uabea\uabec-\uabed\ufb1e\ufe00-\ufe0f\ufe20-\ufe2f"
)
_RUN = re.compile(rf"(?:[^\W_]|[{_CJK}{_MARKS}])+")
_ASCII_RUN = re.compile("[a-z0-9]+")  # after case folding
_CJK_CHAR = re.compile(f"[{_CJK}]")
_CJK_SPLIT = re.compile(f"([{_CJK}]+)")
_STRIPPED_ACCENT = re.compile("[\u0300-\u036f]")


def search_tokens(text: str) -> list[str]:
    """The index terms of ``text``, in order, duplicates kept (see the module docstring for the rule)."""
    text = _normalise(text)
    if text.isascii():
        return _ASCII_RUN.findall(text)
    tokens: list[str] = []
    has_cjk = _CJK_CHAR.search(text) is not None
    for run in _RUN.findall(text):
        if not has_cjk or _CJK_CHAR.search(run) is None:
            tokens.append(run if run.isascii() else _strip_accents(run))
            continue
        # The split alternates other-script parts (even positions, maybe empty) and CJK runs (odd positions).
        for i, part in enumerate(_CJK_SPLIT.split(run)):
            if not part:
                continue
            if i % 2 == 0:
                tokens.append(part if part.isascii() else _strip_accents(part))
            elif len(part) == 1:
                tokens.append(part)
            else:
                tokens.extend(part[j : j + 2] for j in range(len(part) - 1))
    return tokens


def query_tokens(query: str) -> list[str]:
    """The terms of a search query: the same rule as for indexed text, so both sides meet."""
    return search_tokens(query)


def is_cjk(token: str) -> bool:
    """Whether a token came from a CJK run (a bigram or a lone character)."""
    return _CJK_CHAR.match(token) is not None


def _normalise(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def _strip_accents(word: str) -> str:
    decomposed = unicodedata.normalize("NFD", word)
    if _STRIPPED_ACCENT.search(decomposed) is None:
        return word
    kept: list[str] = []
    base = 0
    for ch in decomposed:
        code = ord(ch)
        if 0x300 <= code <= 0x36F and _accented_script(base):
            continue
        kept.append(ch)
        if not unicodedata.combining(ch):
            base = code
    return unicodedata.normalize("NFC", "".join(kept))


def _accented_script(code: int) -> bool:
    # Latin (with its extensions), Greek; Cyrillic keeps its marks: й and и are different letters.
    return code < 0x250 or 0x370 <= code <= 0x3FF or 0x1E00 <= code <= 0x1FFF


# ---------------------------------------------------------------------------------------------- analysers

ANALYSER_VERSION = 1
"""Bumped whenever what an analyser makes of a text changes: index files analysed by an older one are re-analysed."""

SNOWBALL_LANGUAGES: tuple[str, ...] = tuple(
    sorted(name for name in Stemmer.algorithms() if name not in ("porter", "dutch_porter"))
)
LANGUAGES: tuple[str, ...] = ("auto", "none", *SNOWBALL_LANGUAGES)
"""A knowledge base's ``language``: ``auto`` (the default: English rules for words outside CJK, which also suit the
English words that most technical text in any language holds), ``none`` (words as written: no stems, no stop
words) or a Snowball language by its English name (``french``, ``german``, ``russian``...)."""
DEFAULT_LANGUAGE = "auto"

# Stop words: the Snowball project's lists for the languages most knowledge bases are written in, folded like index
# terms (accents stripped; "don't" is "don", "t"), plus the modal verbs questions begin with. Other Snowball languages
# stem without a stop list.
_STOP_WORDS: dict[str, str] = {
    "english": """
        i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she her hers
        herself it its itself they them their theirs themselves what which who whom this that these those am is are
        was were be been being have has had having do does did doing would should could ought a an the and but if or
        because as until while of at by for with about against between into through during before after above below
        to from up down in out on off over under again further then once here there when where why how all any both
        each few more most other some such no nor not only own same so than too very can will shall may might must
        just also s t d ll m re ve don doesn didn isn aren wasn weren hasn haven hadn won wouldn shouldn couldn
        mustn let lets
    """,
    "french": """
        au aux avec ce ces dans de des du elle en et eux il ils je la le les leur lui ma mais me meme mes moi mon ne
        nos notre nous on ou par pas pour qu que qui sa se ses son sur ta te tes toi ton tu un une vos votre vous c d
        j l a m n s t y ete etre avoir ai as avons avez ont est sont etait comment quel quelle quels quelles quoi
        ou est-ce cela ca
    """,
    "german": """
        aber alle als also am an auch auf aus bei bin bis bist da damit dann das dass dein deine dem den der des dich
        die dir du durch ein eine einem einen einer eines er es euer eure fur hat hatte hier ich ihm ihn ihr ihre im in
        ist ja kann kein man mein meine mich mir mit muss nach nicht noch nun nur ob oder ohne sein seine sich sie
        sind so um und uns unser unter viel vom von vor war was weil wenn wer wie wir wird wo wurde zu zum zur uber
        welche welcher welches warum
    """,
    "spanish": """
        a al algo como con de del donde el ella ellos en entre era es esa ese eso esta este esto estos fue ha hay la
        las le les lo los mas me mi mis muy ni no nos o para pero por porque que quien se sea ser si sin sobre su sus
        tambien te tiene tu un una uno unos y ya yo cual cuales cuando cuanto
    """,
    "italian": """
        a ad al alla alle anche che chi ci come con cosa da dal dalla degli dei del della delle di e ed gli ha hanno
        i il in io la le lei lo loro lui ma mi ne negli nei nel nella noi non o per perche piu quale quando quanto
        questa questo se si sono su sua sue suo suoi ti tra tu un una uno voi
    """,
    "portuguese": """
        a ao aos as com como da das de do dos e ela ele eles em entre era esta este eu foi ha isso isto ja lhe mais
        mas me meu minha muito na nao nas nem no nos o os ou para pela pelo por porque qual quando que quem se sem
        ser seu sua tambem te tem um uma voce
    """,
    "dutch": """
        aan al als bij dan dat de der deze die dit doch door een en er had heb hem het hij hoe hun ik in is je kan
        maar me met mij mijn na naar niet nog nu of om omdat ons ook op over te tot u uit van veel voor waar wat
        wanneer waarom we wel werd wie wij worden zal ze zelf zich zij zijn zo zou
    """,
}


@dataclass(frozen=True)
class Analyser:
    """The keyword analysis of one language (see the module docstring); ``id`` names it in an index file."""

    language: str
    _stop: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.language not in LANGUAGES:
            raise ValueError(f"unknown language {self.language!r}; one of: {', '.join(LANGUAGES)}")
        stop = "" if self.language == "none" else _STOP_WORDS.get(self.stemmer_language or "", "")
        object.__setattr__(self, "_stop", frozenset(_fold(w) for w in stop.split()))

    @property
    def stemmer_language(self) -> str | None:
        if self.language == "none":
            return None
        return "english" if self.language == "auto" else self.language

    @property
    def id(self) -> str:
        """What an index file records: a file analysed by another id (or an older version) is re-analysed."""
        return f"{ANALYSER_VERSION}:{self.stemmer_language or 'none'}"

    def index_terms(self, text: str) -> list[str]:
        """The terms of indexed text, in order, duplicates and stop words kept."""
        return self._stems(search_tokens(text))

    def index_terms_of_words(self, words: list[str]) -> list[str]:
        """``index_terms`` of words already split by ``search_tokens``."""
        return self._stems(words)

    def query_terms(self, query: str) -> list[str]:
        """The distinct terms of a query, in order, without its stop words (unless it holds nothing else)."""
        words = list(dict.fromkeys(search_tokens(query)))
        kept = [w for w in words if w not in self._stop]
        return list(dict.fromkeys(self._stems(kept or words)))

    def is_stop_word(self, word: str) -> bool:
        return _fold(word) in self._stop

    def _stems(self, words: list[str]) -> list[str]:
        language = self.stemmer_language
        if language is None or not words:
            return words
        stemmer = _stemmer(language)
        if "".join(words).isascii():  # the common case: no CJK, one call for all
            return list(stemmer.stemWords(words))
        return [w if is_cjk(w) or w.isdigit() else stemmer.stemWord(w) for w in words]


@functools.lru_cache(maxsize=64)
def analyser_for(language: str | None) -> Analyser:
    """The analyser of a language (``None``: the default); analysers are immutable and shared."""
    return Analyser(language or DEFAULT_LANGUAGE)


_THREAD = threading.local()


def _stemmer(language: str) -> Stemmer.Stemmer:
    # A PyStemmer stemmer (with its cache of recent words) is not safe to share between threads: one per thread.
    stemmers: dict[str, Stemmer.Stemmer] | None = getattr(_THREAD, "stemmers", None)
    if stemmers is None:
        stemmers = _THREAD.stemmers = {}
    found = stemmers.get(language)
    if found is None:
        found = stemmers[language] = Stemmer.Stemmer(language, 20_000)
    return found


def _fold(word: str) -> str:
    folded = _normalise(word)
    return folded if folded.isascii() else _strip_accents(folded)


# ---------------------------------------------------------------------------------------------- literal words


def literal_words(pattern: str) -> list[str]:
    """Words that every match of ``pattern`` (a regex in RE2's or Python's syntax, matched case-insensitively) contains.

    The words come out normalised like index terms (folded, accents stripped), at least two characters long, or a
    run of CJK characters of any length; feed them to the index's ``candidates``. What counts as certain:

    * literal characters, escaped punctuation (``\\.``), character escapes (``\\x41``, ``\\x{4e00}``, ``\\n``) and
      quoted text (``\\Q...\\E``); anchors and lookarounds (``^``, ``$``, ``\\b``, ``\\z``, ``(?=...)``) match no
      text, so ``\\bfoo\\b`` is ``foo``;
    * a group counts like its content; an atom quantified by ``+`` or ``{n,}`` (n ≥ 1) counts once;
    * an atom that may be absent (``a?``, ``b*``, ``{0,n}``) counts for nothing and cuts the text around it, as do
      character classes (``[ab]``, ``[[:alpha:]]``, ``.``, ``\\d``, ``\\w``, ``\\pL``, ``\\p{Han}``, ``\\C``) and
      back-references: ``oauth\\s+token`` gives ``oauth``, ``token``; ``^\\d+$`` gives none;
    * an alternation keeps only what all its branches start or end with: ``(foo|bar)baz`` gives ``baz``,
      ``(token|tokens)`` gives ``token``, and a top-level ``foo|bar`` gives none;
    * ``_`` separates words in the index, so ``refresh_token`` gives ``refresh``, ``token``.

    The index matches whole words and word starts (``candidates`` looks words up as prefixes), so a literal that a
    match places in the middle of a longer word (``auth`` inside ``oauth``) does not select that chunk. Patterns in
    verbose mode (``(?x)``) give none, and groups nested deeper than 50 count for nothing. Raise ``re.error`` when the
    pattern is malformed (a group or class left open, a dangling escape); the regex engine judges the rest.
    """
    parser = _PatternParser(pattern)
    if parser.verbose:
        return []
    try:
        found = parser.parse()
    except (ValueError, KeyError, IndexError) as exc:  # a bad \x, \N{...} or (?P<...
        raise re.error(f"malformed pattern: {exc}") from None
    texts = [found.exact] if found.exact is not None else [found.prefix, *found.inner, found.suffix]
    words: list[str] = []
    for text in texts:
        for word in _words_of_literal(text):
            if word not in words:
                words.append(word)
    return words


def _words_of_literal(text: str) -> list[str]:
    words: list[str] = []
    for run in _RUN.findall(_normalise(text)):
        for i, part in enumerate(_CJK_SPLIT.split(run)):
            if i % 2 == 1:
                words.append(part)
            elif len(part) >= 2:
                words.append(part if part.isascii() else _strip_accents(part))
    return words


@dataclass(frozen=True)
class _Literal:
    """What every match of a piece of pattern is known to hold.

    ``exact``: every match is exactly this text (None when unknown); ``prefix``/``suffix``: text every match starts
    or ends with; ``inner``: texts every match contains somewhere.
    """

    exact: str | None
    prefix: str = ""
    suffix: str = ""
    inner: tuple[str, ...] = ()

    @property
    def head(self) -> str:
        return self.exact if self.exact is not None else self.prefix

    @property
    def tail(self) -> str:
        return self.exact if self.exact is not None else self.suffix

    def then(self, other: _Literal) -> _Literal:
        if self.exact is not None and other.exact is not None:
            return _exact(self.exact + other.exact)
        joined = () if self.exact is not None or other.exact is not None else (self.suffix + other.prefix,)
        return _Literal(
            None,
            self.exact + other.prefix if self.exact is not None else self.prefix,
            self.suffix + other.exact if other.exact is not None else other.suffix,
            self.inner + joined + other.inner,
        )

    def repeated(self, least: int, most: int | None) -> _Literal:
        if least == 0:
            return _UNKNOWN
        if self.exact is not None and least == most and len(self.exact) * least <= _REPEAT_TEXT_MAX:
            return _exact(self.exact * least)
        return _Literal(None, self.head, self.tail, self.inner)


def _exact(text: str) -> _Literal:
    return _Literal(text, text, text)


def _either(branches: list[_Literal]) -> _Literal:
    if len(branches) == 1:
        return branches[0]
    exacts = {b.exact for b in branches}
    if len(exacts) == 1 and None not in exacts:
        return branches[0]
    heads = [b.head for b in branches]
    tails = [b.tail for b in branches]
    prefix = _common_prefix(heads)
    suffix = _common_prefix([t[::-1] for t in tails])[::-1]
    return _Literal(None, prefix, suffix)


def _common_prefix(texts: list[str]) -> str:
    first, last = min(texts), max(texts)
    size = 0
    while size < len(first) and first[size] == last[size]:
        size += 1
    return first[:size]


_EMPTY = _exact("")
_UNKNOWN = _Literal(None)
_REPEAT_TEXT_MAX = 256
_CLASS_ESCAPES = frozenset("dDwWsSC")  # \C: any byte (RE2)
_ZERO_WIDTH_ESCAPES = frozenset("bBAZz")
_CHAR_ESCAPES = {"a": "\a", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
_FLAG = re.compile(r"\(\?([aiLmsuxU]+)(?:-[imsxU]*)?[:)]")
_BRACES = re.compile(r"\{(\d*)(?:(,)(\d*))?\}")
_OCTAL = frozenset("01234567")
_DEPTH_MAX = 50  # deeper groups are skipped whole (counting for nothing), which keeps the recursion shallow


class _PatternParser:
    """A recursive-descent reader of a regex (RE2's or Python's syntax) that keeps only what ``_Literal`` tracks."""

    def __init__(self, pattern: str) -> None:
        self._p = pattern
        self._i = 0
        self._depth = 0
        self.verbose = any("x" in flags for flags in _FLAG.findall(pattern))

    def _peek(self, ahead: int = 0) -> str:
        i = self._i + ahead
        return self._p[i] if i < len(self._p) else ""

    def parse(self) -> _Literal:
        found = self._alternation()
        if self._i < len(self._p):
            raise re.error(f"unbalanced parenthesis at position {self._i}")
        return found

    def _alternation(self) -> _Literal:
        branches = [self._sequence()]
        while self._peek() == "|":
            self._i += 1
            branches.append(self._sequence())
        return _either(branches)

    def _sequence(self) -> _Literal:
        result = _EMPTY
        while self._peek() not in ("", "|", ")"):
            atom = self._atom()
            result = result.then(self._quantified(atom))
        return result

    def _quantified(self, atom: _Literal) -> _Literal:
        while True:
            c = self._peek()
            if c in ("*", "?"):
                self._i += 1
                atom = atom.repeated(0, None)
            elif c == "+":
                self._i += 1
                atom = atom.repeated(1, None)
            elif c == "{" and (bounds := self._braces()) is not None:
                atom = atom.repeated(*bounds)
            else:
                return atom
            if self._peek() in ("?", "+"):  # lazy or possessive: same text
                self._i += 1

    def _braces(self) -> tuple[int, int | None] | None:
        found = _BRACES.match(self._p, self._i)
        if found is None or found.group(0) == "{}":
            return None
        self._i = found.end()
        low, comma, high = found.groups()
        least = int(low) if low else 0
        if comma is None:
            return least, least
        return least, int(high) if high else None

    def _atom(self) -> _Literal:
        c = self._peek()
        self._i += 1
        if c == "\\":
            return self._escape()
        if c == "[":
            self._skip_class()
            return _UNKNOWN
        if c == "(":
            return self._group()
        if c == ".":
            return _UNKNOWN
        if c in ("^", "$"):
            return _EMPTY
        return _exact(c)

    def _escape(self) -> _Literal:
        c = self._peek()
        self._i += 1
        if not c:
            raise re.error("bad escape (end of pattern)")
        if c == "Q":  # RE2: literal text up to \E or the end; a quantifier after it repeats its last character only
            end = self._p.find("\\E", self._i)
            text = self._p[self._i : len(self._p) if end < 0 else end]
            self._i += len(text) + (0 if end < 0 else 2)
            return _exact(text[:-1]).then(self._quantified(_exact(text[-1:])))
        if c in ("p", "P"):  # RE2: a Unicode class, \pL or \p{Greek}
            self._i = self._p.index("}", self._i) + 1 if self._peek() == "{" else self._i + 1
            return _UNKNOWN
        if c == "x" and self._peek() == "{":  # RE2: \x{10FFFF}
            end = self._p.index("}", self._i)
            code = int(self._p[self._i + 1 : end], 16)
            self._i = end + 1
            return _exact(chr(code))
        if c in _CLASS_ESCAPES:
            return _UNKNOWN
        if c in _ZERO_WIDTH_ESCAPES:
            return _EMPTY
        if c in _CHAR_ESCAPES:
            return _exact(_CHAR_ESCAPES[c])
        if c in ("x", "u", "U"):
            size = {"x": 2, "u": 4, "U": 8}[c]
            code = int(self._p[self._i : self._i + size], 16)
            self._i += size
            return _exact(chr(code))
        if c == "N":
            end = self._p.index("}", self._i)
            name = self._p[self._i + 1 : end]
            self._i = end + 1
            return _exact(unicodedata.lookup(name))
        if c == "0" or (c in _OCTAL and self._peek() in _OCTAL and self._peek(1) in _OCTAL):
            digits = c
            while len(digits) < 3 and self._peek() in _OCTAL:
                digits += self._peek()
                self._i += 1
            return _exact(chr(int(digits, 8)))
        if c.isdigit():  # a back-reference: text unknown
            if self._peek().isdigit():
                self._i += 1
            return _UNKNOWN
        return _exact(c)

    def _skip_class(self) -> None:
        if self._peek() == "^":
            self._i += 1
        if self._peek() == "]":
            self._i += 1
        while self._peek() != "]":
            if not self._peek():
                raise re.error("unterminated character set")
            if self._p.startswith("[:", self._i) and (end := self._p.find(":]", self._i + 2)) >= 0:
                self._i = end + 2  # a POSIX class, [:alpha:]
            else:
                self._i += 2 if self._peek() == "\\" else 1
        self._i += 1

    def _group(self) -> _Literal:
        if self._peek() != "?":
            return self._group_body()
        self._i += 1
        c = self._peek()
        if c == ":" or c == ">":  # non-capturing, atomic
            self._i += 1
            return self._group_body()
        if (c == "P" and self._peek(1) == "<") or (c == "<" and self._peek(1) not in ("=", "!")):  # named group
            self._i = self._p.index(">", self._i) + 1
            return self._group_body()
        if c == "P" and self._peek(1) == "=":  # named back-reference
            self._i = self._p.index(")", self._i) + 1
            return _UNKNOWN
        if c == "#":
            self._i = self._p.index(")", self._i) + 1
            return _EMPTY
        if c in ("=", "!") or (c == "<" and self._peek(1) in ("=", "!")):  # lookaround: matches no text
            self._i += 1 if c != "<" else 2
            self._group_body()
            return _EMPTY
        if c == "(":  # conditional (?(id)yes|no): either branch, or nothing
            self._i = self._p.index(")", self._i) + 1
            self._group_body()
            return _UNKNOWN
        # Flags: (?aiLmsux) for the whole pattern, or (?flags-flags:...) around a group.
        end = min(i for i in (self._p.find(")", self._i), self._p.find(":", self._i)) if i >= 0)
        scoped = self._p[end] == ":"
        self._i = end + 1
        return self._group_body() if scoped else _EMPTY

    def _group_body(self) -> _Literal:
        if self._depth >= _DEPTH_MAX:
            self._skip_group()
            return _UNKNOWN
        self._depth += 1
        inside = self._alternation()
        self._depth -= 1
        if self._peek() != ")":
            raise re.error("missing ), unterminated subpattern")
        self._i += 1
        return inside

    def _skip_group(self) -> None:
        """Past the parenthesis closing the group whose body starts here, without reading the body."""
        depth = 1
        while depth:
            c = self._peek()
            self._i += 1
            if not c:
                raise re.error("missing ), unterminated subpattern")
            if c == "\\":
                if self._peek() == "Q":
                    end = self._p.find("\\E", self._i)
                    self._i = len(self._p) if end < 0 else end + 2
                else:
                    self._i += 1
            elif c == "[":
                self._skip_class()
            elif c in "()":
                depth += 1 if c == "(" else -1
