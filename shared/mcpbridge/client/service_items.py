"""How a service is kept in the store: its item, its name guard, and the conditions writes carry.

    WS#<ws> / SVC#<id>              a service of a workspace
    WS#<ws> / SVCNAME#<folded>      the name guard: one service per case-insensitive name and workspace
    BUILTIN / SVC#<id>              a builtin service, visible to every workspace, immutable through the API
    BUILTIN / SVCNAME#<folded>      the builtins' name guard

The item never holds a plaintext secret: the registry adds the sealed attributes (``secret_<field>``,
``secret_headers``, ``secret_url``) and opens them when it reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcpbridge.domain.external_services import (
    AUTH_TYPES,
    BUILTIN_PARTITION,
    DEFAULT_API_KEY_HEADER,
    DEFAULT_RETRY_COUNT,
    DEFAULT_RETRY_DELAY_SECONDS,
    DEFAULT_TIMEOUT_SECONDS,
    SECRET_FIELDS,
    AdvancedConfig,
    AuthConfig,
    AuthType,
    ExternalService,
)
from mcpbridge.domain.items import Condition, Item, Key
from mcpbridge.domain.names import fold


def service_key(workspace_id: str | None, service_id: str) -> Key:
    return Key(partition(workspace_id), f"SVC#{service_id}")


def name_key(workspace_id: str | None, name: str) -> Key:
    return Key(partition(workspace_id), f"SVCNAME#{fold(name)}")


def partition(workspace_id: str | None) -> str:
    return BUILTIN_PARTITION if workspace_id is None else f"WS#{workspace_id}"


def unchanged(version: int) -> Condition:
    return Condition.equals("service_unchanged", "version", version)


def name_free() -> Condition:
    return Condition.absent("service_name_free")


def guard_of(workspace_id: str | None, name: str, service_id: str) -> Item:
    return {**name_key(workspace_id, name).as_dict(), "service_id": service_id, "name": name}


def current_value(service: ExternalService, change: str) -> Any:
    if change == "auth_config":
        return service.auth
    if change == "advanced_config":
        return service.advanced
    if change == "headers":
        return dict(service.headers)
    return getattr(service, change)


def stored(value: Any) -> Any:
    if isinstance(value, AuthConfig):
        return auth_item(value)
    if isinstance(value, AdvancedConfig):
        return advanced_item(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value


def auth_item(auth: AuthConfig) -> dict[str, Any]:
    return {
        "auth_type": auth.auth_type,
        "api_key_header": auth.api_key_header,
        "client_id": auth.client_id,
        "scopes": list(auth.scopes),
        "auth_server_metadata_url": auth.auth_server_metadata_url,
    }


def advanced_item(advanced: AdvancedConfig) -> dict[str, Any]:
    return {"timeout": advanced.timeout, "retry_count": advanced.retry_count, "retry_delay": advanced.retry_delay}


def item_of(service: ExternalService) -> Item:
    return {
        **service_key(service.workspace_id, service.id).as_dict(),
        "id": service.id,
        "workspace_id": service.workspace_id,
        "builtin": service.is_builtin,
        "name": service.name,
        "name_folded": fold(service.name),
        "description": service.description,
        "enabled": service.enabled,
        "transport": service.transport,
        "url": service.url,
        "auth_config": auth_item(service.auth),
        "advanced_config": advanced_item(service.advanced),
        "usage_instructions": service.usage_instructions,
        "catalog_stale": service.catalog_stale,
        "created_at": service.created_at,
        "updated_at": service.updated_at,
        "version": service.version,
        "connection_version": service.connection_version,
    }


def service_of(item: Item, headers: Mapping[str, str]) -> ExternalService:
    auth = item.get("auth_config") or {}
    advanced = item.get("advanced_config") or {}
    transport = item.get("transport")
    auth_type: AuthType = "none"
    for known in AUTH_TYPES:
        if known == auth.get("auth_type"):
            auth_type = known
    return ExternalService(
        id=item["id"],
        workspace_id=None if item.get("builtin") else item["workspace_id"],
        name=item["name"],
        description=item.get("description", ""),
        enabled=bool(item.get("enabled", True)),
        transport="sse" if transport == "sse" else "http-streamable",
        url=item.get("url", ""),
        headers=dict(headers),
        auth=AuthConfig(
            auth_type=auth_type,
            api_key_header=auth.get("api_key_header") or DEFAULT_API_KEY_HEADER,
            client_id=auth.get("client_id", ""),
            scopes=tuple(auth.get("scopes") or ()),
            auth_server_metadata_url=auth.get("auth_server_metadata_url", ""),
        ),
        advanced=AdvancedConfig(
            timeout=float(advanced.get("timeout", DEFAULT_TIMEOUT_SECONDS)),
            retry_count=int(advanced.get("retry_count", DEFAULT_RETRY_COUNT)),
            retry_delay=float(advanced.get("retry_delay", DEFAULT_RETRY_DELAY_SECONDS)),
        ),
        usage_instructions=item.get("usage_instructions", ""),
        catalog_stale=bool(item.get("catalog_stale", True)),
        created_at=item["created_at"],
        updated_at=item["updated_at"],
        version=int(item.get("version", 1)),
        connection_version=int(item.get("connection_version", 1)),
        sealed={name: str(item[f"secret_{name}"]) for name in SECRET_FIELDS if item.get(f"secret_{name}")},
    )
