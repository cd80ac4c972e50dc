"""The steps of an agent tool call, as plain functions over the call's record: ``prepare`` (what next?),
``await_resolution`` (park the workflow's token on the record), ``timeout``, ``invoke``, ``finish`` and ``fail``
(what the workflow runs when ``finish`` itself failed).

The same steps run in a Step Functions execution (each one a Lambda task, see ``infra/``) and in the embedded
workflow (:mod:`mcpbridge.adapters.local.workflow`). Every step reads the record again and moves it with a
conditional write, so a step that runs twice, or races a person resolving the call, does no harm: the first move
wins and the loser reads what happened.
"""

# Over 400 lines: every step moves the same record through one state machine (the pauses, a step-up's among them).

from __future__ import annotations

import contextlib
import functools
import json
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from mcpbridge.agent.arguments import validate_arguments
from mcpbridge.agent.calls import WAITING, Next, PendingKind, ToolCall, ToolCalls
from mcpbridge.agent.invoke import ToolInvoker
from mcpbridge.agent.results import Outcome, shape_result
from mcpbridge.client.input_relay import InputRelay
from mcpbridge.domain.external_services import ExternalService
from mcpbridge.domain.identity import timestamp
from mcpbridge.errors import Conflict, MCPBridgeError, NotFound, OAuthRequired
from mcpbridge.ports import Clock, Events, Workflow

if TYPE_CHECKING:
    from mcpbridge.agent.policy_gate import PolicyGate

log = logging.getLogger("mcpbridge.agent")

MAX_INPUT_ROUNDS = 5
"""Questions an upstream may put in one call (each a pause and a run of the tool); beyond, its answer stands."""
TIMEOUT_REASONS: dict[PendingKind, str] = {"approval": "approval timeout", "oauth": "authorization timeout"}
INPUT_TIMEOUT = "input timeout"
"""The reason of a call whose upstream asked a question no one answered in time."""


class OAuthGate(Protocol):
    """What the steps need from the OAuth layer."""

    def usable(self, workspace_id: str, service: ExternalService, user_id: str, *, scope: str | None = None) -> bool:
        """Whether the user holds a token that works now or can be refreshed (and, with ``scope``, was granted
        every scope in it)."""
        ...

    def authorization_url(
        self,
        workspace_id: str,
        service: ExternalService,
        user_id: str,
        base_url: str | None = None,
        *,
        scope: str | None = None,
    ) -> str | None:
        """A fresh authorization URL for the user (None when the flow cannot be started now). ``base_url``: where
        the call was submitted, for the callback URL when no public base URL is configured; ``scope``: scopes to ask
        for beyond the discovered ones (a step-up)."""
        ...


def needs_oauth(gate: OAuthGate | None, workspace_id: str, service: ExternalService, user_id: str) -> bool:
    """Whether a call of ``user_id`` to ``service`` must wait for the user's OAuth authorization first."""
    if service.auth.auth_type != "oauth":
        return False
    return gate is None or not gate.usable(workspace_id, service, user_id)


class CallChecks(Protocol):
    """What the steps need to check a call again before it runs (:class:`~mcpbridge.agent.tool_resolution.
    ToolResolution`)."""

    def recheck(self, call: ToolCall) -> tuple[ExternalService, Mapping[str, Any]]:
        """The service still enabled and selected, the tool still enabled, its definition unchanged: the service
        and the tool's definition; a 4xx error otherwise."""
        ...

    def service_of(self, call: ToolCall) -> ExternalService: ...

    async def refresh_catalog(self, call: ToolCall, service: ExternalService) -> None:
        """The owner's first catalog of an OAuth service."""
        ...


class ToolCallSteps:
    def __init__(
        self,
        calls: ToolCalls,
        clock: Clock,
        invoker: ToolInvoker,
        workflow: Callable[[], Workflow],
        events: Events,
        checks: CallChecks,
        oauth: OAuthGate | None = None,
        gate: PolicyGate | None = None,
    ) -> None:
        """``workflow`` is asked for on use: the embedded workflow runs these very steps; ``gate``: the workspace's
        rules on results."""
        self._calls = calls
        self._clock = clock
        self._invoker = invoker
        self._workflow = workflow
        self._events = events
        self._checks = checks
        self._oauth = oauth
        self._gate = gate

    # -- prepare ------------------------------------------------------------------------------------------------

    def prepare(self, call_id: str, workspace_id: str) -> dict[str, str]:
        try:
            call = self._calls.find(workspace_id, call_id)
        except NotFound:  # its user or workspace was deleted: nothing is left to do
            return {"next": "finish"}
        return {"next": self._advance(call)}

    def _advance(self, call: ToolCall) -> Next:
        if call.is_terminal:
            return "finish"
        if call.status == "awaiting_approval":
            return "approval"
        if call.status == "awaiting_oauth":
            return "oauth"
        if call.status == "running":
            # A step died while the request may have been in flight: never run it again.
            self._calls.move(
                call,
                "uncertain",
                sets={"error": _error("outcome_unknown", "the call was interrupted; it may have run")},
            )
            return "finish"
        if call.status == "approved":
            return self._after_approval(call)
        return "invoke"  # ready

    def _after_approval(self, call: ToolCall) -> Next:
        """An approved call may still need the user's OAuth authorization (two separate pauses)."""
        try:
            service, _ = self._checks.recheck(call)
        except OAuthRequired:
            # No catalog of this OAuth service for the user yet: authorize first, check the tool afterwards.
            service = self._checks.service_of(call)
        except MCPBridgeError as refused:
            self._fail(call, refused, leaving=["approved"])
            return "finish"
        authorization_needed = needs_oauth(self._oauth, call.workspace_id, service, call.owner_user_id)
        if authorization_needed and not call.interactive:
            # Non-interactive channels are not paused: the user authorizes in the console and asks again.
            notice = f"authorize {service.name} in the console, then ask again"
            self._moved(call, "cancelled", leaving=["approved"], sets={"error": _error("oauth_required", notice)})
            return "finish"
        if authorization_needed:
            url = (
                self._oauth.authorization_url(
                    call.workspace_id, service, call.owner_user_id, call.item.get("request_base_url")
                )
                if self._oauth
                else None
            )
            moved = self._moved(call, "awaiting_oauth", leaving=["approved"], sets=self._calls.oauth_pause(call, url))
            if moved is not None:
                self._publish("tool_call.oauth_required", moved)
            return "oauth" if moved is not None else self._advance(self._calls.find(call.workspace_id, call.id))
        moved = self._moved(call, "ready", leaving=["approved"])
        return "invoke" if moved is not None else self._advance(self._calls.find(call.workspace_id, call.id))

    # -- pauses -------------------------------------------------------------------------------------------------

    def await_resolution(self, call_id: str, workspace_id: str, kind: PendingKind, task_token: str) -> None:
        """Park ``task_token`` on the call. If the call stopped waiting meanwhile, resume the workflow now."""
        call = self._calls.find(workspace_id, call_id)
        timeout = call.approval_timeout_seconds if kind == "approval" else call.oauth_timeout_seconds
        deadline = self._clock.now() + timeout
        if call.status == WAITING[kind] and self._calls.store_task_token(call, kind, task_token, deadline):
            return
        self._workflow().send_success(task_token, {"resolved": True})

    def timeout(self, call_id: str, workspace_id: str, kind: PendingKind) -> dict[str, str]:
        """The wait ran out: reject (approval, or an answer to the upstream's question) or cancel (OAuth) unless a
        person resolved it first."""
        call = self._calls.find(workspace_id, call_id)
        if call.status == WAITING[kind]:
            to = "rejected" if kind == "approval" else "cancelled"
            # A wait for an answer to the upstream's own question is no approval: its timeout says so.
            reason = INPUT_TIMEOUT if call.input_request is not None else TIMEOUT_REASONS[kind]
            moved = self._moved(
                call, to, leaving=[WAITING[kind]], sets={"error": _error(reason.replace(" ", "_"), reason)}
            )
            if moved is not None:
                log.info("tool call %s: %s", call.id, reason)
        return {"next": self._advance(self._calls.find(workspace_id, call_id))}

    def resume_waiting(self, call: ToolCall) -> None:
        """After a person resolved ``call`` (already moved on): hand the result to the paused workflow, if it has
        parked its token yet (if not, its ``await_resolution`` sees the move and resumes itself)."""
        token = self._calls.task_token(call, "task_token")
        if token is None:
            return
        try:
            self._workflow().send_success(token, {"resolved": True})
        except Conflict:
            log.info("tool call %s: the workflow had already moved on", call.id)

    # -- invoke -------------------------------------------------------------------------------------------------

    def invoke(self, call_id: str, workspace_id: str) -> dict[str, str]:
        """Blocking form of :meth:`invoke_async` (Lambda tasks and workflow threads have no running loop)."""
        return anyio.run(self.invoke_async, call_id, workspace_id)

    async def invoke_async(self, call_id: str, workspace_id: str) -> dict[str, str]:
        call = await anyio.to_thread.run_sync(self._calls.find, workspace_id, call_id)
        if call.status != "ready":
            return {"next": await anyio.to_thread.run_sync(self._advance, call)}
        try:
            service, _ = await self._checked(call)
        except MCPBridgeError as refused:
            await anyio.to_thread.run_sync(functools.partial(self._fail, call, refused, leaving=["ready"]))
            return {"next": "finish"}
        running = await anyio.to_thread.run_sync(lambda: self._moved(call, "running", leaving=["ready"]))
        if running is None:  # another worker took it
            return {"next": "finish"}
        outcome = await self.call_upstream(running, service)
        recorded = await anyio.to_thread.run_sync(self.record, running, outcome)
        if recorded.status == "awaiting_oauth":  # a step-up: the same pause as a first authorization
            return {"next": "oauth"}
        if recorded.status == "awaiting_approval":  # the upstream asked for input: a person answers it
            return {"next": "approval"}
        return {"next": "finish"}

    async def _checked(self, call: ToolCall) -> tuple[ExternalService, Mapping[str, Any]]:
        """The checks again, right before running. A call submitted before the user had ever authorized its OAuth
        service gets the user's first catalog pulled now, and its arguments checked against it."""
        try:
            service, definition = await anyio.to_thread.run_sync(self._checks.recheck, call)
        except OAuthRequired:
            service = await anyio.to_thread.run_sync(self._checks.service_of, call)
            await self._checks.refresh_catalog(call, service)
            service, definition = await anyio.to_thread.run_sync(self._checks.recheck, call)
        if not call.item.get("arguments_checked", True):
            validate_arguments(definition.get("inputSchema") or {}, call.arguments)
        return service, definition

    async def call_upstream(
        self,
        call: ToolCall,
        service: ExternalService,
        *,
        until: float | None = None,
        secrets: Mapping[str, str] | None = None,
    ) -> Outcome:
        """The upstream tool's answer for a ``running`` call, not recorded yet (:meth:`record`). ``secrets``: the
        service's opened credentials, if the caller has them already."""
        from mcpbridge.client.connection import OutcomeUnknown

        relay = InputRelay(self._calls.input_answers(call) if call.item.get("sealed_input_answers") else {})
        try:
            result = await self._invoker.call(
                service,
                call.workspace_id,
                call.owner_user_id,
                call.tool_name,
                call.arguments,
                until=until,
                secrets=secrets,
                relay=relay,
            )
        except OutcomeUnknown as lost:  # it may have run: reported, never replayed
            return Outcome("uncertain", {"error": _error(lost.code, lost.message)})
        except OAuthRequired as refused:
            return await self._step_up(call, service, refused)
        except MCPBridgeError as failed:  # refused before anything ran upstream
            return Outcome("failed", {"error": _error(failed.code, failed.message)})
        sets: dict[str, Any] = {}
        if relay.unanswered is not None or call.item.get("input_rounds"):
            # The tool ran (up to its question, or to its end): the record counts each run.
            sets["upstream_runs"] = int(call.item.get("upstream_runs") or 0) + 1
            if relay.unanswered is not None and int(call.item.get("input_rounds") or 0) < MAX_INPUT_ROUNDS:
                return Outcome("awaiting_approval", self._calls.input_pause(call, relay.unanswered.record()) | sets)
        if self._gate is not None:
            # A local store's read costs less than a hop to a worker thread and back.
            screened = (
                self._screen(call, service, result)
                if self._gate.reads_are_local
                else await anyio.to_thread.run_sync(self._screen, call, service, result)
            )
            if screened is not None:
                result, sets["policy_result"] = screened[0], screened[1].record()
        shaped = shape_result(service.name, result)
        return Outcome("completed", {"result": shaped.for_storage, **sets}, shaped.for_agent)

    def _screen(self, call: ToolCall, service: ExternalService, result: Mapping[str, Any]) -> Any:
        assert self._gate is not None
        return self._gate.screen(
            call.workspace_id,
            service_id=service.id,
            service_name=service.name,
            tool_name=call.tool_name,
            user_id=call.owner_user_id,
            agent_id=call.agent_id,
            arguments=call.arguments,
            result=result,
        )

    async def _step_up(self, call: ToolCall, service: ExternalService, refused: OAuthRequired) -> Outcome:
        """The user's token was refused: missing or lost (a failure), or too narrow for this call (SEP-835: a 403
        ``insufficient_scope``, answered before anything ran). An interactive call then waits, once, for the user
        to authorize the wider scope, as it would for a first authorization; a second refusal, or one of a call
        that may not pause, is a failure (nothing ran)."""
        failed = Outcome("failed", {"error": _error(refused.code, refused.message)})
        if refused.details.get("reason") != "insufficient_scope" or not call.interactive or call.stepped_up:
            return failed
        scope = refused.details.get("scope")
        scope = scope if isinstance(scope, str) and scope else None
        url = None
        if self._oauth is not None:
            url = await anyio.to_thread.run_sync(
                functools.partial(
                    self._oauth.authorization_url,
                    call.workspace_id,
                    service,
                    call.owner_user_id,
                    call.item.get("request_base_url"),
                    scope=scope,
                )
            )
        return Outcome("awaiting_oauth", self._calls.oauth_pause(call, url, step_up=True, scope=scope))

    def record(self, call: ToolCall, outcome: Outcome, *, durable: bool = True) -> ToolCall:
        """Move a ``running`` call to its outcome (blocking: a store write; ``durable=False``: without waiting for a
        disk sync, for a caller that has one made); a step-up's pause is announced like any OAuth pause."""
        # A pause for input drops the token of an earlier wait (it is of an ended step) and that wait's routing
        # (the question is the caller's to answer).
        removes = ("sealed_task_token", "approval_routing") if outcome.status == "awaiting_approval" else ()
        moved = self._calls.move(call, outcome.status, sets=outcome.sets, removes=removes, durable=durable)
        if moved.status == "awaiting_oauth":
            self._publish("tool_call.oauth_required", moved)
        elif moved.status == "awaiting_approval":
            self._publish("tool_call.approval_required", moved)  # in the inbox like an approval
        return moved

    # -- finish -------------------------------------------------------------------------------------------------

    def finish(self, call_id: str, workspace_id: str) -> dict[str, Any]:
        """Announce the outcome and hand it to the agent's own callback token, if it gave one. A call whose record
        is gone (its workspace was deleted) just ends."""
        try:
            call = self._calls.find(workspace_id, call_id)
        except NotFound:
            log.info("tool call %s is gone (its workspace or user was deleted)", call_id)
            return {"call_id": call_id, "status": "deleted", "outcome_uncertain": False}
        return self.end(call)[1]

    def end(self, call: ToolCall) -> tuple[ToolCall, dict[str, Any]]:
        """``finish`` for a call just read or moved: end it if it has not ended, announce the outcome, hand it to
        the agent's callback token. The ended call and the outcome's summary."""
        if call.status == "running":  # the invoke step died with the request possibly sent
            call = self._calls.move(
                call,
                "uncertain",
                sets={"error": _error("outcome_unknown", "the call was interrupted; it may have run")},
            )
        elif not call.is_terminal:
            call = self._calls.move(
                call,
                "failed",
                leaving=[call.status],
                sets={"error": _error("call_interrupted", "the call stopped before it could run")},
            )
        summary = outcome_of(call)
        self._publish("tool_call.resolved", call)
        try:
            self._hand_to_callback(call, summary)
        except MCPBridgeError as exc:
            log.warning("tool call %s: the agent's callback token was refused (%s)", call.id, exc.code)
        return call, summary

    def _hand_to_callback(self, call: ToolCall, summary: dict[str, Any]) -> None:
        """Resume the agent's own callback token, if it gave one, with the outcome of an ended call."""
        callback = self._calls.task_token(call, "callback_task_token")
        if callback is None:
            return
        if call.status == "completed":
            self._workflow().send_success(callback, _within_step_functions_limit(summary))
        else:
            error = call.error or {}
            self._workflow().send_failure(
                callback, f"ToolCall.{call.status}", str(error.get("message", call.status))[:256]
            )

    # -- fail ---------------------------------------------------------------------------------------------------

    def fail(self, call_id: str, workspace_id: str, error: str) -> dict[str, Any]:
        """``finish`` failed for good (its retries spent; ``error`` names what it raised): record that on the call,
        ending it if it has not ended (failed, or uncertain when it may have run). An ended call keeps its outcome,
        the error noted beside it. Calls nothing upstream and publishes nothing (that may be what failed); safe to
        run again. The agent's callback token, if any, is handed the outcome as a courtesy (errors ignored)."""
        try:
            call = self._calls.find(workspace_id, call_id)
        except NotFound:
            return {"call_id": call_id, "status": "deleted", "outcome_uncertain": False}
        noted = {"finish_error": {"error": error[:256], "at": timestamp(self._clock.now())}}
        for _ in range(3):  # a move lost to another step: read the call again and end what it is now
            if call.is_terminal:
                break
            if call.status == "running":
                to, cause = "uncertain", _error("outcome_unknown", "the call was interrupted; it may have run")
            else:
                to, cause = "failed", _error("finish_failed", f"the call could not be finished ({error[:100]})")
            moved = self._moved(call, to, leaving=[call.status], sets=noted | {"error": cause})
            call = moved or self._calls.find(workspace_id, call_id)
        if "finish_error" not in call.item:
            call = self._calls.note(call, noted)
        with contextlib.suppress(Exception):
            self._hand_to_callback(call, outcome_of(call))
        return {key: value for key, value in outcome_of(call).items() if key != "result"}

    # -- helpers ------------------------------------------------------------------------------------------------

    def _moved(
        self, call: ToolCall, to: Any, *, leaving: list[Any], sets: Mapping[str, Any] | None = None
    ) -> ToolCall | None:
        try:
            return self._calls.move(call, to, leaving=leaving, sets=sets)
        except Conflict:
            return None

    def _fail(self, call: ToolCall, refused: MCPBridgeError, *, leaving: list[Any]) -> None:
        self._moved(call, "failed", leaving=leaving, sets={"error": _error(refused.code, refused.message)})

    def _publish(self, kind: str, call: ToolCall) -> None:
        self._events.publish(kind, event_detail(call))


CALLBACK_OUTPUT_LIMIT = 200_000
"""Step Functions caps task output at 256 KiB: a larger result is left out of the callback (it stays readable
through ``GET /api/v1/agent/tool-calls/{id}``)."""


def _within_step_functions_limit(summary: dict[str, Any]) -> dict[str, Any]:
    if len(json.dumps(summary, default=str).encode()) <= CALLBACK_OUTPUT_LIMIT:
        return summary
    return {**summary, "result": None, "result_omitted": True}


def _error(code: str, message: str) -> dict[str, str]:
    return {"code": code, "message": message[:500]}


def outcome_of(call: ToolCall) -> dict[str, Any]:
    """What an agent learns about a finished call (also the callback's output)."""
    return {
        "call_id": call.id,
        "status": call.status,
        "tool": call.tool_name,
        "service_id": call.service_id,
        "result": call.result,
        "error": call.error,
        "outcome_uncertain": call.status == "uncertain",
    }


def event_detail(call: ToolCall) -> dict[str, Any]:
    """The event payload: who, what, which pause, until when. Never a token, and not the authorization URL (its
    state is a secret: the owner reads it from ``GET /api/v1/agent/tool-calls/{id}``); results are redacted."""
    return {
        "pending_id": call.id,
        "workspace_id": call.workspace_id,
        "user_id": call.owner_user_id,
        "session_id": call.session_id,
        "status": call.status,
        "kind": call.pending_kind,
        "service_id": call.service_id,
        "service_name": call.service_name,
        "tool": call.tool_name,
        "function_name": call.function_name,
        "arguments": call.arguments,
        "original_arguments": call.original_arguments,
        "deadline_at": call.deadline_at,
        "error_code": (call.error or {}).get("code"),
        # Who decides a call an ask rule routed (``users``, ``required``, ``rule_id``), and the rules' decision:
        # what a notification of the waiting call needs to reach the right people.
        "approval_routing": call.item.get("approval_routing"),
        "approvals": [{"by": a.get("by"), "decision": a.get("decision")} for a in call.item.get("approvals") or []],
        "policy": call.item.get("policy"),
    }
