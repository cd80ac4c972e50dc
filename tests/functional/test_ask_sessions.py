"""``ask`` sessions are bound to the credential and the knowledge-base scope that started them: a continuation from
a narrower key or an endpoint never sees earlier turns drawn from knowledge bases outside its scope (REST and MCP,
both backends, a language model that records what it is sent)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from mcpbridge.bootstrap import Container
from mcpbridge.ports import ChatMessage
from tests.support.admin_api import admin_client
from tests.support.clock import FakeClock
from tests.support.containers import container_on

ASK = "/api/v1/knowledge/ask"
SECRET_FACT = "The vault combination is 4417-orchid"


class RecordingLlm:
    """Answers with every passage and earlier turn it was given, so a leak shows in the answer, and keeps them."""

    name = "recording"

    def __init__(self) -> None:
        self.calls: list[list[ChatMessage]] = []

    def complete(self, system: str, messages: Sequence[ChatMessage], *, max_tokens: int = 1024) -> str:
        self.calls.append(list(messages))
        return " | ".join(m.content for m in messages)


@pytest.fixture
def llm() -> RecordingLlm:
    return RecordingLlm()


@pytest.fixture(params=["local", "aws"])
def container(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, llm: RecordingLlm
) -> Iterator[Container]:
    settings = {"jobs": "inline"}
    with container_on(request.param, tmp_path, monkeypatch, settings=settings, clock=FakeClock(), llm=llm) as built:
        yield built


@pytest.fixture
def client(container: Container) -> Iterator[TestClient]:
    with admin_client(container, "http://127.0.0.1") as test_client:
        yield test_client


def kb_with(client: TestClient, name: str, content: str) -> str:
    kb = client.post("/api/v1/knowledge-bases", json={"name": name})
    assert kb.status_code == 201, kb.text
    kb_id: str = kb.json()["id"]
    doc = client.post(f"/api/v1/knowledge-bases/{kb_id}/documents", json={"title": name, "content": content})
    assert doc.status_code == 201, doc.text
    return kb_id


def key(client: TestClient, **body: Any) -> dict[str, str]:
    created = client.post("/api/v1/api-keys", json={"name": "k", "role": "viewer", **body})
    assert created.status_code == 201, created.text
    return {"Authorization": f"Bearer {created.json()['key']}"}


def mcp_ask(client: TestClient, endpoint: dict[str, Any], arguments: dict[str, Any]) -> dict[str, Any]:
    response = client.post(
        f"/mcp/{endpoint['id']}",
        headers={
            "Authorization": f"Bearer {endpoint['token']}",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-06-18",
        },
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "ask", "arguments": arguments}},
    )
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["result"]
    return result


def test_a_narrower_key_cannot_continue_a_broader_session(client: TestClient, llm: RecordingLlm) -> None:
    kb_a = kb_with(client, "Public", "Opening hours are nine to five on weekdays.")
    kb_with(client, "Private", f"{SECRET_FACT}. Keep the vault combination secret.")
    broad = client.post(ASK, json={"question": "What is the vault combination?"})
    assert broad.status_code == 200, broad.text
    assert SECRET_FACT in broad.json()["answer"], "the unrestricted key reads the private base"
    session_id = broad.json()["session_id"]

    narrow = key(client, capabilities=["ask"], knowledge_base_ids=[kb_a])
    calls_before = len(llm.calls)
    refused = client.post(ASK, headers=narrow, json={"question": "And the hours?", "session_id": session_id})
    assert refused.status_code == 404, refused.text
    assert refused.json()["code"] == "session_not_found"
    assert len(llm.calls) == calls_before, "nothing was sent to the model"
    # The narrower key gets its own session, which never holds the earlier turn.
    fresh = client.post(ASK, headers=narrow, json={"question": "What is the vault combination?"})
    assert fresh.status_code == 200, fresh.text
    assert fresh.json()["session_id"] != session_id
    assert SECRET_FACT not in fresh.json()["answer"]
    assert all(SECRET_FACT not in m.content for m in llm.calls[-1])

    # Even a key with the same scope and user continues nothing it did not start.
    same_scope = key(client, capabilities=["ask"])
    again = client.post(ASK, headers=same_scope, json={"question": "again?", "session_id": session_id})
    assert again.status_code == 404
    # The key that started it still continues it.
    follow = client.post(ASK, json={"question": "Say it again", "session_id": session_id})
    assert follow.status_code == 200
    assert follow.json()["session_id"] == session_id


def test_an_endpoint_session_is_bound_to_the_endpoint_and_its_scope(client: TestClient, llm: RecordingLlm) -> None:
    kb_a = kb_with(client, "Public", "Opening hours are nine to five on weekdays.")
    kb_b = kb_with(client, "Private", f"{SECRET_FACT}. Keep the vault combination secret.")
    rest = client.post(ASK, json={"question": "What is the vault combination?"}).json()
    wide = client.post("/api/v1/mcp-endpoints", json={"name": "wide", "tools": ["ask"]}).json()
    narrow = client.post(
        "/api/v1/mcp-endpoints", json={"name": "narrow", "tools": ["ask"], "knowledge_base_ids": [kb_a]}
    ).json()

    for endpoint in (wide, narrow):
        result = mcp_ask(client, endpoint, {"question": "And the hours?", "session_id": rest["session_id"]})
        assert result["isError"] is True, "a REST session does not continue on an endpoint"
        assert result["structuredContent"]["error"]["code"] == "session_not_found"

    started = mcp_ask(client, wide, {"question": "What is the vault combination?"})
    assert SECRET_FACT in started["structuredContent"]["answer"]
    session_id = started["structuredContent"]["session_id"]
    result = mcp_ask(client, narrow, {"question": "And the hours?", "session_id": session_id})
    assert result["isError"] is True
    # Narrowing the wide endpoint to the public base ends its old session too.
    assert client.put(f"/api/v1/mcp-endpoints/{wide['id']}", json={"knowledge_base_ids": [kb_a]}).status_code == 200
    calls_before = len(llm.calls)
    result = mcp_ask(client, wide, {"question": "And the hours?", "session_id": session_id})
    assert result["isError"] is True
    assert len(llm.calls) == calls_before
    assert kb_b
