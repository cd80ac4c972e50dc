"""Knowledge content as the search index and the tools see it: chunks with reading order and source lines."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

ChunkType = Literal["text", "summary", "image_ocr", "image_caption"]
CHUNK_TYPES: tuple[ChunkType, ...] = ("text", "summary", "image_ocr", "image_caption")
DocumentFormat = Literal["markdown", "text"]


@dataclass(frozen=True)
class ChunkDraft:
    """A piece of a document before it is stored: where it sits in the source and what it says.

    Lines are 1-based and inclusive; offsets are 0-based character offsets into the document's stored text, end
    exclusive. ``seq`` is the reading order within the document, from 0.
    """

    seq: int
    text: str
    start_line: int
    end_line: int
    start_offset: int
    end_offset: int
    heading_path: tuple[str, ...] = ()
    type: ChunkType = "text"


@dataclass(frozen=True)
class Chunk:
    """A stored chunk: a draft placed in a document of a knowledge base."""

    id: str
    knowledge_base_id: str
    document_id: str
    document_title: str
    seq: int
    text: str
    start_line: int
    end_line: int
    start_offset: int
    end_offset: int
    heading_path: tuple[str, ...] = ()
    type: ChunkType = "text"

    @staticmethod
    def make_id(document_id: str, seq: int) -> str:
        return f"{document_id}#{seq:05d}"


@dataclass(frozen=True)
class Hit:
    """A chunk found by a search, with the score of the method that found it (higher is better)."""

    chunk: Chunk
    score: float
    relevance: float | None = None
    """How well the chunk answers the query, from 0 to 1, comparable across methods: RELEVANCE_FLOOR and above is
    an answer, below it only the closest thing found. Keyword: the share of the query's weight (each term by its
    inverse document frequency, terms no chunk holds included) that the chunk holds. Semantic: how far its cosine
    stands above the cosines of the other chunks searched. None: not known (counts as relevant)."""

    @property
    def relevant(self) -> bool:
        return self.relevance is None or self.relevance >= RELEVANCE_FLOOR


RELEVANCE_FLOOR = 0.5


@dataclass(frozen=True)
class ParsedDocument:
    """A source (Markdown, text, HTML, PDF) turned into the text mcpbridge stores and chunks.

    ``text`` is the canonical content: line numbers and offsets of chunks refer to it, and ``read_document`` opens
    it at a line. ``title`` is a title found in the source (an HTML <title>, a first Markdown heading), if any.
    """

    text: str
    format: DocumentFormat
    title: str | None = None
    warnings: tuple[str, ...] = field(default_factory=tuple)
    images: tuple[ParsedImage, ...] = ()
    """Images found in the source (the image itself, or embedded in a PDF page or an HTML data: URI), in order."""


@dataclass(frozen=True)
class ParsedImage:
    """An image of a document as found in its source: PNG, JPEG, GIF or WebP bytes."""

    data: bytes
    content_type: str
    page: int | None = None
    """The PDF page it is on (from 1); None elsewhere."""
    alt: str = ""
    """Its alternative text, where the source gives one (HTML)."""


@dataclass(frozen=True)
class KnowledgeAccess:
    """Which knowledge bases a caller may reach: one workspace, and optionally only some of its KBs."""

    workspace_id: str
    knowledge_base_ids: frozenset[str] | None = None
    """None: every knowledge base of the workspace."""

    def allows(self, kb_id: str) -> bool:
        return self.knowledge_base_ids is None or kb_id in self.knowledge_base_ids


@dataclass(frozen=True)
class Reanalysis:
    """A re-analysis of a knowledge base's keyword index under way (after its language or the analyser changed)."""

    language: str
    done: int
    """Chunks analysed so far (of ``total``; both 0 until the job has started)."""
    total: int


@dataclass(frozen=True)
class KnowledgeBase:
    id: str
    workspace_id: str
    name: str
    description: str
    document_count: int
    wiki_page_count: int
    created_at: str
    updated_at: str
    language: str = "auto"
    """How keyword search analyses the text (``text_tokens.LANGUAGES``): stems and stop words of that language."""
    reanalysis: Reanalysis | None = None
    shared_permission: Literal["read", "write"] | None = None
    """For a knowledge base another workspace (``workspace_id``) shares with the caller's: what the share allows."""


@dataclass(frozen=True)
class IndexAnalysis:
    """What a knowledge base's keyword index holds, as the search index reports it."""

    language: str | None
    """The language its terms are analysed for; None when they never were (an index of an older release, searched
    by its words as written until it is re-analysed)."""
    up_to_date: bool
    """Analysed by this release's analyser for ``language``."""
    reanalysing: str | None = None
    done: int = 0
    total: int = 0

    def needs_reanalysis(self, language: str) -> bool:
        """Whether the index must be re-analysed to serve ``language`` (and no re-analysis for it is under way)."""
        return self.reanalysing != language and not (self.language == language and self.up_to_date)


ParseStatus = Literal["pending", "processing", "completed", "failed", "draft"]
"""``draft``: a draft document, kept out of the index until it is published."""


@dataclass(frozen=True)
class Document:
    id: str
    workspace_id: str
    knowledge_base_id: str
    title: str
    source: str
    """``text``, ``url`` or ``file``."""
    url: str | None
    filename: str | None
    content_type: str
    size_bytes: int
    version: int
    parse_status: ParseStatus
    parse_error: str | None
    chunk_count: int
    line_count: int
    created_at: str
    updated_at: str
    indexed_at: str | None
    indexed_version: int | None = None
    """The version whose chunks are in the index (it may lag ``version`` while a change is being indexed)."""
    notices: tuple[str, ...] = ()
    """What its last indexing could not do although it completed (images left without text recognition...)."""
    status: str = "published"
    """``published`` or ``draft`` (``domain.document_filing``)."""
    tags: tuple[str, ...] = ()
    folder: str = ""
    removed_chunks: tuple[str, ...] = ()
    """SHA-256 digests of the chunks deleted one by one since its content last changed: indexing it again leaves
    them out (and their text out of the stored text), as the deletion left them."""
