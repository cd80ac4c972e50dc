"""The rule for OAuth services, held by the connection's auth (``BearerAuth``): the bearer on every request, one forced
refresh and one resend on a 401, nothing else; and ``call_with_oauth`` refusing a principal without a token before any
connection. Exercised at the HTTP seam (an ``httpx2`` mock transport), as the SDK's transports use it."""

from __future__ import annotations

import dataclasses
from typing import Any

import anyio
import httpx2
import pytest

from mcpbridge.client.connection import ConnectionSpec, HttpFacts
from mcpbridge.client.oauth_calls import call_with_oauth
from mcpbridge.client.specs import oauth_connection_spec
from mcpbridge.domain.external_services import AdvancedConfig, AuthConfig, ExternalService
from mcpbridge.errors import OAuthRequired, UpstreamError

SERVICE = ExternalService(
    id="svc_1",
    workspace_id="ws_1",
    name="protected",
    description="",
    enabled=True,
    transport="http-streamable",
    url="https://mcp.example.com/mcp",
    headers={"X-Trace": "on", "Authorization": "Bearer admin-override"},
    auth=AuthConfig(auth_type="oauth"),
    advanced=AdvancedConfig(timeout=12.0, retry_count=2, retry_delay=0.5),
    usage_instructions="",
    catalog_stale=False,
    created_at="2027-01-01T00:00:00Z",
    updated_at="2027-01-01T00:00:00Z",
    version=1,
)
PLAIN = dataclasses.replace(SERVICE, headers={"X-Trace": "on"})


class Tokens:
    """A BearerSource that hands out numbered tokens and records what it was asked."""

    def __init__(self, *, refusal: Exception | None = None, missing: bool = False) -> None:
        self.current = "token-1"
        self.calls: list[tuple[str, Any]] = []
        self.refusal = refusal
        self.missing = missing

    async def bearer_for(self, workspace_id: str, service: ExternalService, ptype: str, pid: str) -> str:
        self.calls.append(("bearer_for", (workspace_id, service.id, ptype, pid)))
        if self.missing:
            raise OAuthRequired("authorize first", details={"service_id": service.id})
        return self.current

    async def force_refresh(
        self, workspace_id: str, service: ExternalService, ptype: str, pid: str, *, rejected: str | None = None
    ) -> str:
        self.calls.append(("force_refresh", rejected))
        if self.refusal is not None:
            raise self.refusal
        self.current = "token-2"
        return self.current


class Upstream:
    """An HTTP server, answering each request with the next status of ``answers`` (then 200), and keeping what was
    sent; or raising ``failure`` (a transport error) instead."""

    def __init__(self, *answers: int, failure: Exception | None = None, challenge: str | None = None) -> None:
        self.answers = list(answers)
        self.failure = failure
        self.challenge = challenge
        self.sent: list[str | None] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.sent.append(request.headers.get("authorization"))
        if self.failure is not None:
            raise self.failure
        status = self.answers.pop(0) if self.answers else 200
        headers = {"www-authenticate": self.challenge} if self.challenge and status in (401, 403) else {}
        return httpx2.Response(status, json={"ok": True}, headers=headers)


def send(tokens: Tokens, upstream: Upstream, service: ExternalService = PLAIN, *, until: float | None = None) -> Any:
    """One request through the connection's auth, as an operation's request; returns (status, the operation's facts)."""

    async def main() -> tuple[int, HttpFacts]:
        spec = oauth_connection_spec(
            service, tokens, "ws_1", "user", "usr_1", until=None if until is None else anyio.current_time() + until
        )
        facts = HttpFacts()
        transport = httpx2.MockTransport(upstream)
        async with httpx2.AsyncClient(transport=transport, headers=spec.headers, auth=spec.auth) as http:
            with facts.recording():
                response = await http.post(spec.url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        return response.status_code, facts

    return anyio.run(main)


def test_the_spec_carries_the_bearer_and_custom_headers_on_top() -> None:
    tokens = Tokens()
    spec = oauth_connection_spec(PLAIN, tokens, "ws_1", "user", "usr_1")
    assert spec.headers == {"X-Trace": "on"}, "no token in the spec: the auth adds it per request"
    assert (spec.url, spec.transport, spec.timeout) == (PLAIN.url, "http-streamable", 12.0)
    assert (spec.retry_count, spec.retry_delay) == (2, 0.5)
    upstream = Upstream()
    assert send(tokens, upstream)[0] == 200
    assert upstream.sent == ["Bearer token-1"]
    overridden = Upstream()
    send(Tokens(), overridden, SERVICE)
    assert overridden.sent == ["Bearer admin-override"], "custom headers win, as for other auth"
    assert "token-1" not in repr(spec)


def test_success_needs_no_refresh() -> None:
    tokens, upstream = Tokens(), Upstream()
    assert send(tokens, upstream)[0] == 200
    assert [c[0] for c in tokens.calls] == ["bearer_for"]
    assert tokens.calls[0][1] == ("ws_1", "svc_1", "user", "usr_1")
    assert len(upstream.sent) == 1


def test_a_401_gets_exactly_one_forced_refresh_and_one_retry() -> None:
    tokens, upstream = Tokens(), Upstream(401)
    assert send(tokens, upstream)[0] == 200
    assert tokens.calls[1] == ("force_refresh", "token-1"), "the refused token is named"
    assert upstream.sent == ["Bearer token-1", "Bearer token-2"]


def test_a_second_401_is_passed_on() -> None:
    tokens, upstream = Tokens(), Upstream(401, 401)
    status, facts = send(tokens, upstream)
    assert status == 401
    assert facts.refusal is None, "a refused fresh token is the server's answer, not a missing one"
    assert len(upstream.sent) == 2
    assert [c[0] for c in tokens.calls] == ["bearer_for", "force_refresh"]


@pytest.mark.parametrize("status", [403, 404, 500, 503])
def test_nothing_else_is_retried(status: int) -> None:
    tokens, upstream = Tokens(), Upstream(status)
    assert send(tokens, upstream)[0] == status
    assert len(upstream.sent) == 1
    assert [c[0] for c in tokens.calls] == ["bearer_for"]


def test_a_request_that_never_got_an_answer_is_not_resent() -> None:
    tokens, upstream = Tokens(), Upstream(failure=httpx2.ReadTimeout("the answer was lost"))
    with pytest.raises(httpx2.ReadTimeout):
        send(tokens, upstream)
    assert len(upstream.sent) == 1
    assert [c[0] for c in tokens.calls] == ["bearer_for"]


def test_no_token_means_no_connection() -> None:
    tokens, connected = Tokens(missing=True), []

    async def operation(spec: ConnectionSpec) -> str:
        connected.append(spec)
        return "done"

    with pytest.raises(OAuthRequired):
        anyio.run(call_with_oauth, tokens, PLAIN, "ws_1", "user", "usr_1", operation)
    assert connected == []
    # And a token that disappears between that check and a request: sent without one, the refusal noted.
    upstream = Upstream(401)
    status, facts = send(tokens, upstream)
    assert (status, upstream.sent) == (401, [None])
    assert isinstance(facts.refusal, OAuthRequired)


def test_a_refused_refresh_ends_the_call() -> None:
    tokens, upstream = Tokens(refusal=OAuthRequired("re-authorize")), Upstream(401)
    status, facts = send(tokens, upstream)
    assert status == 401
    assert isinstance(facts.refusal, OAuthRequired)
    assert len(upstream.sent) == 1


class SlowTokens(Tokens):
    """A BearerSource whose forced refresh does not finish (an authorization server that stalls)."""

    async def force_refresh(
        self, workspace_id: str, service: ExternalService, ptype: str, pid: str, *, rejected: str | None = None
    ) -> str:
        self.calls.append(("force_refresh", rejected))
        await anyio.sleep(3600)
        raise AssertionError("unreachable")


def test_a_refresh_that_does_not_end_by_until_is_a_retryable_failure() -> None:
    tokens, upstream = SlowTokens(), Upstream(401)
    status, facts = send(tokens, upstream, until=0.2)
    error = facts.refusal
    assert status == 401
    assert isinstance(error, UpstreamError)
    assert (error.code, error.retryable) == ("oauth_refresh_failed", True)
    assert 0 < error.details["timeout_seconds"] <= 0.2
    assert f"within {error.details['timeout_seconds']:g} s" in error.message
    assert len(upstream.sent) == 1, "no retry without a new token"


STEP_UP = (
    'Bearer error="insufficient_scope", scope="mcp:basic mcp:write", resource_metadata="https://mcp.example.com/x"'
)


def test_a_403_insufficient_scope_asks_the_user_for_the_wider_scope() -> None:
    """SEP-835 step-up: a renewed token would be as narrow, so nothing is refreshed or resent; the refusal is the
    user's consent again, for the scopes the server named."""
    tokens, upstream = Tokens(), Upstream(403, challenge=STEP_UP)
    status, facts = send(tokens, upstream)
    assert status == 403
    assert len(upstream.sent) == 1
    assert [c[0] for c in tokens.calls] == ["bearer_for"]
    assert isinstance(facts.refusal, OAuthRequired)
    wanted = {"service_id": "svc_1", "reason": "insufficient_scope", "scope": "mcp:basic mcp:write"}
    assert facts.refusal.details == wanted


@pytest.mark.parametrize(
    "challenge",
    ['Bearer error="invalid_token"', 'Bearer scope="mcp:write"', 'Basic realm="x"'],
)
def test_another_403_is_the_servers_answer(challenge: str) -> None:
    status, facts = send(Tokens(), Upstream(403, challenge=challenge))
    assert status == 403
    assert facts.refusal is None


def test_a_step_up_scope_that_is_not_an_oauth_scope_is_left_out() -> None:
    challenge = 'Bearer error="insufficient_scope", scope="mcp:\\x"'
    _status, facts = send(Tokens(), Upstream(403, challenge=challenge))
    assert isinstance(facts.refusal, OAuthRequired)
    assert "scope" not in facts.refusal.details
