"""Tool search across services, on the knowledge search engine (keyword BM25 with stems and CJK bigrams, vectors,
fusion: :mod:`mcpbridge.knowledge.search`, :mod:`mcpbridge.domain.ranking`).

* **The index.** Each workspace has one tool index in the knowledge ``SearchIndex`` under the reserved id
  ``tools_<workspace id>`` (no knowledge base id has that shape). A service's catalog, as one scope sees it (the
  workspace's snapshot, or one user's for a per-user OAuth service), is one document; each of its *indexed* tools
  (:func:`indexed`) is one chunk whose text holds the tool's name (also split at camelCase), title, description,
  parameter names and descriptions, and the service's name and description. Vectors come from the configured
  embedder (the local multilingual-e5-small when installed): a Chinese request finds English definitions through
  them. Without an embedder the index is keyword only and a search says so.
* **Kept current on read.** Before every search the catalogs the caller reaches are compared with what the index
  holds, by a fingerprint of each document (the tools' definition hashes, which tools are indexed, the service's
  name and description, the embedder) recorded in the store (``WS#<ws> / TOOLINDEX#<document>``); a document whose
  fingerprint changed is re-indexed first. So a catalog refresh, a policy change or a service switched off reaches
  search on the next query, in every process, whoever made the change; a deleted service's document is removed
  on the next search of its workspace.
* **Who finds what.** The index holds what the workspace may use (:func:`indexed`); each caller's own limits (the
  services its profile selects, an endpoint's allowlist) are applied as a filter: the documents it may reach before
  recall, then, among them, the tools it may not use are dropped after asking the index for as many more results as
  there are such tools, so a filtered search returns as many results as an unfiltered one would.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from mcpbridge.domain.external_services import ExternalService
from mcpbridge.domain.items import Item, Key
from mcpbridge.domain.knowledge import Chunk, Hit
from mcpbridge.domain.ranking import fuse
from mcpbridge.errors import InvalidInput, MCPBridgeError
from mcpbridge.ports import Embedder, SearchIndex, Store

log = logging.getLogger("mcpbridge.tool_search")

SearchMode = Literal["hybrid", "semantic", "keyword"]
SEARCH_MODES: Final[tuple[SearchMode, ...]] = ("hybrid", "semantic", "keyword")
INDEX_LANGUAGE: Final = "english"
"""Tool definitions are written in English almost everywhere: their keyword terms are English stems. A query in
another script still matches by its own terms (CJK bigrams) and, above all, by vectors."""
NO_EMBEDDER: Final = "no embedding provider configured"
MAX_TEXT_CHARS: Final = 4000
MAX_PARAMETERS: Final = 40
NAME_WEIGHT: Final = 2
HUB_WEIGHT: Final = 0.2
"""How much of the direction shared by all the searched tools' vectors is taken off a query's vector (see
:meth:`ToolIndex.search`)."""

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def index_id(workspace_id: str) -> str:
    """The reserved id of a workspace's tool index inside the knowledge search engine."""
    return f"tools_{workspace_id}"


def document_id(service_id: str, scope: str) -> str:
    """One service's catalog as one scope sees it (the ids stay short and path-safe whatever the scope holds)."""
    digest = hashlib.sha256(f"{service_id}\x00{scope}".encode()).hexdigest()[:32]
    return f"svc_{digest}"


def _marker_key(workspace_id: str, document: str) -> Key:
    return Key(f"WS#{workspace_id}", f"TOOLINDEX#{document}")


def indexed(service: ExternalService, tool_enabled: bool, held: bool = False) -> bool:
    """Whether a tool is in its workspace's tool index at all: an enabled tool of an enabled service, not held by
    the quarantine of changed tools (:mod:`mcpbridge.client.quarantine`).

    The one place that says what search may ever return; a state that withholds a tool from everyone belongs here,
    so the index drops it on the next search."""
    return service.enabled and tool_enabled and not held


@dataclass(frozen=True)
class CatalogDocument:
    """One service's catalog as a caller's scope sees it, with the tools :func:`indexed` keeps."""

    service: ExternalService
    scope: str
    tools: Sequence[dict[str, Any]]
    """Snapshot entries (``name``, ``definition``, ``definition_hash``) of the indexed tools, in snapshot order."""

    @property
    def id(self) -> str:
        return document_id(self.service.id, self.scope)


@dataclass(frozen=True)
class ToolHit:
    service_id: str
    tool_name: str
    score: float


@dataclass(frozen=True)
class ToolSearchOutcome:
    hits: list[ToolHit]
    mode: SearchMode
    """The mode that ran (hybrid runs keyword only without an embedder, and says so in ``notices``)."""
    notices: list[str] = field(default_factory=list)


def tool_text(service: ExternalService, definition: dict[str, Any], *, name_weight: int = NAME_WEIGHT) -> str:
    """What a tool is searched by with keywords: its names, title, description, parameters, and its service's name
    and description, one per line (capped at 4,000 characters).

    The name split into words and the title stand ``name_weight`` times: a term of what the tool is called says more
    about what it does than the same term in a parameter's description, and BM25 counts repetitions."""
    name = str(definition.get("name") or "")
    lines = [name, *[_words_of(name)] * name_weight]
    if definition.get("title"):
        lines.extend([str(definition["title"])] * name_weight)
    if definition.get("description"):
        lines.append(str(definition["description"]))
    schema = definition.get("inputSchema")
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if isinstance(properties, dict):
        for parameter, spec in list(properties.items())[:MAX_PARAMETERS]:
            about = spec.get("description") if isinstance(spec, dict) else None
            words = _words_of(str(parameter))
            lines.append(f"{words}: {about}" if isinstance(about, str) and about else words)
    lines.append(f"{service.name}: {service.description}" if service.description else service.name)
    return "\n".join(line for line in lines if line.strip())[:MAX_TEXT_CHARS]


def embedding_text(service: ExternalService, definition: dict[str, Any]) -> str:
    """What a tool's vector is made of: :func:`tool_text` with every field once (repeating a field moves a vector
    nowhere useful); the service's line is the last."""
    return tool_text(service, definition, name_weight=1)


def _words_of(name: str) -> str:
    """``listIssues`` / ``list_issues`` / ``list-issues`` as ``list issues``."""
    return " ".join(_CAMEL.sub(" ", name).replace("_", " ").replace("-", " ").split()).lower()


class ToolIndex:
    """The tool index of each workspace: kept current with the catalogs (:meth:`sync`) and searched."""

    def __init__(
        self,
        store: Store,
        index: Callable[[], SearchIndex],
        embedder: Callable[[], Embedder | None],
    ) -> None:
        self._store = store
        self._index = index
        self._embedder = embedder

    @property
    def semantic_available(self) -> bool:
        return self._embedder() is not None

    # ------------------------------------------------------------------------------------------ keeping current

    def sync(
        self, workspace_id: str, documents: Sequence[CatalogDocument], *, existing_services: Collection[str]
    ) -> None:
        """Re-index each document whose fingerprint changed; drop the documents of services that no longer exist
        (``existing_services``: every service id of the workspace). A failure to index one document is logged and
        leaves the others current: the next search tries it again."""
        embedder = self._embedder()
        recorded = self._recorded(workspace_id)
        for document in documents:
            fingerprint = _fingerprint(document, embedder)
            if recorded.get(document.id, (None, None))[0] == fingerprint:
                continue
            try:
                self._write(workspace_id, document, embedder, fingerprint)
            except ValueError:
                # Vectors of another embedder (the configuration changed): an index never mixes two, so it starts
                # over, and every document is written again on this and the next searches.
                log.warning("tool index of workspace %s rebuilt for embedder %s", workspace_id, _name(embedder))
                self._drop(workspace_id, recorded)
                recorded = {}
                self._write(workspace_id, document, embedder, fingerprint)
            except MCPBridgeError as exc:
                log.warning("tool index of service %s not updated: %s", document.service.id, exc.code)
        existing = set(existing_services)
        for document_id_, (_, service_id) in recorded.items():
            if service_id not in existing:
                self._index().delete_document(index_id(workspace_id), document_id_)
                self._store.delete(_marker_key(workspace_id, document_id_))

    def _drop(self, workspace_id: str, recorded: dict[str, tuple[str, str]]) -> None:
        self._index().delete_knowledge_base(index_id(workspace_id))
        for document in recorded:
            self._store.delete(_marker_key(workspace_id, document))

    def _recorded(self, workspace_id: str) -> dict[str, tuple[str, str]]:
        return {
            str(item["sk"]).removeprefix("TOOLINDEX#"): (str(item["fingerprint"]), str(item["service_id"]))
            for item in self._markers(workspace_id)
        }

    def _markers(self, workspace_id: str) -> list[Item]:
        found: list[Item] = []
        cursor: str | None = None
        while True:
            page = self._store.query(f"WS#{workspace_id}", sk_prefix="TOOLINDEX#", limit=100, cursor=cursor)
            found.extend(page.items)
            cursor = page.cursor
            if cursor is None:
                return found

    def _write(self, workspace_id: str, document: CatalogDocument, embedder: Embedder | None, fingerprint: str) -> None:
        kb_id = index_id(workspace_id)
        texts = [tool_text(document.service, tool["definition"]) for tool in document.tools]
        embedded = [embedding_text(document.service, tool["definition"]) for tool in document.tools]
        chunks = [
            Chunk(
                id=Chunk.make_id(document.id, seq),
                knowledge_base_id=kb_id,
                document_id=document.id,
                document_title=document.service.name,
                seq=seq,
                text=text,
                start_line=seq + 1,
                end_line=seq + 1,
                start_offset=0,
                end_offset=len(text),
                heading_path=(document.service.id, str(tool["name"])),
            )
            for seq, (tool, text) in enumerate(zip(document.tools, texts, strict=True))
        ]
        index = self._index()
        direction = ""
        if not chunks:
            index.delete_document(kb_id, document.id)
        else:
            vectors = embedder.embed(embedded, purpose="document") if embedder is not None else None
            name = embedder.name if embedder is not None else None
            index.replace_document(kb_id, document.id, chunks, vectors, name, language=INDEX_LANGUAGE)
            if vectors:
                import numpy as np  # on first indexing: importing this module stays light for cold starts

                matrix = np.asarray(vectors, dtype=np.float32)
                norms = np.linalg.norm(matrix, axis=1, keepdims=True)
                unit_sum = (matrix / np.where(norms > 0, norms, 1)).sum(axis=0, dtype=np.float32)
                direction = base64.b64encode(unit_sum.astype("<f4").tobytes()).decode()
        self._store.put(
            {
                **_marker_key(workspace_id, document.id).as_dict(),
                "service_id": document.service.id,
                "fingerprint": fingerprint,
                "tools": len(chunks),
                "vector_sum": direction,
            }
        )

    # ------------------------------------------------------------------------------------------ searching

    def _without_hub(self, workspace_id: str, documents: Collection[str], vector: list[float]) -> list[float]:
        """The query's unit vector less :data:`HUB_WEIGHT` times the unit mean of the searched tools' unit vectors.

        Tool vectors lie in a narrow cone (they all describe software actions), and the tools nearest its axis, those
        with long, generic descriptions, come up for requests the embedder matches poorly, in Chinese above all.
        Ranking by ``cos(q, d) - w * cos(d, mean)``, which is the dot product with this vector, takes that shared
        part off (the centering used against hubness in cross-lingual retrieval). The mean is that of the searched
        documents, from the sums written with them (``vector_sum``)."""
        import numpy as np

        query = np.asarray(vector, dtype=np.float32)
        total = np.zeros_like(query)
        wanted = set(documents)
        for item in self._markers(workspace_id):
            raw = item.get("vector_sum")
            if str(item["sk"]).removeprefix("TOOLINDEX#") not in wanted or not isinstance(raw, str) or not raw:
                continue
            part = np.frombuffer(base64.b64decode(raw), dtype="<f4")
            if part.shape == total.shape:
                total += part
        total_norm, query_norm = float(np.linalg.norm(total)), float(np.linalg.norm(query))
        if total_norm == 0.0 or query_norm == 0.0:
            return vector
        shifted = query / query_norm - HUB_WEIGHT * (total / total_norm)
        return [float(v) for v in shifted]

    def search(
        self,
        workspace_id: str,
        query: str,
        *,
        documents: Collection[str],
        may_use: Callable[[str, str], bool],
        hidden: int,
        mode: SearchMode = "hybrid",
        limit: int = 10,
    ) -> ToolSearchOutcome:
        """The best ``limit`` tools for ``query`` among ``documents`` that ``may_use(service_id, tool_name)``
        keeps; ``hidden`` is how many indexed tools of those documents it refuses (the index is asked for that many
        more, so none of them costs the caller a result)."""
        if mode not in SEARCH_MODES:
            raise InvalidInput("mode must be hybrid, semantic or keyword", code="invalid_search_mode")
        if not documents:
            return ToolSearchOutcome([], mode)
        kb_ids, wanted = [index_id(workspace_id)], max(limit + hidden, 1)
        index = self._index()
        notices: list[str] = []
        embedder = self._embedder() if mode != "keyword" else None
        if mode != "keyword" and embedder is None:
            if mode == "semantic":
                raise InvalidInput(
                    f"semantic search is unavailable: {NO_EMBEDDER}; use mode keyword", code="no_embedding_provider"
                )
            notices.append(
                f"hybrid ran keyword only: {NO_EMBEDDER} (a request in another language than the tools' "
                "definitions finds little)"
            )
            mode = "keyword"
        keyword: list[Hit] = []
        semantic: list[Hit] = []
        if mode != "semantic":
            keyword = index.keyword(kb_ids, query, document_ids=documents, limit=wanted * 2)
        if embedder is not None:
            (vector,) = embedder.embed([query], purpose="query")
            vector = self._without_hub(workspace_id, documents, vector)
            if any(v != 0 for v in vector) and index.has_vectors(kb_ids[0]):
                semantic = index.semantic(kb_ids, vector, document_ids=documents, limit=wanted * 2)
        ranked = (
            keyword
            if mode == "keyword"
            else semantic
            if mode == "semantic"
            else fuse(keyword, semantic, limit=wanted * 2)
        )
        hits: list[ToolHit] = []
        for hit in ranked:
            service_id, tool_name = hit.chunk.heading_path[0], hit.chunk.heading_path[1]
            if may_use(service_id, tool_name):
                hits.append(ToolHit(service_id, tool_name, hit.score))
            if len(hits) == limit:
                break
        return ToolSearchOutcome(hits, mode, notices)


def _name(embedder: Embedder | None) -> str:
    return embedder.name if embedder is not None else "none"


def _fingerprint(document: CatalogDocument, embedder: Embedder | None) -> str:
    service = document.service
    content = {
        "v": 2,
        "service": [service.id, service.name, service.description],
        "tools": [[tool["name"], tool["definition_hash"]] for tool in document.tools],
        "embedder": embedder.name if embedder is not None else None,
    }
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:32]
