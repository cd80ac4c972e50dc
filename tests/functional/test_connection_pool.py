"""Cached connections (``mcpbridge.client.pool``) against npm ``@modelcontextprotocol/server-everything`` on
127.0.0.1: reuse, replacement when the configuration changes (here or on another instance), closing on registry
changes, idle retirement that never interrupts a running call, and one connection for concurrent first users."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from mcpbridge.bootstrap import Container
from mcpbridge.client.connection import ConnectionSpec
from mcpbridge.client.pool import ConnectionPool, PoolKey
from mcpbridge.client.specs import connection_spec
from mcpbridge.domain.external_services import WORKSPACE_SCOPE
from mcpbridge.outbound.policy import EgressPolicy
from mcpbridge.settings import Settings
from tests.support.everything import Everything

pytestmark = [pytest.mark.slow]

POLICY = EgressPolicy(["127.0.0.1"])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Everything]:
    started = Everything("streamableHttp", tmp_path_factory.mktemp("everything"))
    started.start()
    try:
        yield started
    finally:
        started.kill()


class Ticks:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def spec(server: Everything, **headers: str) -> ConnectionSpec:
    return ConnectionSpec(server.url, "http-streamable", headers=headers, timeout=15)


KEY = PoolKey("svc_a")


def test_a_connection_is_reused_and_replaced_when_its_spec_changes(server: Everything) -> None:
    async def scenario() -> None:
        pool = ConnectionPool(POLICY)
        try:
            async with pool.session(KEY, spec(server)) as first:
                assert (await first.call_tool("echo", {"message": "one"})).is_error is False
            async with pool.session(KEY, spec(server)) as again:
                assert again is first
            assert pool.opened == 1
            # A new credential (say, a rotated key or a refreshed OAuth token) gives a new connection.
            async with pool.session(KEY, spec(server, **{"X-API-Key": "rotated"})) as rotated:
                assert rotated is not first
                assert (await rotated.call_tool("echo", {"message": "two"})).is_error is False
            assert pool.opened == 2
            assert pool.size == 1
            # Per-user scopes are separate connections.
            async with pool.session(PoolKey("svc_a", "user:u1"), spec(server)) as user_one:
                assert user_one is not rotated
            assert pool.size == 2
        finally:
            await pool.aclose()
        assert pool.size == 0

    anyio.run(scenario)


def test_concurrent_first_users_share_one_connection(server: Everything) -> None:
    async def scenario() -> None:
        pool = ConnectionPool(POLICY)
        seen: list[int] = []

        async def use(i: int) -> None:
            async with pool.session(KEY, spec(server)) as connection:
                result = await connection.call_tool("echo", {"message": str(i)})
                assert result.content[0].model_dump()["text"] == f"Echo: {i}"
                seen.append(id(connection))

        try:
            async with anyio.create_task_group() as group:
                for i in range(8):
                    group.start_soon(use, i)
        finally:
            await pool.aclose()
        assert pool.opened == 1
        assert len(set(seen)) == 1

    anyio.run(scenario)


def test_idle_connections_retire_but_never_under_a_running_call(server: Everything) -> None:
    async def scenario() -> None:
        ticks = Ticks()
        pool = ConnectionPool(POLICY, idle_seconds=60, clock=ticks)
        try:
            async with pool.session(KEY, spec(server)) as busy:
                # Another key's use sweeps idle entries: this one is in use, however old.
                ticks.now += 3600
                async with pool.session(PoolKey("svc_b"), spec(server)):
                    pass
                assert pool.cached(KEY) is busy
                result = await busy.call_tool("echo", {"message": "still here"})
                assert result.is_error is False
            ticks.now += 61
            async with pool.session(PoolKey("svc_b"), spec(server)):
                pass
            assert pool.cached(KEY) is None  # idle for over a minute: retired
            async with pool.session(KEY, spec(server)) as fresh:
                assert fresh is not busy
            assert pool.opened == 4  # KEY, svc_b, svc_b again (it had been idle as long), KEY again
        finally:
            await pool.aclose()

    anyio.run(scenario)


def test_forgetting_a_service_finishes_running_calls_first(server: Everything) -> None:
    async def scenario() -> None:
        pool = ConnectionPool(POLICY)
        try:
            async with pool.session(KEY, spec(server)) as connection:
                assert pool.forget_service("svc_a") == 1
                assert pool.cached(KEY) is None
                # The operation already holding the connection completes on it.
                result = await connection.call_tool("echo", {"message": "in flight"})
                assert result.is_error is False
            async with pool.session(KEY, spec(server)) as replacement:
                assert replacement is not connection
        finally:
            await pool.aclose()

    anyio.run(scenario)


def test_registry_changes_close_the_services_connections(server: Everything, tmp_path: Path) -> None:
    container = Container(Settings(data_dir=tmp_path / "data", ssrf_allowlist=["127.0.0.1"]))
    try:
        admin = container.identity.authenticate(container.identity.initialize().api_key)
        workspace_id = admin.workspace_id
        registry = container.services
        service = registry.create(
            admin, name="everything", url=server.url, auth_config={"auth_type": "api_key"}
        ).service
        pools = container.connections
        key = PoolKey(service.id, WORKSPACE_SCOPE)

        async def open_one() -> None:
            current = registry.find(workspace_id, service.id)
            pool = pools.for_running_loop()
            async with pool.session(key, connection_spec(current, registry.connection_secrets(current))) as c:
                assert (await c.call_tool("echo", {"message": "x"})).is_error is False

        changes = [
            lambda: registry.update(admin, service.id, usage_instructions="not a connection setting"),
            lambda: registry.update(admin, service.id, headers={"X-Tenant": "t1"}),
            lambda: registry.set_credentials(admin, service.id, {"api_key": "k-123456"}),
            lambda: registry.delete_credential(admin, service.id, "api_key"),
            lambda: registry.update(admin, service.id, enabled=False),
            lambda: registry.delete(admin, service.id),
        ]

        async def scenario() -> None:
            pool = pools.for_running_loop()
            try:
                for index, change in enumerate(changes):
                    await open_one()
                    cached = pool.cached(key)
                    assert cached is not None
                    change()
                    if index == 0:  # usage text is not a connection setting: the connection stays
                        assert pool.cached(key) is cached
                    else:
                        assert pool.cached(key) is None, index
            finally:
                await pool.aclose()

        anyio.run(scenario)
    finally:
        container.close()
