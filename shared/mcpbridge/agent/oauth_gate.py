"""What agent tool calls need from the OAuth layer, over :class:`~mcpbridge.oauth.service_oauth.ServiceOAuth`.

Called from blocking code (worker threads of a request, workflow threads, Lambda tasks): the manager's coroutines
run on the request's loop when there is one, else on a loop of their own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import anyio
import anyio.from_thread

from mcpbridge.domain.external_services import ExternalService
from mcpbridge.domain.identity import acting_for
from mcpbridge.errors import MCPBridgeError
from mcpbridge.oauth.rows import token_key
from mcpbridge.oauth.service_oauth import ServiceOAuth
from mcpbridge.oauth.tokens import TokenStore
from mcpbridge.ports import Clock

log = logging.getLogger("mcpbridge.agent")

USER = "user"
T = TypeVar("T")


def run_blocking(function: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
    """Run a coroutine function from blocking code: through the event loop that started this worker thread, or
    on a new loop when there is none (a workflow thread, a Lambda task)."""
    try:
        return anyio.from_thread.run(function, *args)
    except RuntimeError:  # not in a worker thread of a running loop
        return anyio.run(function, *args)


class ServiceOAuthGate:
    def __init__(self, manager: ServiceOAuth, tokens: TokenStore, clock: Clock) -> None:
        self._manager = manager
        self._tokens = tokens
        self._clock = clock

    def usable(self, workspace_id: str, service: ExternalService, user_id: str, *, scope: str | None = None) -> bool:
        """A token that works now or can be refreshed (a refresh may still fail; the call then fails cleanly), and
        with ``scope``, one granted every scope in it."""
        token = self._tokens.get(token_key(workspace_id, service.id, USER, user_id))
        if token is None or token.state(self._clock.now()) == "reauth_required":
            return False
        return scope is None or set(scope.split()) <= set((token.scope or "").split())

    def authorization_url(
        self,
        workspace_id: str,
        service: ExternalService,
        user_id: str,
        base_url: str | None = None,
        *,
        scope: str | None = None,
    ) -> str | None:
        async def start() -> str:
            started = await self._manager.start_authorization(
                acting_for(workspace_id, user_id), service.id, base_url=base_url, scope=scope
            )
            return started.authorization_url

        try:
            return run_blocking(start)
        except MCPBridgeError as exc:  # the call still waits: the user can authorize from the console
            log.warning("could not start an authorization for MCP service %s: %s", service.id, exc.code)
            return None
