"""``ask`` sessions managed as things: listed (most recently used first), read with their turns and deleted, through
REST, the CLI and an endpoint's MCP tools, on both backends. A caller reaches only the sessions it could continue:
those started through its own API key, or its own endpoint; anything else is not found and stays as it was."""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from mcpbridge.bootstrap import Container
from mcpbridge.cli import main
from mcpbridge.http.apps import create_combined_app
from tests.support.admin_api import admin_client
from tests.support.clock import FakeClock
from tests.support.containers import container_on
from tests.support.live_server import live_server

ASK = "/api/v1/knowledge/ask"
SESSIONS = "/api/v1/knowledge/sessions"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=["local", "aws"])
def container(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: FakeClock
) -> Iterator[Container]:
    with container_on(request.param, tmp_path, monkeypatch, settings={"jobs": "inline"}, clock=clock) as built:
        yield built


@pytest.fixture
def client(container: Container) -> Iterator[TestClient]:
    with admin_client(container, "http://127.0.0.1") as test_client:
        kb = test_client.post("/api/v1/knowledge-bases", json={"name": "Handbook"})
        assert kb.status_code == 201, kb.text
        doc = test_client.post(
            f"/api/v1/knowledge-bases/{kb.json()['id']}/documents",
            json={"title": "Hours", "content": "Opening hours are nine to five on weekdays. Refunds take ten days."},
        )
        assert doc.status_code == 201, doc.text
        yield test_client


def ask(client: TestClient, question: str, session_id: str | None = None, **headers: str) -> str:
    body: dict[str, Any] = {"question": question}
    if session_id:
        body["session_id"] = session_id
    answered = client.post(ASK, json=body, headers=headers)
    assert answered.status_code == 200, answered.text
    return str(answered.json()["session_id"])


def other_key(client: TestClient) -> dict[str, str]:
    created = client.post("/api/v1/api-keys", json={"name": "other", "role": "admin"})
    assert created.status_code == 201, created.text
    return {"Authorization": f"Bearer {created.json()['key']}"}


def test_rest_lists_reads_and_deletes_the_keys_own_sessions(client: TestClient, clock: FakeClock) -> None:
    first = ask(client, "What are the opening hours?")
    clock.advance(5)
    ask(client, "And on weekends?", first)
    clock.advance(5)
    second = ask(client, "How long do refunds take?")
    clock.advance(5)

    listed = client.get(SESSIONS)
    assert listed.status_code == 200, listed.text
    items = listed.json()["items"]
    assert [s["id"] for s in items] == [second, first], "most recently used first"
    assert items[1]["turn_count"] == 2
    assert items[1]["title"] == "What are the opening hours?"
    assert items[0]["created_at"] == items[0]["updated_at"]
    assert items[1]["created_at"] < items[1]["updated_at"]

    read = client.get(f"{SESSIONS}/{first}")
    assert read.status_code == 200, read.text
    turns = read.json()["turns"]
    assert [t["question"] for t in turns] == ["What are the opening hours?", "And on weekends?"]
    assert "nine to five" in turns[0]["answer"]

    page = client.get(SESSIONS, params={"limit": 1})
    assert [s["id"] for s in page.json()["items"]] == [second]
    rest = client.get(SESSIONS, params={"limit": 1, "cursor": page.json()["next_cursor"]})
    assert [s["id"] for s in rest.json()["items"]] == [first]

    assert client.delete(f"{SESSIONS}/{first}").status_code == 204
    assert [s["id"] for s in client.get(SESSIONS).json()["items"]] == [second]
    gone = client.get(f"{SESSIONS}/{first}")
    assert gone.status_code == 404
    assert gone.json()["code"] == "session_not_found"
    again = client.delete(f"{SESSIONS}/{first}")
    assert again.status_code == 404
    assert again.json()["code"] == "session_not_found"
    refused = client.post(ASK, json={"question": "And on holidays?", "session_id": first})
    assert refused.status_code == 404
    assert refused.json()["code"] == "session_not_found"


def test_another_key_reaches_none_of_them_and_changes_nothing(client: TestClient, container: Container) -> None:
    mine = ask(client, "What are the opening hours?")
    other = other_key(client)
    theirs = ask(client, "How long do refunds take?", **other)

    assert [s["id"] for s in client.get(SESSIONS, headers=other).json()["items"]] == [theirs]
    for response in (
        client.get(f"{SESSIONS}/{mine}", headers=other),
        client.delete(f"{SESSIONS}/{mine}", headers=other),
    ):
        assert response.status_code == 404, response.text
        assert response.json()["code"] == "session_not_found"
    still = client.get(f"{SESSIONS}/{mine}")
    assert still.status_code == 200
    assert still.json()["turn_count"] == 1, "the other key's delete removed nothing"


def test_a_key_without_the_ask_capability_is_refused(client: TestClient) -> None:
    session = ask(client, "What are the opening hours?")
    created = client.post("/api/v1/api-keys", json={"name": "reader", "role": "viewer", "capabilities": ["read"]})
    reader = {"Authorization": f"Bearer {created.json()['key']}"}
    for response in (client.get(SESSIONS, headers=reader), client.delete(f"{SESSIONS}/{session}", headers=reader)):
        assert response.status_code == 403, response.text
        assert response.json()["code"] == "capability_missing"
    assert client.get(f"{SESSIONS}/{session}").status_code == 200


@pytest.mark.parametrize("bad", ["not-a-session", "ses_short", "kb_01jd8x2k7m0000000000000000"])
def test_a_malformed_session_id_is_a_400_naming_it(client: TestClient, bad: str) -> None:
    session = ask(client, "What are the opening hours?")
    for response in (client.get(f"{SESSIONS}/{bad}"), client.delete(f"{SESSIONS}/{bad}")):
        assert response.status_code == 400, response.text
        assert response.json()["code"] == "invalid_session_id"
        assert "session_id" in response.json()["detail"]
    assert [s["id"] for s in client.get(SESSIONS).json()["items"]] == [session]


# ---------------------------------------------------------------------------------------------------- MCP


def endpoint(client: TestClient, name: str) -> dict[str, Any]:
    tools = ["ask", "list_sessions", "get_session", "delete_session"]
    created = client.post("/api/v1/mcp-endpoints", json={"name": name, "tools": tools})
    assert created.status_code == 201, created.text
    body: dict[str, Any] = created.json()
    return body


def rpc(client: TestClient, target: dict[str, Any], method: str, params: dict[str, Any]) -> dict[str, Any]:
    response = client.post(
        f"/mcp/{target['id']}",
        headers={
            "Authorization": f"Bearer {target['token']}",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-06-18",
        },
        json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
    )
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["result"]
    return result


def call(client: TestClient, target: dict[str, Any], name: str, **arguments: Any) -> dict[str, Any]:
    return rpc(client, target, "tools/call", {"name": name, "arguments": arguments})


def test_an_endpoint_manages_its_own_sessions_only(client: TestClient, clock: FakeClock) -> None:
    support, other = endpoint(client, "support"), endpoint(client, "other")
    rest_session = ask(client, "What are the opening hours?")
    started = call(client, support, "ask", question="What are the opening hours?")["structuredContent"]
    clock.advance(3)
    call(client, support, "ask", question="And on weekends?", session_id=started["session_id"])

    listed = call(client, support, "list_sessions")
    assert listed.get("isError") is not True, listed
    assert [s["session_id"] for s in listed["structuredContent"]["sessions"]] == [started["session_id"]]
    assert json.loads(listed["content"][0]["text"]) == listed["structuredContent"]
    read = call(client, support, "get_session", session_id=started["session_id"])["structuredContent"]
    assert [t["question"] for t in read["turns"]] == ["What are the opening hours?", "And on weekends?"]

    assert call(client, other, "list_sessions")["structuredContent"]["sessions"] == []
    for name in ("get_session", "delete_session"):
        for session_id in (started["session_id"], rest_session):
            refused = call(client, other, name, session_id=session_id)
            assert refused["isError"] is True
            assert refused["structuredContent"]["error"]["code"] == "session_not_found"
    missing = call(client, support, "get_session")
    assert missing["isError"] is True
    assert "session_id" in missing["structuredContent"]["error"]["message"]
    assert (
        call(client, support, "get_session", session_id=started["session_id"])["structuredContent"]["turn_count"] == 2
    )

    deleted = call(client, support, "delete_session", session_id=started["session_id"])["structuredContent"]
    assert deleted == {"deleted": True, "session_id": started["session_id"]}
    assert call(client, support, "list_sessions")["structuredContent"]["sessions"] == []
    again = call(client, support, "ask", question="And on holidays?", session_id=started["session_id"])
    assert again["structuredContent"]["error"]["code"] == "session_not_found"
    assert client.get(f"{SESSIONS}/{rest_session}").status_code == 200, "the REST session is untouched"


def test_the_session_tools_are_annotated(client: TestClient) -> None:
    tools = {t["name"]: t for t in rpc(client, endpoint(client, "support"), "tools/list", {})["tools"]}
    assert tools["list_sessions"]["annotations"]["readOnlyHint"] is True
    assert tools["get_session"]["annotations"]["readOnlyHint"] is True
    assert tools["delete_session"]["annotations"]["destructiveHint"] is True
    assert tools["delete_session"]["annotations"]["readOnlyHint"] is False
    assert "sessions" in tools["list_sessions"]["outputSchema"]["properties"]
    defaults = client.get("/api/v1/mcp-endpoints/tools").json()
    ticked = {t["name"] for g in defaults["groups"] for t in g["tools"] if t["default"]}
    assert {"list_sessions", "get_session", "delete_session"} <= ticked


# ---------------------------------------------------------------------------------------------------- CLI


def run_cli(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, env: dict[str, str], *args: str
) -> Any:
    capsys.readouterr()
    with monkeypatch.context() as patch:
        for name in list(os.environ):
            if name.startswith("MCPBRIDGE_"):
                patch.delenv(name)
        for name, value in env.items():
            patch.setenv(name, value)
        patch.setattr(sys, "stdin", io.StringIO(""))
        code = main([*args, "--json"])
    out = capsys.readouterr()
    assert code == 0, out
    return json.loads(out.out)


def test_the_cli_asks_lists_shows_and_deletes(
    client: TestClient,
    container: Container,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    key = client.headers["Authorization"].removeprefix("Bearer ")
    with live_server(create_combined_app(container)) as url:
        env = {"MCPBRIDGE_URL": url, "MCPBRIDGE_API_KEY": key, "XDG_CONFIG_HOME": str(tmp_path / "config")}
        answered = run_cli(capsys, monkeypatch, env, "kb", "ask", "What are the opening hours?")
        session_id = answered["session_id"]
        run_cli(capsys, monkeypatch, env, "kb", "ask", "And on weekends?", "--session", session_id)
        listed = run_cli(capsys, monkeypatch, env, "sessions", "list")
        assert [s["id"] for s in listed["items"]] == [session_id]
        shown = run_cli(capsys, monkeypatch, env, "sessions", "show", session_id)
        assert [t["question"] for t in shown["turns"]] == ["What are the opening hours?", "And on weekends?"]
        assert run_cli(capsys, monkeypatch, env, "sessions", "delete", session_id) == {
            "id": session_id,
            "deleted": True,
        }
        assert run_cli(capsys, monkeypatch, env, "sessions", "list")["items"] == []
