"""The params of the methods a published endpoint serves, checked as the MCP SDK's models of each era check them:
anything they would refuse is -32602 ``Invalid request parameters`` with empty ``data``. Also the keys of the modern
era's envelope (``params._meta``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from mcpbridge.http.mcp.jsonrpc import integer_like, invalid_params

PROTOCOL_VERSION_META: Final = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_META: Final = "io.modelcontextprotocol/clientCapabilities"
CLIENT_INFO_META: Final = "io.modelcontextprotocol/clientInfo"
LOG_LEVEL_META: Final = "io.modelcontextprotocol/logLevel"
SERVER_INFO_META: Final = "io.modelcontextprotocol/serverInfo"

_LOG_LEVELS: Final = frozenset({"alert", "critical", "debug", "emergency", "error", "info", "notice", "warning"})

MetaCheck = Callable[[Any], None]


def _require(condition: bool) -> None:
    if not condition:
        raise invalid_params()


def _optional(value: Any, *types: type) -> bool:
    return value is None or isinstance(value, types)


def _progress_token(meta: dict[str, Any]) -> None:
    if "progressToken" in meta:
        token = meta["progressToken"]
        _require(isinstance(token, str) or integer_like(token))


def handshake_meta(meta: Any) -> None:
    _require(meta is None or isinstance(meta, dict))
    if isinstance(meta, dict):
        _progress_token(meta)


def modern_meta(meta: Any) -> None:
    _require(isinstance(meta, dict))
    _client_capabilities(meta.get(CLIENT_CAPABILITIES_META), modern=True)
    info = meta.get(CLIENT_INFO_META)
    if info is not None:
        _implementation(info)
    _require(meta.get(LOG_LEVEL_META) is None or meta.get(LOG_LEVEL_META) in _LOG_LEVELS)
    _progress_token(meta)


def _client_capabilities(capabilities: Any, *, modern: bool) -> None:
    _require(isinstance(capabilities, dict))
    objects = ("elicitation", "roots", "sampling") if modern else ("elicitation", "roots", "sampling", "tasks")
    for name in objects:
        _require(_optional(capabilities.get(name), dict))
    maps = ("experimental", "extensions") if modern else ("experimental",)
    for name in maps:
        value = capabilities.get(name)
        _require(value is None or (isinstance(value, dict) and all(isinstance(v, dict) for v in value.values())))


def _implementation(info: Any) -> None:
    _require(isinstance(info, dict) and isinstance(info.get("name"), str) and isinstance(info.get("version"), str))
    for name in ("title", "description", "websiteUrl"):
        _require(_optional(info.get(name), str))
    icons = info.get("icons")
    _require(icons is None or (isinstance(icons, list) and all(_is_icon(icon) for icon in icons)))


def _is_icon(icon: Any) -> bool:
    return isinstance(icon, dict) and isinstance(icon.get("src"), str) and _optional(icon.get("mimeType"), str)


def request_params(params: dict[str, Any] | None, meta: MetaCheck) -> None:
    meta(None if params is None else params.get("_meta"))


def listing_params(params: dict[str, Any] | None, meta: MetaCheck) -> None:
    request_params(params, meta)
    _require(params is None or _optional(params.get("cursor"), str))


def call_params(params: dict[str, Any] | None, meta: MetaCheck, *, modern: bool) -> tuple[str, dict[str, Any]]:
    if params is None:
        raise invalid_params()
    request_params(params, meta)
    name, arguments = params.get("name"), params.get("arguments")
    _require(isinstance(name, str) and _optional(arguments, dict))
    if modern:
        _require(_optional(params.get("inputResponses"), dict) and _optional(params.get("requestState"), str))
    else:
        task = params.get("task")
        _require(task is None or (isinstance(task, dict) and (task.get("ttl") is None or integer_like(task["ttl"]))))
    return str(name), dict(arguments or {})


def initialize_params(params: dict[str, Any] | None) -> str:
    if params is None:
        raise invalid_params()
    handshake_meta(params.get("_meta"))
    version = params.get("protocolVersion")
    _require(isinstance(version, str))
    _client_capabilities(params.get("capabilities"), modern=False)
    _implementation(params.get("clientInfo"))
    return str(version)


def declared_capability(meta: Mapping[str, Any] | None, name: str) -> Mapping[str, Any] | None:
    """A capability a modern-era request's client declares in ``_meta`` (checked already), or None."""
    capabilities = (meta or {}).get(CLIENT_CAPABILITIES_META)
    declared = capabilities.get(name) if isinstance(capabilities, Mapping) else None
    return declared if isinstance(declared, Mapping) else None


def declares_extension(meta: Mapping[str, Any] | None, extension: str) -> bool:
    return extension in (declared_capability(meta, "extensions") or {})


def elicitation_modes(meta: Mapping[str, Any] | None) -> frozenset[str]:
    """The elicitation modes the client declares (``form``, ``url``); an ``elicitation`` capability naming neither
    is form mode, as before modes had names."""
    declared = declared_capability(meta, "elicitation")
    if declared is None:
        return frozenset()
    modes = frozenset(mode for mode in ("form", "url") if isinstance(declared.get(mode), Mapping))
    return modes or frozenset({"form"})
