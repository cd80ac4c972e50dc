"""Where a knowledge base's Lance datasets live, what their rows hold, and how chunks go in and come out.

One dataset per knowledge base and generation (``<kb>-<random>.lance`` under the root: a name is never reused, so
a cached handle or a commit record can never stand for other content). A row is a chunk:

    id, document_id, document_title, seq, type, text, heading_path (JSON), start_line, end_line, start_offset,
    end_offset     the chunk as ``domain.knowledge.Chunk`` holds it
    words          ``text_tokens.search_tokens`` of the text joined by spaces: grep's candidates
    terms          the knowledge base's analyser's ``index_terms`` of the text, plus each CJK character once (a
                   one-character query matches the words it starts): keyword search ranks these by BM25
    write_id       one random value per ``replace_document`` call: a copy (re-analysis, migration) tells by it
                   that a document changed under it
    vector         the chunk's embedding, L2-normalised (float32; absent until a write brings vectors)

Both text columns are indexed by Lance's inverted index with its ``whitespace`` tokenizer and no other analysis: the
terms are made here, by the same code as the SQLite index's, so both engines find the same words.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import pyarrow as pa

from mcpbridge.domain.knowledge import CHUNK_TYPES, Chunk, ChunkType
from mcpbridge.domain.text_tokens import Analyser, is_cjk, search_tokens

CHUNK_FIELDS: tuple[pa.Field, ...] = (
    pa.field("id", pa.string(), nullable=False),
    pa.field("document_id", pa.string(), nullable=False),
    pa.field("document_title", pa.string()),
    pa.field("seq", pa.int32()),
    pa.field("type", pa.string()),
    pa.field("text", pa.string()),
    pa.field("heading_path", pa.string()),
    pa.field("start_line", pa.int32()),
    pa.field("end_line", pa.int32()),
    pa.field("start_offset", pa.int64()),
    pa.field("end_offset", pa.int64()),
    pa.field("words", pa.string()),
    pa.field("terms", pa.string()),
    pa.field("write_id", pa.string()),
)
CHUNK_COLUMNS = [f.name for f in CHUNK_FIELDS[:11]]


def vector_field(dimension: int) -> pa.Field:
    return pa.field("vector", pa.list_(pa.float32(), dimension))


@dataclass(frozen=True)
class LanceLocation:
    """The root the datasets live under: a local directory, or ``s3+ddb://bucket/prefix`` with the DynamoDB table
    that orders commits (Lance's commit store: any number of writers in any number of processes)."""

    root: str
    commit_table: str = ""
    storage_options: Mapping[str, str] = field(default_factory=dict)

    def uri(self, name: str) -> str:
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"invalid dataset name {name!r}")
        uri = f"{self.root.rstrip('/')}/{name}.lance"
        return f"{uri}?ddbTableName={self.commit_table}" if self.commit_table else uri

    @property
    def options(self) -> dict[str, str]:
        return dict(self.storage_options)

    @property
    def is_local(self) -> bool:
        return "://" not in self.root

    @staticmethod
    def directory(path: Path) -> LanceLocation:
        return LanceLocation(str(path))

    @staticmethod
    def on_s3(bucket: str, commit_table: str, *, region: str | None, endpoint_url: str | None) -> LanceLocation:
        """``s3://<bucket>/lance`` with ``commit_table``; credentials come from the environment (the function's
        role); ``endpoint_url`` (``AWS_ENDPOINT_URL``) points S3 and DynamoDB elsewhere (a moto server in tests).
        Every request has a deadline well inside API Gateway's 29 seconds."""
        options = {"timeout": "20s", "connect_timeout": "3s"}
        if region:
            options["aws_region"] = region
        if endpoint_url:
            options |= {"aws_endpoint": endpoint_url, "dynamodb_endpoint": endpoint_url}
            if endpoint_url.startswith("http://"):
                options["allow_http"] = "true"
        return LanceLocation(f"s3+ddb://{bucket}/lance", commit_table=commit_table, storage_options=options)


def new_dataset_name(kb_id: str) -> str:
    if not kb_id or "/" in kb_id or kb_id.startswith(".") or "?" in kb_id:
        raise ValueError(f"invalid knowledge base id {kb_id!r}")
    return f"{kb_id}-{uuid.uuid4().hex[:12]}"


def literal(value: str) -> str:
    """A SQL string literal for Lance's filters."""
    return "'" + value.replace("'", "''") + "'"


def documents_filter(document_ids: Collection[str]) -> str:
    if isinstance(document_ids, str):
        raise TypeError("document_ids must be a collection of ids, not one string")
    return "document_id IN (" + ", ".join(literal(d) for d in sorted(set(document_ids))) + ")"


def indexed_terms(analyser: Analyser, text: str) -> str:
    terms = analyser.index_terms(text)
    held = set(terms)
    chars = dict.fromkeys(c for t in dict.fromkeys(terms) if len(t) > 1 and is_cjk(t) for c in t)
    return " ".join([*terms, *(c for c in chars if c not in held)])


def chunk_rows(
    document_id: str,
    chunks: Sequence[Chunk],
    vectors: Sequence[Sequence[float]] | None,
    analyser: Analyser,
    *,
    dimension: int | None,
    write_id: str,
) -> pa.Table:
    """The rows of one document's chunks (validated), with normalised vectors when ``dimension`` is given."""
    _check_chunks(document_id, chunks)
    columns: dict[str, list[Any]] = {f.name: [] for f in CHUNK_FIELDS}
    for chunk in chunks:
        for name in CHUNK_COLUMNS:
            value = getattr(chunk, name)
            columns[name].append(json.dumps(list(value), ensure_ascii=False) if name == "heading_path" else value)
        columns["words"].append(" ".join(search_tokens(chunk.text)))
        columns["terms"].append(indexed_terms(analyser, chunk.text))
        columns["write_id"].append(write_id)
    fields = list(CHUNK_FIELDS)
    arrays: list[pa.Array] = [pa.array(columns[f.name], type=f.type) for f in fields]
    if dimension is not None:
        fields.append(vector_field(dimension))
        if vectors is None:
            arrays.append(pa.nulls(len(chunks), type=vector_field(dimension).type))
        else:
            matrix = normalised(vectors)
            arrays.append(pa.FixedSizeListArray.from_arrays(pa.array(matrix.reshape(-1)), dimension))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def check_vectors(
    chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]] | None, embedder_name: str | None
) -> int | None:
    """The vectors' dimension (None when no vectors are given); ``ValueError`` for vectors that do not fit."""
    if vectors is None:
        return None
    if not embedder_name:
        raise ValueError("vectors need the name of the embedder that made them")
    if len(vectors) != len(chunks):
        raise ValueError(f"{len(vectors)} vectors for {len(chunks)} chunks")
    if not chunks:
        return None
    try:
        matrix = np.asarray(vectors, dtype=np.float32)
    except ValueError as exc:
        raise ValueError("vectors must all have the same dimension") from exc
    if matrix.ndim != 2 or matrix.shape[1] == 0:
        raise ValueError("vectors must be non-empty sequences of numbers")
    if not np.isfinite(matrix).all():
        raise ValueError("vectors must hold finite numbers")
    return int(matrix.shape[1])


def normalised(vectors: Sequence[Sequence[float]] | np.ndarray[Any, Any]) -> np.ndarray[Any, np.dtype[np.float32]]:
    matrix = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return cast("np.ndarray[Any, np.dtype[np.float32]]", matrix / np.where(norms == 0, 1, norms))


def _check_chunks(document_id: str, chunks: Sequence[Chunk]) -> None:
    ids: set[str] = set()
    seqs: set[int] = set()
    kb_ids = {chunk.knowledge_base_id for chunk in chunks}
    if len(kb_ids) > 1:
        raise ValueError(f"chunks of document {document_id!r} belong to several knowledge bases")
    for chunk in chunks:
        if chunk.document_id != document_id:
            raise ValueError(f"chunk {chunk.id!r} belongs to document {chunk.document_id!r}, not {document_id!r}")
        if chunk.id in ids or chunk.seq in seqs:
            raise ValueError(f"chunk {chunk.id!r} (seq {chunk.seq}) appears twice in document {document_id!r}")
        if chunk.type not in CHUNK_TYPES:
            raise ValueError(f"chunk {chunk.id!r} has an unknown type {chunk.type!r}")
        ids.add(chunk.id)
        seqs.add(chunk.seq)


def chunk_of(row: Mapping[str, Any], kb_id: str) -> Chunk:
    headings = row["heading_path"]
    return Chunk(
        id=row["id"],
        knowledge_base_id=kb_id,
        document_id=row["document_id"],
        document_title=row["document_title"],
        seq=int(row["seq"]),
        text=row["text"],
        start_line=int(row["start_line"]),
        end_line=int(row["end_line"]),
        start_offset=int(row["start_offset"]),
        end_offset=int(row["end_offset"]),
        heading_path=() if headings in (None, "[]") else tuple(json.loads(headings)),
        type=cast(ChunkType, row["type"]),
    )
