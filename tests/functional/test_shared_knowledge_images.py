"""The images of a knowledge base shared from another workspace, on both backends: the receiving workspace's endpoint
gets a ``/r/<token>`` link to an image of the owner's document that serves the owner's bytes, and the same link is
refused once the share is withdrawn (it is checked again at fetch). Tesseract reads the image, as in
test_document_images.py."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from tests.functional.test_document_images import (
    SCREENSHOT,
    backend,
    client,
    clock,
    container,
    endpoint,
    fetch,
    mcp_call,
    new_kb,
    pytestmark,
    upload,
)
from tests.functional.test_rest_image_links import fetch as rest_fetch
from tests.support.images import text_image

__all__ = ["backend", "client", "clock", "container", "pytestmark"]  # the fixtures and skip condition reused

QUESTION = "gateway firmware outdated error"


def test_a_shared_image_is_linked_for_the_receiving_endpoint_until_the_share_is_withdrawn(
    client: TestClient, backend: str
) -> None:
    kb_id = new_kb(client, "Plant manuals")
    png_bytes = text_image(SCREENSHOT)
    png = upload(client, kb_id, "screenshot.png", png_bytes, "image/png")
    beta = client.post("/api/v1/workspaces", json={"name": "Beta"})
    assert beta.status_code == 201, beta.text
    beta_plain = beta.json()["admin_api_key"]["key"]
    beta_key = {"Authorization": f"Bearer {beta_plain}"}
    shared = client.put(f"/api/v1/knowledge-bases/{kb_id}/shares/{beta.json()['id']}", json={"permission": "read"})
    assert shared.status_code == 200, shared.text

    body = {"name": "Beta plant", "tools": ["ask", "search_knowledge"], "knowledge_base_ids": [kb_id]}
    made = client.post("/api/v1/mcp-endpoints", json=body, headers=beta_key)
    assert made.status_code == 201, made.text
    ep: dict[str, Any] = made.json()
    answer = mcp_call(client, ep, "ask", {"question": QUESTION})
    linked = next(r for r in answer["references"] if r["images"])
    assert linked["document_id"] == png["id"]
    link = linked["images"][0]["url"]
    assert link.startswith("http://127.0.0.1/r/"), link
    status, data, _ = fetch(client, link, backend)
    assert (status, data) == (200, png_bytes)

    # The receiving workspace's key over REST: its search names the shared base, the hit's href serves the owner's
    # image (kept in the owner's workspace), and nothing once the share is withdrawn.
    searched = client.post(
        "/api/v1/knowledge/search",
        json={"query": QUESTION, "mode": "keyword", "knowledge_base_ids": [kb_id]},
        headers=beta_key,
    )
    assert searched.status_code == 200, searched.text
    href = next(i["href"] for r in searched.json()["results"] for i in r["images"])
    assert href == f"/api/v1/documents/{png['id']}/images/1/1"
    assert rest_fetch(client, href, backend, beta_plain)[:2] == (200, png_bytes)

    # An endpoint of the owner's that does not list the knowledge base still gets nothing from the share's side.
    own = endpoint(client, "Owner elsewhere", [new_kb(client, "Elsewhere")])
    assert all(not r["images"] for r in mcp_call(client, own, "ask", {"question": QUESTION})["references"])

    withdrawn = client.delete(f"/api/v1/knowledge-bases/{kb_id}/shares/{beta.json()['id']}")
    assert withdrawn.status_code == 204, withdrawn.text
    refused = client.get(link, follow_redirects=False)
    assert refused.status_code == 403
    assert refused.json()["code"] == "image_link_refused"
    assert rest_fetch(client, href, backend, beta_plain)[0] == 404
    # The owner's own REST answer still has the image: only the share went.
    rest = client.post("/api/v1/knowledge/ask", json={"question": QUESTION})
    assert any(r["images"] for r in rest.json()["references"])
