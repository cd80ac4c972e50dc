"""The capabilities the core needs from the outside world, as ``typing.Protocol``s.

Adapters in ``mcpbridge.adapters`` implement them (AWS and embedded); ``mcpbridge.bootstrap`` wires them. Fakes in
tests match a Protocol without inheriting from it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from mcpbridge.domain.items import Condition, IndexName, Item, Key, Page, Update, WriteOp
from mcpbridge.domain.knowledge import Chunk, Hit, IndexAnalysis
from mcpbridge.domain.secrets import SecretContext


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...


class Store(Protocol):
    """Items under (pk, sk) with conditional writes, prefix queries, two secondary indexes and TTL.

    Every read hides items whose ``expires_at`` has passed; every condition treats them as absent. A condition
    that does not hold raises ``errors.ConditionFailed`` carrying the condition's name and the live item.
    Infrastructure failures raise ``errors.Unavailable``.
    """

    reads_are_local: bool
    """Whether a read is a lookup on this machine that never waits for a writer, cheaper than handing it to a
    worker thread, so an event loop may call it directly; False when a read may wait on the network."""

    indexes_are_consistent: bool
    """Whether a query of a secondary index returns what a consistent read of the item would (SQLite: the index is
    a column of the item's own row); False where an index may lag the table (DynamoDB's global indexes)."""

    def get(self, key: Key) -> Item | None:
        """The live item, read consistently, or None."""
        ...

    def put(self, item: Item, *, condition: Condition | None = None, durable: bool = True) -> None:
        """Create or replace the whole item.

        ``durable=False``: the write may be lost to a power cut (never to a crash of the process) if a store
        would otherwise sync it to disk on its own; for records worth less than that on every request."""
        ...

    def update(self, key: Key, update: Update, *, condition: Condition | None = None, durable: bool = True) -> Item:
        """Change some attributes (creating the item when absent) and return the item as written
        (``durable`` as for ``put``)."""
        ...

    def delete(self, key: Key, *, condition: Condition | None = None) -> Item | None:
        """Delete and return the live item that was there (None when there was none)."""
        ...

    def sync_soon(self, *, within: float = 0.0) -> Callable[[], None]:
        """Start making every write this process made so far durable, without waiting (writes made with
        ``durable=False``): at once, or within ``within`` seconds, sharing a sync asked for meanwhile; the returned
        function waits until they are (blocking), raising ``errors.Unavailable`` if they could not be. Nothing to do
        where every acknowledged write is durable (DynamoDB)."""
        ...

    def writes_at_once(self) -> AbstractContextManager[None]:
        """A block in which this thread's writes never wait: a write that would (for another writer, a disk sync,
        the network) raises ``errors.Unavailable`` with code ``store_busy`` and writes nothing. For an event loop,
        which makes at once what it can and hands the rest to a worker thread. SQLite makes a write that needs no
        disk sync at once when no one else is writing; on DynamoDB every write is a network call, so none is."""
        ...

    def query(
        self,
        partition: str,
        *,
        sk_prefix: str = "",
        index: IndexName | None = None,
        limit: int = 100,
        cursor: str | None = None,
        descending: bool = False,
    ) -> Page:
        """Live items of one partition (of the table or of an index) whose sort key starts with ``sk_prefix``,
        in sort-key order. Reads through an index may lag a write by a moment on DynamoDB."""
        ...

    def transact(self, ops: Sequence[WriteOp]) -> None:
        """All of the writes or none of them (at most 100, at most one per key)."""
        ...

    def ping(self) -> None:
        """Raise ``errors.Unavailable`` when the store cannot be reached."""
        ...

    def reclaim(self) -> None:
        """After a whole workspace was deleted: leave nothing of the deleted items readable where the store keeps
        its data (the embedded store rewrites its file; DynamoDB keeps nothing of a deleted item, so nothing)."""
        ...


class SecretBox(Protocol):
    """Seals secrets for storage (``enc:v1:...``) bound to a ``SecretContext``."""

    def seal(self, plaintext: str, context: SecretContext) -> str: ...

    def open(self, sealed: str, context: SecretContext) -> str:
        """Raise ``domain.secrets.SecretUnreadable`` for a wrong context, tampered bytes or an unknown format."""
        ...

    def ping(self) -> None:
        """Raise ``errors.Unavailable`` when the key material cannot be reached."""
        ...


@dataclass(frozen=True)
class UploadTarget:
    """Where a client sends a file itself, as an HTML form would: a ``multipart/form-data`` POST to ``url`` with
    ``fields`` first, then the file in the field ``file``."""

    url: str
    fields: dict[str, str]


class Blobs(Protocol):
    """Opaque bytes by key (S3 on AWS, files in the data directory locally)."""

    def put(self, key: str, data: bytes, *, content_type: str = "application/octet-stream") -> None: ...

    def get(self, key: str) -> bytes | None:
        """The bytes, or None when there is no such blob."""
        ...

    def delete(self, key: str) -> None:
        """Idempotent."""
        ...

    def size(self, key: str) -> int | None:
        """How many bytes the blob holds, or None when there is no such blob."""
        ...

    def copy(self, source: str, destination: str) -> None:
        """Copy one blob to another key (inside the store: the bytes do not pass through this process on S3)."""
        ...

    def upload_target(self, key: str, *, content_type: str, max_bytes: int, expires_in: int) -> UploadTarget | None:
        """A form the client posts a file of at most ``max_bytes`` and type ``content_type`` to, stored as ``key``,
        for ``expires_in`` seconds (S3: a presigned POST, the size enforced by S3); None where uploads have to pass
        through mcpbridge itself (the embedded backend)."""
        ...


@runtime_checkable
class BlobLinks(Protocol):
    """Blobs a client can fetch straight from the blob store (S3 presigned GETs)."""

    def download_url(self, key: str, *, expires_in: int, content_type: str) -> str:
        """A URL that serves the blob for ``expires_in`` seconds. Raise ``errors.Unavailable`` when none can be made."""
        ...


class Ocr(Protocol):
    """Text recognition in images (Tesseract in the process, Amazon Textract)."""

    @property
    def name(self) -> str:
        """Engine and languages, e.g. ``tesseract:eng+chi_sim``."""
        ...

    def recognise(self, image: bytes) -> str:
        """The text of a PNG or JPEG image ("" when it holds none), lines in reading order. Raise
        ``errors.UpstreamError``/``Unavailable`` when the engine fails, ``errors.InvalidInput`` for an image it
        refuses (too large, unreadable)."""
        ...


class Embedder(Protocol):
    """Turns texts into vectors (Bedrock Titan v2, an OpenAI-compatible endpoint, or a test embedder)."""

    @property
    def name(self) -> str:
        """Provider and model, e.g. ``bedrock:amazon.titan-embed-text-v2:0``; stored beside the vectors it made."""
        ...

    def embed(self, texts: Sequence[str], *, purpose: Literal["document", "query"]) -> list[list[float]]:
        """One vector per text, in order. Raise ``errors.UpstreamError``/``Unavailable`` when the provider fails."""
        ...


@dataclass(frozen=True)
class ChatMessage:
    role: Literal["user", "assistant"]
    content: str


class Llm(Protocol):
    """A chat model (Bedrock Converse, an OpenAI-compatible chat endpoint)."""

    @property
    def name(self) -> str: ...

    def complete(self, system: str, messages: Sequence[ChatMessage], *, max_tokens: int = 1024) -> str:
        """The assistant's reply. Raise ``errors.UpstreamError``/``Unavailable`` when the provider fails."""
        ...


@runtime_checkable
class ImageDescriber(Protocol):
    """A chat model that reads images (captions of the images in documents)."""

    def describe_image(self, image: bytes, content_type: str, *, instruction: str, max_tokens: int = 300) -> str:
        """The model's description of ``image`` (PNG or JPEG) following ``instruction``. Raise
        ``errors.UpstreamError``/``Unavailable`` when the provider fails."""
        ...


class SearchIndex(Protocol):
    """Chunks of documents, per knowledge base, searchable by keywords (BM25) and by vectors.

    Filters (``document_ids``) apply before recall: a search never returns, nor ranks against, chunks outside them.
    """

    def replace_document(
        self,
        kb_id: str,
        document_id: str,
        chunks: Sequence[Chunk],
        vectors: Sequence[Sequence[float]] | None,
        embedder_name: str | None,
        *,
        language: str | None = None,
    ) -> None:
        """Make ``chunks`` (and their vectors, same order, made by ``embedder_name``) the document's whole indexed
        content. A knowledge base never mixes vectors of two embedders (ValueError). ``language`` (the knowledge
        base's) chooses the keyword analysis of an index that holds nothing yet."""
        ...

    def analysis(self, kb_id: str) -> IndexAnalysis | None:
        """What the knowledge base's keyword index is analysed for (None when it has no index yet)."""
        ...

    def reanalyse(self, kb_id: str, language: str, progress: Callable[[int, int], None] | None = None) -> None:
        """Re-analyse the keyword index for ``language`` (resuming one interrupted); ``progress(done, total)``
        after each batch. Searches keep working on the current analysis until the new one is complete."""
        ...

    def delete_document(self, kb_id: str, document_id: str) -> None: ...

    def delete_knowledge_base(self, kb_id: str) -> None: ...

    def keyword(
        self, kb_ids: Collection[str], query: str, *, document_ids: Collection[str] | None = None, limit: int = 10
    ) -> list[Hit]: ...

    def semantic(
        self,
        kb_ids: Collection[str],
        vector: Sequence[float],
        *,
        document_ids: Collection[str] | None = None,
        limit: int = 10,
    ) -> list[Hit]: ...

    def chunks(self, kb_id: str, document_id: str, *, offset: int = 0, limit: int | None = None) -> list[Chunk]:
        """Chunks of one document in reading order."""
        ...

    def count(self, kb_id: str, document_id: str) -> int:
        """How many chunks the document has."""
        ...

    def chunk_at_line(self, kb_id: str, document_id: str, line: int) -> Chunk | None:
        """The chunk whose line range holds ``line`` (else the next one after it)."""
        ...

    def candidates(
        self,
        kb_ids: Collection[str],
        words: Sequence[str],
        *,
        document_ids: Collection[str] | None = None,
        limit: int = 30,
    ) -> list[Chunk]:
        """Chunks holding every one of ``words`` by the keyword index, best first (grep's candidates)."""
        ...

    def has_vectors(self, kb_id: str) -> bool: ...


@runtime_checkable
class IndexMaintenance(Protocol):
    """Upkeep of a search engine that needs it (Lance), run as background jobs; an engine that needs none (the SQLite
    file index) does not implement it."""

    def optimise(self, kb_id: str) -> None:
        """Compact the knowledge base's index (deleted rows removed from storage), bring its indexes and statistics
        up to date. Safe to run twice, or while writes go on."""
        ...

    def migrate(self, kb_id: str) -> bool:
        """Copy a knowledge base still indexed by an older engine into this one (searches keep answering from the
        old index until the copy is complete), then drop the old index. False when there was nothing to migrate."""
        ...


class Jobs(Protocol):
    """Work that runs after the request that asked for it (an in-process pool locally, an async Lambda on AWS).

    A job is a small JSON payload naming what to do; it must be safe to run twice (deliveries are at least once).
    """

    def submit(self, kind: str, payload: dict[str, str]) -> None: ...


@dataclass(frozen=True)
class CallStart:
    """What starts the workflow of one agent tool call; everything else is read from the call's record."""

    call_id: str
    workspace_id: str
    approval_timeout_seconds: int
    oauth_timeout_seconds: int


class Workflow(Protocol):
    """Runs agent tool calls that may pause for a person (Step Functions Standard on AWS; in-process locally).

    A pause is a task token: the workflow hands one to the ``await`` step, which stores it on the call's record;
    whoever resolves the pause (any instance) calls :meth:`send_success` or :meth:`send_failure` with it. Tokens are
    opaque and secret-like: never logged or returned.
    """

    def start(self, call: CallStart) -> str:
        """Start the call's execution; returns its id (an execution ARN on AWS). Idempotent per ``call_id``."""
        ...

    def send_success(self, task_token: str, output: Mapping[str, Any]) -> None:
        """Resume the paused step with ``output`` (a JSON object)."""
        ...

    def send_failure(self, task_token: str, error: str, cause: str) -> None:
        """Fail the paused step (``error`` is a short code, ``cause`` a safe message)."""
        ...


MetricUnit = Literal["Count", "Milliseconds", "Seconds", "Bytes"]


class Telemetry(Protocol):
    """What an operator watches: metrics (CloudWatch, in the embedded metric format, in Lambda) and trace spans
    around slow calls (X-Ray subsegments in Lambda). Locally it does nothing at all."""

    def count(self, name: str, value: float = 1, *, unit: MetricUnit = "Count", **dimensions: str) -> None:
        """Record ``value`` under ``name`` (``dimensions`` beside the service's own, e.g. ``outcome``)."""
        ...

    def span(self, name: str, **annotations: str) -> AbstractContextManager[None]:
        """A span around a block (``annotations`` are searchable in the trace: ids, never secrets)."""
        ...


class Events(Protocol):
    """Facts other systems may react to (a console or chat channel showing a confirmation card): EventBridge on
    AWS, a JSON log stream locally. ``detail`` is a JSON object already free of secrets and image data."""

    def publish(self, kind: str, detail: Mapping[str, Any]) -> None: ...
