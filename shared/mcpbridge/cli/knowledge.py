"""``mcpbridge kb``: knowledge bases through ``/api/v1/knowledge-bases``, ``/api/v1/documents`` and
``/api/v1/knowledge/search``; ``mcpbridge kb ask`` and ``mcpbridge sessions`` through ``/api/v1/knowledge/ask`` and
``/api/v1/knowledge/sessions``.

``kb add`` sends each file in one request (``.../documents/upload``), or, when the server answers that it is larger
than a request may carry (413), through an upload (``.../documents/uploads``: the file posted to the form it
answers, straight to S3 on AWS, then ``complete``); a URL is fetched by the API (``.../documents`` with ``url``).
Then it follows each document's ``parse_status`` until it is ``completed`` or ``failed``, with a progress bar on a
terminal, while the server indexes them (``mcpbridge serve`` itself, the indexer function on AWS).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import quote, urlsplit

from mcpbridge.cli.api import Api, Problem, command
from mcpbridge.cli.output import Column, Progress, deleted, emit, field, shorten, table
from mcpbridge.errors import InvalidInput

KNOWLEDGE_BASES = "/api/v1/knowledge-bases"
DOCUMENTS = "/api/v1/documents"
_FINAL = frozenset({"completed", "failed", "draft"})
_ADDED = frozenset({"completed", "draft"})  # a draft is kept, never indexed
_UPLOAD_SECONDS = 900.0
_URL = re.compile(r"^https?://", re.IGNORECASE)


def kb_id(api: Api, reference: str) -> str:
    return api.resolve(KNOWLEDGE_BASES, reference, "kb", "knowledge base")


_KB_COLUMNS: list[Column] = [
    ("ID", field("id")),
    ("NAME", field("name")),
    ("DOCUMENTS", field("document_count")),
    ("CAPABILITIES", field("capabilities")),
    ("DESCRIPTION", lambda row: shorten(row["description"], 50)),
]
_DOCUMENT_COLUMNS: list[Column] = [
    ("ID", field("id")),
    ("STATUS", field("parse_status")),
    ("CHUNKS", field("chunk_count")),
    ("TITLE", field("title")),
]


@command()
def kb_list(api: Api, args: argparse.Namespace) -> None:
    body = api.every(KNOWLEDGE_BASES)
    emit(args, body, lambda b: table(b["items"], _KB_COLUMNS, empty="No knowledge bases."))


def _print_kb(body: dict[str, Any]) -> None:
    print(f"{body['id']}  {body['name']}")
    for label, name in (("description", "description"), ("language", "language"), ("documents", "document_count")):
        print(f"  {label}: {body[name]}")
    print(f"  capabilities: {', '.join(body['capabilities'])}")


@command()
def kb_show(api: Api, args: argparse.Namespace) -> None:
    emit(args, api.get(f"{KNOWLEDGE_BASES}/{kb_id(api, args.kb)}"), _print_kb)


@command()
def kb_create(api: Api, args: argparse.Namespace) -> None:
    request = {"name": args.name, "description": args.description, "language": args.language}
    body = api.post(KNOWLEDGE_BASES, json=request)
    hint = "fill it: mcpbridge kb add"
    emit(args, body, lambda b: print(f"Knowledge base {b['id']} ({b['name']}) created; {hint} {b['id']} ./docs"))


@command()
def kb_delete(api: Api, args: argparse.Namespace) -> None:
    target = kb_id(api, args.kb)
    api.delete(f"{KNOWLEDGE_BASES}/{target}")
    deleted(args, "knowledge base", target, " Its documents and index are removed in the background.")


@command()
def kb_documents(api: Api, args: argparse.Namespace) -> None:
    params: dict[str, Any] = {"keyword": args.keyword} if args.keyword else {}
    params |= {"status": args.status} if args.status else {}
    params |= {"tag": args.tag} if args.tag else {}
    if args.folder is not None:
        params |= {"folder": args.folder, "subfolders": "true" if args.subfolders else "false"}
    body = api.every(f"{KNOWLEDGE_BASES}/{kb_id(api, args.kb)}/documents", params)
    listed = "items" if "items" in body else "documents"
    emit(args, body, lambda b: table(b[listed], _DOCUMENT_COLUMNS, empty="No documents."))


@command()
def kb_file(api: Api, args: argparse.Namespace) -> None:
    request: dict[str, Any] = {}
    if args.status:
        request["status"] = args.status
    if args.tag is not None:
        request["tags"] = [] if args.tag == [""] else args.tag
    if args.folder is not None:
        request["folder"] = args.folder
    body = api.put(f"{DOCUMENTS}/{args.document}", json=request)
    tags = ", ".join(body["tags"]) or "no tags"
    emit(args, body, lambda b: print(f"{b['id']} ({b['title']}): {b['status']}, {tags}, folder /{b['folder']}"))


@command()
def kb_delete_chunk(api: Api, args: argparse.Namespace) -> None:
    body = api.delete(f"{DOCUMENTS}/{args.document}/chunks/{quote(args.chunk, safe='')}")
    emit(args, body, lambda b: print(f"Deleted chunk {args.chunk}; {b['id']} now has {b['chunk_count']} chunks."))


@command()
def kb_search(api: Api, args: argparse.Namespace) -> None:
    request: dict[str, Any] = {"query": args.query, "mode": args.mode, "limit": args.limit}
    if args.kb:
        request["knowledge_base_ids"] = [kb_id(api, kb) for kb in args.kb]
    if args.drafts:
        request["include_drafts"] = True
    body = api.post("/api/v1/knowledge/search", json=request)
    emit(args, body, _print_results)


def _print_results(body: dict[str, Any]) -> None:
    for notice in body["notices"]:
        print(f"note: {notice}")
    if not body["results"]:
        print("Nothing found.")
    for rank, hit in enumerate(body["results"], 1):
        where = " › ".join([hit["document_title"], *hit["heading_path"]])
        draft = " [draft]" if hit.get("document_status") == "draft" else ""
        print(f"{rank}. {where}{draft}  (lines {hit['start_line']}-{hit['end_line']}, score {hit['score']:.3f})")
        print(f"   {hit['document_id']} in {hit['knowledge_base_id']}")
        for line in [line for line in hit["text"].splitlines() if line.strip()][:3]:
            print(f"   {shorten(line, 110)}")


@command()
def kb_ask(api: Api, args: argparse.Namespace) -> None:
    request: dict[str, Any] = {"question": args.question}
    if args.session:
        request["session_id"] = args.session
    if args.kb:
        request["knowledge_base_ids"] = [kb_id(api, kb) for kb in args.kb]
    emit(args, api.post("/api/v1/knowledge/ask", json=request), _print_answer)


def _print_answer(body: dict[str, Any]) -> None:
    for notice in body["notices"]:
        print(f"note: {notice}")
    print(body["answer"])
    for ref in body["references"]:
        print(f"[{ref['n']}] {ref['document_title']}, lines {ref['start_line']}-{ref['end_line']}")
    print(f"session: {body['session_id']} (continue with --session {body['session_id']})")


# ---------------------------------------------------------------------------------------------------- sessions

SESSIONS = "/api/v1/knowledge/sessions"
_SESSION_COLUMNS: list[Column] = [
    ("ID", field("id")),
    ("TURNS", field("turn_count")),
    ("UPDATED", field("updated_at")),
    ("TITLE", lambda row: shorten(row["title"], 60)),
]


@command()
def sessions_list(api: Api, args: argparse.Namespace) -> None:
    body = api.every(SESSIONS)
    emit(args, body, lambda b: table(b["items"], _SESSION_COLUMNS, empty="No sessions."))


def _print_session(body: dict[str, Any]) -> None:
    print(f"{body['id']}  {body['title']}")
    print(f"  turns: {body['turn_count']}, updated {body['updated_at']}")
    for turn in body["turns"]:
        print(f"\nQ: {turn['question']}\nA: {turn['answer']}")


@command()
def sessions_show(api: Api, args: argparse.Namespace) -> None:
    emit(args, api.get(f"{SESSIONS}/{args.session}"), _print_session)


@command()
def sessions_delete(api: Api, args: argparse.Namespace) -> None:
    api.delete(f"{SESSIONS}/{args.session}")
    deleted(args, "session", args.session)


# ---------------------------------------------------------------------------------------------------- kb add


class Source(NamedTuple):
    label: str
    title: str | None
    url: str | None = None
    path: Path | None = None


def sources_of(arguments: list[str], title: str | None) -> list[Source]:
    """Every document the arguments name, checked before anything is sent: a source that is neither an http(s)
    URL, a file nor a folder holding a document is refused, and nothing is added."""
    found: list[Source] = []
    for raw in arguments:
        if _URL.match(raw):
            found.append(Source(raw, title or _url_title(raw), url=raw))
            continue
        path = Path(raw).expanduser()
        if path.is_file():
            found.append(Source(raw, title, path=path))
        elif path.is_dir():
            files = _documents_in(path)
            if not files:
                raise InvalidInput(f"{raw}: no Markdown, text, HTML or PDF file in this folder", code="invalid_source")
            found += [Source(str(f), f.relative_to(path).as_posix(), path=f) for f in files]
        else:
            raise InvalidInput(f"{raw}: no such file or folder (nor an http:// or https:// URL)", code="invalid_source")
    if title is not None and len(found) > 1:
        raise InvalidInput(f"--title names one document, and these sources are {len(found)}", code="invalid_title")
    return found


def folder_suffixes() -> frozenset[str]:
    """What a folder contributes: the files the parser knows by their extension (Markdown, text, HTML, PDF)."""
    from mcpbridge.knowledge.parsing import KNOWN_EXTENSIONS

    return frozenset(f".{extension}" for extension in KNOWN_EXTENSIONS)


def _documents_in(folder: Path) -> list[Path]:
    """The folder's documents, recursively, in name order; hidden files and folders are left out."""
    suffixes = folder_suffixes()
    return sorted(
        path
        for path in folder.rglob("*")
        if path.is_file()
        and path.suffix.lower() in suffixes
        and not any(part.startswith(".") for part in path.relative_to(folder).parts)
    )


def _url_title(url: str) -> str:
    parts = urlsplit(url)
    last = parts.path.rstrip("/").rpartition("/")[2]
    return (last or parts.hostname or url)[:255]


@command()
def kb_add(api: Api, args: argparse.Namespace) -> int:
    if not 0 < args.timeout <= 86_400:
        raise InvalidInput("--timeout must be from 0 to 86400 seconds", code="invalid_timeout")
    sources = sources_of(args.sources, args.title)
    target = kb_id(api, args.kb)
    api.get(f"{KNOWLEDGE_BASES}/{target}")  # a knowledge base this caller cannot reach: nothing is sent
    progress = Progress(len(sources), "Adding", quiet=args.json)
    created: list[tuple[Source, dict[str, Any]]] = []
    errors: list[dict[str, Any]] = []
    for done, source in enumerate(sources, 1):
        progress.update(done - 1, source.label)
        try:
            created.append((source, _send(api, target, source, _filing(args))))
        except Problem as problem:
            errors.append({"source": source.label, **problem.body})
            progress.note(f"not added  {source.label}: {problem.message}")
        except OSError as exc:
            errors.append({"source": source.label, "status": None, "code": "unreadable", "detail": str(exc)})
            progress.note(f"not added  {source.label}: {exc}")
    progress.close()
    documents = _indexed(api, created, errors, args)
    emit(args, {"items": documents, "errors": errors}, lambda _: _summary(args.kb, documents, errors))
    missing = len(sources) - sum(1 for d in documents if d["parse_status"] in _ADDED)
    if missing:
        print(f"mcpbridge: {missing} of {len(sources)} document(s) were not added or not indexed", file=sys.stderr)
        return 1
    return 0


def _filing(args: argparse.Namespace) -> dict[str, Any]:
    """``--draft``, ``--tag`` and ``--folder`` as the API's fields."""
    filing: dict[str, Any] = {"status": "draft"} if args.draft else {}
    if args.tag:
        filing["tags"] = list(args.tag)
    if args.folder is not None:
        filing["folder"] = args.folder
    return filing


def _send(api: Api, kb: str, source: Source, filing: dict[str, Any]) -> dict[str, Any]:
    if source.url is not None:
        body: dict[str, Any] = api.post(
            f"{KNOWLEDGE_BASES}/{kb}/documents", json={"title": source.title, "url": source.url, **filing}
        )
        return body
    assert source.path is not None
    data = source.path.read_bytes()  # nothing else runs meanwhile
    form: dict[str, Any] = {"title": source.title} if source.title else {}
    form |= filing
    files = {"file": (source.path.name, data, "application/octet-stream")}
    try:
        body = api.post(f"{KNOWLEDGE_BASES}/{kb}/documents/upload", files=files, data=form)
    except Problem as problem:
        if problem.status != 413:
            raise
        return _upload(api, kb, source, data, filing)
    return body


def _upload(api: Api, kb: str, source: Source, data: bytes, filing: dict[str, Any]) -> dict[str, Any]:
    """A file larger than a request may carry: posted to the form an upload answers, then completed."""
    assert source.path is not None
    request: dict[str, Any] = {
        "filename": source.path.name[:255],
        "content_type": "application/octet-stream",
        "size_bytes": len(data),
        **filing,
    }
    if source.title:
        request["title"] = source.title
    upload = api.post(f"{KNOWLEDGE_BASES}/{kb}/documents/uploads", json=request)
    files = {upload["file_field"]: (source.path.name, data, "application/octet-stream")}
    if same_origin(upload["url"], api.base_url):  # the embedded backend's own route
        api.post(upload["url"], data=upload["fields"], files=files)
    else:  # a presigned POST to S3
        # Each read or write may stall for 25 s at most; the whole file for _UPLOAD_SECONDS.
        status = _post_to_blob_store(upload["url"], upload["fields"], files)
        if status >= 300:
            refused = f"the blob store refused the file (HTTP {status})"
            raise Problem(status, {"detail": refused})
    completed: dict[str, Any] = api.post(upload["complete_url"])
    return completed


def _post_to_blob_store(url: str, fields: dict[str, Any], files: dict[str, Any]) -> int:
    """A presigned POST (S3): each read or write may stall for 25 s at most, the whole file _UPLOAD_SECONDS."""
    import asyncio

    import httpx2

    async def post() -> int:
        async with asyncio.timeout(_UPLOAD_SECONDS), httpx2.AsyncClient(timeout=httpx2.Timeout(25.0)) as client:
            return (await client.post(url, data=fields, files=files)).status_code

    return asyncio.run(post())


def _indexed(
    api: Api, created: list[tuple[Source, dict[str, Any]]], errors: list[dict[str, Any]], args: argparse.Namespace
) -> list[dict[str, Any]]:
    """Each created document once its indexing ended (or as it stands when --timeout runs out)."""
    latest = {body["id"]: body for _, body in created}
    labels = {body["id"]: source.label for source, body in created}
    waiting = [identifier for identifier, body in latest.items() if body["parse_status"] not in _FINAL]
    progress = Progress(len(latest), "Indexing", quiet=args.json)
    deadline = time.monotonic() + args.timeout
    while True:
        for identifier in list(waiting):
            latest[identifier] = body = api.get(f"{DOCUMENTS}/{identifier}")
            if body["parse_status"] in _FINAL:
                waiting.remove(identifier)
                progress.note(_outcome(labels[identifier], body))
        progress.update(len(latest) - len(waiting), labels[waiting[0]] if waiting else "")
        if not waiting or time.monotonic() >= deadline:
            break
        time.sleep(0.25)
    progress.close()
    for identifier in waiting:
        detail = f"still {latest[identifier]['parse_status']} after {args.timeout:g} s"
        errors.append({"source": labels[identifier], "status": None, "code": "indexing_timeout", "detail": detail})
    return list(latest.values())


def same_origin(url: str, base_url: str) -> bool:
    """Whether ``url`` is on the server itself (scheme, host and port), not another one (S3)."""
    parts, base = urlsplit(url), urlsplit(base_url)
    return (parts.scheme.lower(), parts.netloc.lower()) == (base.scheme.lower(), base.netloc.lower())


def _outcome(label: str, body: dict[str, Any]) -> str:
    if body["parse_status"] == "completed":
        return f"indexed    {label} ({body['chunk_count']} chunks)"
    if body["parse_status"] == "draft":
        return f"draft      {label} (kept, not indexed until published)"
    return f"failed     {label}: {body.get('parse_error') or 'indexing failed'}"


def _summary(kb: str, documents: list[dict[str, Any]], errors: list[dict[str, Any]]) -> None:
    indexed = sum(1 for d in documents if d["parse_status"] == "completed")
    drafts = sum(1 for d in documents if d["parse_status"] == "draft")
    added = f"{indexed} indexed" + (f", {drafts} draft(s)" if drafts else "")
    print(f"Added {len(documents)} document(s) to {kb}: {added}, {len(documents) - indexed - drafts} not.")
    for error in errors:
        print(f"  {error['source']}: {error.get('detail') or error.get('code')}")
