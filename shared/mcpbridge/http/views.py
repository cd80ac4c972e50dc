"""The views both edges render: REST responses and MCP tool results show knowledge bases, chunks, documents, answers
and wiki pages in the same shapes, so a client reading one can read the other."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from mcpbridge.domain.knowledge import Chunk, Document, KnowledgeBase
from mcpbridge.knowledge.answers import Answer
from mcpbridge.knowledge.wiki import WikiPage
from mcpbridge.observability import masked_url

Capability = Literal["keyword", "semantic", "wiki"]

Timestamp = Annotated[str, Field(json_schema_extra={"format": "date-time", "examples": ["2026-01-31T09:30:00Z"]})]
"""Every time in a REST body or a tool result: RFC 3339 in UTC at second precision (``2026-01-31T09:30:00Z``)."""


LANGUAGE_HELP = (
    "How keyword search analyses the text: auto (the default: English stems and stop words for words outside "
    "CJK, bigrams for CJK), none (words as written) or a Snowball language (french, german, spanish, russian...). "
    "Changing it re-analyses the index in the background."
)


class ReanalysisOut(BaseModel):
    language: str
    done: int = Field(description="Chunks re-analysed so far.")
    total: int = Field(description="Chunks to re-analyse (0 until the job has started).")


class KnowledgeBaseOut(BaseModel):
    id: str
    name: str
    description: str
    language: str = Field(description=LANGUAGE_HELP)
    reanalysis: ReanalysisOut | None = Field(
        description="The keyword index being re-analysed in the background (searches keep working), or null."
    )
    capabilities: list[Capability]
    document_count: int
    wiki_page_count: int
    created_at: Timestamp
    updated_at: Timestamp

    @classmethod
    def of(cls, kb: KnowledgeBase, *, semantic: bool) -> KnowledgeBaseOut:
        return cls(
            id=kb.id,
            name=kb.name,
            description=kb.description,
            language=kb.language,
            reanalysis=None if kb.reanalysis is None else ReanalysisOut(**vars(kb.reanalysis)),
            capabilities=capabilities(kb, semantic=semantic),
            document_count=kb.document_count,
            wiki_page_count=kb.wiki_page_count,
            created_at=kb.created_at,
            updated_at=kb.updated_at,
        )


def capabilities(kb: KnowledgeBase, *, semantic: bool) -> list[Capability]:
    """What a knowledge base can do: keyword search always, semantic with an embedder, wiki once it has a page."""
    found: list[Capability] = ["keyword"]
    if semantic:
        found.append("semantic")
    if kb.wiki_page_count > 0:
        found.append("wiki")
    return found


class ChunkOut(BaseModel):
    knowledge_base_id: str
    document_id: str
    document_title: str
    chunk_id: str
    chunk_type: str
    offset: int = Field(description="The chunk's position in reading order: read_document(offset=...) opens here.")
    start_line: int
    end_line: int
    heading_path: list[str]
    text: str

    @classmethod
    def of(cls, chunk: Chunk) -> ChunkOut:
        return cls(
            knowledge_base_id=chunk.knowledge_base_id,
            document_id=chunk.document_id,
            document_title=chunk.document_title,
            chunk_id=chunk.id,
            chunk_type=chunk.type,
            offset=chunk.seq,
            start_line=chunk.start_line,
            end_line=chunk.end_line,
            heading_path=list(chunk.heading_path),
            text=chunk.text,
        )


class ImageOut(BaseModel):
    """An image a reference was read from. ``url``: ``resource://images/...`` as stored; in an MCP tool result, a
    time-limited link (``/r/<token>``) when the endpoint may reach the image."""

    url: str
    content_type: str
    caption: str
    ocr_text: str


class ReferenceOut(BaseModel):
    n: int
    knowledge_base_id: str
    document_id: str
    document_title: str
    chunk_id: str
    start_line: int
    end_line: int
    excerpt: str
    images: list[ImageOut] = []


class AskOut(BaseModel):
    answer: str
    mode: Literal["agent", "llm", "extractive"] = Field(
        description="agent: the endpoint's default agent answered; llm: the built-in answer through the language "
        "model; extractive: the best passages, cited (no model, or the model failed)."
    )
    session_id: str
    references: list[ReferenceOut]
    notices: list[str]
    agent_id: str | None = Field(default=None, description="The agent that answered (mode agent), else null.")

    @classmethod
    def of(cls, answer: Answer) -> AskOut:
        return cls(
            answer=answer.answer,
            mode=answer.mode,
            session_id=answer.session_id,
            references=[
                ReferenceOut(
                    **{name: value for name, value in vars(r).items() if name != "images"},
                    images=[
                        ImageOut(url=i.url, content_type=i.content_type, caption=i.caption, ocr_text=i.ocr_text)
                        for i in r.images
                    ],
                )
                for r in answer.references
            ],
            notices=answer.notices,
            agent_id=answer.agent_id,
        )


class DocumentOut(BaseModel):
    """A document. ``url`` (a URL import's source) is shown with its query values masked (``?api_key=***``)."""

    id: str
    knowledge_base_id: str
    title: str
    source: str
    url: str | None
    filename: str | None
    content_type: str
    size_bytes: int
    version: int
    parse_status: str
    parse_error: str | None
    chunk_count: int
    line_count: int
    created_at: Timestamp
    updated_at: Timestamp
    indexed_at: Timestamp | None
    notices: list[str] = Field(
        default=[], description="What the last indexing could not do (images left without text recognition...)."
    )
    status: Literal["published", "draft"] = Field(
        default="published", description="published: searchable; draft: kept out of search and endpoints."
    )
    tags: list[str] = Field(default_factory=list)
    folder: str = Field(default="", description="A path like docs/spec; empty: the root.")
    content: str | None = Field(default=None, description="The indexed text, with include_content=true.")

    @classmethod
    def of(cls, document: Document, content: str | None = None) -> DocumentOut:
        fields = {name: getattr(document, name) for name in cls.model_fields if name != "content"}
        fields["notices"] = list(document.notices)
        fields["tags"] = list(document.tags)
        if document.url is not None:
            fields["url"] = masked_url(document.url)
        return cls(**fields, content=content)


class PageOut(BaseModel):
    knowledge_base_id: str
    slug: str
    type: str
    title: str
    content: str
    links: list[str]
    created_at: Timestamp
    updated_at: Timestamp

    @classmethod
    def of(cls, page: WikiPage) -> PageOut:
        return cls(**vars(page))
