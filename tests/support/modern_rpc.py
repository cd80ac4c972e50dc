"""One MCP 2026-07-28 request as a client sends it over HTTP: the envelope's ``_meta`` and the headers that must
match it (for the methods the SDK client has no helper for, such as the Tasks extension's)."""

from __future__ import annotations

from typing import Any

MODERN = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"


def modern_request(
    method: str, params: dict[str, Any], token: str, capabilities: dict[str, Any] | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """The JSON body and the headers of ``method`` with ``params``, its client declaring ``capabilities``."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": capabilities or {},
    }
    headers = {
        "accept": "application/json, text/event-stream",
        "authorization": f"Bearer {token}",
        "mcp-protocol-version": MODERN,
        "mcp-method": method,
        **({"mcp-name": params["name"]} if "name" in params else {}),
    }
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}}, headers
