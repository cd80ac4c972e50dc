"""Knowledge bases (``/api/v1/knowledge-bases``) and the retrieval calls the MCP tools also make
(``/api/v1/knowledge/search``, ``/grep``, ``/ask``), and the sessions ``ask`` keeps (``/api/v1/knowledge/sessions``)."""

# Over 400 lines: the retrieval calls the MCP tools also make, and what they keep (sessions), side by side.

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from mcpbridge.domain.identity import Principal
from mcpbridge.domain.names import fold
from mcpbridge.errors import Forbidden
from mcpbridge.http.auth import CurrentPrincipal, knowledge_access, knowledge_write_access
from mcpbridge.http.deps import (
    AnswererDep,
    AskSessionsDep,
    FileToolsDep,
    KnowledgeBasesDep,
    KnowledgeSearchDep,
    SemanticDep,
)
from mcpbridge.http.fields import KnowledgeBaseId
from mcpbridge.http.openapi import problems
from mcpbridge.http.paging import cursor_query, limit_query, next_cursor_field, page_of
from mcpbridge.http.views import (
    LANGUAGE_HELP,
    AskOut,
    ChunkOut,
    DocumentOut,
    ImageOut,
    KnowledgeBaseOut,
    ReferenceOut,
    Timestamp,
)
from mcpbridge.knowledge.image_reads import href_of
from mcpbridge.knowledge.patterns import PATTERN_MAX_CHARS

if TYPE_CHECKING:
    from mcpbridge.knowledge.answers import Answer
    from mcpbridge.knowledge.ask_sessions import AskSession
    from mcpbridge.knowledge.images import ImageRef

router = APIRouter(prefix="/api/v1", tags=["knowledge"])


class KnowledgeBaseIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [
                {"name": "Engineering handbook", "description": "How we build and run things", "language": "auto"}
            ]
        },
    )

    name: str = Field(min_length=1, max_length=255)
    description: str = Field(default="", max_length=2000)
    language: str = Field(default="auto", max_length=40, description=LANGUAGE_HELP)


class KnowledgeBasePatch(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={"examples": [{"description": "How we build, test and run things"}]},
    )

    name: str | None = Field(default=None, min_length=1, max_length=255)
    description: str | None = Field(default=None, max_length=2000)
    language: str | None = Field(default=None, max_length=40, description=LANGUAGE_HELP)


class KnowledgeBaseList(BaseModel):
    items: list[KnowledgeBaseOut]
    next_cursor: str | None = next_cursor_field()


@router.get("/knowledge-bases", operation_id="listKnowledgeBases", summary="List knowledge bases")
def list_knowledge_bases(
    principal: CurrentPrincipal,
    kb_service: KnowledgeBasesDep,
    semantic: SemanticDep,
    limit: int = limit_query(),
    cursor: str | None = cursor_query(),
) -> KnowledgeBaseList:
    """The knowledge bases the key may read, by name (case-insensitive), with their capabilities and counts."""
    bases, next_cursor = page_of(
        kb_service.list_bases(knowledge_access(principal, "read")),
        key=lambda kb: (fold(kb.name), kb.id),
        limit=limit,
        cursor=cursor,
        listing="knowledge-bases",
    )
    return KnowledgeBaseList(
        items=[KnowledgeBaseOut.of(kb, semantic=semantic) for kb in bases], next_cursor=next_cursor
    )


@router.post(
    "/knowledge-bases",
    operation_id="createKnowledgeBase",
    summary="Create a knowledge base",
    status_code=201,
    responses=problems(409),
)
def create_knowledge_base(
    body: KnowledgeBaseIn, principal: CurrentPrincipal, bases: KnowledgeBasesDep, semantic: SemanticDep
) -> KnowledgeBaseOut:
    """A new, empty knowledge base. Names are unique in the workspace, case-insensitively (409 otherwise). Needs an
    admin key with `manage_knowledge`, not limited to some knowledge bases."""
    access = knowledge_write_access(principal, "manage_knowledge")
    if access.knowledge_base_ids is not None:
        raise Forbidden("a key limited to some knowledge bases cannot create one", code="scope_exceeded")
    kb = bases.create(access, name=body.name, description=body.description, language=body.language)
    return KnowledgeBaseOut.of(kb, semantic=semantic)


@router.get("/knowledge-bases/{kb_id}", operation_id="getKnowledgeBase", summary="Get a knowledge base")
def get_knowledge_base(
    kb_id: KnowledgeBaseId, principal: CurrentPrincipal, bases: KnowledgeBasesDep, semantic: SemanticDep
) -> KnowledgeBaseOut:
    """One knowledge base, with its capabilities, counts and any re-analysis in progress."""
    return KnowledgeBaseOut.of(
        bases.get(knowledge_access(principal, "read"), kb_id),
        semantic=semantic,
    )


@router.put(
    "/knowledge-bases/{kb_id}",
    operation_id="updateKnowledgeBase",
    summary="Update a knowledge base",
    responses=problems(409),
)
def update_knowledge_base(
    kb_id: KnowledgeBaseId,
    body: KnowledgeBasePatch,
    principal: CurrentPrincipal,
    bases: KnowledgeBasesDep,
    semantic: SemanticDep,
) -> KnowledgeBaseOut:
    """Changes the fields sent (name, description, language). A new language re-analyses the keyword index in the
    background; searches keep working meanwhile."""
    access = knowledge_write_access(principal, "manage_knowledge")
    kb = bases.update(access, kb_id, name=body.name, description=body.description, language=body.language)
    return KnowledgeBaseOut.of(kb, semantic=semantic)


@router.delete(
    "/knowledge-bases/{kb_id}",
    operation_id="deleteKnowledgeBase",
    summary="Delete a knowledge base",
    status_code=204,
    responses=problems(409),
)
def delete_knowledge_base(kb_id: KnowledgeBaseId, principal: CurrentPrincipal, bases: KnowledgeBasesDep) -> Response:
    """The knowledge base goes at once; its documents, wiki pages and index are removed in the background."""
    bases.delete(knowledge_write_access(principal, "manage_knowledge"), kb_id)
    return Response(status_code=204)


class LanguagesOut(BaseModel):
    languages: list[str] = Field(description="Every value a knowledge base's language may take, in order.")
    default: str = Field(description="A new knowledge base's language when none is given.")


@router.get("/knowledge/languages", operation_id="getKnowledgeLanguages", summary="Keyword search languages")
def list_languages(principal: CurrentPrincipal) -> LanguagesOut:
    """The languages a knowledge base's keyword search may analyse its text in: `auto`, `none`, then the Snowball
    languages (the list the create and update routes check against)."""
    from mcpbridge.domain.text_tokens import DEFAULT_LANGUAGE, LANGUAGES  # the stemmers load when needed

    return LanguagesOut(languages=list(LANGUAGES), default=DEFAULT_LANGUAGE)


# ---------------------------------------------------------------------------------------------------- retrieval


class SearchIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"query": "how are refresh tokens rotated?", "mode": "hybrid", "limit": 5}]},
    )

    query: str = Field(min_length=1, max_length=2000)
    mode: Literal["hybrid", "semantic", "keyword"] = "hybrid"
    limit: int = Field(default=10, ge=1, le=30)
    knowledge_base_ids: list[str] | None = None
    knowledge_ids: list[str] | None = None
    include_drafts: StrictBool = Field(
        default=False,
        description="Also search draft documents (their results say `document_status: draft`); "
        "published documents only by default.",
    )


DocumentStatusOut = Field(description="published, or draft (found only with `include_drafts`).")


class RestImageOut(ImageOut):
    href: str | None = Field(
        default=None,
        description="Where this API key fetches the image (relative to the API's base URL; the key's scope checked "
        "at each fetch): the image itself, or a redirect to a short-lived presigned URL.",
    )

    @classmethod
    def of(cls, image: ImageOut | ImageRef) -> RestImageOut:
        return cls(
            url=image.url,
            content_type=image.content_type,
            caption=image.caption,
            ocr_text=image.ocr_text,
            href=href_of(image.url),
        )


class RestReferenceOut(ReferenceOut):
    images: list[RestImageOut] = Field(default_factory=list)  # type: ignore[assignment]  # REST images have an href


class RestAskOut(AskOut):
    references: list[RestReferenceOut]  # type: ignore[assignment]  # their images have an href

    @classmethod
    def of_answer(cls, answer: Answer) -> RestAskOut:
        out = AskOut.of(answer)
        references = [
            RestReferenceOut(**r.model_dump(exclude={"images"}), images=[RestImageOut.of(image) for image in r.images])
            for r in out.references
        ]
        return cls(**out.model_dump(exclude={"references"}), references=references)


class SearchResultOut(ChunkOut):
    score: float
    document_status: Literal["published", "draft"] = DocumentStatusOut
    images: list[RestImageOut] = Field(default=[], description="The image an image chunk was read from.")


class SearchOut(BaseModel):
    mode: str
    notices: list[str]
    results: list[SearchResultOut]


@router.post(
    "/knowledge/search", operation_id="searchKnowledge", summary="Search knowledge bases", responses=problems(404)
)
def search(body: SearchIn, principal: CurrentPrincipal, knowledge: KnowledgeSearchDep, request: Request) -> SearchOut:
    """Hybrid (keywords and meaning, the default), semantic or keyword search over the knowledge bases in scope,
    optionally limited to some knowledge bases and documents (applied before recall). Each hit gives the document,
    the chunk, its lines and the offset to read from."""
    service = knowledge
    access = knowledge_access(principal, "read")
    scope = service.scope(
        access,
        body.knowledge_base_ids,
        body.knowledge_ids,
        include_drafts=body.include_drafts,
    )
    outcome = service.search(scope, body.query, mode=body.mode, limit=body.limit)
    images = request.app.state.container.document_images
    return SearchOut(
        mode=outcome.mode,
        notices=outcome.notices,
        results=[
            SearchResultOut(
                **ChunkOut.of(h.chunk).model_dump(),
                score=round(h.score, 6),
                document_status="draft" if h.chunk.id in outcome.drafts else "published",
                images=[RestImageOut.of(ref) for ref in images.images_of(access, h.chunk)],
            )
            for h in outcome.hits
        ],
    )


class GrepIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"pattern": "refresh\\s+tokens?", "limit": 10}]}
    )

    pattern: str = Field(min_length=1, max_length=PATTERN_MAX_CHARS, description="An RE2 regular expression.")
    limit: int = Field(default=10, ge=1, le=30)
    knowledge_base_ids: list[str] | None = None
    knowledge_ids: list[str] | None = None
    include_drafts: StrictBool = Field(
        default=False,
        description="Also search draft documents (their results say `document_status: draft`); "
        "published documents only by default.",
    )


class GrepLine(BaseModel):
    line: int
    text: str


class GrepMatchOut(ChunkOut):
    lines: list[GrepLine]
    document_status: Literal["published", "draft"] = DocumentStatusOut


class GrepOut(BaseModel):
    matches: list[GrepMatchOut]
    truncated: bool = Field(description="The scan budget ran out before every candidate was checked (see notices).")
    notices: list[str]


@router.post("/knowledge/grep", operation_id="grepKnowledge", summary="Grep knowledge bases", responses=problems(404))
def grep(body: GrepIn, principal: CurrentPrincipal, knowledge: KnowledgeSearchDep) -> GrepOut:
    """Chunks matching a case-insensitive RE2 regular expression, with the matching lines. The pattern needs one
    literal word (used to find candidates); `truncated` says when the scan budget ran out first."""
    service = knowledge
    access = knowledge_access(principal, "read")
    scope = service.scope(
        access,
        body.knowledge_base_ids,
        body.knowledge_ids,
        include_drafts=body.include_drafts,
    )
    outcome = service.grep(scope, body.pattern, limit=body.limit)
    return GrepOut(
        matches=[
            GrepMatchOut(
                **ChunkOut.of(m.chunk).model_dump(),
                lines=[GrepLine(line=n, text=t) for n, t in m.lines],
                document_status="draft" if m.chunk.id in outcome.drafts else "published",
            )
            for m in outcome.matches
        ],
        truncated=outcome.truncated,
        notices=outcome.notices,
    )


class AskIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"question": "How do I deploy to staging?"}]}
    )

    question: str = Field(min_length=1, max_length=4000)
    session_id: str | None = None
    knowledge_base_ids: list[str] | None = None


@router.post("/knowledge/ask", operation_id="askKnowledge", summary="Ask a question", responses=problems(404, 502))
def ask(body: AskIn, principal: CurrentPrincipal, answerer: AnswererDep) -> RestAskOut:
    """An answer from the knowledge bases with numbered references: a language model when one is configured,
    otherwise an extractive answer that says so. Pass `session_id` from an earlier answer to continue the
    conversation. An image a reference was read from has an `href` this key fetches it from."""
    answer = answerer.ask(
        knowledge_access(principal, "ask"),
        body.question,
        owner=f"user:{principal.user_id}",
        credential=f"key:{principal.api_key_id}",
        session_id=body.session_id,
        knowledge_base_ids=body.knowledge_base_ids,
    )
    return RestAskOut.of_answer(answer)


# ---------------------------------------------------------------------------------------------------- ask sessions

SessionId = Annotated[str, Path(description="The session's id (`ses_...`), the `session_id` an answer gives.")]


class TurnOut(BaseModel):
    question: str
    answer: str


class AskSessionOut(BaseModel):
    """An ``ask`` session: the conversation one caller started through one API key or endpoint."""

    id: str
    title: str = Field(description="The session's first question, shortened.")
    turn_count: int = Field(description="How many turns it keeps (the last ten).")
    created_at: Timestamp | None
    updated_at: Timestamp
    expires_at: Timestamp = Field(description="When it goes (a week after its last turn).")

    @classmethod
    def of(cls, session: AskSession) -> AskSessionOut:
        return cls(
            id=session.id,
            title=session.title,
            turn_count=session.turn_count,
            created_at=session.created_at,
            updated_at=session.updated_at,
            expires_at=session.expires_at,
        )


class AskSessionDetail(AskSessionOut):
    turns: list[TurnOut] = Field(description="Oldest first.")


class AskSessionList(BaseModel):
    items: list[AskSessionOut]
    next_cursor: str | None = next_cursor_field()


def _session_caller(principal: Principal) -> dict[str, Any]:
    """Whose sessions a REST caller reaches: those it could continue (its user, through this API key)."""
    return {"owner": f"user:{principal.user_id}", "credential": f"key:{principal.api_key_id}"}


@router.get("/knowledge/sessions", operation_id="listAskSessions", summary="List ask sessions")
def list_sessions(
    principal: CurrentPrincipal,
    sessions: AskSessionsDep,
    limit: int = limit_query(),
    cursor: str | None = cursor_query(),
) -> AskSessionList:
    """The `ask` sessions this API key started (the ones it may continue), most recently used first."""
    found = sessions.list(knowledge_access(principal, "ask"), **_session_caller(principal))
    items, next_cursor = page_of(
        found, key=lambda s: (s.updated_at, s.id), limit=limit, cursor=cursor, listing="sessions", descending=True
    )
    return AskSessionList(items=[AskSessionOut.of(s) for s in items], next_cursor=next_cursor)


@router.get(
    "/knowledge/sessions/{session_id}",
    operation_id="getAskSession",
    summary="Read an ask session",
    responses=problems(400, 404),
)
def get_session(session_id: SessionId, principal: CurrentPrincipal, sessions: AskSessionsDep) -> AskSessionDetail:
    """One session with its turns (questions and answers, oldest first); 404 for a session this key did not
    start."""
    session = sessions.get(knowledge_access(principal, "ask"), session_id, **_session_caller(principal))
    return AskSessionDetail(
        **AskSessionOut.of(session).model_dump(),
        turns=[TurnOut(question=t.question, answer=t.answer) for t in session.turns],
    )


@router.delete(
    "/knowledge/sessions/{session_id}",
    operation_id="deleteAskSession",
    summary="Delete an ask session",
    status_code=204,
    responses=problems(400, 404),
)
def delete_session(session_id: SessionId, principal: CurrentPrincipal, sessions: AskSessionsDep) -> Response:
    """Delete a session this key started; continuing it afterwards is refused (404 `session_not_found`)."""
    sessions.delete(knowledge_access(principal, "ask"), session_id, **_session_caller(principal))
    return Response(status_code=204)


# ---------------------------------------------------------------------------------------------------- by file name


class NamedDocumentOut(DocumentOut):
    knowledge_base_name: str
    match: Literal["exact", "prefix", "contains"]


class NamedDocumentList(BaseModel):
    items: list[NamedDocumentOut]
    next_cursor: str | None = next_cursor_field()


@router.get(
    "/knowledge/documents",
    operation_id="findDocumentsByName",
    summary="Find documents by file name",
    responses=problems(400, 404),
)
def find_documents(
    principal: CurrentPrincipal,
    file_tools: FileToolsDep,
    name: str = Query(min_length=1, max_length=255, description="A file name or part of one (case-insensitive)."),
    knowledge_base_ids: Annotated[
        list[str] | None,
        Query(description="Knowledge bases to look in, by id or name (repeat); default: every one in reach."),
    ] = None,
    limit: int = limit_query(),
    cursor: str | None = cursor_query(),
) -> NamedDocumentList:
    """Published documents whose file name (or title) holds `name`, across the knowledge bases in reach: exact names
    first, then names that start with it, then names that contain it."""
    found = file_tools.find_by_name(knowledge_access(principal, "read"), name, knowledge_base_ids=knowledge_base_ids)
    listing = f"knowledge/documents?name={name.strip().casefold()}&kb={','.join(knowledge_base_ids or [])}"
    page, next_cursor = page_of(found, key=lambda n: n.order, limit=limit, cursor=cursor, listing=listing)
    return NamedDocumentList(
        items=[
            NamedDocumentOut(
                **DocumentOut.of(n.document).model_dump(),
                knowledge_base_name=n.knowledge_base_name,
                match=("exact", "prefix", "contains")[n.rank],
            )
            for n in page
        ],
        next_cursor=next_cursor,
    )
