"""The Lance search index at scale, on S3 with its DynamoDB commit store, next to the SQLite file index on S3.

Both run against one moto server (S3 and DynamoDB) on 127.0.0.1, started by this script in its own process and
stopped at the end. The server counts the bytes of every S3 response body it sends (GET), so a query's reads from
S3 are known exactly, and serves a range request in the time of its range, as S3 does (moto alone reads the whole
object for each).

The corpus is synthetic and deterministic (``--seed``): documents of 10 chunks, half English (words of a
20,000-word vocabulary drawn with a Zipf law) and half Chinese (two-character words, the same law); each chunk has a
unit vector of ``--dim`` dimensions drawn around one of 256 centres (embeddings cluster; uniform random vectors
would be the worst case of any vector index). Queries: two mid-frequency English words, one or two Chinese words, a
vector near a centre; hybrid is the product's (keyword 20 + semantic 20, reciprocal rank fusion); "filtered" asks
keyword and semantic within 5 documents.

Steps, per engine:

    ingest     lance: every document written through the adapter (chunk rows analysed as the product does),
               ``--batch`` documents per commit, then the upkeep job (compaction, inverted indexes, the IVF-PQ
               vector index, statistics) timed apart; files: the SQLite file built on local disk (the file index
               cannot take more than one writer per knowledge base, each write downloading and uploading the whole
               file), then uploaded and published
    write      ``--writes`` documents replaced one at a time through ``replace_document`` on the full index, and
               as many deleted: the product's own write path
    warm       ``--queries`` queries of each kind after 10 warm-up ones, the engines taking turns on each query
    cold       ``--cold`` fresh processes per engine and kind: imports, then one query, and the S3 bytes it read

    .venv/bin/python tests/bench/lance_scale.py --chunks 100000            # both engines
    .venv/bin/python tests/bench/lance_scale.py --chunks 1000000 --engines lance
    .venv/bin/python tests/bench/lance_scale.py --chunks 100000 --key-index-ab   # B-tree keys on/off, writes

``--key-index-ab`` builds two Lance knowledge bases of the same corpus, one with the B-tree indexes on ``id`` and
``document_id`` and one without (as datasets created before them), and times their writes and deletes in turns.

Numbers depend on the machine and its load: quote them with the command line, compare engines within one run.
"""

# Over 400 lines: a benchmark with its own S3-counting server, corpus, engines and fresh-process probes.

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CHUNKS_PER_DOCUMENT = 10
CENTRES = 256
VOCABULARY = 20_000
WARMUP = 10
BATCH_ROWS = 20_000  # chunks generated at a time
KINDS = ("keyword_en", "keyword_zh", "semantic", "hybrid", "filtered_keyword", "filtered_semantic")
REGION = "eu-west-1"
KB = "kb_scale"
HAN = (
    "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法"
    "所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政"
    "四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最"
    "立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根"
    "论运农指几九区强放决西被干做必战先回则任取据处府局检索库识"
)


# ---------------------------------------------------------------------------------------------- the S3-counting server


class _Counting:
    """WSGI middleware: counts S3 GET responses and their body bytes; ``/_bench/s3`` reads (GET) or resets (POST)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.gets = 0
        self.bytes = 0

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if environ.get("PATH_INFO") == "/_bench/s3":
            if environ["REQUEST_METHOD"] == "POST":
                self.gets = self.bytes = 0
            body = json.dumps({"gets": self.gets, "bytes": self.bytes}).encode()
            start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [body]
        is_s3_get = environ["REQUEST_METHOD"] == "GET" and "/s3/aws4_request" in environ.get("HTTP_AUTHORIZATION", "")
        result = self.app(environ, start_response)
        if not is_s3_get:
            return result
        self.gets += 1
        return self._counted(result)

    def _counted(self, result: Any) -> Iterator[bytes]:
        try:
            for part in result:
                self.bytes += len(part)
                yield part
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()


def _ranges_as_s3(kept_bytes: int = 4 << 30) -> None:
    """Make moto serve a range GET as S3 does, in the time of its range: moto reads an object's whole body from its
    buffer for every GET, one GET of a key at a time (under the key's lock), so a take of 10 rows from a 244 MB Lance
    data file (about 120 range GETs) cost seconds that S3 does not spend. The bodies read last are kept, up to
    ``kept_bytes`` in all (at 1M chunks, keeping every body read made the server run out of memory while compacting);
    a new value drops the kept one."""
    import threading
    from collections import OrderedDict

    from moto.s3.models import FakeKey

    plain: Any = vars(FakeKey)["value"]  # the property itself
    recent: OrderedDict[int, tuple[Any, bytes]] = OrderedDict()
    held = {"bytes": 0}
    lock = threading.Lock()

    def kept(key: Any) -> bytes:
        with lock:
            found = recent.get(id(key))
            if found is not None and found[0] is key:
                recent.move_to_end(id(key))
                return found[1]
        body: bytes = plain.fget(key)
        with lock:
            previous = recent.pop(id(key), None)
            held["bytes"] += len(body) - (len(previous[1]) if previous else 0)
            recent[id(key)] = (key, body)
            while held["bytes"] > kept_bytes and len(recent) > 1:
                _, (_, dropped) = recent.popitem(last=False)
                held["bytes"] -= len(dropped)
        return body

    def replace(key: Any, value: bytes) -> None:
        with lock:
            previous = recent.pop(id(key), None)
            if previous is not None:
                held["bytes"] -= len(previous[1])
        plain.fset(key, value)

    FakeKey.value = property(kept, replace)  # type: ignore[method-assign,assignment]


def serve_moto(port: int, parent: int) -> None:
    """Run moto on 127.0.0.1:``port`` until the parent process is gone (a bounded server: it never outlives us)."""
    import threading

    from moto.server import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    _ranges_as_s3()
    server = make_server("127.0.0.1", port, _Counting(DomainDispatcherApplication(create_backend_app)), threaded=True)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        server.shutdown()

    threading.Thread(target=watch, daemon=True).start()
    server.serve_forever()


@contextmanager
def moto_process() -> Iterator[str]:
    from tests.support.serve import free_port

    port = free_port()
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve-moto", str(port), "--parent", str(os.getpid())],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                s3_read(url)
                break
            except OSError:
                time.sleep(0.1)
        yield url
    finally:
        child.terminate()
        child.wait(30)


def s3_read(url: str, *, reset: bool = False) -> dict[str, int]:
    request = urllib.request.Request(f"{url}/_bench/s3", method="POST" if reset else "GET")  # noqa: S310 - http://127.0.0.1
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=10) as reply:
        return dict(json.loads(reply.read()))


# ---------------------------------------------------------------------------------------------- the corpus


@dataclass(frozen=True)
class Corpus:
    seed: int
    dim: int
    english: list[str]
    chinese: list[str]
    weights: np.ndarray[Any, Any]
    centres: np.ndarray[Any, Any]

    @classmethod
    def make(cls, seed: int, dim: int) -> Corpus:
        rng = np.random.default_rng(seed)
        letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
        english: list[str] = []
        seen: set[str] = set()
        while len(english) < VOCABULARY:
            word = "".join(rng.choice(letters, size=int(rng.integers(3, 10))))
            if word not in seen:
                seen.add(word)
                english.append(word)
        han = np.array(list(dict.fromkeys(HAN)))
        chinese: list[str] = []
        seen.clear()
        while len(chinese) < VOCABULARY:
            word = "".join(rng.choice(han, size=2))
            if word not in seen:
                seen.add(word)
                chinese.append(word)
        ranks = np.arange(1, VOCABULARY + 1, dtype=np.float64)
        weights = 1.0 / ranks**1.07
        centres = rng.standard_normal((CENTRES, dim)).astype(np.float32)
        centres /= np.linalg.norm(centres, axis=1, keepdims=True)
        return cls(seed, dim, english, chinese, weights / weights.sum(), centres)

    def batch(self, start: int, count: int) -> tuple[list[str], np.ndarray[Any, Any]]:
        """Texts and unit vectors of chunks ``start`` .. ``start + count`` (the same for any batching)."""
        texts: list[str] = []
        rng = np.random.default_rng([self.seed, start])
        words = rng.choice(VOCABULARY, size=(count, 48), p=self.weights)
        for offset in range(count):
            document = (start + offset) // CHUNKS_PER_DOCUMENT
            row = words[offset]
            if document % 2 == 0:
                texts.append(" ".join(self.english[w] for w in row[:40]).capitalize() + ".")
            else:
                texts.append("".join(self.chinese[w] for w in row) + "。")
        centre = rng.integers(0, CENTRES, size=count)
        vectors = self.centres[centre] + 0.35 * rng.standard_normal((count, self.dim)).astype(np.float32) / np.sqrt(
            self.dim / 16
        )
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        return texts, vectors.astype(np.float32)

    def queries(self, n: int, documents: int, seed: int) -> list[dict[str, Any]]:
        rng = np.random.default_rng([self.seed, seed, 99])
        made = []
        for _ in range(n):
            en = rng.integers(50, 3000, size=2)
            zh = rng.integers(20, 2000, size=int(rng.integers(1, 3)))
            vector = self.centres[int(rng.integers(0, CENTRES))] + 0.3 * rng.standard_normal(self.dim) / np.sqrt(
                self.dim / 16
            )
            made.append(
                {
                    "en": " ".join(self.english[int(w)] for w in en),
                    "zh": "".join(self.chinese[int(w)] for w in zh),
                    "vector": (vector / np.linalg.norm(vector)).astype(np.float32).tolist(),
                    "documents": [f"doc_{int(d):07d}" for d in rng.integers(0, documents, size=5)],
                }
            )
        return made


def chunk_objects(corpus: Corpus, start: int, count: int) -> Iterator[tuple[str, list[Any], np.ndarray[Any, Any]]]:
    """(document id, chunks, vectors) of whole documents from chunk ``start`` (a multiple of 10)."""
    from mcpbridge.domain.knowledge import Chunk

    texts, vectors = corpus.batch(start, count)
    for first in range(0, count, CHUNKS_PER_DOCUMENT):
        document_id = f"doc_{(start + first) // CHUNKS_PER_DOCUMENT:07d}"
        parts = [
            Chunk(
                id=Chunk.make_id(document_id, seq),
                knowledge_base_id=KB,
                document_id=document_id,
                document_title=f"Document {document_id}",
                seq=seq,
                text=texts[first + seq],
                start_line=seq + 1,
                end_line=seq + 1,
                start_offset=0,
                end_offset=len(texts[first + seq]),
            )
            for seq in range(CHUNKS_PER_DOCUMENT)
        ]
        yield document_id, parts, vectors[first : first + CHUNKS_PER_DOCUMENT]


# ---------------------------------------------------------------------------------------------- the engines


@dataclass(frozen=True)
class Place:
    url: str
    bucket: str
    table: str
    commits: str
    cache: str

    def client(self, service: str) -> Any:
        import boto3

        return boto3.client(
            service,  # type: ignore[call-overload]
            region_name=REGION,
            endpoint_url=self.url,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )


def make_place(url: str, cache: str) -> Place:
    from tests.support.aws import table_create_kwargs
    from tests.support.lance import commit_table_kwargs

    suffix = uuid.uuid4().hex[:8]
    place = Place(url, f"scale-{suffix}", f"store-{suffix}", f"commits-{suffix}", cache)
    dynamodb = place.client("dynamodb")
    dynamodb.create_table(**table_create_kwargs(place.table))
    dynamodb.create_table(**commit_table_kwargs(place.commits))
    place.client("s3").create_bucket(Bucket=place.bucket, CreateBucketConfiguration={"LocationConstraint": REGION})
    return place


def open_engine(place: Place, engine: str, name: str = KB) -> Any:
    from mcpbridge.adapters.aws.dynamodb import DynamoStore
    from mcpbridge.adapters.system_clock import SystemClock

    clock = SystemClock()
    store = DynamoStore(place.client("dynamodb"), place.table, clock)
    if engine == "lance":
        from tests.support.lance import storage_options

        from mcpbridge.adapters.lance.search_index import LanceSearchIndex
        from mcpbridge.adapters.lance.tables import LanceLocation

        location = LanceLocation(
            f"s3+ddb://{place.bucket}/lance", commit_table=place.commits, storage_options=storage_options(place.url)
        )
        return LanceSearchIndex(store, location, clock)
    from mcpbridge.adapters.aws.s3_search_index import S3IndexFiles
    from mcpbridge.adapters.index_files.search_index import FileSearchIndex

    cache = Path(place.cache) / f"files-{uuid.uuid4().hex[:8]}"
    return FileSearchIndex(S3IndexFiles(store, place.client("s3"), place.bucket, cache, clock))


def ingest_lance(
    place: Place, corpus: Corpus, chunks: int, batch: int, writers: int, kb: str = KB, key_indexes: bool = True
) -> dict[str, float]:
    """Every document through the adapter, ``writers`` processes committing at once, then the upkeep job."""
    index = open_engine(place, "lance")
    start = time.perf_counter()
    document_id, parts, vectors = next(chunk_objects(corpus, 0, CHUNKS_PER_DOCUMENT))
    with _key_indexes(key_indexes):
        index.replace_document(kb, document_id, _in(parts, kb), vectors, "synthetic", language="english")
    documents = chunks // CHUNKS_PER_DOCUMENT
    shares = np.linspace(1, documents, writers + 1).astype(int)
    parts_state = [
        {"place": place.__dict__, "kb": kb, "first": int(a), "end": int(b), "batch": batch, "seed": corpus.seed}
        | {"dim": corpus.dim}
        for a, b in itertools.pairwise(shares)
    ]
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    children = [
        subprocess.Popen([sys.executable, __file__, "--ingest-part", json.dumps(state)], env=env)
        for state in parts_state
    ]
    failed = [child.wait(7200) for child in children]
    if any(failed):
        raise RuntimeError(f"an ingest process failed: {failed}")
    written = time.perf_counter() - start
    held = index.count(kb, f"doc_{documents - 1:07d}")
    start = time.perf_counter()
    index.optimise(kb, grace_seconds=0)
    optimised = time.perf_counter() - start
    rows = int(index.dataset(index.pointer(kb)).count_rows())
    index.close()
    if rows != chunks or held != CHUNKS_PER_DOCUMENT:
        raise RuntimeError(f"{rows} rows after ingesting {chunks} chunks")
    return {"write_s": written, "optimise_s": optimised, "chunks_per_s": chunks / (written + optimised), "rows": rows}


@contextmanager
def _key_indexes(on: bool) -> Iterator[None]:
    from mcpbridge.adapters.lance import datasets

    kept = datasets.KEY_INDEXES
    datasets.KEY_INDEXES = kept if on else ()  # type: ignore[misc]
    try:
        yield
    finally:
        datasets.KEY_INDEXES = kept  # type: ignore[misc]


def ingest_part(state: dict[str, Any]) -> None:
    """One writer process: documents ``first`` .. ``end`` of the corpus, ``batch`` documents per commit."""
    corpus = Corpus.make(state["seed"], state["dim"])
    index = open_engine(Place(**state["place"]), "lance")
    kb = state["kb"]
    pointer = index.pointer(kb)
    pending: list[tuple[str, list[Any], Any, str]] = []
    first, end = state["first"] * CHUNKS_PER_DOCUMENT, state["end"] * CHUNKS_PER_DOCUMENT
    for at in range(first, end, BATCH_ROWS):
        for document_id, parts, vectors in chunk_objects(corpus, at, min(BATCH_ROWS, end - at)):
            pending.append((document_id, _in(parts, kb), vectors, uuid.uuid4().hex))
            if len(pending) >= state["batch"]:
                index.write_documents(pointer, pointer.table, pointer.language, pending)
                pending = []
    if pending:
        index.write_documents(pointer, pointer.table, pointer.language, pending)
    index.close()


def _in(parts: list[Any], kb: str) -> list[Any]:
    if kb == KB:
        return parts
    from dataclasses import replace

    return [replace(part, knowledge_base_id=kb) for part in parts]


def ingest_files(place: Place, corpus: Corpus, chunks: int) -> dict[str, float]:
    from mcpbridge.adapters.aws.s3_search_index import S3IndexFiles, _checkpoint, pointer_key
    from mcpbridge.adapters.index_files.kb_index import KbIndexFile

    start = time.perf_counter()
    path = Path(place.cache) / "built.sqlite3"
    built = KbIndexFile(path)
    for first in range(0, chunks, BATCH_ROWS):
        for document_id, parts, vectors in chunk_objects(corpus, first, min(BATCH_ROWS, chunks - first)):
            built.replace_document(document_id, parts, vectors, "synthetic", language="english")
    built.close()
    _checkpoint(path)
    written = time.perf_counter() - start
    start = time.perf_counter()
    key = S3IndexFiles.new_object_key(KB, 1)
    place.client("s3").upload_file(str(path), place.bucket, key)
    from mcpbridge.adapters.aws.dynamodb import DynamoStore
    from mcpbridge.adapters.system_clock import SystemClock

    DynamoStore(place.client("dynamodb"), place.table, SystemClock()).put(
        {**pointer_key(KB).as_dict(), "version": 1, "object": key}
    )
    uploaded = time.perf_counter() - start
    size = path.stat().st_size
    path.unlink()
    return {"write_s": written, "upload_s": uploaded, "chunks_per_s": chunks / (written + uploaded), "bytes": size}


def product_writes(index: Any, corpus: Corpus, chunks: int, writes: int, kb: str = KB) -> Iterator[tuple[str, float]]:
    """Replace then delete ``writes`` existing documents one call at a time: ("write"|"delete", seconds)."""
    documents = chunks // CHUNKS_PER_DOCUMENT
    picked = np.random.default_rng(corpus.seed + 5).choice(documents, size=writes, replace=False)
    for number in picked:
        first = int(number) * CHUNKS_PER_DOCUMENT
        document_id, parts, vectors = next(chunk_objects(corpus, first, CHUNKS_PER_DOCUMENT))
        start = time.perf_counter()
        index.replace_document(kb, document_id, _in(parts, kb), vectors, "synthetic", language="english")
        yield "write", time.perf_counter() - start
        start = time.perf_counter()
        index.delete_document(kb, document_id)
        yield "delete", time.perf_counter() - start


# ---------------------------------------------------------------------------------------------- queries


def query_runner(index: Any, kind: str, kb: str = KB) -> Callable[[dict[str, Any]], int]:
    from mcpbridge.domain.ranking import fuse

    def run(q: dict[str, Any]) -> int:
        if kind == "keyword_en":
            return len(index.keyword([kb], q["en"], limit=10))
        if kind == "keyword_zh":
            return len(index.keyword([kb], q["zh"], limit=10))
        if kind == "semantic":
            return len(index.semantic([kb], q["vector"], limit=10))
        if kind == "hybrid":
            keyword = index.keyword([kb], q["en"], limit=20)
            semantic = index.semantic([kb], q["vector"], limit=20)
            return len(fuse(keyword, semantic, limit=10))
        if kind == "filtered_keyword":
            return len(index.keyword([kb], q["en"], document_ids=q["documents"], limit=10))
        return len(index.semantic([kb], q["vector"], document_ids=q["documents"], limit=10))

    return run


def warm(indexes: dict[str, Any], queries: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """p50/p95 ms per engine and kind, the engines taking turns on each query."""
    table: dict[str, dict[str, dict[str, float]]] = {name: {} for name in indexes}
    for kind in KINDS:
        runners = {name: query_runner(index, kind) for name, index in indexes.items()}
        times: dict[str, list[float]] = {name: [] for name in indexes}
        found: dict[str, int] = dict.fromkeys(indexes, 0)
        for n, q in enumerate(queries):
            for name, run in runners.items():
                start = time.perf_counter()
                hits = run(q)
                if n >= WARMUP:
                    times[name].append(time.perf_counter() - start)
                    found[name] += hits
        for name in indexes:
            table[name][kind] = {
                "p50_ms": 1000 * _p(times[name], 0.5),
                "p95_ms": 1000 * _p(times[name], 0.95),
                "hits_per_query": found[name] / max(len(times[name]), 1),
            }
            print(f"warm {name} {kind}: {table[name][kind]}", file=sys.stderr, flush=True)
    return table


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    at = q * (len(ordered) - 1)
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def fresh_probe(state: dict[str, Any]) -> dict[str, Any]:
    """In a fresh process: imports and opening, then one query of ``state['kind']`` and the S3 bytes it read."""
    start = time.perf_counter()
    place = Place(**state["place"])
    index = open_engine(place, state["engine"])
    corpus_query = state["query"]
    run = query_runner(index, state["kind"])
    opened = time.perf_counter() - start
    s3_read(place.url, reset=True)
    start = time.perf_counter()
    run(corpus_query)
    first = time.perf_counter() - start
    read = s3_read(place.url)
    start = time.perf_counter()
    run(corpus_query)
    second = time.perf_counter() - start
    index.close()
    return {"open_s": opened, "first_ms": 1000 * first, "second_ms": 1000 * second, **read}


def cold(place: Place, engines: Sequence[str], queries: list[dict[str, Any]], runs: int) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for kind in KINDS:
        samples: dict[str, list[dict[str, Any]]] = {engine: [] for engine in engines}
        for n in range(runs):
            for engine in engines:  # interleaved
                state = {"place": place.__dict__, "engine": engine, "kind": kind, "query": queries[n]}
                done = subprocess.run(
                    [sys.executable, __file__, "--probe", json.dumps(state)],
                    capture_output=True,
                    text=True,
                    timeout=300,
                    check=True,
                    env={**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"},
                )
                samples[engine].append(json.loads(done.stdout.strip().splitlines()[-1]))
        for engine, found in samples.items():
            table.setdefault(engine, {})[kind] = {
                key: statistics.median(s[key] for s in found) for key in ("open_s", "first_ms", "second_ms", "bytes")
            } | {"gets": statistics.median(s["gets"] for s in found), "runs": len(found)}
            print(f"cold {engine} {kind}: {table[engine][kind]}", file=sys.stderr, flush=True)
    return table


# ---------------------------------------------------------------------------------------------- the run


def key_index_ab(place: Place, corpus: Corpus, args: argparse.Namespace) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for kb, keys in (("kb_btree", True), ("kb_plain", False)):
        figures[kb] = {"ingest": ingest_lance(place, corpus, args.chunks, args.batch, args.writers, kb, keys)}
    indexes = {kb: open_engine(place, "lance") for kb in figures}
    streams = {kb: product_writes(indexes[kb], corpus, args.chunks, args.writes, kb) for kb in figures}
    times: dict[str, dict[str, list[float]]] = {kb: {"write": [], "delete": []} for kb in figures}
    for _ in range(2 * args.writes):
        for kb, stream in streams.items():  # interleaved
            what, seconds = next(stream)
            times[kb][what].append(seconds)
    for kb in figures:
        for what, values in times[kb].items():
            figures[kb][what] = {"p50_ms": 1000 * _p(values, 0.5), "p95_ms": 1000 * _p(values, 0.95)}
        run = query_runner(indexes[kb], "keyword_en", kb)
        figures[kb]["keyword_after_writes_hits"] = sum(run(q) for q in corpus.queries(20, args.chunks // 10, 3))
        indexes[kb].close()
    return figures


def main_run(args: argparse.Namespace) -> dict[str, Any]:
    corpus = Corpus.make(args.seed, args.dim)
    documents = args.chunks // CHUNKS_PER_DOCUMENT
    queries = corpus.queries(args.queries + WARMUP, documents, 1)
    result: dict[str, Any] = {
        "command": " ".join(["tests/bench/lance_scale.py", *sys.argv[1:]]),
        "chunks": args.chunks,
        "dim": args.dim,
        "python": sys.version.split()[0],
    }
    with tempfile.TemporaryDirectory(prefix="mcpbridge-scale-") as cache, moto_process() as url:
        place = make_place(url, cache)
        if args.key_index_ab:
            result["key_index_ab"] = key_index_ab(place, corpus, args)
            return result
        ingest: dict[str, Any] = {}
        for engine in args.engines:
            ingest[engine] = (
                ingest_lance(place, corpus, args.chunks, args.batch, args.writers)
                if engine == "lance"
                else (ingest_files(place, corpus, args.chunks))
            )
            print(f"ingested {engine}: {ingest[engine]}", file=sys.stderr, flush=True)
        result["ingest"] = ingest
        result["s3_objects_bytes"] = _bucket_bytes(place)
        indexes = {engine: open_engine(place, engine) for engine in args.engines}
        result["warm"] = warm(indexes, queries)
        print(f"warm: {result['warm']}", file=sys.stderr, flush=True)
        result["cold"] = cold(place, args.engines, queries, args.cold)
        print(f"cold: {result['cold']}", file=sys.stderr, flush=True)
        writes: dict[str, Any] = {}
        for engine, index in indexes.items():
            times: dict[str, list[float]] = {"write": [], "delete": []}
            for what, seconds in product_writes(index, corpus, args.chunks, args.writes):
                times[what].append(seconds)
            writes[engine] = {w: {"p50_ms": 1000 * _p(v, 0.5), "max_ms": 1000 * max(v)} for w, v in times.items()}
            index.close()
        result["writes"] = writes
    return result


def _bucket_bytes(place: Place) -> dict[str, int]:
    s3 = place.client("s3")
    sizes: dict[str, int] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=place.bucket):
        for item in page.get("Contents", []):
            top = str(item["Key"]).split("/")[0]
            sizes[top] = sizes.get(top, 0) + int(item["Size"])
    return sizes


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--engines", nargs="+", choices=["lance", "files"], default=["lance", "files"])
    parser.add_argument("--batch", type=int, default=1000, help="documents per Lance commit while ingesting")
    parser.add_argument("--writers", type=int, default=2, help="processes writing to Lance at once while ingesting")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--cold", type=int, default=3, help="fresh processes per engine and kind")
    parser.add_argument("--writes", type=int, default=10, help="documents replaced, then deleted, one at a time")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--key-index-ab", action="store_true")
    parser.add_argument("--serve-moto", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--parent", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--probe", help=argparse.SUPPRESS)
    parser.add_argument("--ingest-part", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_moto:
        serve_moto(args.serve_moto, args.parent)
        return 0
    if args.ingest_part:
        ingest_part(json.loads(args.ingest_part))
        return 0
    if args.probe:
        print(json.dumps(fresh_probe(json.loads(args.probe))))
        return 0
    if args.chunks % CHUNKS_PER_DOCUMENT or args.chunks < 2 * BATCH_ROWS // 10:
        parser.error(f"--chunks must be a multiple of {CHUNKS_PER_DOCUMENT} and at least {2 * BATCH_ROWS // 10}")
    print(json.dumps(main_run(args), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
