"""How long ``POST /api/v1/mcp-services/{id}/test`` takes against an upstream that stalls, and what it says.

    python tests/bench/service_test_deadline.py [--stall silent|json-headers-only|event-stream-headers-only]
                                                [--timeout 30] [--retry-count 3] [--retry-delay 1]

The upstream (127.0.0.1) accepts the connection and never finishes an answer; the service is registered with the
given ``advanced_config`` (the defaults are a service's defaults). Printed: seconds until the route answered, its
error code and message. For notes only (a synchronous route must answer well inside API Gateway's 29 s).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.functional.test_outbound_deadlines import _STALLED_ANSWERS, route_test, stalling

from mcpbridge.bootstrap import Container
from mcpbridge.settings import Settings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stall", choices=sorted(_STALLED_ANSWERS), default="silent")
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--retry-count", type=int, default=3)
    parser.add_argument("--retry-delay", type=float, default=1.0)
    options = parser.parse_args()
    advanced = {"timeout": options.timeout, "retry_count": options.retry_count, "retry_delay": options.retry_delay}
    with tempfile.TemporaryDirectory() as tmp, stalling(_STALLED_ANSWERS[options.stall]) as url:
        container = Container(Settings(data_dir=Path(tmp) / "data", ssrf_allowlist=["127.0.0.1"]))
        try:
            started = time.monotonic()
            body, elapsed = anyio.run(route_test, container, url, advanced, None)
        finally:
            container.close()
    print(f"advanced_config {advanced}, stall {options.stall}: answered after {elapsed:.1f} s")
    print(f"  error_code {body['error_code']}: {body['message']}  (wall {time.monotonic() - started:.1f} s)")


if __name__ == "__main__":
    main()
