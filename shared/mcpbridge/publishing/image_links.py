"""Time-limited links to the images of documents, handed out in an endpoint's MCP tool results: ``/r/<token>``.

A tool result's image references (``resource://images/<document>/<version>/<n>``) become links once per tool call,
after the endpoint's scope is checked again (the endpoint exists and is open, its workspace holds the document, and
its knowledge bases, and the caller's, include the document's); the stored document and session keep the
``resource://`` form. A link is a random token whose SHA-256 names a record kept until it expires:

    IMGLINK#<sha256(token)> / IMGLINK   {workspace_id, owner_workspace_id, endpoint_id, kb_scope, document_id,
                                         version, n, content_type, expires_at}

(``owner_workspace_id``: the workspace holding the document, another one's for a knowledge base shared with the
endpoint's; the image's blob is looked up anew at fetch, so a withdrawn share refuses its links.)

At fetch the same checks run again (an endpoint narrowed, disabled or deleted since refuses its links), then the
image is served: on AWS by a redirect to a presigned S3 GET (valid no longer than the link), locally by ``serve``.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from mcpbridge.domain.items import Key
from mcpbridge.domain.knowledge import KnowledgeAccess
from mcpbridge.errors import Forbidden, NotFound
from mcpbridge.knowledge.document_records import reachable_document
from mcpbridge.knowledge.images import ImageRef, image_blob
from mcpbridge.ports import BlobLinks, Blobs, Clock, Store
from mcpbridge.publishing.endpoints import EndpointService

TOKEN_SHAPE: Final = re.compile(r"^[A-Za-z0-9_-]{20,100}$")
REDIRECT_SECONDS_MAX: Final = 300


def link_key(token: str) -> Key:
    digest = hashlib.sha256(token.encode()).hexdigest()
    return Key(f"IMGLINK#{digest}", "IMGLINK")


@dataclass(frozen=True)
class ImageServed:
    """What ``/r/<token>`` answers: a redirect (``url``) or the bytes themselves."""

    content_type: str
    url: str | None = None
    data: bytes | None = None
    max_age: int = 0


class ImageLinks:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        blobs: Blobs,
        endpoints: EndpointService,
        *,
        links: BlobLinks | None,
        seconds: int,
    ) -> None:
        self._store = store
        self._clock = clock
        self._blobs = blobs
        self._endpoints = endpoints
        self._links = links
        self._seconds = seconds

    def link_all(
        self, endpoint_id: str, access: KnowledgeAccess, refs: Iterable[ImageRef], base_url: str
    ) -> dict[str, str]:
        """Links for the images of one tool call's result, each made once: stored URL -> link. An image the
        endpoint may no longer reach gets none (its reference keeps its stored URL)."""
        made: dict[str, str] = {}
        for ref in refs:
            if ref.url in made:
                continue
            link = self.issue(endpoint_id, access, ref, base_url)
            if link is not None:
                made[ref.url] = link
        return made

    def issue(self, endpoint_id: str, access: KnowledgeAccess, ref: ImageRef, base_url: str) -> str | None:
        found = self._reachable(endpoint_id, access.workspace_id, access.knowledge_base_ids, ref.document_id)
        if found is None:
            return None
        token = secrets.token_urlsafe(32)
        self._store.put(
            {
                **link_key(token).as_dict(),
                "workspace_id": access.workspace_id,
                "owner_workspace_id": found[1],
                "endpoint_id": endpoint_id,
                "kb_scope": None if access.knowledge_base_ids is None else sorted(access.knowledge_base_ids),
                "document_id": ref.document_id,
                "version": ref.version,
                "n": ref.n,
                "content_type": ref.content_type,
                "expires_at": int(self._clock.now()) + self._seconds,
            }
        )
        return f"{base_url.rstrip('/')}/r/{token}"

    def open(self, token: str) -> ImageServed:
        """The image behind a link, its scope checked again; ``NotFound`` for an unknown or expired link,
        ``Forbidden`` when the endpoint no longer reaches the document."""
        item = self._store.get(link_key(token)) if TOKEN_SHAPE.match(token) else None
        # The store hides an expired record (each read checks expires_at); the check here holds it to the second.
        remaining = 0 if item is None else int(item["expires_at"]) - int(self._clock.now())
        if item is None or remaining <= 0:
            raise NotFound("no such image link, or it has expired", code="image_link_not_found")
        scope = item.get("kb_scope")
        found = self._reachable(
            str(item["endpoint_id"]),
            str(item["workspace_id"]),
            None if scope is None else frozenset(scope),
            str(item["document_id"]),
        )
        if found is None:
            raise Forbidden("this image link's endpoint no longer reaches the document", code="image_link_refused")
        content_type = str(item["content_type"])
        key = image_blob(found[1], str(item["document_id"]), int(item["version"]), int(item["n"]), content_type)
        if self._links is not None:
            url = self._links.download_url(
                key, expires_in=min(remaining, REDIRECT_SECONDS_MAX), content_type=content_type
            )
            return ImageServed(content_type, url=url)
        data = self._blobs.get(key)
        if data is None:
            raise NotFound("the image is gone (its document was changed or deleted)", code="image_link_not_found")
        return ImageServed(content_type, data=data, max_age=min(remaining, REDIRECT_SECONDS_MAX))

    def _reachable(
        self, endpoint_id: str, workspace_id: str, caller_scope: frozenset[str] | None, document_id: str
    ) -> tuple[str, str] | None:
        """The document's knowledge base and the workspace holding it (the endpoint's, or the owner of a knowledge
        base shared with it) when the endpoint (open, in that workspace) and the caller's scope both reach it; None
        otherwise (a share withdrawn since included)."""
        endpoint = self._endpoints.find(endpoint_id)
        if endpoint is None or endpoint.workspace_id != workspace_id:
            return None
        try:
            self._endpoints.require_open(endpoint)
        except Forbidden:
            return None
        document = reachable_document(self._store, KnowledgeAccess(workspace_id, caller_scope), document_id)
        if document is None:
            return None
        kb_id = str(document["knowledge_base_id"])
        if not endpoint.knowledge_access().allows(kb_id):
            return None
        return kb_id, str(document["workspace_id"])
