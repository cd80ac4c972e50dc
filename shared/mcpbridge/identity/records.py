"""How workspaces, users and API keys are kept in the store: their keys, items and the conditions writes carry.

    INSTALL / INSTALL            the install marker: which workspace ``init`` created (the platform's own)
    WS#<ws> / WS                 a workspace {name, status}; gsi1 = WORKSPACES / <ws> (the operator's listing)
    WS#<ws> / USER#<user>        a user {name, status, admin_keys, email, capabilities, knowledge_base_ids}
    WS#<ws> / USEREMAIL#<email>  {user_id}: the user with this e-mail address (lower case), one per workspace
    WS#<ws> / USERSUB#<digest>   {user_id}: the user an OpenID Connect identity (issuer and subject) signs in as
    WS#<ws> / APIKEY#<key>       an API key; gsi1 = APIKEY#<sha256> / APIKEY while it is active
    WS#<ws> / ADMINKEYS          {count}: the workspace's usable unrestricted admin keys

Two counters keep a workspace from locking itself out. ``admin_keys`` on a user is how many unrevoked unrestricted
admin keys the user holds; ``ADMINKEYS.count`` is the sum over the workspace's *active* users (and users recorded
before users had items: a key whose user has no item counts as its user's). Every write that changes either moves
both in one transaction, on conditions that make the last usable unrestricted admin key impossible to revoke, and
the last active user holding one impossible to disable or delete. Items written by earlier releases lack a status
(active) and the ``admin_keys`` counter (counted from the keys when first needed).
"""

from __future__ import annotations

import hashlib

from mcpbridge.domain import credentials
from mcpbridge.domain.identity import ApiKey, Role, Scope, User, Workspace, scope_of
from mcpbridge.domain.items import AllOf, Clause, Compare, Condition, Item, ItemExists, Key

INSTALL_KEY = Key("INSTALL", "INSTALL")
WORKSPACES_PARTITION = "WORKSPACES"
"""gsi1 partition of every workspace item (the operator's listing)."""


def workspace_key(workspace_id: str) -> Key:
    return Key(f"WS#{workspace_id}", "WS")


def user_key(workspace_id: str, user_id: str) -> Key:
    return Key(f"WS#{workspace_id}", f"USER#{user_id}")


def api_key_key(workspace_id: str, key_id: str) -> Key:
    return Key(f"WS#{workspace_id}", f"APIKEY#{key_id}")


def admin_keys_key(workspace_id: str) -> Key:
    return Key(f"WS#{workspace_id}", "ADMINKEYS")


NOT_REFUSED = AllOf((Compare("status", "<>", "disabled"), Compare("status", "<>", "deleting")))
"""Neither disabled nor being deleted (an item of an earlier release has no status: active; no item passes too)."""


def user_usable(*more: Clause) -> Condition:
    """The user's item exists and is neither disabled nor being deleted."""
    return Condition("user_active", AllOf((ItemExists(), NOT_REFUSED, *more)))


def status_of(item: Item) -> str:
    return str(item.get("status") or "active")


def access_of(item: Item) -> Scope:
    """What a user may reach through an OAuth sign-in (``None`` per dimension: unrestricted)."""
    return scope_of(item.get("capabilities"), item.get("knowledge_base_ids"))


def user_email_key(workspace_id: str, email: str) -> Key:
    return Key(f"WS#{workspace_id}", f"USEREMAIL#{email.strip().lower()}")


def user_subject_key(workspace_id: str, issuer: str, subject: str) -> Key:
    identity = hashlib.sha256(f"{issuer}\x1f{subject}".encode()).hexdigest()
    return Key(f"WS#{workspace_id}", f"USERSUB#{identity}")


def workspace_item(workspace_id: str, name: str, now: str) -> Item:
    return {
        **workspace_key(workspace_id).as_dict(),
        "id": workspace_id,
        "name": name,
        "status": "active",
        "created_at": now,
        "updated_at": now,
        "gsi1pk": WORKSPACES_PARTITION,
        "gsi1sk": workspace_id,
    }


def user_item(workspace_id: str, user_id: str, name: str, now: str, *, admin_keys: int = 0) -> Item:
    return {
        **user_key(workspace_id, user_id).as_dict(),
        "id": user_id,
        "workspace_id": workspace_id,
        "name": name,
        "status": "active",
        "admin_keys": admin_keys,
        "created_at": now,
        "updated_at": now,
    }


def api_key_item(
    workspace_id: str,
    key_id: str,
    user_id: str,
    name: str,
    role: Role,
    scope: Scope,
    issued: credentials.IssuedCredential,
    now: str,
) -> Item:
    return {
        **api_key_key(workspace_id, key_id).as_dict(),
        "gsi1pk": f"APIKEY#{issued.sha256}",
        "gsi1sk": "APIKEY",
        "id": key_id,
        "workspace_id": workspace_id,
        "user_id": user_id,
        "name": name,
        "role": role,
        "capabilities": None if scope.capabilities is None else sorted(scope.capabilities),
        "knowledge_base_ids": None if scope.knowledge_base_ids is None else sorted(scope.knowledge_base_ids),
        "sha256": issued.sha256,
        "hint": issued.hint,
        "created_at": now,
    }


def workspace_of(item: Item) -> Workspace:
    status = item.get("status")
    return Workspace(
        id=item["id"],
        name=item["name"],
        # Anything but the three statuses (an earlier release's "inactive") refuses its keys like "disabled".
        status=status if status in ("active", "deleting") else "disabled",
        created_at=item["created_at"],
        updated_at=item.get("updated_at") or item["created_at"],
    )


def user_of(workspace_id: str, item: Item) -> User:
    return User(
        id=item["id"],
        workspace_id=workspace_id,
        name=str(item.get("name") or ""),
        status="active" if status_of(item) == "active" else "deleting" if status_of(item) == "deleting" else "disabled",
        created_at=str(item.get("created_at") or ""),
        updated_at=str(item.get("updated_at") or item.get("created_at") or ""),
        email=item.get("email") or None,
        access=access_of(item),
    )


def api_key_of(item: Item) -> ApiKey:
    return ApiKey(
        id=item["id"],
        workspace_id=item["workspace_id"],
        user_id=item["user_id"],
        name=item["name"],
        role=item["role"],
        scope=scope_of(item.get("capabilities"), item.get("knowledge_base_ids")),
        hint=item["hint"],
        created_at=item["created_at"],
        last_used_at=item.get("last_used_at"),
        revoked_at=item.get("revoked_at"),
    )
