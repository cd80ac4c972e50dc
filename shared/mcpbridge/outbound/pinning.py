"""What every pinned network backend does, whichever httpcore flavour it plugs into (httpcore, httpcore2):
resolve the host once through the policy, then dial only the addresses it approved."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import anyio.to_thread

from mcpbridge.outbound.policy import EgressPolicy, IPAddress, normalise_host

_Stream = TypeVar("_Stream")


def is_ip_literal(host: str) -> bool:
    try:
        return not isinstance(normalise_host(host), str)
    except ValueError:
        return False


async def resolve_async(
    policy: EgressPolicy, host: str, port: int, timeout: float | None, timeout_error: type[Exception]
) -> list[IPAddress]:
    """``policy.resolve_host`` in a worker thread, bounded by ``timeout`` (getaddrinfo has no timeout of its own)."""
    if is_ip_literal(host):
        return policy.resolve_host(host, port)
    try:
        with anyio.fail_after(timeout):
            # Abandoned on cancellation: a hung getaddrinfo must not hold up the caller's deadline.
            return await anyio.to_thread.run_sync(policy.resolve_host, host, port, abandon_on_cancel=True)
    except TimeoutError:
        raise timeout_error(f"resolving the host took longer than {timeout} s") from None


async def connect_first(
    addresses: list[IPAddress],
    connect: Callable[[str], Awaitable[_Stream]],
    connect_errors: tuple[type[Exception], ...],
) -> _Stream:
    """The first approved address that accepts the connection. Every address was approved, so falling back to the
    next one (as a browser does) is safe."""
    failure: Exception | None = None
    for address in addresses:
        try:
            return await connect(str(address))
        except connect_errors as exc:
            failure = exc
    assert failure is not None  # resolve_host never returns an empty list
    raise failure
