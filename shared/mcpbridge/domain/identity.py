"""Workspaces, users, API keys and the principal a request acts as."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Role = Literal["viewer", "admin"]
ROLES: tuple[Role, ...] = ("viewer", "admin")

CAPABILITIES: dict[str, str] = {
    "read": "search and read knowledge bases",
    "ask": "ask questions answered from knowledge bases",
    "wiki": "read knowledge-base wikis",
    "write": "add, update and delete documents",
    "manage_knowledge": "create and change knowledge bases",
    "manage_channels": "publish MCP endpoints",
    "manage_services": "register external MCP services",
    "act_as": "call tools on behalf of a named end user",
    "call_tools": "discover and call external MCP tools as an agent, and resolve one's own paused calls",
    "manage_keys": "list, create and revoke API keys (never broader than the key itself)",
    "approve_calls": "see and resolve the paused tool calls of every user of the workspace (with an admin key)",
    "manage_users": "create, list, disable and delete the workspace's users and mint their keys (with an admin key)",
    "manage_workspaces": "create, list, rename, disable and delete workspaces (admin keys of the platform's own "
    "workspace only)",
}

WorkspaceStatus = Literal["active", "disabled", "deleting"]
UserStatus = Literal["active", "disabled", "deleting"]


def timestamp(epoch: float) -> str:
    """ISO 8601 in UTC at second precision: fixed width, so strings sort as times do."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(epoch)))


@dataclass(frozen=True)
class Scope:
    """What a credential may reach. ``None`` means unrestricted for that dimension."""

    capabilities: frozenset[str] | None = None
    knowledge_base_ids: frozenset[str] | None = None

    def covers(self, other: Scope) -> bool:
        """True when ``other`` grants nothing this scope does not."""
        return _within(other.capabilities, self.capabilities) and _within(
            other.knowledge_base_ids, self.knowledge_base_ids
        )

    def allows(self, capability: str) -> bool:
        return self.capabilities is None or capability in self.capabilities

    def allows_knowledge_base(self, kb_id: str) -> bool:
        return self.knowledge_base_ids is None or kb_id in self.knowledge_base_ids


def _within(inner: frozenset[str] | None, outer: frozenset[str] | None) -> bool:
    if outer is None:
        return True
    return inner is not None and inner <= outer


def scope_of(capabilities: Iterable[str] | None, knowledge_base_ids: Iterable[str] | None) -> Scope:
    return Scope(
        capabilities=None if capabilities is None else frozenset(capabilities),
        knowledge_base_ids=None if knowledge_base_ids is None else frozenset(knowledge_base_ids),
    )


@dataclass(frozen=True)
class Principal:
    """Who a request acts as: an API key of a user in a workspace, with the key's role and scope."""

    workspace_id: str
    user_id: str
    api_key_id: str
    role: Role
    scope: Scope

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    def outranks_or_equals(self, role: Role, scope: Scope) -> bool:
        """True when this principal holds at least ``role`` and everything ``scope`` grants."""
        return (self.is_admin or role == "viewer") and self.scope.covers(scope)


AGENT_CAPABILITY = "call_tools"
"""What an agent's requests need (discover and call external tools, read and resolve its own user's paused calls)."""


def is_approver(principal: Principal) -> bool:
    """Who may see and resolve every paused call of the workspace: an admin key with ``approve_calls``."""
    return principal.is_admin and principal.scope.allows("approve_calls")


def acting_for(workspace_id: str, user_id: str, api_key_id: str = "") -> Principal:
    """A user as a read-only principal, for work done on their behalf without their API key at hand (a paused
    tool call, an operator's CLI): it reads services and owns OAuth tokens, it never writes configuration."""
    return Principal(workspace_id, user_id, api_key_id, "viewer", Scope())


@dataclass(frozen=True)
class Operator:
    """The operator at the machine or account that holds the data (the ``mcpbridge`` command): platform authority
    without an API key, since whoever runs it can read and write the store anyway."""


OPERATOR = Operator()


@dataclass(frozen=True)
class Workspace:
    """A tenant. Only ``active`` lets its keys and endpoint tokens in; ``deleting`` lasts until its purge ends."""

    id: str
    name: str
    status: WorkspaceStatus
    created_at: str
    updated_at: str


@dataclass(frozen=True)
class User:
    """A person (or an agent platform) of a workspace; API keys belong to one user. Only ``active`` users' keys
    authenticate; ``deleting`` lasts until the user's keys, tokens and sessions are gone."""

    id: str
    workspace_id: str
    name: str
    status: UserStatus
    created_at: str
    updated_at: str
    email: str | None = None
    access: Scope = Scope()
    """What the user may reach through an OAuth sign-in: capabilities (tool groups) and knowledge bases."""


@dataclass(frozen=True)
class ApiKey:
    """An API key as stored, minus its hash. The plaintext exists only in the response that creates it."""

    id: str
    workspace_id: str
    user_id: str
    name: str
    role: Role
    scope: Scope
    hint: str
    created_at: str
    last_used_at: str | None
    revoked_at: str | None

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    @property
    def unrestricted_admin(self) -> bool:
        """An admin key with every capability and every knowledge base: the kind a workspace must keep one of."""
        return self.role == "admin" and self.scope == Scope()
