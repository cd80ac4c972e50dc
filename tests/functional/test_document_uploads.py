"""Large documents go straight to the blob store: the admin API hands out a form to post the file to (on AWS a
presigned S3 POST, here to a moto server on 127.0.0.1 over real HTTP; on the embedded backend mcpbridge's own
route), then ``complete`` makes the document and starts its indexing. A document sent inside a request is refused
above the in-request limit, with the way to upload it instead."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from moto.server import ThreadedMotoServer

from mcpbridge.bootstrap import Container
from mcpbridge.http.apps import create_combined_app
from mcpbridge.knowledge.documents import blob_key
from mcpbridge.knowledge.uploads import upload_blob
from mcpbridge.settings import Settings
from tests.support.aws import create_aws_resources, set_fake_aws_env
from tests.support.serve import free_port

REGION = "eu-west-1"
IN_REQUEST = 64 * 1024
PER_DOCUMENT = 8 * 1024 * 1024


class HeldJobs:
    def __init__(self) -> None:
        self.submitted: list[tuple[str, dict[str, str]]] = []

    def submit(self, kind: str, payload: dict[str, str]) -> None:
        self.submitted.append((kind, dict(payload)))


class Hub:
    def __init__(self, container: Container, client: TestClient, kb_id: str) -> None:
        self.container = container
        self.client = client
        self.kb_id = kb_id

    def start(self, filename: str, size: int, content_type: str = "text/markdown") -> httpx.Response:
        body = {"filename": filename, "content_type": content_type, "size_bytes": size}
        return self.client.post(f"/api/v1/knowledge-bases/{self.kb_id}/documents/uploads", json=body)

    def post_file(self, form: dict[str, Any], data: bytes, content_type: str = "text/markdown") -> int:
        """What a client does with the form: a multipart POST, the fields first, the file last."""
        files = {"file": ("upload", data, content_type)}
        if form["url"].startswith("http://testserver/"):
            return self.client.post(form["url"], data=form["fields"], files=files).status_code
        with httpx.Client(trust_env=False, timeout=60) as http:
            return http.post(form["url"], data=form["fields"], files=files).status_code

    def complete(self, form: dict[str, Any]) -> httpx.Response:
        assert form["complete_url"].startswith("http://testserver/")
        return self.client.post(form["complete_url"].removeprefix("http://testserver"))

    def run_jobs(self) -> None:
        jobs = self.container.jobs
        assert isinstance(jobs, HeldJobs)
        for kind, payload in jobs.submitted:
            self.container.run_job(kind, payload)
        jobs.submitted.clear()


def _hub(container: Container) -> Iterator[Hub]:
    with TestClient(create_combined_app(container), raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {container.identity.initialize().api_key}"
        kb = client.post("/api/v1/knowledge-bases", json={"name": "Manuals"})
        assert kb.status_code == 201, kb.text
        yield Hub(container, client, kb.json()["id"])


def _settings(**extra: Any) -> dict[str, Any]:
    return {"max_request_document_bytes": IN_REQUEST, "max_document_bytes": PER_DOCUMENT, **extra}


@pytest.fixture
def moto_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    set_fake_aws_env(monkeypatch, REGION)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{port}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", url)
    try:
        yield url
    finally:
        try:
            httpx.post(f"{url}/moto-api/reset", timeout=10.0, trust_env=False)
        finally:
            server.stop()


@pytest.fixture
def aws_hub(moto_server: str, tmp_path: Path) -> Iterator[Hub]:
    resources = create_aws_resources(table_name=f"mcpbridge-{uuid.uuid4().hex[:8]}", endpoint_url=moto_server)
    settings = Settings(
        backend="aws",
        table_name=resources.table_name,
        kms_key_id=resources.kms_key_id,
        bucket_name=resources.bucket_name,
        aws_region=REGION,
        index_cache_dir=tmp_path / "index-cache",
        **_settings(),
    )
    container = Container(settings, jobs=HeldJobs(), embedder=None)
    try:
        yield from _hub(container)
    finally:
        container.close()


@pytest.fixture
def local_hub(tmp_path: Path) -> Iterator[Hub]:
    container = Container(Settings(data_dir=tmp_path / "data", **_settings()), jobs=HeldJobs(), embedder=None)
    try:
        yield from _hub(container)
    finally:
        container.close()


def manual(size: int) -> bytes:
    line = b"The walrus manual: haul out on the ice floe before the tide turns.\n"
    body = b"# Walrus manual\n\n" + line * (size // len(line) + 1)
    return body[:size]


def test_a_large_document_goes_straight_to_s3_through_a_presigned_post(aws_hub: Hub) -> None:
    data = manual(6 * 1024 * 1024)  # more than any request may carry through API Gateway and Lambda
    # In the request: refused, saying how to upload it instead.
    files = {"file": ("manual.md", data, "text/markdown")}
    refused = aws_hub.client.post(f"/api/v1/knowledge-bases/{aws_hub.kb_id}/documents/upload", files=files)
    assert refused.status_code == 413
    assert refused.json()["code"] == "document_too_large"
    assert "/documents/uploads" in refused.json()["detail"]

    started = aws_hub.start("manual.md", len(data))
    assert started.status_code == 201, started.text
    form = started.json()
    assert form["url"].startswith("http://127.0.0.1:")  # S3 itself (moto's server here), not mcpbridge
    assert aws_hub.container.settings.bucket_name in form["url"]
    assert form["fields"]["Content-Type"] == "text/markdown"
    assert {"policy", "key"} <= set(form["fields"])
    assert form["max_bytes"] == PER_DOCUMENT
    assert aws_hub.post_file(form, data) in (200, 201, 204)

    completed = aws_hub.complete(form)
    assert completed.status_code == 201, completed.text
    document = completed.json()
    assert (document["id"], document["parse_status"]) == (form["document_id"], "pending")
    assert document["size_bytes"] == len(data)
    blobs = aws_hub.container.blobs
    workspace = aws_hub.container.identity.installed_workspace_id()
    assert workspace is not None
    assert blobs.get(blob_key(workspace, document["id"], 1, "source")) == data
    assert blobs.get(upload_blob(workspace, form["upload_id"])) is None  # moved, not left behind
    assert [kind for kind, _ in aws_hub.container.jobs.submitted] == ["index_document"]  # type: ignore[attr-defined]
    # Once: a second completion finds no upload.
    again = aws_hub.complete(form)
    assert (again.status_code, again.json()["code"]) == (404, "upload_not_found")


def test_an_uploaded_document_is_indexed_and_searchable(aws_hub: Hub) -> None:
    data = manual(100 * 1024)
    form = aws_hub.start("manual.md", len(data)).json()
    assert aws_hub.post_file(form, data) in (200, 201, 204)
    document = aws_hub.complete(form).json()
    aws_hub.run_jobs()
    indexed = aws_hub.client.get(f"/api/v1/documents/{document['id']}").json()
    assert indexed["parse_status"] == "completed", indexed
    hits = aws_hub.client.post("/api/v1/knowledge/search", json={"query": "walrus tide", "mode": "keyword"}).json()
    assert hits["results"][0]["document_id"] == document["id"]


def test_completing_before_the_upload_or_above_the_limit_is_refused(aws_hub: Hub) -> None:
    too_early = aws_hub.start("manual.md", 1000).json()
    refused = aws_hub.complete(too_early)
    assert (refused.status_code, refused.json()["code"]) == (409, "upload_missing")

    # A file larger than the limit (S3 refuses it by the form's policy; the completion checks again what landed).
    oversized = manual(PER_DOCUMENT + 1)
    assert aws_hub.post_file(too_early, oversized) in (200, 201, 204, 400)
    refused = aws_hub.complete(too_early)
    assert refused.status_code in (409, 413)
    listed = aws_hub.client.get(f"/api/v1/knowledge-bases/{aws_hub.kb_id}/documents").json()
    assert listed["items"] == []
    # Declaring more than the limit is refused at once.
    declared = aws_hub.start("huge.pdf", PER_DOCUMENT + 1, "application/pdf")
    assert (declared.status_code, declared.json()["code"]) == (413, "document_too_large")


def test_the_embedded_backend_takes_the_same_flow_on_its_own_route(local_hub: Hub) -> None:
    data = manual(200 * 1024)  # above the in-request limit here
    form = local_hub.start("manual.md", len(data)).json()
    assert form["url"].startswith("http://testserver/api/v1/document-uploads/")
    forged = {**form, "fields": {**form["fields"], "token": "not-the-token"}}
    assert local_hub.post_file(forged, data) == 404
    assert local_hub.post_file(form, data) == 204
    document = local_hub.complete(form).json()
    assert document["parse_status"] == "pending"
    local_hub.run_jobs()
    indexed = local_hub.client.get(f"/api/v1/documents/{document['id']}").json()
    assert (indexed["parse_status"], indexed["size_bytes"]) == ("completed", len(data))


def test_in_request_documents_keep_their_smaller_limit(local_hub: Hub) -> None:
    small = local_hub.client.post(
        f"/api/v1/knowledge-bases/{local_hub.kb_id}/documents",
        json={"title": "small", "content": manual(IN_REQUEST).decode()},
    )
    assert small.status_code == 201, small.text
    big = local_hub.client.post(
        f"/api/v1/knowledge-bases/{local_hub.kb_id}/documents",
        json={"title": "big", "content": manual(IN_REQUEST + 1).decode()},
    )
    assert big.status_code == 413
    assert big.json()["details"] == {"limit_bytes": IN_REQUEST, "upload_limit_bytes": PER_DOCUMENT}
