"""mcpbridge's MCP protocol module against the MCP SDK's own server, side by side on the same generated traffic.

Two apps serve one published endpoint: the product's (``McpEndpointApp``, answering through
:mod:`mcpbridge.http.mcp.protocol`) and the same app answering through the SDK's low-level server in stateless JSON
mode (``tests.support.sdk_reference``). Every generated request (both eras, valid and malformed: the JSON-RPC fuzz's
messages) goes to both, and the answers must be the same: status, ``Content-Type``, ``Allow`` and the JSON body
(``Mcp-Session-Id`` never appears). The few places where the two differ on purpose are :func:`accepted_difference`,
each with its reason; anything else fails, so an SDK upgrade that changes the protocol shows up here.

The endpoint offers the tools whose answers are the same on every call (no write tools, no ``ask``, which starts a
session of its own), with a rate limit that the run never reaches.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import mcp_types
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp.shared import inbound
from mcp_types import version as sdk_versions
from starlette.types import ASGIApp, Receive, Scope, Send

from mcpbridge.bootstrap import Container
from mcpbridge.http.apps import create_combined_app
from mcpbridge.http.mcp import jsonrpc, params, protocol
from mcpbridge.http.mcp.transport import McpEndpointApp
from mcpbridge.settings import Settings
from tests.support.embedder import HashingEmbedder
from tests.support.jsonrpc_messages import TOOL_NAMES, Corpus, as_sent, bodies, replayable, seed_endpoint
from tests.support.live_server import live_server
from tests.support.sdk_reference import SdkReferenceApp

pytestmark = pytest.mark.slow

MAX_EXAMPLES = 1500
SAME_EVERY_TIME = [
    name for name in TOOL_NAMES if name not in ("ask", "add_document", "update_document", "delete_document")
]


@dataclass
class Pair:
    corpus: Corpus
    endpoint_id: str
    ours: httpx.AsyncClient
    reference: httpx.AsyncClient
    loop: asyncio.AbstractEventLoop
    compared: int = 0


class _Routed:
    """The endpoint's id in the path parameters, as the app's router puts it there."""

    def __init__(self, app: ASGIApp, endpoint_id: str) -> None:
        self._app = app
        self._endpoint_id = endpoint_id

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app({**scope, "path_params": {"endpoint_id": self._endpoint_id}}, receive, send)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    data_dir: Path = tmp_path_factory.mktemp("reference") / "data"
    container = Container(Settings(data_dir=data_dir, jobs="inline"), embedder=HashingEmbedder(64))
    admin_key = container.identity.initialize().api_key
    auth = {"Authorization": f"Bearer {admin_key}"}
    with (
        live_server(create_combined_app(container)) as url,
        httpx.Client(base_url=url, headers=auth, timeout=30) as api,
    ):
        endpoint, corpus = seed_endpoint(api, "reference", SAME_EVERY_TIME)
    loop = asyncio.new_event_loop()

    def client(app: ASGIApp) -> httpx.AsyncClient:
        transport = httpx.ASGITransport(app=_Routed(app, endpoint["id"]))
        return httpx.AsyncClient(transport=transport, base_url="http://localhost", timeout=60)

    ours, reference = client(McpEndpointApp(container)), client(SdkReferenceApp(container))
    yield Pair(corpus, endpoint["id"], ours, reference, loop)
    loop.run_until_complete(ours.aclose())
    loop.run_until_complete(reference.aclose())
    loop.close()
    container.close()


# ---------------------------------------------------------------------------------------------------- comparing


def outcome(response: httpx.Response) -> dict[str, Any]:
    """What a client sees of an answer."""
    content_type = response.headers.get("content-type")
    body: Any = response.content
    if content_type is not None and content_type.startswith("application/json") and body:
        body = json.loads(body)
    return {
        "status": response.status_code,
        "content-type": content_type,
        "allow": response.headers.get("allow"),
        "session": response.headers.get("mcp-session-id"),
        "body": body,
    }


SERVED = frozenset(
    {
        "initialize",
        "ping",
        "tools/list",
        "tools/call",
        "server/discover",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "prompts/list",
        "prompts/get",
        "completion/complete",
    }
)


def accepted_difference(sent: bytes, ours: dict[str, Any], sdk: dict[str, Any]) -> str | None:
    """Why the two answers may differ here, or None when they must be the same."""
    method = json.loads(sent).get("method")
    if method not in SERVED and _error_code(ours) == jsonrpc.METHOD_NOT_FOUND and _error_code(sdk) == -32602:
        return (
            "a method this server does not serve is -32601 whatever its params; the SDK first checks the params "
            "against the method's schema in the spec (-32602 when they do not fit)"
        )
    return None


def _error_code(answer: dict[str, Any]) -> int | None:
    body = answer["body"]
    return body.get("error", {}).get("code") if isinstance(body, dict) else None


Headers = dict[str, bytes] | list[tuple[str, str]]


async def _both(
    pair: Pair, body: bytes, headers: Headers, method: str = "POST"
) -> tuple[dict[str, Any], dict[str, Any]]:
    path = f"/mcp/{pair.endpoint_id}"
    ours = await pair.ours.request(method, path, content=body, headers=headers)
    reference = await pair.reference.request(method, path, content=body, headers=headers)
    return outcome(ours), outcome(reference)


def test_generated_traffic_gets_the_sdks_answers(pair: Pair) -> None:
    differences: list[str] = []

    @replayable(MAX_EXAMPLES)
    @given(data=st.data())
    def compare(data: st.DataObject) -> None:
        body, sent = data.draw(bodies(pair.corpus), label="request")
        ours, sdk = pair.loop.run_until_complete(_both(pair, body, as_sent(sent)))
        pair.compared += 1
        if ours != sdk and accepted_difference(body, ours, sdk) is None:
            differences.append(f"{body[:300]!r} {sent}\n  ours: {str(ours)[:600]}\n  sdk:  {str(sdk)[:600]}")

    compare()
    print(f"\n{pair.compared} requests compared, {len(differences)} differences")
    assert not differences, "\n".join(differences[:15])


# ---------------------------------------------------------------------------------------------------- by hand

MODERN = "2026-07-28"
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "probe", "version": "1"},
}


def _modern_call(name: str) -> bytes:
    params = {"_meta": ENVELOPE, "name": name, "arguments": {}}
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}).encode()


def _headers(pair: Pair) -> list[tuple[str, str]]:
    return [
        ("Authorization", f"Bearer {pair.corpus.token}"),
        ("Accept", "application/json, text/event-stream"),
        ("Content-Type", "application/json"),
    ]


CASES: dict[str, tuple[str, bytes, tuple[tuple[str, str], ...]]] = {
    "DELETE, handshake era": ("DELETE", b"", ()),
    "DELETE, modern era": ("DELETE", b"", (("MCP-Protocol-Version", MODERN),)),
    "modern call, Mcp-Name wrapped in base64": (
        "POST",
        _modern_call("list_knowledge_bases"),
        (
            ("MCP-Protocol-Version", MODERN),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "=?base64?bGlzdF9rbm93bGVkZ2VfYmFzZXM=?="),
        ),
    ),
    "modern call, Mcp-Name wrapped in base64 that is not canonical": (
        "POST",
        _modern_call("list_knowledge_bases"),
        (("MCP-Protocol-Version", MODERN), ("Mcp-Method", "tools/call"), ("Mcp-Name", "=?base64?bGlzdA=?=")),
    ),
    "modern call, Mcp-Method twice": (
        "POST",
        _modern_call("list_knowledge_bases"),
        (
            ("MCP-Protocol-Version", MODERN),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "list_knowledge_bases"),
        ),
    ),
    "modern notification at an unknown version": (
        "POST",
        b'{"jsonrpc": "2.0", "method": "notifications/initialized"}',
        (("MCP-Protocol-Version", "2099-01-01"),),
    ),
    "modern call without Mcp-Name": (
        "POST",
        _modern_call("search_knowledge"),
        (("MCP-Protocol-Version", MODERN), ("Mcp-Method", "tools/call")),
    ),
    "modern subscriptions/listen without event streams accepted": (
        "POST",
        json.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen", "params": {"_meta": ENVELOPE}}
        ).encode(),
        (("MCP-Protocol-Version", MODERN), ("Mcp-Method", "subscriptions/listen"), ("Accept", "application/json")),
    ),
    "handshake request with a content type that only starts like JSON": (
        "POST",
        b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}',
        (("Content-Type", "application/jsonx"),),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_edge_cases_get_the_sdks_answers(pair: Pair, case: str) -> None:
    method, body, extra = CASES[case]
    replaced = {name for name, _ in extra}
    headers = [h for h in _headers(pair) if h[0] not in replaced] + list(extra)
    ours, sdk = pair.loop.run_until_complete(_both(pair, body, headers, method))
    assert ours == sdk


def test_the_protocols_words_are_the_sdks() -> None:
    """Versions, envelope keys, header names, error codes and statuses: a new SDK that changes one fails here."""
    assert protocol.HANDSHAKE_VERSIONS == sdk_versions.HANDSHAKE_PROTOCOL_VERSIONS
    assert protocol.MODERN_VERSIONS == sdk_versions.MODERN_PROTOCOL_VERSIONS
    assert protocol.LATEST_HANDSHAKE_VERSION == sdk_versions.LATEST_HANDSHAKE_VERSION
    assert params.PROTOCOL_VERSION_META == mcp_types.PROTOCOL_VERSION_META_KEY
    assert params.CLIENT_CAPABILITIES_META == mcp_types.CLIENT_CAPABILITIES_META_KEY
    assert params.CLIENT_INFO_META == mcp_types.CLIENT_INFO_META_KEY
    assert params.SERVER_INFO_META == mcp_types.SERVER_INFO_META_KEY
    assert (protocol.PROTOCOL_VERSION_HEADER, protocol.METHOD_HEADER, protocol.NAME_HEADER) == (
        inbound.MCP_PROTOCOL_VERSION_HEADER,
        inbound.MCP_METHOD_HEADER,
        inbound.MCP_NAME_HEADER,
    )
    assert dict(protocol.MODERN_ERROR_STATUS) == dict(inbound.ERROR_CODE_HTTP_STATUS)
