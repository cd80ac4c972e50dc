"""Concurrent refreshes of one refresh token at mcpbridge's own authorization server, and what survives them.

    python tests/bench/oauth_refresh_race.py                       # both backends: 2-way x 20, 20-way x 5
    python tests/bench/oauth_refresh_race.py --backends local --races 2x20
    PYTHONPATH=/tmp/main-src/shared:/tmp/main-src python tests/bench/oauth_refresh_race.py   # another tree's code

The real ASGI app (``create_combined_app``) is served by uvicorn on 127.0.0.1, on the embedded backend (SQLite)
and on DynamoDB, KMS and S3 in moto. Per race: a person signs in (the consent page's form posts, with the admin
key), the client exchanges the code, then ``ways`` threads present the one refresh token at once (a barrier
releases them together, each on its own connection). Then, for that race:

* ``grant alive``: the grant is still listed (``GET /api/v1/users/{me}/oauth-grants?client_id=...``);
* ``200s``: how many of the concurrent refreshes were answered with tokens;
* ``tokens working``: of the access tokens those answers carried, how many ``tools/list`` accepts afterwards;
* ``client goes on``: the refresh token the client kept (the last answer to arrive) refreshes once more.

Printed per backend and race shape, summed over the races. The loop is bounded (races x ways requests) and talks
only to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

sys.path.append(str(Path(__file__).resolve().parents[2]))  # appended: a PYTHONPATH naming another tree wins

from tests.support.oauth_flow import Browser, Hub, OAuthClient, close_clients, hub_on, mcp_post


@dataclass
class Tally:
    races: int = 0
    alive: int = 0
    answered: int = 0
    requests: int = 0
    working: int = 0
    goes_on: int = 0


def race(hub: Hub, client: OAuthClient, me: str, ways: int, tally: Tally) -> None:
    tokens = client.tokens(Browser(), hub.admin_key)
    barrier = threading.Barrier(ways)
    answers: list[dict[str, Any]] = []
    lock = threading.Lock()

    def refresh() -> None:
        form = {"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"], "client_id": client.client_id}
        with httpx.Client(timeout=60) as http:
            barrier.wait(timeout=60)
            answer = http.post(client.metadata["token_endpoint"], data=form)
        if answer.status_code == 200:
            with lock:
                answers.append(answer.json())

    threads = [threading.Thread(target=refresh) for _ in range(ways)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    with hub.api() as api:
        listed = api.get(f"/api/v1/users/{me}/oauth-grants", params={"client_id": client.client_id}).json()
    tally.races += 1
    tally.requests += ways
    tally.answered += len(answers)
    tally.alive += bool(listed.get("items"))
    tally.working += sum(mcp_post(client.endpoint_url, a["access_token"]).status_code == 200 for a in answers)
    if answers:
        tally.goes_on += client.refresh(answers[-1]["refresh_token"]).status_code == 200


def run(backend: str, shapes: list[tuple[int, int]]) -> list[tuple[str, Tally]]:
    results = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        pytest.MonkeyPatch.context() as monkeypatch,
        hub_on(backend, Path(tmp), monkeypatch) as hub,
    ):
        endpoint = hub.publish()
        with hub.api() as api:
            me = str(api.get("/api/v1/me").json()["user_id"])
        for ways, races in shapes:
            client = OAuthClient(endpoint["url"])
            client.discover()
            assert client.register().status_code == 201
            tally = Tally()
            for _ in range(races):
                race(hub, client, me, ways, tally)
            results.append((f"{ways}-way x {races}", tally))
        close_clients()
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backends", nargs="+", default=["local", "aws"], choices=["local", "aws"])
    parser.add_argument("--races", nargs="+", default=["2x20", "20x5"], help="WAYSxRACES, e.g. 2x20")
    options = parser.parse_args()
    shapes = [(int(w), int(r)) for w, r in (shape.split("x") for shape in options.races)]
    import mcpbridge

    print(f"code under test: {Path(mcpbridge.__file__).resolve().parent}")
    print(f"{'backend':8} {'race':12} {'grants alive':>13} {'200s':>9} {'tokens working':>15} {'client goes on':>15}")
    for backend in options.backends:
        for name, t in run(backend, shapes):
            print(
                f"{backend:8} {name:12} {t.alive:>6}/{t.races:<6} {t.answered:>4}/{t.requests:<4} "
                f"{t.working:>7}/{t.answered:<7} {t.goes_on:>7}/{t.races:<7}"
            )


if __name__ == "__main__":
    main()
