"""Memory of ``mcpbridge serve`` holding a knowledge base of ``--chunks`` chunks x ``--dim`` vectors, next to the size
of the matrix itself, and semantic search through REST before and after a write.

A fresh data directory gets a knowledge base whose index file is written directly (random unit vectors, short
texts); ``serve`` then runs in a subprocess on 127.0.0.1 with an OpenAI-compatible embedder that is a small fake
server in this process (random vectors of the same size), so no model weighs on the figures. Measured from
``/proc/<pid>/status`` (VmRSS): after a keyword search (idle: everything imported, no vector loaded), after the
first semantic search (the matrix loaded), after a document was added and searched again. The ratio to quote is
(loaded - idle) / matrix bytes.

    .venv/bin/python tests/bench/serve_rss.py [--chunks 100000] [--dim 384] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from mcpbridge.adapters.index_files.kb_index import KbIndexFile
from mcpbridge.bootstrap import Container
from mcpbridge.domain.knowledge import Chunk, KnowledgeAccess
from mcpbridge.settings import Settings

REPO = Path(__file__).resolve().parents[2]


def fake_embedder(dim: int) -> tuple[ThreadingHTTPServer, str]:
    rng = np.random.default_rng(5)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            data = [{"index": i, "embedding": rng.standard_normal(dim).tolist()} for i in range(len(body["input"]))]
            payload = json.dumps({"data": data}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run(chunks: int, dim: int) -> dict[str, Any]:
    results: dict[str, Any] = {"chunks": chunks, "dim": dim, "matrix MB": chunks * dim * 4 / 2**20}
    server, base_url = fake_embedder(dim)
    with tempfile.TemporaryDirectory(prefix="mcpbridge-rss-") as tmp:
        data = Path(tmp) / "data"
        env = {
            **os.environ,
            "MCPBRIDGE_DATA_DIR": str(data),
            "MCPBRIDGE_EMBEDDING_PROVIDER": "openai",
            "MCPBRIDGE_EMBEDDING_BASE_URL": base_url,
            "MCPBRIDGE_EMBEDDING_MODEL": "fake",
        }
        settings = Settings(data_dir=data, embedding_provider="openai", embedding_base_url=base_url)
        container = Container(settings, embedder=None)
        key = container.identity.initialize().api_key
        access = KnowledgeAccess(container.identity.initialize().workspace_id)
        kb = container.knowledge_bases.create(access, name="big")
        container.close()
        index = KbIndexFile(settings.indexes_dir / f"{kb.id}.sqlite3")
        rng = np.random.default_rng(3)
        per_document = 10
        for d in range(chunks // per_document):
            rows = [
                Chunk(f"doc{d}#{s:05d}", kb.id, f"doc{d}", f"Document {d}", s, f"note {d} part {s} walrus", 1, 1, 0, 9)
                for s in range(per_document)
            ]
            index.replace_document(f"doc{d}", rows, rng.standard_normal((per_document, dim)).tolist(), "openai:fake")
        index.close()
        port = free_port()
        serve = subprocess.Popen(
            [str(REPO / ".venv/bin/mcpbridge"), "serve", "--port", str(port), "--data-dir", str(data)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            with httpx.Client(
                base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {key}"}, timeout=120
            ) as http:
                for _ in range(200):
                    try:
                        if http.get("/healthz").status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    time.sleep(0.1)

                def search(mode: str) -> float:
                    started = time.perf_counter()
                    response = http.post("/api/v1/knowledge/search", json={"query": "walrus note", "mode": mode})
                    response.raise_for_status()
                    return (time.perf_counter() - started) * 1000

                search("keyword")
                results["RSS idle MB"] = rss_mb(serve.pid)
                results["first semantic ms (loads)"] = search("semantic")
                steady = [search("semantic") for _ in range(20)]
                results["RSS loaded MB"] = rss_mb(serve.pid)
                results["semantic p50 ms"] = float(np.median(steady))
                after = []
                for n in range(5):
                    created = http.post(
                        f"/api/v1/knowledge-bases/{kb.id}/documents",
                        json={"title": f"new {n}", "content": f"A small walrus note number {n}."},
                    ).json()
                    while http.get(f"/api/v1/documents/{created['id']}").json()["parse_status"] != "completed":
                        time.sleep(0.05)
                    after.append(search("semantic"))
                results["semantic after a write p50 ms"] = float(np.median(after))
                results["RSS after writes MB"] = rss_mb(serve.pid)
        finally:
            serve.terminate()
            serve.wait(timeout=30)
            server.shutdown()
    results["(loaded - idle) / matrix"] = (results["RSS loaded MB"] - results["RSS idle MB"]) / results["matrix MB"]
    results["after a write / steady"] = results["semantic after a write p50 ms"] / results["semantic p50 ms"]
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = run(args.chunks, args.dim)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for name, value in results.items():
            print(f"{name:<34} {value:.2f}" if isinstance(value, float) else f"{name:<34} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
