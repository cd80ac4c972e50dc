"""The tripwire that ends an upstream operation early without a watcher task per event."""

from __future__ import annotations

import anyio
import pytest

from mcpbridge.client.tripwire import Tripwire


@pytest.mark.anyio
async def test_setting_it_cancels_the_scopes_registered_with_it_and_wakes_its_waiters() -> None:
    wire = Tripwire()
    woken: list[str] = []

    async def waiter() -> None:
        await wire.wait()
        woken.append("waiter")

    async with anyio.create_task_group() as group:
        group.start_soon(waiter)
        with anyio.CancelScope() as scope, wire.cancels(scope):
            group.start_soon(lambda: _set_soon(wire))
            await anyio.sleep(5)
            pytest.fail("the scope was not cancelled")
    assert scope.cancelled_caught
    assert woken == ["waiter"]
    assert wire.is_set()


@pytest.mark.anyio
async def test_a_scope_registered_after_it_was_set_is_cancelled_at_once_and_others_are_left_alone() -> None:
    wire = Tripwire()
    wire.set()
    wire.set()  # a second set changes nothing
    with anyio.CancelScope() as scope, wire.cancels(scope):
        await anyio.sleep(5)
    assert scope.cancelled_caught
    await wire.wait()  # returns at once

    other = Tripwire()
    with anyio.CancelScope() as untouched, other.cancels(untouched):
        await anyio.sleep(0)
    assert not untouched.cancelled_caught
    other.set()  # after the block: the scope is no longer registered
    assert not untouched.cancel_called


async def _set_soon(wire: Tripwire) -> None:
    await anyio.sleep(0.01)
    wire.set()
