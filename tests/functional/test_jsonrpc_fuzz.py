"""A JSON-RPC fuzz of ``/mcp/{endpoint_id}`` over real HTTP, with a valid token: generated messages, valid and
malformed (wrong types for every envelope member, batches, huge and deeply nested values, unknown methods, every
tool with generated arguments, wrong or missing headers, bodies that are not JSON or not UTF-8).

What must hold for every one of them: never a 5xx, never a tool that failed unexpectedly (an ``internal_error``
result is a 500 in disguise), a JSON body whenever the answer is a JSON-RPC message, and, after the run, an
endpoint that still answers ``tools/list``.

Bounded for CI: a fixed number of examples, derandomized (the same examples on every run, so a failure
reproduces), no example database. The run is logged with its count (``-s`` shows it).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcpbridge.bootstrap import Container
from mcpbridge.http.apps import create_combined_app
from mcpbridge.settings import Settings
from tests.support.embedder import HashingEmbedder
from tests.support.jsonrpc_messages import TOOL_NAMES, Corpus, as_sent, bodies, replayable, seed_endpoint
from tests.support.live_server import live_server

pytestmark = pytest.mark.slow

MAX_EXAMPLES = 2500


@dataclass
class Target:
    url: str
    corpus: Corpus
    http: httpx.Client
    seen: dict[str, int]

    @property
    def token(self) -> str:
        return self.corpus.token

    @property
    def kb_id(self) -> str:
        return self.corpus.kb_id


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    data_dir: Path = tmp_path_factory.mktemp("fuzz") / "data"
    container = Container(Settings(data_dir=data_dir, jobs="inline"), embedder=HashingEmbedder(64))
    admin_key = container.identity.initialize().api_key
    assert admin_key is not None
    with live_server(create_combined_app(container)) as base_url:
        with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {admin_key}"}, timeout=30) as api:
            endpoint, corpus = seed_endpoint(api, "fuzz", TOOL_NAMES)
        assert sorted(endpoint["tools"]) == sorted(TOOL_NAMES)
        with httpx.Client(timeout=60) as http:
            yield Target(endpoint["url"], corpus, http, {})
    container.close()


# ---------------------------------------------------------------------------------------------------- the fuzz


def _check(target: Target, body: bytes, response: httpx.Response) -> None:
    target.seen[str(response.status_code)] = target.seen.get(str(response.status_code), 0) + 1
    assert response.status_code < 500, response.text[:2000]
    content_type = response.headers.get("content-type", "")
    if not content_type.startswith("application/json") or not response.content:
        return
    reply = response.json()
    assert isinstance(reply, dict), reply
    assert reply.get("jsonrpc") == "2.0"
    assert ("result" in reply) != ("error" in reply), reply
    if response.status_code == 200:
        assert reply["id"] == json.loads(body)["id"], "an answer carries the id of its request"
    result = reply.get("result")
    if isinstance(result, dict) and result.get("isError"):
        # A tool that failed unexpectedly is a 500 in disguise.
        error = json.loads(result["content"][0]["text"]).get("error", {})
        assert error.get("code") != "internal_error", (error, body[:2000])


def test_generated_messages_never_get_a_5xx_and_the_endpoint_still_answers(target: Target) -> None:
    @replayable(MAX_EXAMPLES)
    @given(data=st.data())
    def fuzz(data: st.DataObject) -> None:
        body, sent_headers = data.draw(bodies(target.corpus), label="request")
        _check(target, body, target.http.post(target.url, content=body, headers=as_sent(sent_headers)))

    started = time.monotonic()
    fuzz()
    elapsed = time.monotonic() - started
    count = sum(target.seen.values())
    print(f"\njsonrpc fuzz: {count} requests in {elapsed:.1f} s, statuses {dict(sorted(target.seen.items()))}")
    assert count >= MAX_EXAMPLES
    listed = target.http.post(
        target.url,
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={
            "Authorization": f"Bearer {target.token}",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-11-25",
        },
    )
    assert listed.status_code == 200, listed.text
    assert sorted(t["name"] for t in listed.json()["result"]["tools"]) == sorted(TOOL_NAMES)


@pytest.mark.parametrize(("literal", "page_size"), [("1e400", 100), ("-1e999", 1), ("1e308", 100), ("2.5", 2)])
def test_a_number_too_large_for_a_float_is_clamped_like_any_other(target: Target, literal: str, page_size: int) -> None:
    """Found by the fuzz: 1e400 is valid JSON, parsed as infinity, and the tools' integer arguments failed on it."""
    body = (
        '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "list_documents", "arguments": '
        f'{{"knowledge_base_id": "{target.kb_id}", "page_size": {literal}, "page": {literal}}}}}}}'
    )
    response = target.http.post(
        target.url,
        content=body.encode(),
        headers={
            "Authorization": f"Bearer {target.token}",
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
            "MCP-Protocol-Version": "2025-11-25",
        },
    )
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert not result.get("isError"), result
    assert result["structuredContent"]["page_size"] == page_size
