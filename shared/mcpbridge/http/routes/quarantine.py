"""The quarantine of changed tools (:mod:`mcpbridge.client.quarantine`): the held tools, the difference between a
held tool's approved and current definitions, its approval, and a service's setting for tools that appear after its
first catalog. Read: viewer; write: admin; API keys need ``manage_services``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, cast

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from mcpbridge.client.quarantine import Difference, HeldTool, Pin, QuarantineSettings
from mcpbridge.http.auth import CurrentPrincipal, service_of
from mcpbridge.http.fields import ServiceId, ToolName
from mcpbridge.http.openapi import problems
from mcpbridge.http.paging import cursor_query, limit_query, next_cursor_field, page_of
from mcpbridge.http.views import Timestamp

if TYPE_CHECKING:
    from mcpbridge.client.quarantine import ToolQuarantine

router = APIRouter(tags=["tool-quarantine"])


async def _quarantine(request: Request) -> ToolQuarantine:
    return cast("ToolQuarantine", await service_of(request, "tool_quarantine"))


QuarantineDep = Annotated["ToolQuarantine", Depends(_quarantine)]


class HeldToolOut(BaseModel):
    service_id: str
    service_name: str
    tool_name: str
    reason: Literal["new", "changed"] = Field(
        description="new: appeared after the service's first catalog; changed: differs from its approved definition."
    )
    current_hash: str = Field(description="SHA-256 of the current definition: what an approval names.")
    pinned_hash: str | None = Field(description="SHA-256 of the approved definition (null: never approved).")
    seen_at: Timestamp | None = Field(description="When the catalog showing the current definition was taken.")

    @classmethod
    def of(cls, held: HeldTool) -> HeldToolOut:
        return cls(
            service_id=held.service_id,
            service_name=held.service_name,
            tool_name=held.tool_name,
            reason=held.reason,
            current_hash=held.current_hash,
            pinned_hash=held.pinned_hash,
            seen_at=held.seen_at,
        )


class HeldTools(BaseModel):
    items: list[HeldToolOut]
    next_cursor: str | None = next_cursor_field()


class QuarantineOut(BaseModel):
    service_id: str
    new_tools: Literal["hold", "approve"] = Field(
        description="hold: tools appearing after the first catalog wait for an approval; approve: pinned as they come."
    )
    baseline_at: Timestamp | None = Field(description="When the first catalog's tools were pinned (null: not yet).")
    held: list[HeldToolOut]

    @classmethod
    def of(cls, settings: QuarantineSettings, held: list[HeldTool]) -> QuarantineOut:
        return cls(
            service_id=settings.service_id,
            new_tools=settings.new_tools,
            baseline_at=settings.baseline_at,
            held=[HeldToolOut.of(h) for h in held],
        )


class QuarantineIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"examples": [{"new_tools": "hold"}]})

    new_tools: str = Field(description='"hold" (the default) or "approve".')


class DifferenceOut(BaseModel):
    tool: HeldToolOut
    approved_definition: dict[str, Any] | None = Field(description="The definition approved before (null: none).")
    current_definition: dict[str, Any]
    changed_fields: list[str] = Field(description="The definition's fields that differ (description, inputSchema...).")
    diff: str = Field(description="A unified diff of the two definitions as indented, key-sorted JSON.")
    untrusted: bool = Field(default=True, description="Definitions come from the external server: data, not orders.")

    @classmethod
    def of(cls, difference: Difference) -> DifferenceOut:
        return cls(
            tool=HeldToolOut.of(difference.held),
            approved_definition=difference.pinned,
            current_definition=difference.current,
            changed_fields=difference.changed_fields,
            diff=difference.diff,
        )


class ApprovalIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"examples": [{"definition_hash": "…"}]})

    definition_hash: str = Field(description="The `current_hash` of the difference reviewed.")


class PinOut(BaseModel):
    service_id: str
    tool_name: str
    definition_hash: str
    approved_at: Timestamp
    approved_by: str

    @classmethod
    def of(cls, pin: Pin) -> PinOut:
        return cls(
            service_id=pin.service_id,
            tool_name=pin.tool_name,
            definition_hash=pin.digest,
            approved_at=pin.approved_at,
            approved_by=pin.approved_by,
        )


@router.get("/api/v1/tool-quarantine", operation_id="listHeldTools", summary="List every held tool")
def list_held_tools(
    principal: CurrentPrincipal,
    quarantine: QuarantineDep,
    limit: int = limit_query(),
    cursor: str | None = cursor_query(),
) -> HeldTools:
    """The tools of every service of the workspace that the quarantine holds: not offered to agents or endpoints,
    and refused when called, until an admin approves them."""
    held, next_cursor = page_of(
        quarantine.held(principal),
        key=lambda h: (h.service_id, h.tool_name),
        limit=limit,
        cursor=cursor,
        listing="tool-quarantine",
    )
    return HeldTools(items=[HeldToolOut.of(h) for h in held], next_cursor=next_cursor)


@router.get(
    "/api/v1/mcp-services/{service_id}/quarantine",
    operation_id="getServiceQuarantine",
    summary="A service's quarantine",
)
def get_service_quarantine(
    service_id: ServiceId, principal: CurrentPrincipal, quarantine: QuarantineDep
) -> QuarantineOut:
    """The service's setting for new tools and the tools it holds now."""
    settings = quarantine.settings(principal, service_id)
    return QuarantineOut.of(settings, quarantine.held(principal, settings.service_id))


@router.put(
    "/api/v1/mcp-services/{service_id}/quarantine",
    operation_id="setServiceQuarantine",
    summary="Set a service's rule for new tools",
    responses=problems(400),
)
def set_service_quarantine(
    service_id: ServiceId, body: QuarantineIn, principal: CurrentPrincipal, quarantine: QuarantineDep
) -> QuarantineOut:
    """Whether tools that appear after the service's first catalog start held (`hold`) or are approved as they
    appear (`approve`). A changed tool is held either way."""
    settings = quarantine.set_new_tools(principal, service_id, body.new_tools)
    return QuarantineOut.of(settings, quarantine.held(principal, settings.service_id))


@router.get(
    "/api/v1/mcp-services/{service_id}/quarantine/{tool_name}",
    operation_id="getHeldToolDifference",
    summary="A held tool's difference",
    responses=problems(404),
)
def get_difference(
    service_id: ServiceId, tool_name: ToolName, principal: CurrentPrincipal, quarantine: QuarantineDep
) -> DifferenceOut:
    """The approved and current definitions of a held tool, the fields that changed and a unified diff."""
    return DifferenceOut.of(quarantine.difference(principal, service_id, tool_name))


@router.post(
    "/api/v1/mcp-services/{service_id}/quarantine/{tool_name}/approve",
    operation_id="approveHeldTool",
    summary="Approve a held tool's current definition",
    responses=problems(400, 404, 409),
)
def approve_held_tool(
    service_id: ServiceId, tool_name: ToolName, body: ApprovalIn, principal: CurrentPrincipal, quarantine: QuarantineDep
) -> PinOut:
    """Pins the tool's current definition, named by the `current_hash` reviewed; 409 `definition_changed` when it
    changed again since. Earlier `tool_ref`s stay invalid: agents describe the tool again."""
    return PinOut.of(quarantine.approve(principal, service_id, tool_name, body.definition_hash))
