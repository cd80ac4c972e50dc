"""Token items and the refresh lease on the embedded store (the DynamoDB side runs in the functional race test)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcpbridge.adapters.local.keyfile import KeyFileSecretBox
from mcpbridge.adapters.local.sqlite import SqliteStore
from mcpbridge.identity.records import workspace_item
from mcpbridge.oauth.registration import ClientIdentity
from mcpbridge.oauth.tokens import (
    LEASE_SECONDS,
    REFRESH_SKEW_SECONDS,
    IssuedToken,
    TokenOrigin,
    TokenStore,
    classify,
    token_key,
)
from tests.support.clock import FakeClock

ORIGIN = TokenOrigin(
    issuer="https://as.example",
    token_endpoint="https://as.example/token",
    revocation_endpoint=None,
    resource="https://mcp.example/mcp",
    client=ClientIdentity("client-1", "client_secret_basic", "dynamic", secret="s", record="OAUTHCLIENT#svc_1#abc"),
)


@pytest.mark.parametrize(
    ("status", "error", "verdict"),
    [
        (400, "invalid_grant", "reauthorize"),
        (400, "invalid_token", "reauthorize"),
        (400, "expired_token", "reauthorize"),
        (400, "bad_refresh_token", "reauthorize"),
        (400, "invalid_request", "reauthorize"),
        (400, None, "reauthorize"),
        (400, "invalid_client", "drop_client"),
        (400, "unauthorized_client", "drop_client"),
        (401, "invalid_client", "drop_client"),
        (401, None, "drop_client"),
        (403, None, "temporary"),
        (429, None, "temporary"),
        (500, None, "temporary"),
        (503, "temporarily_unavailable", "temporary"),
        (500, "invalid_grant", "reauthorize"),
    ],
)
def test_classification(status: int, error: str | None, verdict: str) -> None:
    assert classify(status, error) == verdict


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def tokens(tmp_path: Path, clock: FakeClock) -> TokenStore:
    store = SqliteStore(tmp_path / "store.sqlite3", clock)
    store.put(workspace_item("ws_1", "Workspace", "2027-01-01T00:00:00Z"))  # tokens are stored for active workspaces
    return TokenStore(store, clock, KeyFileSecretBox(tmp_path / "key"))


def issued(access: str = "access-1", refresh: str | None = "refresh-1", expires_in: int | None = 3600) -> IssuedToken:
    return IssuedToken(access_token=access, refresh_token=refresh, expires_in=expires_in, scope="mcp")


def save(tokens: TokenStore, token: IssuedToken) -> None:
    tokens.save("ws_1", "svc_1", "user", "usr_1", token, ORIGIN, scope="mcp")


KEY = token_key("ws_1", "svc_1", "user", "usr_1")


def test_a_refreshable_token_is_due_30_seconds_early(tokens: TokenStore, clock: FakeClock) -> None:
    save(tokens, issued())
    token = tokens.get(KEY)
    assert token is not None
    assert token.access_token == "access-1"
    assert token.state(clock.now()) == "authorized"
    clock.advance(3600 - REFRESH_SKEW_SECONDS)
    assert token.state(clock.now()) == "refreshable"
    assert tokens.get(KEY) is not None, "a refreshable token outlives its access token"


def test_a_token_without_refresh_lives_to_its_real_expiry(tokens: TokenStore, clock: FakeClock) -> None:
    save(tokens, issued(refresh=None))
    clock.advance(3600 - 1)
    token = tokens.get(KEY)
    assert token is not None
    assert token.state(clock.now()) == "authorized"
    clock.advance(1)
    assert tokens.get(KEY) is None, "expired and not refreshable: gone (TTL)"


def test_secrets_are_sealed(tokens: TokenStore, tmp_path: Path, clock: FakeClock) -> None:
    save(tokens, issued())
    raw = SqliteStore(tmp_path / "store.sqlite3", clock).get(KEY)
    assert raw is not None
    assert "access-1" not in repr(raw)
    assert "refresh-1" not in repr(raw)
    assert "access-1" not in repr(tokens.get(KEY))


def test_one_lease_at_a_time_until_it_lapses(tokens: TokenStore, clock: FakeClock) -> None:
    save(tokens, issued())
    token = tokens.get(KEY)
    assert token is not None
    lease = tokens.acquire_lease(token)
    assert lease is not None
    assert tokens.acquire_lease(token) is None, "held"
    clock.advance(LEASE_SECONDS + 1)
    assert tokens.acquire_lease(token) is not None, "a lapsed lease (crashed holder) can be taken over"


def test_the_lease_is_bound_to_the_generation_read(tokens: TokenStore) -> None:
    save(tokens, issued())
    stale = tokens.get(KEY)
    assert stale is not None
    lease = tokens.acquire_lease(stale)
    assert lease is not None
    refreshed = tokens.save_refreshed(stale, lease, issued("access-2", "refresh-2"))
    assert refreshed is not None
    assert refreshed.generation != stale.generation
    assert refreshed.lease_id is None, "writing the new material releases the lease"
    assert tokens.acquire_lease(stale) is None, "a refresher that read the old token cannot lease it"
    assert tokens.acquire_lease(refreshed) is not None


def test_a_lost_lease_cannot_write(tokens: TokenStore, clock: FakeClock) -> None:
    save(tokens, issued())
    token = tokens.get(KEY)
    assert token is not None
    lease = tokens.acquire_lease(token)
    assert lease is not None
    clock.advance(LEASE_SECONDS + 1)
    other = tokens.acquire_lease(token)
    assert other is not None
    assert tokens.save_refreshed(token, lease, issued("access-2")) is None
    assert tokens.delete(KEY, lease_id=lease) is None
    current = tokens.get(KEY)
    assert current is not None
    assert current.access_token == "access-1"


def test_a_server_that_does_not_rotate_keeps_the_refresh_token(tokens: TokenStore) -> None:
    save(tokens, issued())
    token = tokens.get(KEY)
    assert token is not None
    lease = tokens.acquire_lease(token)
    assert lease is not None
    refreshed = tokens.save_refreshed(token, lease, issued("access-2", refresh=None))
    assert refreshed is not None
    assert refreshed.access_token == "access-2"
    assert refreshed.refresh_token == "refresh-1"
