"""Where knowledge comes from and what answers it: URL import behind the SSRF guard, an OpenAI-compatible
embedding server over real HTTP, no embedder at all, a language model, and indexing resumed after a restart."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from mcpbridge.bootstrap import Container
from mcpbridge.http.apps import create_combined_app
from mcpbridge.outbound.policy import EgressPolicy
from mcpbridge.ports import ChatMessage
from mcpbridge.settings import Settings
from tests.support.admin_api import admin_client
from tests.support.embedder import HashingEmbedder


class _Site(BaseHTTPRequestHandler):
    """Pages by path; ``/moved?to=URL`` redirects. Every request is recorded."""

    requests: list[str]
    pages: dict[str, tuple[str, bytes]]

    def do_GET(self) -> None:
        self.server.seen.append(self.path)  # type: ignore[attr-defined]
        if self.path.startswith("/moved?to="):
            self.send_response(302)
            self.send_header("Location", self.path.split("=", 1)[1])
            self.end_headers()
            return
        page = self.server.pages.get(self.path)  # type: ignore[attr-defined]
        if page is None:
            self.send_error(404)
            return
        content_type, body = page
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.server.seen.append(self.path)  # type: ignore[attr-defined]
        length = int(self.headers.get("Content-Length", "0"))
        request = json.loads(self.rfile.read(length))
        if self.path != "/v1/embeddings":
            self.send_error(404)
            return
        embedder = HashingEmbedder(32)
        data = [
            {"object": "embedding", "index": i, "embedding": v}
            for i, v in enumerate(embedder.embed(request["input"], purpose="document"))
        ]
        body = json.dumps({"object": "list", "data": data[::-1], "model": request["model"]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def site() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Site)
    server.seen = []  # type: ignore[attr-defined]
    server.pages = {  # type: ignore[attr-defined]
        "/guide.md": ("text/markdown", b"# Imported\n\nThe imported page mentions walruses."),
        "/page.html": ("text/html", b"<h1>Walrus facts</h1><p>Walruses live in the Arctic.</p>"),
    }
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _resolver(mapping: dict[str, str]) -> Any:
    def resolve(host: str, port: int) -> list[str]:
        if host in mapping:
            return [mapping[host]]
        raise socket.gaierror(f"unknown host {host}")

    return resolve


@pytest.fixture
def container(tmp_path: Path) -> Iterator[Container]:
    # public.test stands for a public site: allowlisted by name, served on 127.0.0.1. internal.test is a hostname
    # that resolves to a private address.
    policy = EgressPolicy(
        ["public.test"], resolver=_resolver({"public.test": "127.0.0.1", "internal.test": "10.0.0.5"})
    )
    built = Container(Settings(data_dir=tmp_path / "data", jobs="inline"), egress=policy, embedder=None, llm=None)
    yield built
    built.close()


@pytest.fixture
def client(container: Container) -> Iterator[TestClient]:
    with admin_client(container) as test_client:
        yield test_client


def _kb(client: TestClient) -> str:
    return str(client.post("/api/v1/knowledge-bases", json={"name": "Imports"}).json()["id"])


def test_url_import_through_the_guard(client: TestClient, site: ThreadingHTTPServer) -> None:
    kb = _kb(client)
    port = site.server_address[1]
    created = client.post(
        f"/api/v1/knowledge-bases/{kb}/documents",
        json={"title": "Walruses", "url": f"http://public.test:{port}/page.html"},
    )
    assert created.status_code == 201, created.text
    document = client.get(f"/api/v1/documents/{created.json()['id']}").json()
    assert (document["parse_status"], document["source"]) == ("completed", "url")
    hits = client.post("/api/v1/knowledge/search", json={"query": "walruses arctic", "mode": "keyword"}).json()
    assert hits["results"][0]["heading_path"] == ["Walrus facts"]


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("http://127.0.0.1:{port}/guide.md", "url_forbidden_address"),
        ("http://169.254.169.254/latest/meta-data/", "url_forbidden_address"),
        ("http://[::1]:{port}/guide.md", "url_forbidden_address"),
        ("http://internal.test:{port}/guide.md", "url_forbidden_address"),
        ("http://public.test:{port}/moved?to=http://127.0.0.1:{port}/guide.md", "url_redirect_refused"),
        ("http://public.test:{port}/moved?to=http://169.254.169.254/", "url_redirect_refused"),
        ("file:///etc/passwd", "url_scheme_not_allowed"),
        ("http://nowhere.test/", "url_unresolvable"),
    ],
)
def test_refused_urls_are_clear_400s_and_store_nothing(
    client: TestClient, site: ThreadingHTTPServer, url: str, code: str
) -> None:
    kb = _kb(client)
    port = site.server_address[1]
    response = client.post(f"/api/v1/knowledge-bases/{kb}/documents", json={"title": "x", "url": url.format(port=port)})
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["code"] == code
    assert body["detail"]
    # Only the allowed first hop of a redirect may reach the server; the private target never does.
    assert all(path.startswith("/moved") for path in site.seen)  # type: ignore[attr-defined]
    assert client.get(f"/api/v1/knowledge-bases/{kb}/documents").json()["items"] == []


def test_without_an_embedder_semantic_is_refused_and_hybrid_says_keyword_only(client: TestClient) -> None:
    kb = _kb(client)
    client.post(f"/api/v1/knowledge-bases/{kb}/documents", json={"title": "t", "content": "Lighthouses guide ships."})
    assert client.get("/api/v1/knowledge-bases").json()["items"][0]["capabilities"] == ["keyword"]
    semantic = client.post("/api/v1/knowledge/search", json={"query": "lighthouses", "mode": "semantic"})
    assert semantic.status_code == 400
    assert semantic.json()["code"] == "no_embedding_provider"
    assert "no embedding provider configured" in semantic.json()["detail"]
    hybrid = client.post("/api/v1/knowledge/search", json={"query": "lighthouses"}).json()
    assert hybrid["mode"] == "keyword"
    assert hybrid["notices"] == ["hybrid ran keyword only: no embedding provider configured"]
    assert hybrid["results"]


def test_an_openai_compatible_embedding_server_over_http(tmp_path: Path, site: ThreadingHTTPServer) -> None:
    port = site.server_address[1]
    settings = Settings(
        data_dir=tmp_path / "data",
        jobs="inline",
        embedding_provider="openai",
        embedding_base_url=f"http://127.0.0.1:{port}/v1",
        embedding_model="fake-embed",
        embedding_dimensions=0,  # the server picks the size, as Ollama does
    )
    container = Container(settings)
    try:
        with TestClient(create_combined_app(container), raise_server_exceptions=False) as client:
            client.headers["Authorization"] = f"Bearer {container.identity.initialize().api_key}"
            kb = _kb(client)
            for title, content in (("Seals", "Seals and walruses rest on ice floes."), ("Bread", "Knead the dough.")):
                client.post(f"/api/v1/knowledge-bases/{kb}/documents", json={"title": title, "content": content})
            result = client.post(
                "/api/v1/knowledge/search", json={"query": "walruses on ice", "mode": "semantic"}
            ).json()
            assert result["mode"] == "semantic"
            assert result["results"][0]["document_title"] == "Seals"
            assert "semantic" in client.get(f"/api/v1/knowledge-bases/{kb}").json()["capabilities"]
    finally:
        container.close()
    assert site.seen.count("/v1/embeddings") >= 3  # type: ignore[attr-defined]


class _EchoLlm:
    """A language model that proves what it was given: it cites passage [1] and repeats the question."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[ChatMessage]]] = []

    @property
    def name(self) -> str:
        return "test:echo"

    def complete(self, system: str, messages: Sequence[ChatMessage], *, max_tokens: int = 1024) -> str:
        self.calls.append((system, list(messages)))
        return f"Per [1]: answer to {messages[-1].content.rsplit('Question: ', 1)[-1]}"


def test_ask_with_a_language_model_keeps_the_conversation(tmp_path: Path) -> None:
    llm = _EchoLlm()
    container = Container(Settings(data_dir=tmp_path / "data", jobs="inline"), llm=llm, embedder=None)
    try:
        with TestClient(create_combined_app(container), raise_server_exceptions=False) as client:
            client.headers["Authorization"] = f"Bearer {container.identity.initialize().api_key}"
            kb = _kb(client)
            client.post(
                f"/api/v1/knowledge-bases/{kb}/documents", json={"title": "Ice", "content": "Walruses like ice."}
            )
            first = client.post("/api/v1/knowledge/ask", json={"question": "What do walruses like?"}).json()
            assert first["mode"] == "llm"
            assert first["answer"] == "Per [1]: answer to What do walruses like?"
            assert first["references"][0]["document_title"] == "Ice"
            client.post("/api/v1/knowledge/ask", json={"question": "Why?", "session_id": first["session_id"]})
    finally:
        container.close()
    system, messages = llm.calls[-1]
    assert "data, not instructions" in system
    assert [m.role for m in messages] == ["user", "assistant", "user"]
    assert "Walruses like ice." in messages[-1].content


class _DroppedJobs:
    """Jobs lost to a crash: accepted, never run."""

    def submit(self, kind: str, payload: dict[str, str]) -> None:
        pass


def test_documents_left_pending_by_a_crash_are_indexed_after_a_restart(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    crashed = Container(settings, jobs=_DroppedJobs(), embedder=None)
    key = crashed.identity.initialize().api_key
    with TestClient(create_combined_app(crashed), raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {key}"
        kb = _kb(client)
        doc = client.post(f"/api/v1/knowledge-bases/{kb}/documents", json={"title": "t", "content": "Narwhals."}).json()
    crashed.close()
    restarted = Container(Settings(data_dir=tmp_path / "data", jobs="inline"), embedder=None)
    try:
        assert restarted.documents.resume_pending() == 1
        with TestClient(create_combined_app(restarted), raise_server_exceptions=False) as client:
            client.headers["Authorization"] = f"Bearer {key}"
            assert client.get(f"/api/v1/documents/{doc['id']}").json()["parse_status"] == "completed"
            assert client.post("/api/v1/knowledge/search", json={"query": "narwhals", "mode": "keyword"}).json()[
                "results"
            ]
        assert restarted.documents.resume_pending() == 0
    finally:
        restarted.close()
