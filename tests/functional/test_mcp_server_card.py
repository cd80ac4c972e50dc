"""Each published endpoint's MCP Server Card (SEP-2127, a draft): ``GET /mcp/{endpoint_id}/server-card``, over real
HTTP against the combined app on 127.0.0.1 (what ``mcpbridge serve`` runs) and against the template's functions
behind an emulated HTTP API on moto.

The card is public, so it must say nothing an unauthenticated caller does not learn anyway: no knowledge base, tool,
workspace, description or token of the endpoint; the endpoint's name only where its public OAuth metadata already
gives it. A disabled or unknown endpoint has no card, and the two look alike.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from mcpbridge import __version__
from mcpbridge.domain.www_authenticate import auth_param
from tests.support.oauth_flow import Hub, hub_on, lambda_hub

MEDIA_TYPE = "application/mcp-server-card+json"
SCHEMA = "https://static.modelcontextprotocol.io/schemas/v1/server-card.schema.json"
NAME = re.compile(r"^[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+$")
VERSIONS = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"]


@dataclass
class World:
    backend: str
    hub: Hub
    kb: str
    both: dict[str, Any]
    static: dict[str, Any]
    disabled: dict[str, Any]


@contextlib.contextmanager
def _hub(backend: str, tmp: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Hub]:
    if backend == "serve":
        with hub_on("local", tmp, monkeypatch) as hub:
            yield hub
    else:
        with lambda_hub(monkeypatch, jobs="inline") as hub:
            yield hub


@pytest.fixture(scope="module", params=["serve", "lambda"])
def world(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with (
        pytest.MonkeyPatch.context() as monkeypatch,
        _hub(request.param, tmp_path_factory.mktemp("cards"), monkeypatch) as hub,
    ):
        kb = hub.post("/api/v1/knowledge-bases", {"name": "Walrus research", "description": "Tusks and clams"})["id"]
        both = hub.publish(name="Field notes", description="Internal: the polar team's notes", knowledge_base_ids=[kb])
        static = hub.publish(name="Private backend", auth_mode="static", description="Only for the ETL job")
        disabled = hub.publish(name="Retired")
        with hub.api() as api:
            answer = api.put(f"/api/v1/mcp-endpoints/{disabled['id']}", json={"enabled": False})
            assert answer.status_code == 200, answer.text
        yield World(request.param, hub, kb, both, static, disabled)


def _card_url(endpoint: dict[str, Any]) -> str:
    return f"{endpoint['url']}/server-card"


def _get(url: str, **headers: str) -> httpx.Response:
    with httpx.Client(timeout=30) as http:
        return http.get(url, headers=headers)


def test_the_card_of_an_endpoint_that_signs_clients_in_with_oauth(world: World) -> None:
    answer = _get(_card_url(world.both), accept=MEDIA_TYPE)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == MEDIA_TYPE
    assert answer.headers["access-control-allow-origin"] == "*"
    assert answer.headers["access-control-expose-headers"] == "ETag"
    assert answer.headers["cache-control"].startswith("public, max-age=")
    assert answer.headers["etag"].startswith('"')
    card = answer.json()
    assert card["$schema"] == SCHEMA
    assert NAME.fullmatch(card["name"]), card["name"]
    assert card["name"].endswith(f"/{world.both['id']}")
    assert card["version"] == __version__
    assert 1 <= len(card["description"]) <= 100
    assert card["title"] == "Field notes", "its RFC 9728 metadata names it already"
    (icon,) = card["icons"]
    assert icon["src"].startswith("data:image/svg+xml;base64,")
    (remote,) = card["remotes"]
    assert remote["type"] == "streamable-http"
    assert remote["url"] == world.both["url"]
    assert remote["supportedProtocolVersions"] == VERSIONS
    (header,) = remote["headers"]
    assert (header["name"], header["isRequired"], header["isSecret"]) == ("Authorization", False, True)
    # What the card says of authorization is what a 401 tells any caller.
    with httpx.Client(timeout=30) as http:
        refused = http.post(world.both["url"], json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert refused.status_code == 401
    named = auth_param(refused.headers["www-authenticate"], "resource_metadata")
    authorization = card["_meta"]["io.mcpbridge/authorization"]
    assert authorization == {"bearer": True, "oauth": True, "protectedResourceMetadata": named}
    assert _get(named).json()["resource_name"] == card["title"]


def test_a_card_tells_nothing_an_unauthenticated_caller_does_not_know(world: World) -> None:
    hub = world.hub
    workspace_id = hub.container.identity.installed_workspace_id()
    assert workspace_id is not None
    for endpoint in (world.both, world.static):
        text = _get(_card_url(endpoint)).text
        private = [
            world.kb,
            "Walrus research",
            "Tusks and clams",
            "polar team",
            "ETL job",
            workspace_id,
            endpoint["token"],
            endpoint["token_hint"],
            "search_knowledge",
            "list_knowledge_bases",
        ]
        leaked = [value for value in private if value and value in text]
        assert not leaked, leaked


def test_a_static_token_endpoint_keeps_its_name_and_needs_its_token(world: World) -> None:
    card = _get(_card_url(world.static)).json()
    assert "title" not in card, "no public metadata names it"
    (remote,) = card["remotes"]
    (header,) = remote["headers"]
    assert (header["name"], header["isRequired"], header["isSecret"]) == ("Authorization", True, True)
    assert card["_meta"]["io.mcpbridge/authorization"] == {"bearer": True, "oauth": False}


def test_disabled_and_unknown_endpoints_have_no_card_and_look_alike(world: World) -> None:
    base = world.both["url"].rsplit("/mcp/", 1)[0]
    answers = [
        _get(_card_url(world.disabled)),
        _get(f"{base}/mcp/ep_{'a' * 26}/server-card"),
        _get(f"{base}/mcp/not-an-id/server-card"),
    ]
    assert [a.status_code for a in answers] == [404, 404, 404]
    assert {a.json()["code"] for a in answers} == {"server_card_not_found"}
    assert {a.json()["detail"] for a in answers} == {answers[0].json()["detail"]}
    assert "Retired" not in answers[0].text
    # Enabled again, it has its card again (nothing is cached on the server's side).
    with world.hub.api() as api:
        assert api.put(f"/api/v1/mcp-endpoints/{world.disabled['id']}", json={"enabled": True}).status_code == 200
    try:
        assert _get(_card_url(world.disabled)).status_code == 200
    finally:
        with world.hub.api() as api:
            api.put(f"/api/v1/mcp-endpoints/{world.disabled['id']}", json={"enabled": False})


def test_revalidation_negotiation_methods_and_hosts(world: World) -> None:
    url = _card_url(world.both)
    first = _get(url)
    etag = first.headers["etag"]
    unchanged = _get(url, **{"if-none-match": etag})
    assert unchanged.status_code == 304
    assert unchanged.content == b""
    assert unchanged.headers["etag"] == etag
    assert _get(url, **{"if-none-match": f'W/{etag}, "other"'}).status_code == 304
    assert _get(url, **{"if-none-match": '"other"'}).status_code == 200

    as_json = _get(url, accept="application/json")
    assert as_json.status_code == 200
    assert as_json.headers["content-type"] == "application/json"
    assert as_json.json() == first.json()
    refused = _get(url, accept="text/html")
    assert (refused.status_code, refused.json()["code"]) == (406, "not_acceptable")

    with httpx.Client(timeout=30) as http:
        posted = http.post(url, json={})
        preflight = http.options(
            url, headers={"origin": "https://elsewhere.example", "access-control-request-method": "GET"}
        )
        misdirected = http.get(url, headers={"host": "evil.example"})
    assert posted.status_code == 405
    assert "GET" in posted.headers["allow"]
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == "*"
    assert "If-None-Match" in preflight.headers["access-control-allow-headers"]
    # Behind API Gateway only the API's own domain names reach the function; served directly, a host name not
    # configured is refused.
    if world.backend == "serve":
        assert misdirected.status_code == 421
