"""Wiki pages: ``/api/v1/knowledge-bases/{kb_id}/wiki`` (index by type, pages CRUD) and ``/api/v1/wiki/search``."""

from __future__ import annotations

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from mcpbridge.http.auth import CurrentPrincipal, knowledge_access, knowledge_write_access
from mcpbridge.http.deps import WikiDep
from mcpbridge.http.fields import KnowledgeBaseId, WikiSlug
from mcpbridge.http.openapi import problems
from mcpbridge.http.views import PageOut
from mcpbridge.knowledge.patterns import PATTERN_MAX_CHARS

router = APIRouter(prefix="/api/v1", tags=["wiki"])


class PageIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [
                {
                    "slug": "concept/rag",
                    "type": "concept",
                    "title": "Retrieval-augmented generation",
                    "content": "Answers built from retrieved passages.",
                    "links": ["entity/lancedb"],
                }
            ]
        },
    )

    slug: str = Field(min_length=1, max_length=200, examples=["concept/rag"])
    type: str = Field(min_length=1, max_length=32, examples=["concept"])
    title: str = Field(min_length=1, max_length=255)
    content: str = Field(default="")
    links: list[str] = Field(default_factory=list)


class PagePatch(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={"examples": [{"content": "Answers built from retrieved, cited passages."}]},
    )

    type: str | None = Field(default=None, min_length=1, max_length=32)
    title: str | None = Field(default=None, min_length=1, max_length=255)
    content: str | None = None
    links: list[str] | None = None


class WikiIndexPage(BaseModel):
    slug: str
    title: str


class WikiIndexGroup(BaseModel):
    type: str = Field(description="The pages' type (entity, concept, summary...).")
    total: int = Field(description="How many pages of this type the wiki holds.")
    pages: list[WikiIndexPage] = Field(description="At most `limit` of them, by title.")
    truncated: bool = Field(description="More pages of this type exist than are shown.")


class WikiIndexOut(BaseModel):
    knowledge_base_id: str
    intro: str = Field(description="The knowledge base's description.")
    groups: list[WikiIndexGroup]


@router.get("/knowledge-bases/{kb_id}/wiki", operation_id="getWikiIndex", summary="Wiki index")
def wiki_index(
    kb_id: KnowledgeBaseId,
    principal: CurrentPrincipal,
    wiki: WikiDep,
    limit: int = Query(default=50, ge=1, le=200, description="Pages shown per type, 1 to 200 (default 50)."),
) -> WikiIndexOut:
    """The pages of a knowledge base's wiki grouped by type (at most `limit` per type), with the knowledge base's
    description as introduction."""
    return WikiIndexOut.model_validate(wiki.index(knowledge_access(principal, "wiki"), kb_id, limit=limit))


@router.post(
    "/knowledge-bases/{kb_id}/wiki/pages",
    operation_id="createWikiPage",
    summary="Create a wiki page",
    status_code=201,
    responses=problems(409, 413),
)
def create_page(kb_id: KnowledgeBaseId, body: PageIn, principal: CurrentPrincipal, wiki: WikiDep) -> PageOut:
    """A new page (slug, type, title, Markdown content, links) in a knowledge base's wiki; the slug is unique in it
    (409 otherwise)."""
    access = knowledge_write_access(principal, "manage_knowledge")
    page = wiki.create(
        access, kb_id, slug=body.slug, type=body.type, title=body.title, content=body.content, links=body.links
    )
    return PageOut.of(page)


@router.get("/knowledge-bases/{kb_id}/wiki/pages/{slug:path}", operation_id="getWikiPage", summary="Get a wiki page")
def get_page(kb_id: KnowledgeBaseId, slug: WikiSlug, principal: CurrentPrincipal, wiki: WikiDep) -> PageOut:
    """One page of a knowledge base's wiki, by slug (which may contain `/`)."""
    return PageOut.of(wiki.get(knowledge_access(principal, "wiki"), kb_id, slug))


@router.put(
    "/knowledge-bases/{kb_id}/wiki/pages/{slug:path}",
    operation_id="updateWikiPage",
    summary="Update a wiki page",
    responses=problems(409, 413),
)
def update_page(
    kb_id: KnowledgeBaseId, slug: WikiSlug, body: PagePatch, principal: CurrentPrincipal, wiki: WikiDep
) -> PageOut:
    """Changes the fields sent (type, title, content, links)."""
    access = knowledge_write_access(principal, "manage_knowledge")
    page = wiki.update(access, kb_id, slug, type=body.type, title=body.title, content=body.content, links=body.links)
    return PageOut.of(page)


@router.delete(
    "/knowledge-bases/{kb_id}/wiki/pages/{slug:path}",
    operation_id="deleteWikiPage",
    summary="Delete a wiki page",
    status_code=204,
    responses=problems(409),
)
def delete_page(kb_id: KnowledgeBaseId, slug: WikiSlug, principal: CurrentPrincipal, wiki: WikiDep) -> Response:
    """Deletes one page of a knowledge base's wiki."""
    wiki.delete(knowledge_write_access(principal, "manage_knowledge"), kb_id, slug)
    return Response(status_code=204)


class WikiSearchIn(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"query": "retriev(al|e)", "limit": 10}]})

    query: str = Field(min_length=1, max_length=PATTERN_MAX_CHARS)
    regex: bool | None = Field(
        default=None,
        description="Unset: an RE2 regex when valid, else literal (a lookaround or backreference is refused by name).",
    )
    knowledge_base_ids: list[str] | None = None
    limit: int = Field(default=10, ge=1, le=50)


class WikiLine(BaseModel):
    line: int
    text: str


class WikiMatchOut(BaseModel):
    knowledge_base_id: str
    slug: str
    type: str
    title: str
    lines: list[WikiLine]


TRUNCATED_HEADER = "MCPBridge-Search-Truncated"


@router.post(
    "/wiki/search",
    operation_id="searchWiki",
    summary="Search wiki pages",
    responses={
        **problems(404),
        200: {
            "headers": {
                TRUNCATED_HEADER: {
                    "description": "Present when one search's scan budget ran out before every page was read: the "
                    "list may miss matches. Its value says where the search stopped.",
                    "schema": {"type": "string"},
                }
            }
        },
    },
)
def wiki_search(
    body: WikiSearchIn, principal: CurrentPrincipal, wiki: WikiDep, response: Response
) -> list[WikiMatchOut]:
    """Pages whose title or lines match a case-insensitive RE2 regular expression (text that is not a valid regex is
    matched literally; `regex` forces either). The `MCPBridge-Search-Truncated` header says when a scan budget ran
    out first."""
    outcome = wiki.search(
        knowledge_access(principal, "wiki"),
        body.query,
        regex=body.regex,
        knowledge_base_ids=body.knowledge_base_ids,
        limit=body.limit,
    )
    if outcome.truncated:
        # The body stays a list (its documented shape); the header carries what a list cannot, in printable ASCII
        # (the notice names a page and a knowledge base).
        response.headers[TRUNCATED_HEADER] = "".join(c if " " <= c <= "~" else "?" for c in " ".join(outcome.notices))
    return [
        WikiMatchOut(
            knowledge_base_id=m.page.knowledge_base_id,
            slug=m.page.slug,
            type=m.page.type,
            title=m.page.title,
            lines=[WikiLine(line=n, text=t) for n, t in m.lines],
        )
        for m in outcome.matches
    ]
