"""Repeat the concurrent-401 scenario of ``tests/functional/test_oauth_concurrent_401.py`` and count.

    python tests/bench/oauth_concurrent_401.py [--runs 10] [--callers 20]

Each run: a fresh embedded container and authorization server; one call opens the pooled connection, the upstream
starts refusing the token, ``callers`` agent calls run at once. Printed per run: how many calls completed, the
failure codes, and how many refresh requests reached the authorization server (expected: all, none, 1).
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.functional.test_oauth_concurrent_401 import refused_bursts
from tests.functional.test_oauth_flow import Api, instances
from tests.support.clock import FakeClock
from tests.support.oauth_server import oauth_server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--callers", type=int, default=20)
    options = parser.parse_args()
    perfect = 0
    for run in range(1, options.runs + 1):
        with (
            tempfile.TemporaryDirectory() as tmp,
            instances("local", Path(tmp), pytest.MonkeyPatch(), FakeClock(time.time())) as built,
            oauth_server() as server,
        ):
            api = Api(built[0])
            with api.client:
                (burst,) = refused_bursts(api, server, options.callers)
            outcomes, refreshes = burst.outcomes, burst.refreshes
            completed = sum(o.call.status == "completed" for o in outcomes)
            failures = collections.Counter(str((o.call.error or {}).get("code")) for o in outcomes if o.call.error)
            perfect += completed == options.callers and refreshes == 1
            summary = f"{completed}/{options.callers} completed, failures {dict(failures)}, refreshes {refreshes}"
            print(f"run {run}: {summary}")
    print(f"{perfect}/{options.runs} runs with every call completed and exactly one refresh")


if __name__ == "__main__":
    main()
