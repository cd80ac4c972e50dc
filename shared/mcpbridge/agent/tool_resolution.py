"""How an agent's call finds its tool: as the submitter sees it when the call is made, and again as its owner just
before it runs (the workflow holds no API key). Over the agent-facing catalog, the agent profiles, the services and
their catalog snapshots; the broker and the steps ask here instead of wiring the pieces themselves."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mcpbridge.agent.discovery import AgentCatalog, ResolvedTool, tool_ref_key
from mcpbridge.agent.profiles import AgentProfile, AgentProfiles, require_agent
from mcpbridge.client.registry import ServiceRegistry
from mcpbridge.domain.external_services import ExternalService
from mcpbridge.domain.identity import Principal, acting_for
from mcpbridge.domain.tool_names import is_tool_ref
from mcpbridge.ports import Store

ENDPOINT_PREFIX = "ep_"
"""The ids of published endpoints, whose calls carry the endpoint's id where an agent's carry its profile's."""

if TYPE_CHECKING:
    from mcpbridge.agent.calls import ToolCall
    from mcpbridge.client.tool_catalog import ToolCatalog


class ToolResolution:
    def __init__(
        self,
        store: Store,
        registry: ServiceRegistry,
        discovery: AgentCatalog,
        profiles: AgentProfiles,
        catalog: ToolCatalog,
        endpoint_profile: Callable[[str, str], AgentProfile | None] | None = None,
    ) -> None:
        """``endpoint_profile(workspace_id, endpoint_id)``: the profile a published endpoint's calls run under (its
        services as the selection; None when there is no such endpoint)."""
        self._store = store
        self._endpoint_profile = endpoint_profile
        self._registry = registry
        self._discovery = discovery
        self._profiles = profiles
        self._catalog = catalog

    def profile(self, principal: Principal, agent_id: str | None) -> AgentProfile:
        """The agent profile a call runs under (the workspace's default when ``agent_id`` is None; for a call made
        through a published endpoint, the endpoint's)."""
        if agent_id and agent_id.startswith(ENDPOINT_PREFIX) and self._endpoint_profile is not None:
            profile = self._endpoint_profile(principal.workspace_id, agent_id)
            if profile is not None:
                require_agent(principal)
                return profile
        return self._profiles.resolve(principal, agent_id)

    def resolve(self, principal: Principal, agent_id: str | None, tool_ref: str) -> ResolvedTool:
        """The tool ``tool_ref`` names, as ``principal`` may call it under that agent (4xx errors otherwise)."""
        return self._discovery.resolve(principal, self.profile(principal, agent_id), tool_ref)

    def named_by_ref(self, workspace_id: str, tool_ref: str) -> tuple[str, str] | None:
        """``(service_id, tool_name)`` a ``tool_ref`` was issued for, whatever the catalog says now (None: unknown)."""
        record = self._store.get(tool_ref_key(workspace_id, tool_ref)) if is_tool_ref(tool_ref) else None
        return None if record is None else (str(record["service_id"]), str(record["tool_name"]))

    def recheck(self, call: ToolCall) -> tuple[ExternalService, dict[str, Any]]:
        """The checks of a call again, as its owner: service, selection, policy, definition."""
        owner = acting_for(call.workspace_id, call.owner_user_id, call.item.get("submitted_by_api_key", ""))
        resolved = self.resolve(owner, call.agent_id, call.tool_ref)
        return resolved.service, resolved.definition

    def service_of(self, call: ToolCall) -> ExternalService:
        return self._registry.find(call.workspace_id, call.service_id)

    async def refresh_catalog(self, call: ToolCall, service: ExternalService) -> None:
        """The owner's first catalog of an OAuth service they just authorized (to check the tool afterwards)."""
        await self._catalog.refresh_for(acting_for(call.workspace_id, call.owner_user_id), service)
