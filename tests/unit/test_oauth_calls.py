"""The per-operation rule for OAuth services: bearer first, one forced refresh and one retry on a 401, nothing else."""

from __future__ import annotations

import dataclasses
from typing import Any

import anyio
import pytest

from mcpbridge.client.connection import ConnectionSpec, OutcomeUnknown
from mcpbridge.client.oauth_calls import call_with_oauth, oauth_connection_spec
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


class Operation:
    def __init__(self, *failures: Exception) -> None:
        self.failures = list(failures)
        self.specs: list[ConnectionSpec] = []

    async def __call__(self, spec: ConnectionSpec) -> str:
        self.specs.append(spec)
        if self.failures:
            raise self.failures.pop(0)
        return "done"


def unauthorized() -> UpstreamError:
    return UpstreamError("refused (HTTP 401)", code="upstream_unauthorized", details={"status": 401})


def run(tokens: Tokens, operation: Operation, service: ExternalService = PLAIN) -> str:
    async def main() -> str:
        return await call_with_oauth(tokens, service, "ws_1", "user", "usr_1", operation)

    return anyio.run(main)


def test_the_spec_carries_the_bearer_and_custom_headers_on_top() -> None:
    spec = oauth_connection_spec(PLAIN, "abc")
    assert spec.headers == {"Authorization": "Bearer abc", "X-Trace": "on"}
    assert (spec.url, spec.transport, spec.timeout) == (PLAIN.url, "http-streamable", 12.0)
    assert (spec.retry_count, spec.retry_delay) == (2, 0.5)
    overridden = oauth_connection_spec(SERVICE, "abc")
    assert overridden.headers["Authorization"] == "Bearer admin-override", "custom headers win, as for other auth"
    assert "abc" not in repr(spec)


def test_success_needs_no_refresh() -> None:
    tokens, operation = Tokens(), Operation()
    assert run(tokens, operation) == "done"
    assert [c[0] for c in tokens.calls] == ["bearer_for"]
    assert tokens.calls[0][1] == ("ws_1", "svc_1", "user", "usr_1")
    assert len(operation.specs) == 1


def test_a_401_gets_exactly_one_forced_refresh_and_one_retry() -> None:
    tokens, operation = Tokens(), Operation(unauthorized())
    assert run(tokens, operation) == "done"
    assert tokens.calls[1] == ("force_refresh", "token-1"), "the refused token is named"
    assert [s.headers["Authorization"] for s in operation.specs] == ["Bearer token-1", "Bearer token-2"]


def test_a_second_401_is_passed_on() -> None:
    tokens, operation = Tokens(), Operation(unauthorized(), unauthorized())
    with pytest.raises(UpstreamError) as failed:
        run(tokens, operation)
    assert failed.value.code == "upstream_unauthorized"
    assert len(operation.specs) == 2
    assert [c[0] for c in tokens.calls] == ["bearer_for", "force_refresh"]


@pytest.mark.parametrize(
    "failure",
    [
        OutcomeUnknown("the answer was lost"),
        UpstreamError("refused (HTTP 403)", code="upstream_forbidden"),
        UpstreamError("unreachable", code="upstream_unreachable"),
        RuntimeError("bug"),
    ],
)
def test_nothing_else_is_retried(failure: Exception) -> None:
    tokens, operation = Tokens(), Operation(failure)
    with pytest.raises(type(failure)):
        run(tokens, operation)
    assert len(operation.specs) == 1
    assert [c[0] for c in tokens.calls] == ["bearer_for"]


def test_no_token_means_no_connection() -> None:
    tokens, operation = Tokens(missing=True), Operation()
    with pytest.raises(OAuthRequired):
        run(tokens, operation)
    assert operation.specs == []


def test_a_refused_refresh_ends_the_call() -> None:
    tokens, operation = Tokens(refusal=OAuthRequired("re-authorize")), Operation(unauthorized())
    with pytest.raises(OAuthRequired):
        run(tokens, operation)
    assert len(operation.specs) == 1


class SlowTokens(Tokens):
    """A BearerSource whose forced refresh does not finish (an authorization server that stalls)."""

    async def force_refresh(
        self, workspace_id: str, service: ExternalService, ptype: str, pid: str, *, rejected: str | None = None
    ) -> str:
        self.calls.append(("force_refresh", rejected))
        await anyio.sleep(3600)
        raise AssertionError("unreachable")


def test_a_refresh_that_does_not_end_by_until_is_a_retryable_failure() -> None:
    tokens, operation = SlowTokens(), Operation(unauthorized())

    async def main() -> UpstreamError:
        until = anyio.current_time() + 0.2
        with anyio.fail_after(30), pytest.raises(UpstreamError) as raised:
            await call_with_oauth(tokens, PLAIN, "ws_1", "user", "usr_1", operation, until=until)
        return raised.value

    error = anyio.run(main)
    assert (error.code, error.retryable) == ("oauth_refresh_failed", True)
    assert 0 < error.details["timeout_seconds"] <= 0.2
    assert f"within {error.details['timeout_seconds']:g} s" in error.message
    assert len(operation.specs) == 1, "no retry without a new token"
