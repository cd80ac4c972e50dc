"""Agent tool calls: submit a call by ``tool_ref``, read it, list what waits for a person, and resolve pauses.

A call is checked in full when it is submitted (service enabled and selected, tool enabled, ``tool_ref`` still
naming the current definition, arguments valid against the tool's JSON Schema without fetching anything), then
either runs at once or pauses:

* for approval when the tool's policy requires it. The policy check fails closed: if the policy cannot be read,
  approval is required;
* for OAuth when the service uses OAuth and the user has no usable token (interactive calls only: a
  non-interactive call gets a notice telling the user to authorize in the console, and no pause).

A paused call is a record (:mod:`mcpbridge.agent.calls`) plus a workflow execution (:class:`~mcpbridge.ports.
Workflow`); the steps (:mod:`mcpbridge.agent.steps`) run it on. A pause is resolved by the user the call belongs to,
or by a workspace admin holding ``approve_calls`` (how calls made for end users through ``act_as``, who hold no key,
get resolved); the first resolution wins. Before running, a call is checked again (a tool disabled or changed
while the call waited is refused).
"""

# Over 400 lines: a call's whole life at the broker (submit, read, resolve, resume) shares its checks.

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

import anyio
from anyio import to_thread

from mcpbridge.agent.arguments import MAX_ARGUMENT_BYTES, validate_arguments
from mcpbridge.agent.calls import ID_PREFIX, ToolCall, ToolCalls
from mcpbridge.agent.idempotency import IdempotencyKeys, check_key, request_digest
from mcpbridge.agent.steps import OAuthGate, ToolCallSteps, event_detail, needs_oauth
from mcpbridge.client.registry import ServiceRegistry
from mcpbridge.domain.external_services import ExternalService
from mcpbridge.domain.identity import Principal, acting_for, is_approver, timestamp
from mcpbridge.domain.ids import new_id
from mcpbridge.errors import Conflict, Forbidden, InvalidInput, NotFound, OAuthRequired, Unavailable
from mcpbridge.ports import CallStart, Clock, Events, Store, Workflow

if TYPE_CHECKING:
    from mcpbridge.agent.discovery import PublishedCall, ResolvedTool
    from mcpbridge.agent.policy_gate import PolicyGate, Routing
    from mcpbridge.agent.profiles import AgentProfile
    from mcpbridge.agent.results import Outcome
    from mcpbridge.client.policies import ToolPolicy
    from mcpbridge.rules.evaluate import Decision

log = logging.getLogger("mcpbridge.agent")

_T = TypeVar("_T")

_USER_ID = re.compile(r"[A-Za-z0-9_.:@-]{1,128}")
BACKGROUND_NOTICE = (
    "{service} may take up to {timeout:g} s to answer, longer than a request may wait here ({budget:g} s): the call "
    "runs in the background; poll GET /api/v1/agent/tool-calls/{call_id} (or pass callback_task_token)"
)
OUTCOME_SYNC_SECONDS = 0.02
"""How long a call's outcome, written after its answer went out, may wait to share another write's disk sync (the
next call's record, under load) before it is synced on its own: what a power cut right after an answer may lose."""
OAUTH_NOTICE = (
    "This tool needs your authorization of {service}. Authorize it in the console (MCP services), then ask again; "
    "the agent continues without the tool for now."
)


@dataclass(frozen=True)
class _Draft:
    """A checked submission, before it is stored."""

    principal: Principal
    service: ExternalService
    tool_name: str
    function_name: str
    tool_ref: str
    definition_hash: str
    profile: Any
    user_id: str
    arguments: dict[str, Any]
    session_id: str | None
    interactive: bool
    base_url: str | None
    arguments_checked: bool
    needs_approval: bool
    needs_oauth: bool
    call_id: str | None = None
    """Chosen before the call is recorded when an idempotency key is claimed for it."""
    decision: Decision | None = None
    """What the workspace's rules decided (enforced or only recorded)."""
    routing: Routing | None = None
    """Who approves, when an ask rule named them."""


@dataclass(frozen=True)
class Submitted:
    """The answer to a submission: ``call`` (its record) and, for a call that ran at once, its outcome."""

    call: ToolCall
    paused: bool
    notice: str | None = None
    agent_result: dict[str, Any] | None = None
    """For a call that ran at once: its result with images (the stored one has them redacted)."""
    replayed: bool = False
    """The call was made before with the same idempotency key: ``call`` is that first call, as it stands."""


class ToolLookup(Protocol):
    """How a call finds its tool (:class:`~mcpbridge.agent.tool_resolution.ToolResolution`)."""

    def profile(self, principal: Principal, agent_id: str | None) -> AgentProfile: ...

    def resolve(self, principal: Principal, agent_id: str | None, tool_ref: str) -> ResolvedTool: ...

    def named_by_ref(self, workspace_id: str, tool_ref: str) -> tuple[str, str] | None: ...


class PolicyReader(Protocol):
    """The per-tool policy a call is judged by (:class:`~mcpbridge.client.policies.ToolPolicies`)."""

    def policy_for(self, workspace_id: str, service_id: str, tool_name: str) -> ToolPolicy: ...


class ToolCallBroker:
    def __init__(
        self,
        calls: ToolCalls,
        clock: Clock,
        registry: ServiceRegistry,
        steps: ToolCallSteps,
        workflow: Callable[[], Workflow],
        events: Events,
        tools: ToolLookup,
        policies: PolicyReader,
        oauth: OAuthGate | None,
        *,
        store: Store,
        callbacks_supported: bool,
        user_usable: Callable[[str, str], bool] | None = None,
        request_budget: float | None = None,
        keys: IdempotencyKeys | None = None,
        gate: PolicyGate | None = None,
    ) -> None:
        """``workflow`` is asked for on use (the embedded workflow runs the steps this broker starts);
        ``user_usable(workspace_id, user_id)`` says whether a user a call acts for may still be acted for;
        ``store``: the store the call records live in, which says where a call's admission runs cheapest."""
        self._calls = calls
        self._clock = clock
        self._registry = registry
        self._steps = steps
        self._workflow = workflow
        self._events = events
        self._tools = tools
        self._policies = policies
        self._oauth = oauth
        self._store = store
        self._callbacks_supported = callbacks_supported
        self._user_usable = user_usable
        self._budget = request_budget
        self._keys = keys or IdempotencyKeys(store, clock, calls.retention_seconds)
        self._gate = gate

    # -- submitting -------------------------------------------------------------------------------------------

    async def submit(
        self,
        principal: Principal,
        *,
        tool_ref: str,
        arguments: Mapping[str, Any],
        agent_id: str | None = None,
        acting_user_id: str | None = None,
        session_id: str | None = None,
        interactive: bool = True,
        callback_task_token: str | None = None,
        base_url: str | None = None,
        idempotency_key: str | None = None,
        published: PublishedCall | None = None,
    ) -> Submitted:
        """Check, record and run (or pause) a call. ``idempotency_key``: a retry with the same key and the same
        request returns the first call as it stands (never running the tool again); with another request, 409.
        ``published``: the tool a published endpoint's caller named, its profile and ``tool_ref`` resolved just now
        as :meth:`ToolLookup.profile` and :meth:`ToolLookup.resolve` would (the catalogs are read once)."""
        key = None if idempotency_key is None else check_key(idempotency_key)
        until = None if self._budget is None else anyio.current_time() + self._budget
        if callback_task_token and not self._callbacks_supported:
            raise InvalidInput(
                "callback_task_token needs the AWS backend (Step Functions)", code="callback_not_supported"
            )
        prepared = _once(
            lambda: self._prepare(
                principal, tool_ref, arguments, agent_id, acting_user_id, session_id, interactive, base_url, published
            )
        )
        if self._store.reads_are_local:
            prepared()  # reads only: on the event loop, before (not inside) the store's block of writes made at once
        # Judged once: a rule counting history writes, and a retry of the admission in a thread must not count again.
        judged = _once(lambda: self._judged(prepared()))
        admitted = await self._on_store(
            lambda: self._admit_keyed(prepared(), judged, callback_task_token, base_url, key)
        )
        if isinstance(admitted, Submitted):
            return admitted
        running, secrets = admitted
        synced = self._store.sync_soon()  # the call's record reaches the disk while the tool runs upstream
        outcome = await self._steps.call_upstream(running, prepared().service, until=until, secrets=secrets)
        call = await to_thread.run_sync(self._record_and_end, running, outcome, synced)
        if call.status in ("awaiting_oauth", "awaiting_approval"):
            return Submitted(call=call, paused=True)
        return Submitted(call=call, paused=False, agent_result=outcome.for_agent)

    def _record_and_end(self, running: ToolCall, outcome: Outcome, synced: Callable[[], None]) -> ToolCall:
        """One hop after the upstream answered: the outcome's write, its event, the agent's callback; returns once
        ``synced`` says the call's record is on disk (never answered before)."""
        # A step-up (SEP-835), or the upstream's own question: paused like a first authorization or approval.
        pauses = outcome.status in ("awaiting_oauth", "awaiting_approval")
        recorded = self._steps.record(running, outcome, durable=pauses)
        synced()
        if pauses:
            self._workflow().start(
                CallStart(
                    recorded.id,
                    recorded.workspace_id,
                    recorded.approval_timeout_seconds,
                    recorded.oauth_timeout_seconds,
                )
            )
            return recorded
        ended = self._steps.end(recorded)[0]
        self._store.sync_soon(within=OUTCOME_SYNC_SECONDS)  # the outcome: with the next call's sync, or on its own
        return ended

    async def _on_store(self, work: Callable[[], _T]) -> _T:
        """Run ``work`` (a call's checks and first write) where the store makes it cheapest: on the event loop when
        its reads are local and its write can be made at once (SQLite with no one else writing: the loop shares
        one interpreter lock with the worker threads, and each hop to one costs a wake-up), else in one worker
        thread (a write that would wait, every DynamoDB call). ``work`` must raise ``store_busy`` before any write
        lands, and keep what it read (``_once``), so the thread goes on from there."""
        if self._store.reads_are_local:
            try:
                with self._store.writes_at_once():
                    return work()
            except Unavailable as busy:
                if busy.code != "store_busy":
                    raise
        return await to_thread.run_sync(work)

    def _admit_keyed(
        self,
        draft: _Draft,
        judged: Callable[[], _Draft],
        callback: str | None,
        base_url: str | None,
        key: str | None,
    ) -> Submitted | tuple[ToolCall, Mapping[str, str] | None]:
        """:meth:`_admit` of the judged draft, after claiming the idempotency key if there is one (a durable write:
        never at once; claimed with the arguments as sent, before the rules judge the call)."""
        if key is None:
            return self._admit(judged(), callback, base_url)
        workspace_id, call_id = draft.principal.workspace_id, new_id(ID_PREFIX)
        digest = request_digest(draft.service.id, draft.tool_name, getattr(draft.profile, "id", None), draft.arguments)
        first = self._keys.claim(workspace_id, draft.user_id, key, digest, call_id)
        if first is not None:
            try:
                call = self._calls.find(workspace_id, first)
            except NotFound:
                raise Conflict(
                    "a call with this idempotency key is being made; retry in a moment", code="idempotency_key_in_use"
                ) from None
            return Submitted(call=call, paused=not call.is_terminal, replayed=True)
        try:
            return self._admit(dataclasses.replace(judged(), call_id=call_id), callback, base_url)
        except Exception:
            self._keys.release(workspace_id, draft.user_id, key)
            raise

    def _admit(
        self, draft: _Draft, callback: str | None, base_url: str | None
    ) -> Submitted | tuple[ToolCall, Mapping[str, str] | None]:
        """Record a checked call: about to run (its record and its service's opened credentials), or answered now
        (refused by a rule, cancelled for want of an authorization, run in the background, paused)."""
        refusal = self._refusal(draft)
        if refusal is not None:
            return Submitted(call=self._record(draft, "failed", error=refusal), paused=False, notice=refusal["message"])
        if draft.needs_oauth and not draft.interactive and not draft.needs_approval:
            notice = OAUTH_NOTICE.format(service=draft.service.name)
            error = {"code": "oauth_required", "message": notice}
            return Submitted(call=self._record(draft, "cancelled", error=error), paused=False, notice=notice)
        if self._runs_at_once(draft):
            return self._open(draft, callback)
        if not draft.needs_approval and not draft.needs_oauth:
            return self._run_in_background(draft, callback)
        return Submitted(call=self._pause(draft, callback, base_url), paused=True)

    def _pause(self, draft: _Draft, callback: str | None, base_url: str | None) -> ToolCall:
        """Record a call that waits for an approval or the user's authorization, and start its workflow."""
        status = "awaiting_approval" if draft.needs_approval else "awaiting_oauth"
        call = self._record(draft, status, callback=callback)
        if status == "awaiting_oauth":
            url = (
                self._oauth.authorization_url(call.workspace_id, draft.service, draft.user_id, base_url)
                if self._oauth
                else None
            )
            call = self._calls.move(call, "awaiting_oauth", sets=self._calls.oauth_pause(call, url))
        kind = "tool_call.approval_required" if draft.needs_approval else "tool_call.oauth_required"
        self._events.publish(kind, event_detail(call))
        self._workflow().start(
            CallStart(call.id, call.workspace_id, call.approval_timeout_seconds, call.oauth_timeout_seconds)
        )
        return call

    def _open(self, draft: _Draft, callback: str | None) -> tuple[ToolCall, Mapping[str, str] | None]:
        """Record a call about to run and open its service's credentials. The record is not synced to disk on its
        own (SQLite: so it can be written at once): :meth:`submit` has it synced while the tool runs upstream, and
        answers the agent once it is on disk; the outcome is written without waiting for a sync and synced right
        behind. A crash of the process loses nothing; a power cut may forget a call whose agent got no answer, or
        the outcome of one answered a moment before (its record then shows it running, and it ends uncertain, as
        any call interrupted while it ran), never a call its agent was answered about."""
        running = self._record(draft, "running", callback=callback, durable=False)
        return running, self._secrets_of(draft)

    def _secrets_of(self, draft: _Draft) -> Mapping[str, str] | None:
        return None if draft.service.auth.auth_type == "oauth" else self._registry.connection_secrets(draft.service)

    def _runs_at_once(self, draft: _Draft) -> bool:
        return not (draft.needs_approval or draft.needs_oauth or self._in_background(draft.service))

    def _in_background(self, service: ExternalService) -> bool:
        """A call that may outlast the request (its service's timeout is longer than the request's budget) runs in
        the workflow instead, where a Lambda task may take minutes, when there is one apart from this process."""
        return self._budget is not None and self._callbacks_supported and service.advanced.timeout > self._budget

    def _run_in_background(self, draft: _Draft, callback: str | None) -> Submitted:
        call = self._record(draft, "ready", callback=callback)
        self._workflow().start(
            CallStart(call.id, call.workspace_id, call.approval_timeout_seconds, call.oauth_timeout_seconds)
        )
        assert self._budget is not None
        notice = BACKGROUND_NOTICE.format(
            service=draft.service.name, timeout=draft.service.advanced.timeout, budget=self._budget, call_id=call.id
        )
        return Submitted(call=call, paused=True, notice=notice)

    def _prepare(
        self,
        principal: Principal,
        tool_ref: str,
        arguments: Mapping[str, Any],
        agent_id: str | None,
        acting_user_id: str | None,
        session_id: str | None,
        interactive: bool,
        base_url: str | None,
        published: PublishedCall | None = None,
    ) -> _Draft:
        user_id = self._acting_user(principal, acting_user_id)
        profile, resolved = self._found(principal, agent_id, tool_ref, published)
        try:
            if resolved is None:
                resolved = self._tools.resolve(principal, agent_id, tool_ref)
        except OAuthRequired:
            # The user has never authorized this OAuth service, so there is no catalog of it for them yet: the
            # reference still names the tool; the call waits for the authorization, and the schema and arguments
            # are checked before it runs.
            named = self._tools.named_by_ref(principal.workspace_id, tool_ref)
            if named is None:
                raise
            service = self._registry.find(principal.workspace_id, named[0])
            if not isinstance(arguments, Mapping):
                raise InvalidInput("arguments must be a JSON object", code="invalid_arguments") from None
            return _Draft(
                principal=principal,
                service=service,
                tool_name=named[1],
                function_name="",
                tool_ref=tool_ref,
                definition_hash="",
                profile=profile,
                user_id=user_id,
                arguments=dict(arguments),
                session_id=session_id,
                interactive=interactive,
                base_url=base_url,
                arguments_checked=False,
                needs_approval=self._approval_required(principal.workspace_id, service.id, named[1]),
                needs_oauth=True,
            )
        validate_arguments(resolved.input_schema, arguments)
        service = resolved.service
        return _Draft(
            principal=principal,
            service=service,
            tool_name=resolved.tool_name,
            function_name=resolved.function_name,
            tool_ref=resolved.tool_ref,
            definition_hash=resolved.definition_hash,
            profile=profile,
            user_id=user_id,
            arguments=dict(arguments),
            session_id=session_id,
            interactive=interactive,
            base_url=base_url,
            arguments_checked=True,
            needs_approval=bool(resolved.policy.require_approval),  # read with the tool (an unreadable one: refused)
            needs_oauth=needs_oauth(self._oauth, principal.workspace_id, service, user_id),
        )

    def _acting_user(self, principal: Principal, acting_user_id: str | None) -> str:
        if acting_user_id is None or acting_user_id == principal.user_id:
            return principal.user_id
        if not (principal.is_admin and principal.scope.allows("act_as")):
            raise Forbidden("acting for another user needs an admin key with act_as", code="act_as_required")
        if not isinstance(acting_user_id, str) or not _USER_ID.fullmatch(acting_user_id):
            raise InvalidInput("principal.user_id is not a valid user id", code="invalid_principal")
        if self._user_usable is not None and not self._user_usable(principal.workspace_id, acting_user_id):
            raise Forbidden("the user this call would act for is disabled or being deleted", code="user_inactive")
        return acting_user_id

    def _found(
        self, principal: Principal, agent_id: str | None, tool_ref: str, published: PublishedCall | None
    ) -> tuple[AgentProfile, ResolvedTool | None]:
        """The profile a call runs under and its tool as ``published`` has them resolved (None: resolve it)."""
        if published is not None and published.profile.id == agent_id and published.tool_ref == tool_ref:
            return published.profile, published.resolved
        return self._tools.profile(principal, agent_id), None

    def _approval_required(self, workspace_id: str, service_id: str, tool_name: str) -> bool:
        try:
            return bool(self._policies.policy_for(workspace_id, service_id, tool_name).require_approval)
        except Exception:  # fail closed: a policy we cannot read means a person must approve
            log.warning("tool policy of %s unreadable: approval required", service_id)
            return True

    def _judged(self, draft: _Draft) -> _Draft:
        """The draft as the workspace's rules leave it: its decision noted and, when the rules are enforced, its
        arguments masked (redact), an approval required (ask) with who may give it. A deny is acted on at
        admission (:meth:`_refusal`). A workspace without rules: the draft as it is."""
        if self._gate is None:
            return draft
        decision = self._gate.judge(
            draft.principal,
            service_id=draft.service.id,
            service_name=draft.service.name,
            tool_name=draft.tool_name,
            user_id=draft.user_id,
            agent_id=getattr(draft.profile, "id", None),
            arguments=draft.arguments,
        )
        if decision is None:
            return draft
        judged = dataclasses.replace(draft, decision=decision)
        if not decision.enforced:
            return judged
        if decision.arguments is not None:
            judged = dataclasses.replace(judged, arguments=decision.arguments)
        if decision.outcome == "ask":
            routing = self._gate.routing(draft.principal, decision, draft.user_id)
            judged = dataclasses.replace(judged, needs_approval=True, routing=routing)
        return judged

    @staticmethod
    def _refusal(draft: _Draft) -> dict[str, str] | None:
        """The error a call is recorded with when an enforced rule refuses it (deny, or an ask that too few people
        could ever approve), else None."""
        decision = draft.decision
        if decision is None or not decision.enforced:
            return None
        if decision.outcome == "deny":
            return {"code": "denied_by_rule", "message": decision.reason or "refused by the workspace's rules"}
        routing = draft.routing
        if routing is not None and len(routing.users) < routing.required:
            return {
                "code": "approvers_unavailable",
                "message": f"rule {routing.rule_id} asks {routing.required} approver(s) and only "
                f"{len(routing.users)} other than the caller can approve",
            }
        return None

    def _record(
        self,
        draft: _Draft,
        status: str,
        *,
        error: dict[str, str] | None = None,
        callback: str | None = None,
        durable: bool = True,
    ) -> ToolCall:
        item: dict[str, Any] = {
            "id": draft.call_id or new_id(ID_PREFIX),
            "workspace_id": draft.principal.workspace_id,
            "owner_user_id": draft.user_id,
            "submitted_by_api_key": draft.principal.api_key_id,
            "agent_id": getattr(draft.profile, "id", None),
            "session_id": draft.session_id,
            "interactive": draft.interactive,
            "service_id": draft.service.id,
            "service_name": draft.service.name,
            "tool_name": draft.tool_name,
            "function_name": draft.function_name,
            "tool_ref": draft.tool_ref,
            "definition_hash": draft.definition_hash,
            "arguments": draft.arguments,
            "arguments_checked": draft.arguments_checked,
            "status": status,
            "approval_timeout_seconds": int(draft.profile.approval_timeout_seconds),
            "oauth_timeout_seconds": int(draft.profile.oauth_wait_timeout_seconds),
        }
        if draft.base_url:
            item["request_base_url"] = draft.base_url
        if draft.decision is not None:
            item["policy"] = draft.decision.record()
            if draft.decision.arguments is not None and draft.decision.enforced:
                item["arguments_redacted"] = True
        if draft.routing is not None:
            item["approval_routing"] = draft.routing.as_item()
        if error is not None:
            item["error"] = error
            item["finished_at"] = timestamp(self._clock.now())
        return self._calls.create(item, callback_task_token=callback, durable=durable)

    # -- reading ----------------------------------------------------------------------------------------------

    @property
    def records(self) -> ToolCalls:
        """The call records (what the audit trail reads)."""
        return self._calls

    def get(self, principal: Principal, call_id: str) -> ToolCall:
        """A call of the caller's workspace, for its owner or a workspace admin."""
        call = self._calls.find(principal.workspace_id, call_id)
        if call.owner_user_id != principal.user_id and not principal.is_admin and not _routed_to(call, principal):
            raise NotFound("no such tool call", code="pending_not_found")
        return call

    def pending(self, principal: Principal) -> list[ToolCall]:
        """The calls waiting for this caller: its own and those an ask rule routed to it, or for an approver every
        call of the workspace (calls made for end users through ``act_as`` included)."""
        if is_approver(principal):
            return self._calls.pending_in(principal.workspace_id)
        own = self._calls.pending_of(principal.workspace_id, principal.user_id)
        routed = [  # calls an ask rule named this user to decide
            c
            for c in self._calls.pending_in(principal.workspace_id)
            if c.owner_user_id != principal.user_id and _routed_to(c, principal)
        ]
        return sorted([*own, *routed], key=lambda c: (c.created_at, c.id))

    @staticmethod
    def approvers_of(call: ToolCall) -> list[str] | None:
        """Who may decide a call waiting for approval, for notifying them: the users an ask rule routed it to
        (never its caller), with how many must approve in ``call.item["approval_routing"]["required"]``; None when
        no rule named anyone (its owner and the workspace's admins with ``approve_calls`` decide, as before)."""
        routing = call.item.get("approval_routing")
        return list(routing.get("users", ())) if isinstance(routing, dict) else None

    def authorization_url(self, call: ToolCall, principal: Principal) -> str | None:
        """The call's OAuth authorization URL, for its owner only."""
        if call.status != "awaiting_oauth" or call.owner_user_id != principal.user_id:
            return None
        return self._calls.authorization_url(call)

    # -- resolving --------------------------------------------------------------------------------------------

    def resolve_approval(
        self,
        principal: Principal,
        pending_id: str,
        *,
        decision: Literal["approve", "reject"],
        reason: str | None = None,
        modified_args: Any = None,
        modified_given: bool = False,
        content: Any = None,
        content_given: bool = False,
    ) -> ToolCall:
        """Approve or reject a call waiting for approval. A call waiting on its upstream's question (``input_request``)
        is approved with ``content``, the answer, checked against the question's schema (its arguments stay); one
        waiting for an approval takes no ``content``."""
        call = self._owned(principal, pending_id)
        if call.status != "awaiting_approval":
            raise _already_resolved()
        question = call.input_request
        if question is not None and decision == "approve":
            return self._answer(principal, call, question, reason, content, content_given, modified_given)
        if content_given and question is None:
            raise InvalidInput(
                "content answers an upstream's question; this call waits for an approval", code="invalid_content"
            )
        if call.item.get("approval_routing"):
            return self._resolve_routed(principal, call, decision, reason, modified_given)
        approval: dict[str, Any] = {
            "decision": decision,
            "by": principal.user_id,
            "by_api_key": principal.api_key_id,
            "at": timestamp(self._clock.now()),
        }
        if reason:
            approval["reason"] = reason[:1000]
        if decision == "reject":
            moved = self._calls.move(
                call,
                "rejected",
                sets={
                    "approval": approval,
                    "error": {"code": "rejected", "message": (reason or "tool execution rejected by user")[:500]},
                },
            )
        else:
            sets: dict[str, Any] = {"approval": approval}
            if modified_given:
                if not isinstance(modified_args, dict):
                    raise InvalidInput("modified_args must be a JSON object (not null)", code="invalid_modified_args")
                # Checked as the call's owner sees the tool, whoever approves.
                owner = acting_for(call.workspace_id, call.owner_user_id)
                resolved = self._tools.resolve(owner, call.agent_id, call.tool_ref)
                validate_arguments(resolved.input_schema, modified_args)
                _check_kept_together(call.arguments, modified_args)
                # The caller's own arguments stay beside the approved ones: the record shows what was changed.
                sets["arguments"] = modified_args
                sets["original_arguments"] = call.arguments
                approval["modified_args"] = True
            moved = self._calls.move(call, "approved", sets=sets)
        self._events.publish("tool_call.approval_resolved", event_detail(moved))
        self._steps.resume_waiting(moved)
        return moved

    def _answer(
        self,
        principal: Principal,
        call: ToolCall,
        question: dict[str, Any],
        reason: str | None,
        content: Any,
        content_given: bool,
        modified_given: bool,
    ) -> ToolCall:
        """The answer to the upstream's question: checked against its schema (nothing is written when it does not
        fit), sealed on the call, and the call approved to run again with it."""
        if modified_given:
            raise InvalidInput(
                "this call waits for an answer to its service's question: give content, not modified_args",
                code="invalid_modified_args",
            )
        if not content_given or not isinstance(content, dict):
            raise InvalidInput(
                "content (a JSON object answering the service's question) is required", code="invalid_content"
            )
        try:
            validate_arguments(question.get("requested_schema") or {"type": "object"}, content)
        except InvalidInput as wrong:
            listed = "; ".join(f"{p['path']}: {p['problem']}" for p in wrong.details.get("errors", ()))
            message = f"content does not match the schema the service asked for: {listed or wrong.message}"
            raise InvalidInput(message, code="invalid_content", details=wrong.details) from None
        approval: dict[str, Any] = {
            "decision": "approve",
            "by": principal.user_id,
            "by_api_key": principal.api_key_id,
            "at": timestamp(self._clock.now()),
            "answered_input": True,
        }
        if reason:
            approval["reason"] = reason[:1000]
        sets = {"approval": approval, **self._calls.answer_sets(call, str(question.get("key")), content)}
        moved = self._calls.move(call, "approved", sets=sets)
        self._events.publish("tool_call.approval_resolved", event_detail(moved))
        self._steps.resume_waiting(moved)
        return moved

    def _resolve_routed(
        self, principal: Principal, call: ToolCall, decision: str, reason: str | None, modified_given: bool
    ) -> ToolCall:
        """A call an ask rule routed: one of its approvers decides. Approvals count once per approver until the
        rule's number is reached; one rejection ends the call."""
        if modified_given:
            raise InvalidInput(
                "a call routed to named approvers runs with its own arguments: modified_args is refused",
                code="invalid_modified_args",
            )
        entry: dict[str, Any] = {
            "decision": decision,
            "by": principal.user_id,
            "by_api_key": principal.api_key_id,
            "at": timestamp(self._clock.now()),
        }
        if reason:
            entry["reason"] = reason[:1000]
        required = int(call.item["approval_routing"].get("required", 1))
        moved = self._calls.add_approval(call, entry, required)
        if moved.status == "awaiting_approval":  # counted; the rule wants more approvals yet
            self._events.publish("tool_call.approval_given", event_detail(moved))
        else:
            self._events.publish("tool_call.approval_resolved", event_detail(moved))
            self._steps.resume_waiting(moved)
        return moved

    def resolve_oauth(
        self, principal: Principal, pending_id: str, *, service_id: str, decision: Literal["authorize", "cancel"]
    ) -> ToolCall:
        call = self._owned(principal, pending_id)
        if call.status != "awaiting_oauth":
            raise _already_resolved()
        if service_id != call.service_id:
            raise InvalidInput("service_id is not the service this call waits for", code="service_mismatch")
        if decision == "cancel":
            moved = self._calls.move(
                call, "cancelled", sets={"error": {"code": "oauth_cancelled", "message": "authorization cancelled"}}
            )
        else:
            service = self._registry.find(call.workspace_id, call.service_id)
            usable = self._oauth is not None and self._oauth.usable(
                call.workspace_id, service, call.owner_user_id, scope=call.step_up_scope
            )
            if not usable:
                raise Conflict("authorization not completed yet for this MCP service", code="oauth_not_completed")
            moved = self._calls.move(call, "ready")
        self._events.publish("tool_call.oauth_resolved", event_detail(moved))
        self._steps.resume_waiting(moved)
        return moved

    def withdraw(self, principal: Principal, call_id: str) -> ToolCall:
        """The caller cancels its own call while it waits for a person (an MCP client's ``tasks/cancel``): it ends
        ``cancelled`` and its paused workflow finishes. A call already approved or running is not stopped (it may
        have reached the upstream: the uncertain-outcome rule), and one that has ended stays as it ended: both are
        answered as they stand."""
        call = self.get(principal, call_id)
        if call.owner_user_id != principal.user_id:
            raise NotFound("no such tool call", code="pending_not_found")
        if call.status not in ("awaiting_approval", "awaiting_oauth"):
            return call
        try:
            moved = self._calls.move(
                call, "cancelled", sets={"error": {"code": "cancelled", "message": "cancelled by the caller"}}
            )
        except Conflict:  # resolved meanwhile: as it stands now
            return self._calls.find(principal.workspace_id, call_id)
        self._events.publish("tool_call.cancelled", event_detail(moved))
        self._steps.resume_waiting(moved)
        return moved

    def on_token_stored(self, workspace_id: str, service_id: str, principal_type: str, principal_id: str) -> int:
        """A user completed an OAuth flow: the calls waiting for that (user, service) resume by themselves."""
        if principal_type != "user":
            return 0
        resumed = 0
        for call in self._calls.pending_of(workspace_id, principal_id):
            if call.status != "awaiting_oauth" or call.service_id != service_id:
                continue
            try:
                moved = self._calls.move(call, "ready")
            except Conflict:
                continue
            self._events.publish("tool_call.oauth_resolved", event_detail(moved))
            self._steps.resume_waiting(moved)
            resumed += 1
        return resumed

    def _owned(self, principal: Principal, pending_id: str) -> ToolCall:
        if not isinstance(pending_id, str) or not pending_id.startswith(f"{ID_PREFIX}_"):
            raise NotFound("no such pending call", code="pending_not_found")
        call = self._calls.find(principal.workspace_id, pending_id)  # another workspace's call is not found here
        routing = call.item.get("approval_routing")
        if routing:
            if principal.user_id == call.owner_user_id:
                raise Forbidden("nobody approves their own call", code="own_call")
            if not _routed_to(call, principal):
                raise Forbidden(
                    f"rule {routing.get('rule_id')} names who approves this call, and you are not among them",
                    code="not_an_approver",
                )
            return call
        if call.owner_user_id != principal.user_id and not is_approver(principal):
            raise Forbidden(
                "only the user this call belongs to, or a workspace admin with approve_calls, may resolve it",
                code="user_mismatch",
            )
        return call


def _routed_to(call: ToolCall, principal: Principal) -> bool:
    routing = call.item.get("approval_routing")
    return isinstance(routing, dict) and principal.user_id in routing.get("users", ())


def _already_resolved() -> Conflict:
    return Conflict("this call was already resolved", code="already_resolved")


def _check_kept_together(original: dict[str, Any], modified: dict[str, Any]) -> None:
    """Both sets of arguments are stored in the call: together they keep to one set's limit (a DynamoDB item holds
    400 KB)."""
    size = len(json.dumps(original, default=str)) + len(json.dumps(modified, default=str))
    if size > MAX_ARGUMENT_BYTES:
        raise InvalidInput(
            f"modified_args and the call's original arguments (both are kept) are together larger than "
            f"{MAX_ARGUMENT_BYTES // 1024} KiB",
            code="invalid_modified_args",
        )


def _once(make: Callable[[], _T]) -> Callable[[], _T]:
    """``make`` run on the first call only; later calls return what it returned (or raise what it raised again by
    running it again: a failed check keeps nothing)."""
    made: list[_T] = []

    def get() -> _T:
        if not made:
            made.append(make())
        return made[0]

    return get
