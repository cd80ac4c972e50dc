"""Refresh token rotation with a grace for the same client, on both backends over real HTTP: concurrent refreshes of
one refresh token (2 and 20 at once) all get the pair it was rotated into and the grant stands; the same token
after the grace, or from another client, is a replay that revokes the grant. The hub's clock is a ``FakeClock``."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.clock import FakeClock
from tests.support.oauth_flow import Browser, Hub, OAuthClient, close_clients, hub_on, mcp_post

BACKENDS = ["local", "aws"]
GRACE_SECONDS = 5


@pytest.fixture(scope="module")
def clock() -> FakeClock:
    return FakeClock(time.time())


@pytest.fixture(scope="module", params=BACKENDS)
def hub(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, clock: FakeClock) -> Iterator[Hub]:
    with (
        pytest.MonkeyPatch.context() as monkeypatch,
        hub_on(
            request.param,
            tmp_path_factory.mktemp(request.param),
            monkeypatch,
            clock=clock,
            oauth_refresh_grace_seconds=GRACE_SECONDS,
        ) as served,
    ):
        yield served


@pytest.fixture(autouse=True)
def _closed_clients() -> Iterator[None]:
    yield
    close_clients()


@pytest.fixture(scope="module")
def endpoint(hub: Hub) -> dict[str, Any]:
    return hub.publish()


def signed_in(endpoint: dict[str, Any], hub: Hub) -> tuple[OAuthClient, dict[str, Any]]:
    client = OAuthClient(endpoint["url"])
    client.discover()
    assert client.register().status_code == 201
    return client, client.tokens(Browser(), hub.admin_key)


def grant_listed(hub: Hub, client: OAuthClient) -> bool:
    with hub.api() as api:
        me = api.get("/api/v1/me").json()["user_id"]
        listed = api.get(f"/api/v1/users/{me}/oauth-grants", params={"client_id": client.client_id})
    return bool(listed.json()["items"])


def at_once(client: OAuthClient, refresh_token: str, ways: int) -> list[httpx.Response]:
    """``ways`` refreshes of one refresh token released together, each on its own connection."""
    barrier = threading.Barrier(ways)
    answers: list[httpx.Response] = []
    lock = threading.Lock()
    form = {"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": client.client_id}

    def refresh() -> None:
        with httpx.Client(timeout=60) as http:
            barrier.wait(timeout=60)
            answer = http.post(client.metadata["token_endpoint"], data=form)
        with lock:
            answers.append(answer)

    threads = [threading.Thread(target=refresh) for _ in range(ways)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(answers) == ways
    return answers


@pytest.mark.parametrize("ways", [2, 20])
def test_concurrent_refreshes_of_one_token_all_get_its_successor(hub: Hub, endpoint: dict[str, Any], ways: int) -> None:
    client, tokens = signed_in(endpoint, hub)
    answers = at_once(client, tokens["refresh_token"], ways)
    assert [a.status_code for a in answers] == [200] * ways, [a.text for a in answers if a.status_code != 200]
    pairs = {(a.json()["access_token"], a.json()["refresh_token"]) for a in answers}
    assert len(pairs) == 1, "every racer got the one pair the token was rotated into"
    ((access, refresh),) = pairs
    assert grant_listed(hub, client)
    assert mcp_post(endpoint["url"], access).status_code == 200
    assert client.refresh(refresh).status_code == 200, "the client goes on with the pair it kept"


def test_a_retry_within_the_grace_gets_the_same_pair_and_after_it_revokes(
    hub: Hub, endpoint: dict[str, Any], clock: FakeClock
) -> None:
    client, tokens = signed_in(endpoint, hub)
    first = client.refresh(tokens["refresh_token"])
    assert first.status_code == 200, first.text
    clock.advance(GRACE_SECONDS - 1)
    retried = client.refresh(tokens["refresh_token"])
    assert retried.status_code == 200, retried.text
    assert retried.json()["refresh_token"] == first.json()["refresh_token"]
    assert retried.json()["access_token"] == first.json()["access_token"]
    assert retried.json()["expires_in"] <= first.json()["expires_in"], "the same access token, nearer its end"

    clock.advance(2)
    replayed = client.refresh(tokens["refresh_token"])
    assert replayed.status_code == 400
    assert replayed.json()["error"] == "invalid_grant"
    assert not grant_listed(hub, client), "a replay after the grace revokes the grant"
    assert mcp_post(endpoint["url"], first.json()["access_token"]).status_code == 401
    assert client.refresh(first.json()["refresh_token"]).json()["error"] == "invalid_grant"


def test_a_refresh_token_presented_by_another_client_is_a_replay(hub: Hub, endpoint: dict[str, Any]) -> None:
    client, tokens = signed_in(endpoint, hub)
    rotated = client.refresh(tokens["refresh_token"])
    assert rotated.status_code == 200, rotated.text
    thief = OAuthClient(endpoint["url"])
    thief.discover()
    assert thief.register(client_name="Thief").status_code == 201
    stolen = thief.refresh(tokens["refresh_token"])
    assert stolen.status_code == 400
    assert stolen.json()["error"] == "invalid_grant"
    assert not grant_listed(hub, client)
    assert mcp_post(endpoint["url"], rotated.json()["access_token"]).status_code == 401
