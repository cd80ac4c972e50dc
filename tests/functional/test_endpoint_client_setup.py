"""What people set a client up with: OpenCode's configuration among the generated client configs (and ``mcp-remote``
pinned to the version the suite runs), and usage instructions written from an endpoint's enabled tools, by a template
or by the configured language model (which falls back to the template when it fails). Both backends; the CLI too."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from mcpbridge.bootstrap import Container
from mcpbridge.cli import main
from mcpbridge.errors import UpstreamError
from mcpbridge.http.apps import create_combined_app
from mcpbridge.ports import ChatMessage
from mcpbridge.publishing.usage_instructions import SYSTEM_PROMPT
from tests.support.admin_api import admin_client
from tests.support.containers import container_on
from tests.support.live_server import live_server

PACKAGE_JSON = Path(__file__).parents[1] / "conformance" / "package.json"


class WritingLlm:
    """Writes 'instructions' that prove what it was given; fails when told to."""

    name = "test:writer"

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[ChatMessage]]] = []
        self.fail = False

    def complete(self, system: str, messages: Sequence[ChatMessage], *, max_tokens: int = 1024) -> str:
        self.calls.append((system, list(messages)))
        if self.fail:
            raise UpstreamError("the model is down", code="llm_failed")
        return "Use search_knowledge first. " + str(len(messages[-1].content))


@pytest.fixture
def llm() -> WritingLlm:
    return WritingLlm()


@pytest.fixture(params=["local", "aws"])
def container(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, llm: WritingLlm
) -> Iterator[Container]:
    with container_on(request.param, tmp_path, monkeypatch, settings={"jobs": "inline"}, llm=llm) as built:
        yield built


@pytest.fixture
def client(container: Container) -> Iterator[TestClient]:
    with admin_client(container, "http://127.0.0.1") as test_client:
        yield test_client


def created(client: TestClient, **fields: Any) -> dict[str, Any]:
    response = client.post("/api/v1/mcp-endpoints", json={"name": "Product docs", **fields})
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def test_opencode_is_among_the_client_configs(client: TestClient) -> None:
    body = created(client)
    server = body["client_configs"]["opencode"]["mcp"]["servers"]["product-docs"]
    assert server == {
        "type": "remote",
        "url": body["url"],
        "oauth": False,
        "headers": {"Authorization": f"Bearer {body['token']}"},
    }
    assert body["client_configs"]["opencode"]["$schema"] == "https://opencode.ai/config.json"
    rotated = client.post(f"/api/v1/mcp-endpoints/{body['id']}/rotate-token").json()
    headers = rotated["client_configs"]["opencode"]["mcp"]["servers"]["product-docs"]["headers"]
    assert headers == {"Authorization": f"Bearer {rotated['token']}"}


def test_mcp_remote_is_pinned_to_the_version_the_suite_runs(client: TestClient) -> None:
    args = created(client)["client_configs"]["mcp_remote"]["mcpServers"]["product-docs"]["args"]
    pinned = json.loads(PACKAGE_JSON.read_text())["devDependencies"]["mcp-remote"]
    assert args[1] == f"mcp-remote@{pinned}"


# ---------------------------------------------------------------------------------------------------- instructions


def kb(client: TestClient, name: str, description: str) -> str:
    response = client.post("/api/v1/knowledge-bases", json={"name": name, "description": description})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def test_the_template_follows_the_enabled_tools_and_bases(client: TestClient, llm: WritingLlm) -> None:
    handbook = kb(client, "Handbook", "How we work")
    kb(client, "Secrets", "Never published")
    endpoint = created(client, tools=["search_knowledge", "read_document", "ask"], knowledge_base_ids=[handbook])
    response = client.post(f"/api/v1/mcp-endpoints/{endpoint['id']}/usage-instructions", params={"template": True})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["source"] == "template"
    assert body["notices"] == []
    text = body["instructions"]
    assert "Handbook (How we work)" in text
    assert "Secrets" not in text, "only the bases the endpoint reaches"
    assert "- search_knowledge:" in text
    assert "- ask:" in text
    assert "grep_chunks" not in text, "only the enabled tools"
    assert "add_document" not in text
    assert llm.calls == [], "template=true asks no model"

    changed = client.put(f"/api/v1/mcp-endpoints/{endpoint['id']}", json={"tools": ["grep_chunks"]})
    assert changed.status_code == 200, changed.text
    again = client.post(f"/api/v1/mcp-endpoints/{endpoint['id']}/usage-instructions", params={"template": True})
    assert "- grep_chunks:" in again.json()["instructions"]
    assert "search_knowledge" not in again.json()["instructions"]


def test_the_model_writes_them_and_the_template_stands_in_when_it_fails(client: TestClient, llm: WritingLlm) -> None:
    kb(client, "Handbook", "How we work")
    endpoint = created(client, tools=["search_knowledge"])
    template = client.post(f"/api/v1/mcp-endpoints/{endpoint['id']}/usage-instructions", params={"template": True})
    written = client.post(f"/api/v1/mcp-endpoints/{endpoint['id']}/usage-instructions")
    assert written.status_code == 200, written.text
    assert written.json()["source"] == "model"
    system, messages = llm.calls[-1]
    assert system == SYSTEM_PROMPT
    assert messages[-1].content == template.json()["instructions"], "the model sees the template, nothing else"
    assert written.json()["instructions"] == f"Use search_knowledge first. {len(messages[-1].content)}"

    llm.fail = True
    fallback = client.post(f"/api/v1/mcp-endpoints/{endpoint['id']}/usage-instructions").json()
    assert fallback["source"] == "template"
    assert fallback["instructions"] == template.json()["instructions"]
    assert fallback["notices"] == ["the language model did not answer (llm_failed): this is the template"]


def test_instructions_of_an_unknown_or_unreachable_endpoint_are_refused(client: TestClient, llm: WritingLlm) -> None:
    missing = client.post("/api/v1/mcp-endpoints/mcp_01jd8x2k7m0000000000000000/usage-instructions")
    assert missing.status_code == 404, missing.text
    handbook = kb(client, "Handbook", "")
    other = kb(client, "Other", "")
    endpoint = created(client, knowledge_base_ids=[other])
    scoped = client.post(
        "/api/v1/api-keys", json={"name": "scoped", "role": "viewer", "knowledge_base_ids": [handbook]}
    ).json()
    refused = client.post(
        f"/api/v1/mcp-endpoints/{endpoint['id']}/usage-instructions",
        headers={"Authorization": f"Bearer {scoped['key']}"},
    )
    assert refused.status_code == 403, refused.text
    assert llm.calls == [], "nothing was sent to the model"


def test_the_cli_prints_them(
    client: TestClient,
    container: Container,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    kb(client, "Handbook", "How we work")
    created(client, tools=["search_knowledge", "ask"])
    key = client.headers["Authorization"].removeprefix("Bearer ")
    with live_server(create_combined_app(container)) as url, monkeypatch.context() as patch:
        for name in list(os.environ):
            if name.startswith("MCPBRIDGE_"):
                patch.delenv(name)
        patch.setenv("MCPBRIDGE_URL", url)
        patch.setenv("MCPBRIDGE_API_KEY", key)
        patch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
        capsys.readouterr()
        assert main(["endpoints", "instructions", "Product docs", "--template"]) == 0
        out = capsys.readouterr().out
    assert "- search_knowledge:" in out
    assert "- ask:" in out
