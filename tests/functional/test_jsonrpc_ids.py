"""What ``/mcp/{endpoint_id}`` owes a body that is not one valid JSON-RPC message, over real HTTP, in every era.

JSON-RPC 2.0: a request's id is a string or an integer (MCP allows no null id); a request with any other id is an
Invalid Request (-32600) answered with ``id: null``, not a notification to be accepted silently. Bodies that are not
JSON are Parse errors (-32700); ``NaN`` and ``Infinity`` are not JSON. The transport answers all of them with 400.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from mcpbridge.bootstrap import Container
from mcpbridge.http.apps import create_combined_app
from mcpbridge.publishing.rate_limit import window_key
from mcpbridge.settings import Settings
from tests.support.live_server import live_server

VERSIONS = ["2025-06-18", "2025-11-25", "2026-07-28"]
MODERN = "2026-07-28"


@dataclass
class Endpoint:
    id: str
    url: str
    token: str
    container: Container


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    data_dir: Path = tmp_path_factory.mktemp("ids") / "data"
    container = Container(Settings(data_dir=data_dir, jobs="inline"))
    admin_key = container.identity.initialize().api_key
    assert admin_key is not None
    with live_server(create_combined_app(container)) as base_url:
        with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {admin_key}"}, timeout=30) as api:
            kb = api.post("/api/v1/knowledge-bases", json={"name": "Notes"}).json()
            published = api.post(
                "/api/v1/mcp-endpoints",
                json={"name": "ids", "knowledge_base_ids": [kb["id"]], "tools": ["list_knowledge_bases"]},
            ).json()
        yield Endpoint(published["id"], published["url"], published["token"], container)
    container.close()


def message(version: str, method: str, **fields: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": "list_knowledge_bases", "arguments": {}} if method == "tools/call" else {}
    if version == MODERN:
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
    return {"jsonrpc": "2.0", "method": method, "params": params, **fields}


def post(endpoint: Endpoint, version: str, body: bytes, method: str = "tools/list") -> httpx.Response:
    headers = {
        "Authorization": f"Bearer {endpoint.token}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": version,
    }
    if version == MODERN:
        headers["Mcp-Method"] = method
        if method == "tools/call":
            headers["Mcp-Name"] = "list_knowledge_bases"
    return httpx.post(endpoint.url, content=body, headers=headers, timeout=30)


def error_of(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"jsonrpc", "id", "error"}
    assert body["jsonrpc"] == "2.0"
    return body  # type: ignore[no-any-return]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("method", ["tools/list", "tools/call"])
@pytest.mark.parametrize("bad_id", [True, False, 1.5, 1.0, -2.5e3, [], [1], {}, {"a": 1}, None], ids=repr)
def test_a_request_with_an_id_that_is_no_string_nor_integer_is_an_invalid_request(
    endpoint: Endpoint, version: str, method: str, bad_id: Any
) -> None:
    before = endpoint.container.store.get(window_key(endpoint.id))
    response = post(endpoint, version, json.dumps(message(version, method, id=bad_id)).encode(), method)
    body = error_of(response)
    assert body["id"] is None
    assert body["error"]["code"] == -32600
    assert body["error"]["message"] == "Invalid Request: the id must be a string or an integer"
    assert endpoint.container.store.get(window_key(endpoint.id)) == before, "the call was neither run nor counted"


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("good_id", [0, 7, -1, 2**70, "a", "", "7"], ids=repr)
def test_string_and_integer_ids_are_answered_with_the_same_id(endpoint: Endpoint, version: str, good_id: Any) -> None:
    response = post(endpoint, version, json.dumps(message(version, "tools/list", id=good_id)).encode())
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["id"] == good_id
    assert type(body["id"]) is type(good_id)
    assert [tool["name"] for tool in body["result"]["tools"]] == ["list_knowledge_bases"]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_notification_without_an_id_is_still_accepted(endpoint: Endpoint, version: str) -> None:
    body = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    response = post(endpoint, version, json.dumps(body).encode(), "notifications/initialized")
    assert response.status_code == 202, response.text


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_not_json(endpoint: Endpoint, version: str, literal: str) -> None:
    body = json.dumps(message(version, "tools/call", id=1)).replace(
        '"arguments": {}', f'"arguments": {{"n": {literal}}}'
    )
    assert literal in body
    error = error_of(post(endpoint, version, body.encode(), "tools/call"))
    assert error["id"] is None
    assert error["error"]["code"] == -32700


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    ("body", "echoed_id"),
    [
        (b"[]", None),
        (b'[{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}]', None),
        (b"42", None),
        (b'"tools/list"', None),
        (b'{"jsonrpc": "1.0", "id": 3, "method": "tools/list"}', 3),
        (b'{"id": 4, "method": "tools/list"}', 4),
        (b'{"jsonrpc": "2.0", "id": "five", "method": 5}', "five"),
        (b'{"jsonrpc": "2.0", "id": 6, "method": "tools/list", "params": [1]}', 6),
        (b'{"jsonrpc": "2.0", "id": true, "result": {}}', None),
    ],
)
def test_a_body_that_is_not_one_message_is_an_invalid_request(
    endpoint: Endpoint, version: str, body: bytes, echoed_id: Any
) -> None:
    error = error_of(post(endpoint, version, body))
    assert error["error"]["code"] == -32600
    assert error["id"] == echoed_id, "the id is given back when it could be read, else null"


@pytest.mark.parametrize("body", [b"", b"{", b"\xff\xfe{}", b'{"jsonrpc": "2.0", "id": 1, "method": "\xc3\x28"}'])
def test_a_body_that_is_not_json_is_a_parse_error(endpoint: Endpoint, body: bytes) -> None:
    error = error_of(post(endpoint, "2025-11-25", body))
    assert error["id"] is None
    assert error["error"]["code"] == -32700
