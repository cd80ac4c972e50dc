"""Services created from a standard ``{"mcpServers": {name: {url, type|transport, headers}}}`` document, as Cursor,
VS Code and Claude Desktop write them. Each entry is created through the registry like any other service; an entry
that cannot be one (stdio, a refused URL, a taken name, bad fields) is listed with the reason and creates nothing."""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from mcpbridge.client.service_validation import clean_bool, shown
from mcpbridge.domain.external_services import DEFAULT_TRANSPORT, STDIO_REFUSED, ExternalService, Transport
from mcpbridge.domain.identity import Principal
from mcpbridge.errors import Conflict, InvalidInput


class _Created(Protocol):
    @property
    def service(self) -> ExternalService: ...

    @property
    def warnings(self) -> tuple[str, ...]: ...


class ServiceCreator(Protocol):
    """What an import creates services with (:class:`~mcpbridge.client.registry.ServiceRegistry`)."""

    def create(
        self,
        principal: Principal,
        *,
        name: str,
        url: str,
        description: str = ...,
        enabled: bool = ...,
        transport: str = ...,
        headers: Mapping[str, str] | None = ...,
    ) -> _Created: ...


MAX_IMPORT_ENTRIES = 100
_IMPORT_TRANSPORTS: dict[str, Transport] = {
    "sse": "sse",
    "http": "http-streamable",
    "http-streamable": "http-streamable",
    "streamable-http": "http-streamable",
    "streamable_http": "http-streamable",
    "streamablehttp": "http-streamable",
}


@dataclass(frozen=True)
class ImportRefusal:
    name: str
    code: str
    reason: str


@dataclass(frozen=True)
class ImportResult:
    created: builtins.list[ExternalService]
    refused: builtins.list[ImportRefusal]
    warnings: builtins.list[str]


def import_servers(registry: ServiceCreator, principal: Principal, document: Mapping[str, Any]) -> ImportResult:
    """One service per entry of ``document["mcpServers"]``, created as ``principal`` (who must be a writer)."""
    servers = document.get("mcpServers")
    if not isinstance(servers, Mapping):
        raise InvalidInput("the document has no mcpServers object", code="invalid_import")
    if len(servers) > MAX_IMPORT_ENTRIES:
        raise InvalidInput(f"an import holds at most {MAX_IMPORT_ENTRIES} servers", code="too_many_servers")
    created: builtins.list[ExternalService] = []
    refused: builtins.list[ImportRefusal] = []
    warnings: builtins.list[str] = []
    for raw_name, entry in servers.items():
        name = shown(str(raw_name))
        try:
            arguments = _import_arguments(entry)
            saved = registry.create(principal, name=str(raw_name), **arguments)
        except (InvalidInput, Conflict) as refusal:
            refused.append(ImportRefusal(name, refusal.code, refusal.message))
            continue
        created.append(saved.service)
        warnings.extend(f"{name}: {w}" for w in saved.warnings)
    return ImportResult(created, refused, warnings)


def _import_arguments(entry: Any) -> dict[str, Any]:
    """``create`` arguments for one ``mcpServers`` entry (InvalidInput when it cannot be one)."""
    if not isinstance(entry, Mapping):
        raise InvalidInput("the entry is not an object", code="invalid_import_entry")
    kind = entry.get("type", entry.get("transport"))
    if "command" in entry or (isinstance(kind, str) and kind.strip().lower() == "stdio"):
        raise InvalidInput(STDIO_REFUSED, code="stdio_disabled")
    url = entry.get("url", entry.get("serverUrl"))
    if not isinstance(url, str) or not url.strip():
        raise InvalidInput("the entry has no url", code="url_invalid")
    if kind is None:
        transport: str = "sse" if url.rstrip("/").lower().endswith("/sse") else DEFAULT_TRANSPORT
    elif isinstance(kind, str):
        transport = _IMPORT_TRANSPORTS.get(kind.strip().lower(), kind)
    else:
        raise InvalidInput("type must be a string", code="invalid_transport")
    arguments: dict[str, Any] = {"url": url, "transport": transport, "headers": entry.get("headers") or {}}
    if "description" in entry:
        arguments["description"] = entry["description"]
    if "disabled" in entry:
        arguments["enabled"] = not clean_bool(entry["disabled"], "disabled")
    return arguments
