"""Every outbound operation has one overall deadline, and messages give the deadline that was applied.

``POST /api/v1/mcp-services/{id}/test`` is a synchronous route (API Gateway gives up after 29 s): against an upstream
that stalls it answers once the service's ``timeout`` has passed, whatever ``retry_count`` and ``retry_delay`` say,
and the whole test never spends more than its budget upstream. Stalling upstreams on 127.0.0.1: a TCP listener
that never answers, servers that send the headers of an answer and never its body, an SDK server whose tool list
has no end. Small configured timeouts keep the tests short. What is checked is the deadline's cause, never the wall
time: the answer names the deadline applied, and the attempts or pages made fit in one deadline, not one each (the
defect was minutes, so a test that outlives ``HARD_STOP`` fails).
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import types
from mcp.server.lowlevel import Server

from mcpbridge.bootstrap import Container
from mcpbridge.client.connection import ProbeResult
from mcpbridge.client.service_probe import probe_service
from mcpbridge.domain.external_services import ExternalService
from mcpbridge.settings import Settings
from tests.support.admin_api import admin_api
from tests.support.everything import handle_stateless, serve

pytestmark = [pytest.mark.slow]

TIMEOUT = 1.0
"""The service's configured timeout in these tests (the smallest the API accepts)."""
HARD_STOP = 90.0
"""A test gives up here, under the test's own timeout (before the fix, a stalled test took (retry_count + 1) * 60 s)."""

_STALLED_ANSWERS = {
    "silent": b"",
    "json-headers-only": b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 4096\r\n\r\n",
    "event-stream-headers-only": b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n",
}


@dataclass
class Stalling:
    url: str
    accepted: list[socket.socket]


@contextlib.contextmanager
def stalling(answer: bytes) -> Iterator[Stalling]:
    """A TCP server on 127.0.0.1 that reads each request's head, sends ``answer`` (maybe nothing) and then nothing
    more, keeping the connection open; yields its ``/mcp`` URL and the connections it accepted."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(32)
    listener.settimeout(0.05)
    stop = threading.Event()
    accepted: list[socket.socket] = []

    def serve_one(conn: socket.socket) -> None:
        conn.settimeout(0.05)
        head = b""
        while not stop.is_set() and b"\r\n\r\n" not in head:
            with contextlib.suppress(TimeoutError):
                chunk = conn.recv(65536)
                if not chunk:
                    return
                head += chunk
        with contextlib.suppress(OSError):
            conn.sendall(answer)

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            accepted.append(conn)
            threading.Thread(target=serve_one, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield Stalling(f"http://127.0.0.1:{listener.getsockname()[1]}/mcp", accepted)
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in accepted:
            conn.close()
        listener.close()


class EndlessTools:
    """An SDK server whose tool list never ends: every page takes a while and names a next cursor."""

    PAGE_SECONDS = 0.4

    def __init__(self) -> None:
        self.pages = 0

        async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
            self.pages += 1
            await anyio.sleep(self.PAGE_SECONDS)
            tool = types.Tool(name=f"tool_{self.pages}", input_schema={"type": "object"})
            return types.ListToolsResult(tools=[tool], next_cursor=f"page-{self.pages}")

        self.server: Server[Any] = Server("endless", version="1", on_list_tools=list_tools)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await handle_stateless(self.server, scope, receive, send)


@pytest.fixture
def container(tmp_path: Path) -> Iterator[Container]:
    built = Container(Settings(data_dir=tmp_path / "data", ssrf_allowlist=["127.0.0.1"]))
    yield built
    built.close()


async def route_test(
    container: Container, url: str, advanced: dict[str, Any], hard_stop: float | None = HARD_STOP
) -> dict[str, Any]:
    """Register a service at ``url`` and call its ``/test``: the answer."""
    async with admin_api(container) as client:
        created = await client.post(
            "/api/v1/mcp-services",
            json={"name": "stalling", "transport": "http-streamable", "url": url, "advanced_config": advanced},
        )
        assert created.status_code == 201, created.text
        with anyio.fail_after(hard_stop):
            answer = await client.post(f"/api/v1/mcp-services/{created.json()['id']}/test")
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def stated_deadline(message: str) -> float:
    found = re.search(r"within ([0-9.]+) s", message)
    assert found is not None, message
    return float(found.group(1))


@pytest.mark.parametrize("stall", sorted(_STALLED_ANSWERS))
def test_a_stalled_handshake_ends_at_the_services_timeout(container: Container, stall: str) -> None:
    with stalling(_STALLED_ANSWERS[stall]) as upstream:
        body = anyio.run(
            route_test, container, upstream.url, {"timeout": TIMEOUT, "retry_count": 3, "retry_delay": 0.2}
        )
        attempts = len(upstream.accepted)
    assert (body["success"], body["error_code"]) == (False, "upstream_timeout"), body
    assert "did not complete the connection" in body["message"]
    # The retries fit in the one deadline, and the message gives that deadline: the first try stalls until it ends,
    # where a deadline per try would have made all four.
    assert stated_deadline(body["message"]) == TIMEOUT
    assert attempts == 1, attempts


def test_a_listing_without_end_ends_at_the_services_timeout(container: Container) -> None:
    upstream = EndlessTools()
    with serve(upstream, lifespan="off") as base:
        body = anyio.run(route_test, container, f"{base}/mcp", {"timeout": TIMEOUT, "retry_count": 3})
    assert (body["success"], body["error_code"]) == (False, "outcome_unknown"), body
    assert stated_deadline(body["message"]) == TIMEOUT
    # Each page takes 0.4 s: a deadline per page would list until HARD_STOP.
    assert upstream.pages < 10, "one deadline for the whole listing, not one per page"


def test_the_whole_test_keeps_to_its_budget_whatever_the_services_timeout(container: Container) -> None:
    budget = 1.5
    admin = container.identity.authenticate(container.identity.initialize().api_key)

    async def scenario(service: ExternalService) -> ProbeResult:
        with anyio.fail_after(HARD_STOP):
            return await probe_service(
                service, admin, registry=container.services, policy=container.egress, budget=budget
            )

    with stalling(b"") as upstream:
        service = container.services.create(
            admin,
            name="slow",
            transport="http-streamable",
            url=upstream.url,
            advanced_config={"timeout": 120, "retry_count": 10, "retry_delay": 0.1},
        ).service
        result = anyio.run(scenario, service)
        attempts = len(upstream.accepted)
    # The budget, not the service's 120 s, was the deadline applied: one try, ended by it (120 s would outlive
    # HARD_STOP).
    assert result.error is not None
    assert result.error.code == "upstream_timeout"
    # What is left of the budget when the try starts (a busy machine spends some of it first), never more.
    stated = stated_deadline(result.error.message)
    assert 0 < stated <= budget, stated
    assert result.error.details == {"timeout_seconds": stated}
    assert attempts == 1, attempts
