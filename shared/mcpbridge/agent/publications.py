"""What a published endpoint publishes of the external services (:class:`Publication`), and who a call through it
runs as (:func:`caller`): see :mod:`mcpbridge.agent.gateway`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from mcpbridge.agent.profiles import AgentProfile
from mcpbridge.domain.identity import Principal, Scope

ENDPOINT_IDENTITY: Final = "endpoint:{endpoint_id}"


@dataclass(frozen=True)
class Publication:
    """What one endpoint publishes of the external services: for each service id, its tool names (``("*",)``: every
    enabled tool)."""

    endpoint_id: str
    workspace_id: str
    name: str
    services: tuple[tuple[str, tuple[str, ...]], ...]
    search_mode: bool = False
    """``search_tools`` and ``call_tool`` are listed in place of the external tools."""

    def publishes(self, service_id: str, tool_name: str) -> bool:
        for published, tools in self.services:
            if published == service_id:
                return tools == ("*",) or tool_name in tools
        return False

    @property
    def profile(self) -> AgentProfile:
        """The endpoint's calls run under a profile that selects its services (default timeouts)."""
        return AgentProfile(
            id=self.endpoint_id,
            workspace_id=self.workspace_id,
            name=self.name,
            mcp_selection_mode="selected",
            mcp_services=tuple(service_id for service_id, _ in self.services),
        )


def caller(workspace_id: str, endpoint_id: str, user_id: str | None) -> Principal:
    """Who a call through the endpoint runs as: the OAuth user, or the endpoint's own identity (static token)."""
    return Principal(workspace_id, user_id or ENDPOINT_IDENTITY.format(endpoint_id=endpoint_id), "", "viewer", Scope())


def publication_of(
    endpoint_id: str, workspace_id: str, name: str, services: Sequence[Any], *, search_mode: bool = False
) -> Publication:
    """A :class:`Publication` from an endpoint's ``services`` (objects with ``service_id`` and ``tools``)."""
    published = tuple((s.service_id, tuple(s.tools)) for s in services)
    return Publication(endpoint_id, workspace_id, name, published, search_mode=search_mode)
