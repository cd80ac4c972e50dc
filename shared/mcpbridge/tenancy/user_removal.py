"""Deleting a user of a workspace: marked ``deleting`` at once (its keys refused from the next request), then what it
owned goes, in this order, each step safe to run again (a deletion interrupted midway is finished by deleting the
user again):

1. its calls waiting for a person are cancelled (code ``user_deleted``) and their workflows woken to end them;
2. its OAuth authorizations in progress (attempts and their states, so no callback completes one), its OAuth tokens
   of every service (deleted, not revoked upstream: the user is being forgotten) and its own catalog snapshots;
   the grants it gave OAuth clients on published endpoints, with their tokens, and its sign-in identities;
3. its answer sessions (its own and those it started through OAuth clients), then its API keys;
4. the user's item.

Finished calls it made stay, for their retention period, as the workspace's record of what ran.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from mcpbridge.agent.calls import ToolCalls
from mcpbridge.agent.steps import ToolCallSteps
from mcpbridge.authserver.grants import Grants
from mcpbridge.client.snapshots import Snapshots
from mcpbridge.domain.identity import Principal
from mcpbridge.domain.items import Key
from mcpbridge.identity.users import Users
from mcpbridge.oauth.attempts import forget_attempts
from mcpbridge.oauth.rows import OAuthRows
from mcpbridge.oauth.rules import USER
from mcpbridge.paging import every_item
from mcpbridge.ports import Store
from mcpbridge.tenancy.paused_calls import cancel_waiting

log = logging.getLogger("mcpbridge.tenancy")

SESSIONS = "SESSION#"
"""Answer sessions (``knowledge.answers``), owned by ``user:<id>`` or ``endpoint:<id>``."""


class UserRemoval:
    def __init__(
        self,
        store: Store,
        users: Users,
        calls: ToolCalls,
        steps: Callable[[], ToolCallSteps],
        snapshots: Snapshots,
        grants: Grants,
    ) -> None:
        """``steps`` is asked for only when a paused call must be woken."""
        self._store = store
        self._users = users
        self._calls = calls
        self._steps = steps
        self._snapshots = snapshots
        self._grants = grants

    def delete(self, principal: Principal, user_id: str) -> None:
        """Delete a user of the caller's workspace and everything it owns (the authority rules are ``Users``')."""
        self._users.begin_deletion(principal, user_id)
        workspace_id = principal.workspace_id
        waiting = self._calls.pending_of(workspace_id, user_id)
        if waiting:
            cancel_waiting(self._calls, self._steps(), waiting, code="user_deleted", why="the user was deleted")
        forget_attempts(self._store, workspace_id, principal=(USER, user_id))
        OAuthRows(self._store).forget_principal(workspace_id, USER, user_id)
        self._snapshots.forget_scope(workspace_id, f"{USER}:{user_id}")
        self._grants.forget_user(workspace_id, user_id)
        for guard in ("USEREMAIL#", "USERSUB#"):
            self._delete_where(workspace_id, guard, "user_id", user_id)
        self._delete_where(workspace_id, SESSIONS, "owner", f"{USER}:{user_id}")
        self._delete_where(workspace_id, SESSIONS, "owner", f"#{USER}:{user_id}", suffix=True)
        self._delete_where(workspace_id, "APIKEY#", "user_id", user_id)
        self._users.finish_deletion(workspace_id, user_id)

    def _delete_where(
        self, workspace_id: str, prefix: str, attribute: str, value: str, *, suffix: bool = False
    ) -> None:
        """Delete the items under ``prefix`` whose ``attribute`` is ``value`` (or, with ``suffix``, ends with it)."""
        items = every_item(self._store, f"WS#{workspace_id}", sk_prefix=prefix)
        matching = [
            i for i in items if (str(i.get(attribute, "")).endswith(value) if suffix else i.get(attribute) == value)
        ]
        for item in matching:
            self._store.delete(Key(item["pk"], item["sk"]))
