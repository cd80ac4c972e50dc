"""``/api/v1/policy-rules`` and ``/api/v1/groups``: the workspace's rules for tool calls (allow, deny, ask,
redact; versioned; enforced or log-only) and the groups of users they name (read: viewer; write: admin; API keys
need ``manage_services``). The rules' language is described in :mod:`mcpbridge.rules.model`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, cast

from fastapi import APIRouter, Depends, Path, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from mcpbridge.http.auth import CurrentPrincipal, service_of
from mcpbridge.http.openapi import problems
from mcpbridge.http.paging import cursor_query, limit_query, next_cursor_field, page_of
from mcpbridge.http.views import Timestamp

if TYPE_CHECKING:
    from mcpbridge.rules.rule_sets import Group, RuleSets, StoredRuleSet

router = APIRouter(prefix="/api/v1", tags=["policy rules"])


async def _rule_sets(request: Request) -> RuleSets:
    return cast("RuleSets", await service_of(request, "rule_sets"))


RuleSetsDep = Annotated[Any, Depends(_rule_sets)]
GroupName = Annotated[str, Path(min_length=1, max_length=64, description="The group's name.")]

_EXAMPLE_RULES: Any = [
    {
        "id": "big-refunds",
        "outcome": "ask",
        "match": {"tools": ["refund"], "arguments": [{"path": "$.amount", "op": "gt", "value": 500}]},
        "approvers": {"groups": ["finance"], "required": 2},
    },
    {
        "id": "no-secrets-out",
        "outcome": "deny",
        "reason": "arguments may not carry credentials",
        "match": {"detected": {"kinds": ["secret"], "in": "arguments"}},
    },
    {"id": "mask-personal-data", "outcome": "redact", "redact": {"kinds": ["personal"], "in": "results"}},
]


class RuleSetIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [{"expected_version": 0, "mode": "enforce", "default": "allow", "rules": _EXAMPLE_RULES}]
        },
    )

    expected_version: int = Field(description="The version read (0 for the first): 409 version_conflict otherwise.")
    mode: Literal["enforce", "log_only"] = Field(
        default="enforce", description="log_only: decisions are recorded on each call, none is acted on."
    )
    default: Literal["allow", "deny", "ask"] = Field(default="allow", description="When no rule decides.")
    rules: list[dict[str, Any]] = Field(
        default_factory=list,
        description="In evaluation order: redact rules mask and go on; the first allow, deny or ask rule that "
        "matches decides. At most 500.",
    )


class ModeIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"examples": [{"mode": "log_only"}]})

    mode: Literal["enforce", "log_only"]


class RuleSetOut(BaseModel):
    version: int = Field(description="0 while the workspace has no rule set.")
    mode: str
    default: str
    rules: list[dict[str, Any]]
    updated_at: Timestamp | None
    updated_by: str | None

    @classmethod
    def of(cls, stored: StoredRuleSet) -> RuleSetOut:
        return cls(
            version=stored.version,
            mode=stored.mode,
            default=stored.body.get("default", "allow"),
            rules=list(stored.body.get("rules", [])),
            updated_at=stored.updated_at,
            updated_by=stored.updated_by,
        )


class GroupIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={"examples": [{"name": "finance", "members": ["usr_01jd8x2k7m0000000000000000"]}]},
    )

    name: str = Field(description="1 to 64 characters: lower-case letters, digits, '_', '.', '-'.")
    description: str = ""
    members: list[str] = Field(default_factory=list, description="User ids of the workspace; at most 500.")


class GroupPut(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"examples": [{"members": []}]})

    description: str = ""
    members: list[str] = Field(default_factory=list)


class GroupOut(BaseModel):
    name: str
    description: str
    members: list[str]
    version: int
    updated_at: Timestamp

    @classmethod
    def of(cls, group: Group) -> GroupOut:
        return cls(
            name=group.name,
            description=group.description,
            members=list(group.members),
            version=group.version,
            updated_at=group.updated_at,
        )


class GroupsOut(BaseModel):
    items: list[GroupOut]
    next_cursor: str | None = next_cursor_field()


@router.get("/policy-rules", operation_id="getPolicyRules", summary="Read the workspace's rules")
def get_rules(principal: CurrentPrincipal, rule_sets: RuleSetsDep) -> RuleSetOut:
    """The current rule set (version 0, allow, no rules while none was saved)."""
    return RuleSetOut.of(rule_sets.get(principal))


@router.put(
    "/policy-rules", operation_id="putPolicyRules", summary="Save the workspace's rules", responses=problems(409)
)
def put_rules(body: RuleSetIn, principal: CurrentPrincipal, rule_sets: RuleSetsDep) -> RuleSetOut:
    """Checks every rule (400 `invalid_rule`, `details.field` naming the first wrong field; nothing is saved) and
    saves them as the next version, if the current one is still `expected_version` (409 `version_conflict`)."""
    payload = {"mode": body.mode, "default": body.default, "rules": body.rules}
    return RuleSetOut.of(rule_sets.save(principal, payload, body.expected_version))


@router.put("/policy-rules/mode", operation_id="setPolicyRulesMode", summary="Enforce the rules, or only log")
def put_mode(body: ModeIn, principal: CurrentPrincipal, rule_sets: RuleSetsDep) -> RuleSetOut:
    """Switches between `enforce` and `log_only`; the rules and their version stay as they are (404 before any rule
    set was saved)."""
    return RuleSetOut.of(rule_sets.set_mode(principal, body.mode))


@router.get(
    "/policy-rules/versions/{version}",
    operation_id="getPolicyRulesVersion",
    summary="Read an earlier version of the rules",
)
def get_version(
    version: Annotated[int, Path(ge=1, le=10**6, description="A version the rule set had (1, 2, ...).")],
    principal: CurrentPrincipal,
    rule_sets: RuleSetsDep,
) -> RuleSetOut:
    """The rules as they were at `version` (what a call's decision names)."""
    return RuleSetOut.of(rule_sets.version(principal, version))


@router.get("/groups", operation_id="listGroups", summary="List groups")
def list_groups(
    principal: CurrentPrincipal,
    rule_sets: RuleSetsDep,
    limit: int = limit_query(),
    cursor: str | None = cursor_query(),
) -> GroupsOut:
    """The workspace's groups, by name."""
    groups, next_cursor = page_of(
        rule_sets.groups(principal), key=lambda g: (g.name,), limit=limit, cursor=cursor, listing="groups"
    )
    return GroupsOut(items=[GroupOut.of(g) for g in groups], next_cursor=next_cursor)


@router.post("/groups", operation_id="createGroup", summary="Create a group", status_code=201, responses=problems(409))
def create_group(body: GroupIn, principal: CurrentPrincipal, rule_sets: RuleSetsDep) -> GroupOut:
    """Members must be users of the workspace (400 `unknown_member`); a name in use answers 409 `group_exists`."""
    group = rule_sets.put_group(
        principal, body.name, {"description": body.description, "members": body.members}, create=True
    )
    return GroupOut.of(group)


@router.get("/groups/{name}", operation_id="getGroup", summary="Read a group")
def get_group(name: GroupName, principal: CurrentPrincipal, rule_sets: RuleSetsDep) -> GroupOut:
    """One group and its members."""
    return GroupOut.of(rule_sets.group(principal, name))


@router.put("/groups/{name}", operation_id="putGroup", summary="Replace a group's members")
def put_group(name: GroupName, body: GroupPut, principal: CurrentPrincipal, rule_sets: RuleSetsDep) -> GroupOut:
    """Replaces the group's description and members (users of the workspace, 400 `unknown_member` otherwise). Calls
    already waiting keep the approvers they were given."""
    group = rule_sets.put_group(
        principal, name, {"description": body.description, "members": body.members}, create=False
    )
    return GroupOut.of(group)


@router.delete(
    "/groups/{name}", operation_id="deleteGroup", summary="Delete a group", status_code=204, responses=problems(409)
)
def delete_group(name: GroupName, principal: CurrentPrincipal, rule_sets: RuleSetsDep) -> Response:
    """A group a rule names cannot be deleted (409 `group_in_use`)."""
    rule_sets.delete_group(principal, name)
    return Response(status_code=204)
