"""A published endpoint's prompts (answer with citations, summarise a document, compare two documents) and the
completion of their arguments and of the resource templates' (:mod:`mcpbridge.http.mcp.resources`).

Completion offers, within the request's scope, at most :data:`MAX_VALUES` values: knowledge-base ids (for
``kb_id``) or names (for a prompt's ``knowledge_base``) whose id starts with, or whose name contains, what was typed
(case-insensitively); document ids whose id starts with, or whose title contains, it (within the knowledge base
already chosen, if any). Matching is one substring test per candidate on a value of at most
:data:`MAX_TYPED_CHARS` characters: linear in the candidates.
"""

from __future__ import annotations

from typing import Any, Final

from mcpbridge.bootstrap import Container
from mcpbridge.domain.knowledge import Document, KnowledgeAccess
from mcpbridge.domain.names import fold
from mcpbridge.errors import MCPBridgeError
from mcpbridge.http.mcp.jsonrpc import INVALID_PARAMS, JsonRpcError
from mcpbridge.http.mcp.resources import (
    DOCUMENT_TEMPLATE,
    LIST_TEMPLATE,
    Resources,
    document_uri,
    window,
)

MAX_VALUES: Final = 100
MAX_TYPED_CHARS: Final = 200
SEARCH_HITS: Final = 8

_KB_ARGUMENT = {
    "name": "knowledge_base",
    "description": "A knowledge base's name or id (default: every one in scope).",
    "required": False,
}
PROMPTS: Final[dict[str, dict[str, Any]]] = {
    "answer_with_citations": {
        "name": "answer_with_citations",
        "title": "Answer with citations",
        "description": "Answer a question from a knowledge base's best passages, citing each claim by document and "
        "lines.",
        "arguments": [
            {"name": "question", "description": "The question to answer.", "required": True},
            _KB_ARGUMENT,
        ],
    },
    "summarise_document": {
        "name": "summarise_document",
        "title": "Summarise a document",
        "description": "Summarise one document, citing the lines each point comes from.",
        "arguments": [{"name": "document", "description": "The document's id.", "required": True}],
    },
    "compare_documents": {
        "name": "compare_documents",
        "title": "Compare two documents",
        "description": "Compare two documents: what they agree on, where they differ, what only one covers.",
        "arguments": [
            {"name": "first", "description": "The first document's id.", "required": True},
            {"name": "second", "description": "The second document's id.", "required": True},
        ],
    },
}
NEEDS: Final = {
    "answer_with_citations": "search_knowledge",
    "summarise_document": "read_document",
    "compare_documents": "read_document",
}
"""The tool a prompt needs on the endpoint: it reads what that tool reads."""


class Prompts:
    """The prompts and completions of one request's scope."""

    def __init__(self, container: Container, access: KnowledgeAccess, tools: frozenset[str]) -> None:
        self._container = container
        self._access = access
        self._names = tuple(name for name, tool in NEEDS.items() if tool in tools)
        self._resources = Resources(container, access)

    @property
    def offered(self) -> tuple[str, ...]:
        return self._names

    def listing(self) -> dict[str, Any]:
        return {"prompts": [PROMPTS[name] for name in self._names]}

    def get(self, name: str, arguments: dict[str, str]) -> dict[str, Any]:
        if name not in self._names:
            raise JsonRpcError(INVALID_PARAMS, f"Unknown prompt: {name}")
        missing = [a["name"] for a in PROMPTS[name]["arguments"] if a["required"] and not arguments.get(a["name"])]
        if missing:
            raise JsonRpcError(INVALID_PARAMS, f"Missing required arguments: {', '.join(missing)}")
        if name == "answer_with_citations":
            return self._answer(arguments["question"], arguments.get("knowledge_base"))
        if name == "summarise_document":
            return _prompt(
                "Summarise the document below in a few paragraphs. After each point, cite the lines it comes from as "
                "(lines a-b). Say if the text shown was cut short.",
                [self._embedded(arguments["document"])],
            )
        return _prompt(
            "Compare the two documents below: what they agree on, where they differ, and what only one of them "
            "covers. Cite each point as (document title, lines a-b).",
            [self._embedded(arguments["first"]), self._embedded(arguments["second"])],
        )

    def _document(self, document_id: str) -> Document:
        try:
            document = self._container.documents.get(self._access, document_id.strip())
        except MCPBridgeError:
            document = None
        if document is None or document.status != "published":  # a draft is not there for an endpoint
            raise JsonRpcError(INVALID_PARAMS, f"document {document_id[:100]!r} was not found in scope") from None
        return document

    def _embedded(self, document_id: str) -> dict[str, Any]:
        document = self._document(document_id)
        text = self._container.documents.text(document)
        if text is None:
            raise JsonRpcError(INVALID_PARAMS, f"document {document.id!r} has no text yet (still being indexed)")
        uri = document_uri(document.knowledge_base_id, document.id)
        return {"type": "resource", "resource": window(uri, document, text, None)}

    def _answer(self, question: str, knowledge_base: str | None) -> dict[str, Any]:
        service = self._container.knowledge_search
        try:
            scope = service.scope(self._access, [knowledge_base] if knowledge_base else None)
            outcome = service.search(scope, question[:2000], limit=SEARCH_HITS)
        except MCPBridgeError as exc:
            raise JsonRpcError(INVALID_PARAMS, exc.message) from None
        passages = [
            {
                "type": "resource",
                "resource": {
                    "uri": document_uri(
                        hit.chunk.knowledge_base_id,
                        hit.chunk.document_id,
                        f"{hit.chunk.start_line}-{hit.chunk.end_line}",
                    ),
                    "mimeType": "text/markdown",
                    "text": f"{hit.chunk.document_title}, lines {hit.chunk.start_line}-{hit.chunk.end_line}:\n\n"
                    f"{hit.chunk.text}",
                },
            }
            for hit in outcome.hits
        ]
        found = "The passages found follow." if passages else "The search found no passage: say so."
        return _prompt(
            f"Answer the question below using only the passages that follow. Cite every claim as (document title, "
            f"lines a-b), with the passage's URI. If the passages do not answer it, say so.\n\nQuestion: {question}\n\n"
            f"{found}",
            passages,
        )

    # -------------------------------------------------------------------------------------------- completion

    def complete(self, ref: dict[str, Any], name: str, typed: str, context: dict[str, str]) -> dict[str, Any]:
        typed = typed[:MAX_TYPED_CHARS]
        if ref.get("type") == "ref/resource":
            if ref.get("uri") not in (DOCUMENT_TEMPLATE, LIST_TEMPLATE):
                raise JsonRpcError(INVALID_PARAMS, f"no resource template {str(ref.get('uri'))[:200]!r}")
            values = self._complete_template(name, typed, context)
        else:
            prompt = str(ref.get("name"))
            if prompt not in self._names:
                raise JsonRpcError(INVALID_PARAMS, f"Unknown prompt: {prompt[:200]}")
            if name == "knowledge_base":
                values = [
                    kb.name
                    for kb in self._container.knowledge_bases.list_bases(self._access)
                    if _hit(typed, "", kb.name)
                ]
            elif name in ("document", "first", "second"):
                values = self._document_ids(typed, None)
            else:
                values = []
        return {
            "completion": {"values": values[:MAX_VALUES], "total": len(values), "hasMore": len(values) > MAX_VALUES}
        }

    def _complete_template(self, name: str, typed: str, context: dict[str, str]) -> list[str]:
        if name == "kb_id":
            return [
                kb.id for kb in self._container.knowledge_bases.list_bases(self._access) if _hit(typed, kb.id, kb.name)
            ]
        if name == "document_id":
            return self._document_ids(typed, context.get("kb_id"))
        if name == "lines":
            kb_id, document_id = context.get("kb_id"), context.get("document_id")
            document = self._resources.document(kb_id, document_id) if kb_id and document_id else None
            whole = f"1-{document.line_count}" if document else None
            return [whole] if whole and whole.startswith(typed) else []
        return []

    def _document_ids(self, typed: str, kb_id: str | None) -> list[str]:
        bases = self._container.knowledge_bases.list_bases(self._access)
        found: list[str] = []
        for kb in bases:
            if kb_id and kb.id != kb_id:
                continue
            for document in self._container.documents.matching(self._access, kb.id):
                if document.indexed_version is not None and _hit(typed, document.id, document.title):
                    found.append(document.id)
        return found


def _hit(typed: str, identifier: str, label: str) -> bool:
    return not typed or identifier.startswith(typed) or fold(typed) in fold(label)


def _prompt(instruction: str, attachments: list[dict[str, Any]]) -> dict[str, Any]:
    messages = [{"role": "user", "content": {"type": "text", "text": instruction}}]
    messages.extend({"role": "user", "content": content} for content in attachments)
    return {"messages": messages}
