"""MCP 2025-03-26 servers without authorization metadata: the default endpoints, and only when the metadata is absent.

MCP 2025-03-26 (section 2.3.3): a client that finds no authorization server metadata uses ``/authorize``, ``/token``
and ``/register`` at the MCP server's origin. "Finds none" is read narrowly here: the server answered 401 naming no
resource metadata, and every metadata URL answered 404. Anything else (a redirect, a document that is not metadata,
a refusal, an answer too large, a probe that got no 401, a 401 that names resource metadata) fails discovery with
``oauth_discovery_failed`` (or its own code) and nothing is sent to the default endpoints. The SSRF corpus
(``test_ssrf_corpus.py``) holds the refused and hostile URLs to the same rule.

Real pieces: the in-process authorization server and MCP server (``tests/support/oauth_server.py``), mcpbridge's REST
API and callback, a real ``Connection`` for the tool call.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.functional.test_oauth_flow import Api, instances, problem, query_of, stored_attempts
from tests.support.clock import FakeClock
from tests.support.oauth_server import OAuthTestServer, oauth_server

BASE = "/api/v1/mcp-services"
AS_METADATA = "/.well-known/oauth-authorization-server"
OPENID = "/.well-known/openid-configuration"
RESOURCE_METADATA = "/.well-known/oauth-protected-resource/mcp"
RESOURCE_ROOT = "/.well-known/oauth-protected-resource"
METADATA_DOCUMENT = {"issuer": "https://elsewhere.example", "note": "not authorization server metadata"}


@pytest.fixture
def local_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    with instances("local", tmp_path, monkeypatch, FakeClock(time.time())) as built:
        api = Api(built[0])
        with api.client:
            yield api


@pytest.fixture
def legacy() -> Iterator[OAuthTestServer]:
    with oauth_server(published_metadata=False, challenge_hint=False) as server:
        yield server


def test_a_server_without_metadata_is_authorized_at_its_default_endpoints(
    local_api: Api, legacy: OAuthTestServer
) -> None:
    api = local_api
    service_id = api.create_service(legacy)
    started, _ = api.complete(service_id)
    url = started["authorization_url"]
    assert url.startswith(f"{legacy.base_url}/authorize?"), "the default authorization endpoint at the origin"
    query = query_of(url)
    assert query["code_challenge_method"] == "S256"
    assert query["resource"] == legacy.mcp_url
    assert legacy.registrations == 1, "registered at the default /register"
    assert legacy.token_requests["authorization_code"] == 1, "the code exchanged at the default /token"
    assert api.whoami(service_id) == "hello alice"
    assert set(legacy.well_known_requests) >= {AS_METADATA, RESOURCE_METADATA, RESOURCE_ROOT}
    assert api.status(service_id)["status"] == "authorized"


def _refused_before_any_default_endpoint(api: Api, server: OAuthTestServer, code: str) -> dict[str, Any]:
    service_id = api.create_service(server)
    answer = api.client.post(f"{BASE}/{service_id}/oauth/authorize-url", json={})
    body = problem(answer, 502, code)
    assert server.registrations == 0, "nothing registered at a default endpoint"
    assert server.authorizations == []
    assert stored_attempts(api) == [], "no attempt stored"
    return body


HOSTILE_METADATA = {
    "redirect": (302, "application/json", b""),
    "html": (200, "text/html", b"<html><body>Sign in</body></html>"),
    "json-not-metadata": (200, "application/json", json.dumps(METADATA_DOCUMENT).encode()),
    "json-array": (200, "application/json", b"[]"),
    "unauthorized": (401, "application/json", b"{}"),
    "forbidden": (403, "application/json", b"{}"),
    "gone": (410, "application/json", b"{}"),
}


@pytest.mark.parametrize("answer", sorted(HOSTILE_METADATA))
def test_authorization_server_metadata_that_is_not_absent_is_no_reason_to_fall_back(
    local_api: Api, answer: str
) -> None:
    with oauth_server(
        published_metadata=False, challenge_hint=False, well_known_answers={AS_METADATA: HOSTILE_METADATA[answer]}
    ) as server:
        _refused_before_any_default_endpoint(local_api, server, "oauth_discovery_failed")


@pytest.mark.parametrize("answer", ["redirect", "html", "json-not-metadata", "forbidden"])
def test_resource_metadata_that_is_not_absent_is_no_reason_to_fall_back(local_api: Api, answer: str) -> None:
    with oauth_server(
        published_metadata=False, challenge_hint=False, well_known_answers={RESOURCE_ROOT: HOSTILE_METADATA[answer]}
    ) as server:
        _refused_before_any_default_endpoint(local_api, server, "oauth_discovery_failed")


def test_metadata_larger_than_the_cap_fails_discovery(local_api: Api) -> None:
    oversize = (200, "application/json", b'{"pad": "' + b"x" * (300 * 1024) + b'"}')
    with oauth_server(published_metadata=False, challenge_hint=False, well_known_answers={AS_METADATA: oversize}) as s:
        _refused_before_any_default_endpoint(local_api, s, "oauth_answer_too_large")


@pytest.mark.parametrize("status", [404, 200, 403])
def test_a_server_that_did_not_ask_for_authorization_gets_no_default_endpoints(local_api: Api, status: int) -> None:
    """The probe's 401 is what says the server wants OAuth at all: without it there is nothing to fall back for."""
    with oauth_server(published_metadata=False, challenge_hint=False, unauthenticated_status=status) as server:
        _refused_before_any_default_endpoint(local_api, server, "oauth_discovery_failed")


def test_a_401_that_names_resource_metadata_is_a_later_version_and_gets_no_default_endpoints(local_api: Api) -> None:
    """A server that points at RFC 9728 metadata speaks MCP 2025-06-18 or later: its missing metadata is an error."""
    with oauth_server(published_metadata=False, challenge_hint=True) as server:
        _refused_before_any_default_endpoint(local_api, server, "oauth_discovery_failed")
