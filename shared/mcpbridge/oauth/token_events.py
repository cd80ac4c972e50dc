"""Who hears when a principal's token is stored or removed (cached connections close; paused calls waiting for the
token resume). A listener may be sync or async; its failures are logged, never raised."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable

log = logging.getLogger("mcpbridge.oauth")

TokenListener = Callable[[str, str, str, str], object]
"""``listener(workspace_id, service_id, principal_type, principal_id)``; what it returns is ignored (awaited first
when it is awaitable)."""


class TokenEvents:
    def __init__(self) -> None:
        self._stored: list[TokenListener] = []
        self._removed: list[TokenListener] = []

    def on_token_stored(self, listener: TokenListener) -> None:
        """Call ``listener(workspace_id, service_id, principal_type, principal_id)`` after a token is stored
        (authorization, assertion, refresh)."""
        self._stored.append(listener)

    def on_token_removed(self, listener: TokenListener) -> None:
        """Call ``listener(...)`` after a token is deleted (revocation, a refused refresh)."""
        self._removed.append(listener)

    async def stored(self, workspace_id: str, service_id: str, principal_type: str, principal_id: str) -> None:
        await _notify(self._stored, workspace_id, service_id, principal_type, principal_id)

    async def removed(self, workspace_id: str, service_id: str, principal_type: str, principal_id: str) -> None:
        await _notify(self._removed, workspace_id, service_id, principal_type, principal_id)


async def _notify(listeners: list[TokenListener], *args: str) -> None:
    for listener in list(listeners):
        try:
            result = listener(*args)
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("an OAuth token listener failed (service %s)", args[1])
