"""Captions of the images in documents through the configured model when it reads images (``llm_vision``): an
OpenAI-compatible server on 127.0.0.1 that answers an ``image_url`` part with a caption of the image it was sent
(it checks the bytes are the uploaded PNG), and any other chat with a plain answer. The caption becomes an
``image_caption`` chunk, found by keyword search and carried by ``ask``'s ``references[].images``; without
``llm_vision`` the document says captions were skipped and why."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from mcpbridge.bootstrap import Container
from mcpbridge.http.apps import create_combined_app
from mcpbridge.settings import Settings
from tests.support.images import text_image

SHOT = text_image(["Router admin"])
CAPTION = "A screenshot of a router admin page with a red warning banner about the firmware."


class VisionServer:
    def __init__(self) -> None:
        self.image_requests: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                parts = body["messages"][-1]["content"]
                images = [p for p in parts if isinstance(p, dict) and p.get("type") == "image_url"]
                if images:
                    server.image_requests.append(body)
                    url = images[0]["image_url"]["url"]
                    sent = base64.b64decode(url.removeprefix("data:image/png;base64,"))
                    reply = CAPTION if sent == SHOT else "not the uploaded image"
                else:
                    reply = "A plain answer."
                answer = json.dumps({"choices": [{"message": {"role": "assistant", "content": reply}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


@pytest.fixture
def server() -> Iterator[VisionServer]:
    made = VisionServer()
    thread = threading.Thread(target=made.httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield made
    finally:
        made.httpd.shutdown()
        made.httpd.server_close()


def run(tmp_path: Path, server: VisionServer, *, vision: bool) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    settings = Settings(
        data_dir=tmp_path / ("vision" if vision else "text"),
        jobs="inline",
        embedding_provider="none",
        ocr_engine="none",
        llm_provider="openai",
        llm_base_url=server.base_url,
        llm_model="vision-model",
        llm_vision=vision,
        ssrf_allowlist=["127.0.0.1"],
    )
    container = Container(settings)
    try:
        with TestClient(create_combined_app(container), base_url="http://127.0.0.1") as client:
            client.headers["Authorization"] = f"Bearer {container.identity.initialize().api_key}"
            kb = client.post("/api/v1/knowledge-bases", json={"name": "Shots"}).json()
            files = {"file": ("router.png", SHOT, "image/png")}
            created = client.post(f"/api/v1/knowledge-bases/{kb['id']}/documents/upload", files=files)
            assert created.status_code == 201, created.text
            document = client.get(f"/api/v1/documents/{created.json()['id']}").json()
            search = client.post("/api/v1/knowledge/search", json={"query": "router warning banner", "mode": "keyword"})
            ask = client.post("/api/v1/knowledge/ask", json={"question": "router warning banner firmware"})
            return document, search.json(), ask.json()
    finally:
        container.close()


def test_a_model_that_reads_images_captions_them(tmp_path: Path, server: VisionServer) -> None:
    document, search, ask = run(tmp_path, server, vision=True)
    assert document["parse_status"] == "completed", document
    assert not any("captions skipped" in notice for notice in document["notices"])
    assert len(server.image_requests) == 1
    assert server.image_requests[0]["model"] == "vision-model"
    results = search["results"]
    assert [(r["document_id"], r["chunk_type"]) for r in results] == [(document["id"], "image_caption")]
    assert CAPTION in results[0]["text"]
    images = next(r for r in ask["references"] if r["images"])["images"]
    assert images[0]["caption"] == CAPTION
    assert images[0]["url"] == f"resource://images/{document['id']}/1/1"


def test_without_vision_captions_are_skipped_and_said(tmp_path: Path, server: VisionServer) -> None:
    document, search, _ = run(tmp_path, server, vision=False)
    assert document["parse_status"] == "completed", document
    assert server.image_requests == []
    assert (
        "image captions skipped: the configured model (openai:vision-model) is not declared to read images "
        "(MCPBRIDGE_LLM_VISION)"
    ) in document["notices"]
    assert search["results"] == []
