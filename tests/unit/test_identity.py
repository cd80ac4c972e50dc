"""Identity on the embedded store: first-run initialisation exactly once, authentication without caching."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from mcpbridge.adapters.local.sqlite import SqliteStore
from mcpbridge.domain.identity import Principal
from mcpbridge.domain.items import Update
from mcpbridge.errors import Forbidden, Unauthenticated
from mcpbridge.identity.accounts import Accounts, Initialization, workspace_key
from tests.support.clock import FakeClock


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    return SqliteStore(tmp_path / "s.sqlite3", FakeClock())


def test_initialize_creates_once(store: SqliteStore) -> None:
    service = Accounts(store, FakeClock())
    first = service.initialize()
    assert first.created
    assert first.api_key is not None
    again = service.initialize()
    assert again == Initialization(created=False, workspace_id=first.workspace_id, api_key=None)
    admin = service.authenticate(first.api_key)
    keys, _ = service.list_api_keys(admin)
    assert len(keys) == 1


def test_concurrent_first_starts_create_one_workspace(tmp_path: Path) -> None:
    """Two processes starting on an empty data directory: one creates, the other reports it (no second key)."""
    results: list[Initialization] = []
    barrier = threading.Barrier(4)

    def start() -> None:
        # A store per thread, as separate processes would have.
        service = Accounts(SqliteStore(tmp_path / "s.sqlite3", FakeClock()), FakeClock())
        barrier.wait()
        results.append(service.initialize())

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sum(r.created for r in results) == 1
    assert len({r.workspace_id for r in results}) == 1
    assert [r.api_key is not None for r in results].count(True) == 1


def test_an_inactive_workspace_is_forbidden(store: SqliteStore) -> None:
    service = Accounts(store, FakeClock())
    init = service.initialize()
    assert init.api_key is not None
    store.update(workspace_key(init.workspace_id), Update(set={"status": "inactive"}))
    with pytest.raises(Forbidden) as refused:
        service.authenticate(init.api_key)
    assert refused.value.code == "workspace_inactive"


def test_authentication_reads_the_store_every_time(store: SqliteStore) -> None:
    service = Accounts(store, FakeClock())
    init = service.initialize()
    assert init.api_key is not None
    admin: Principal = service.authenticate(init.api_key)
    second = service.create_api_key(admin, name="second", role="admin")
    assert service.authenticate(second.plaintext).api_key_id == second.record.id
    service.revoke_api_key(admin, second.record.id)
    with pytest.raises(Unauthenticated):
        service.authenticate(second.plaintext)


def test_error_messages_never_carry_the_presented_key(store: SqliteStore) -> None:
    service = Accounts(store, FakeClock())
    presented = "sk_" + "Z" * 43
    with pytest.raises(Unauthenticated) as refused:
        service.authenticate(presented)
    assert presented not in str(refused.value)
    assert presented[3:] not in repr(refused.value)
