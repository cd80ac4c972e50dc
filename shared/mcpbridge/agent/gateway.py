"""Gateway mode: the tools of external MCP services that a published endpoint publishes, listed and called there.

* **Names.** A published tool is listed under its agent function name, ``mcp_<service>_<tool>_<hash8>``
  (:mod:`mcpbridge.domain.tool_names`): lower case, at most 64 characters, the hash over the service id and the
  tool's own name, so a name never changes while the service keeps its name and never collides with a knowledge
  tool (none starts with ``mcp_``) or another published tool. Descriptions carry the agent catalog's untrusted-data
  prefix ``[MCP Service: <name> (external)]``; schemas and annotations are the service's (its ``outputSchema`` is
  left out: a paused call answers with a notice, not the tool's structured output). A catalog refresh reaches the
  list on its next request: nothing is cached here.
* **Who a call runs as.** A caller signed in with OAuth runs as their user (their own OAuth tokens for OAuth
  services; a missing authorization pauses the call with its consent URL). A caller with the endpoint's static
  token runs as the endpoint's own identity, ``endpoint:<endpoint id>``, with the workspace's service credentials;
  it has no user to authorize an OAuth service, so such a call ends with a notice to sign in with OAuth instead.
* **Every call goes through the agent broker** (:class:`~mcpbridge.agent.broker.ToolCallBroker`): per-tool enable
  and approval policy, arguments checked against the tool's pinned schema, the call's record, the SSRF guard, the
  uncertain-outcome rule. Its record carries the endpoint's id as its ``agent_id``; rechecks before the tool runs
  judge it by the endpoint's services as they are then.
* **Search mode** (the endpoint's ``external_tool_mode`` is ``search``). ``tools/list`` offers ``search_tools`` and
  ``call_tool`` in place of the external tools (the knowledge tools stay listed): ``search_tools`` answers the
  published tools that best match a request, in any language, with their input schemas, from the workspace's tool
  index (:mod:`mcpbridge.agent.tool_search`) filtered by what the endpoint publishes, so a tool outside its
  allowlist is never found; ``call_tool`` (a tool's function name and arguments) is exactly a call of that tool by
  its name: the same broker, policies, approvals, pauses and rate limit. The tools stay callable by name as well.
* **Pauses** (handshake-era clients). A call that waits for a person answers at once with a tool result that is not
  an error (the call was accepted: a client must not make it again): ``status``, ``call_id``, ``approval_url``
  (the console's page for it, absolute from the request's base URL) or ``authorization_url`` (for the user's own
  OAuth consent), and a note naming ``check_call``. ``check_call`` (offered only by endpoints that publish external
  tools) answers the tool's result once the call has run, the same notice while it still waits, and an error result
  naming the reason after a rejection, a timeout or a failure. Only the caller who made a call may check it, through
  the endpoint that made it.
* **Pauses** (2026-07-28, a client that declares elicitation). The call answers ``InputRequiredResult``: an
  input request ``approval`` (or ``oauth``), a URL-mode elicitation to the approval page (or to the caller's own
  consent URL), and a ``requestState`` sealed by mcpbridge (:mod:`mcpbridge.agent.request_state`: bound to the
  endpoint, the caller, the tool and its arguments). The client's retry with that state gets the tool's result once
  the call has run; while it still waits, ``InputRequiredResult`` again, with only the state when the client was
  sent to that page already; an error result naming the reason after a rejection or a timeout; the waiting notice
  above when its person declined or dismissed the page (the call still waits for its approver). A retry takes no
  count of the endpoint's rate limit. A modern client that does not declare the mode the wait needs (URL for an
  approval or a consent, form for the upstream's own question) gets the handshake-era notice.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from mcpbridge.agent import call_tasks
from mcpbridge.agent.calls import TERMINAL, ToolCall
from mcpbridge.agent.discovery import AgentCatalog, PublishedCall, PublishedTool, description_prefix
from mcpbridge.agent.paused_call_tools import (
    ANSWER_CALL_TOOL,
    APPROVAL_PAGE,
    CHECK_CALL_TOOL,
    tool_result,
    waiting_notice,
)
from mcpbridge.agent.publications import Publication
from mcpbridge.agent.request_state import InvalidRequestState, PausedCall, arguments_digest
from mcpbridge.agent.request_state import open_state as request_state_of
from mcpbridge.agent.request_state import seal as seal_request_state
from mcpbridge.agent.search_mode import (
    CALL_TOOL,
    CALL_TOOL_TOOL,
    SEARCH_LIMIT_DEFAULT,
    SEARCH_LIMIT_MAX,
    SEARCH_TOOLS_TOOL,
)
from mcpbridge.domain.identity import Principal
from mcpbridge.errors import InvalidInput, NotFound

if TYPE_CHECKING:
    from mcpbridge.agent.broker import ToolCallBroker
    from mcpbridge.ports import SecretBox

_WAITING: Final = frozenset({"awaiting_approval", "awaiting_oauth", "approved", "ready", "running"})


def listed(tool: PublishedTool) -> dict[str, Any]:
    """A published tool as ``tools/list`` gives it."""
    definition = tool.definition
    entry: dict[str, Any] = {
        "description": description_prefix(tool.service.name) + str(definition.get("description") or ""),
        "inputSchema": dict(definition.get("inputSchema") or {"type": "object"}),
        "name": tool.function_name,
    }
    if definition.get("title"):
        entry["title"] = definition["title"]
    if isinstance(definition.get("annotations"), dict):
        entry["annotations"] = definition["annotations"]
    return entry


class Gateway:
    def __init__(self, catalog: AgentCatalog, broker: Callable[[], ToolCallBroker], secrets: SecretBox) -> None:
        self._catalog = catalog
        self._broker = broker
        self._secrets = secrets

    def tools(self, publication: Publication, principal: Principal) -> list[dict[str, Any]]:
        """The published tools the caller may call now, then ``check_call`` (blocking: store reads); in search mode,
        ``search_tools``, ``call_tool`` and ``check_call``."""
        if publication.search_mode:
            return [SEARCH_TOOLS_TOOL, CALL_TOOL_TOOL, CHECK_CALL_TOOL, ANSWER_CALL_TOOL]
        found = self._catalog.published(principal, publication.profile, publication.publishes)
        return [*(listed(tool) for tool in found if not tool.held), CHECK_CALL_TOOL, ANSWER_CALL_TOOL]

    def search(self, publication: Publication, principal: Principal, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """``search_tools``: the published tools that best match ``query``, each as ``tools/list`` would list it
        (blocking). Bad arguments raise ``InvalidInput``."""
        query = arguments.get("query")
        if not isinstance(query, str) or not query.strip():
            raise InvalidInput("query must be a non-empty string", code="invalid_query")
        limit = arguments.get("limit", SEARCH_LIMIT_DEFAULT)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= SEARCH_LIMIT_MAX:
            raise InvalidInput(f"limit must be an integer from 1 to {SEARCH_LIMIT_MAX}", code="invalid_limit")
        result = self._catalog.search(
            principal, publication.profile, query, mode="hybrid", limit=limit, publishes=publication.publishes
        )
        tools = [
            {
                **listed(hit.tool),
                "requiresApproval": hit.tool.require_approval,
                **({"oauthConnection": hit.oauth_connection} if hit.oauth_connection else {}),
            }
            for hit in result.found
        ]
        data: dict[str, Any] = {"tools": tools, "mode": result.mode}
        if result.notices:
            data["notices"] = result.notices
        names = ", ".join(tool["name"] for tool in tools) or "none"
        return tool_result(data, f"{len(tools)} tools found ({names}); run one with {CALL_TOOL}.", is_error=False)

    def find(self, publication: Publication, principal: Principal, name: str) -> PublishedCall | None:
        """The published tool listed as ``name``, ready for :meth:`call`, or None (blocking)."""
        if not name.startswith("mcp_"):
            return None
        return self._catalog.published_named(principal, publication.profile, publication.publishes, name)

    async def call(
        self,
        publication: Publication,
        principal: Principal,
        found: PublishedCall,
        arguments: Mapping[str, Any],
        base_url: str,
        idempotency_key: str | None = None,
        *,
        paused_as: str | None = None,
        elicits: frozenset[str] = frozenset({"url", "form"}),
        as_task: bool = False,
    ) -> dict[str, Any]:
        """Call a published tool through the broker: its result, or the notice of a call that waits (with
        ``paused_as``, the name the client called: an ``InputRequiredResult`` instead, 2026-07-28, when the wait's
        question is of a mode in ``elicits``: URL for an approval or a consent, form for the upstream's own question).
        With an idempotency key used before for the same call: that call as it stands (its result, once it ran)."""
        submitted = await self._broker().submit(
            principal,
            tool_ref=found.tool_ref,
            published=found,
            arguments=arguments,
            agent_id=publication.endpoint_id,
            interactive=not principal.user_id.startswith("endpoint:"),
            base_url=base_url,
            idempotency_key=idempotency_key,
        )
        call = submitted.call
        if submitted.agent_result is not None and call.status == "completed":
            return submitted.agent_result
        if as_task and call.status in _WAITING:
            return call_tasks.created(call, self._broker().records.retention_seconds)
        if paused_as is not None and call.status in _WAITING:
            question = self._question(call, principal, base_url)
            if question is None or question[1].get("mode", "form") in elicits:
                return self._input_required(
                    publication, principal, call, paused_as, arguments, base_url, asked=None, question=question
                )
        return self._answer(call, principal, base_url, notice=submitted.notice)

    def resume(
        self,
        publication: Publication,
        principal: Principal,
        name: str,
        arguments: Mapping[str, Any],
        request_state: str | None,
        input_responses: Mapping[str, Any] | None,
        base_url: str,
    ) -> dict[str, Any]:
        """The retry of a call that answered ``InputRequiredResult`` (blocking: a store read): the tool's result once
        the call has run, ``InputRequiredResult`` again while it waits (asking only what was not asked yet), an error
        result naming the reason once it ended otherwise. A client whose person declined or cancelled the page gets
        the waiting notice (the call still waits for its approver; ``check_call`` or a retry finds its end). Raises
        :class:`InvalidRequestState` for a state that is not this caller's, this endpoint's or this request's."""
        if not isinstance(request_state, str) or not request_state:
            raise InvalidRequestState("input responses without a requestState")
        paused = request_state_of(self._secrets, publication.endpoint_id, principal, request_state, name, arguments)
        try:
            call = self._broker().get(principal, paused.call_id)
        except NotFound:
            raise InvalidRequestState("the call is gone (its record has expired)") from None
        if call.agent_id != publication.endpoint_id:
            raise InvalidRequestState("the call was made through another endpoint")
        if call.input_request is not None and call_tasks.input_key(call) in (input_responses or {}):
            assert input_responses is not None
            call = self._relay_answer(principal, call, input_responses[call_tasks.input_key(call)])
        if call.status in _WAITING:
            if call.input_request is None and _declined(input_responses):
                return waiting_notice(call, base_url, self._broker().authorization_url(call, principal))
            question = self._question(call, principal, base_url)
            return self._input_required(
                publication,
                principal,
                call,
                name,
                arguments,
                base_url,
                asked=paused.asked,
                question=question,
                state=request_state,
            )
        return self._answer(call, principal, base_url)

    def _input_required(
        self,
        publication: Publication,
        principal: Principal,
        call: ToolCall,
        name: str,
        arguments: Mapping[str, Any],
        base_url: str,
        *,
        asked: str | None,
        question: tuple[str, dict[str, Any]] | None,
        state: str | None = None,
    ) -> dict[str, Any]:
        """``InputRequiredResult``: a URL-mode elicitation to the page the call waits on (the approval page, or the
        caller's own OAuth consent), unless the client was sent there already; and the sealed ``requestState`` (the
        client's own ``state`` again when nothing new is asked: no sealing per poll). ``question``: what
        :meth:`_question` asks of the call now."""
        if question is None or question[0] == asked:
            if state is not None:
                return {"resultType": "input_required", "requestState": state}
            answer: dict[str, Any] = {"resultType": "input_required"}
        else:
            asked, elicitation = question
            answer = {
                "resultType": "input_required",
                "inputRequests": {asked: {"method": "elicitation/create", "params": elicitation}},
            }
        paused = PausedCall(call.id, name, arguments_digest(arguments), asked)
        answer["requestState"] = seal_request_state(self._secrets, publication.endpoint_id, principal, paused)
        return answer

    def _question(self, call: ToolCall, principal: Principal, base_url: str) -> tuple[str, dict[str, Any]] | None:
        """What a waiting call asks its client: (``approval`` or ``oauth``, a URL-mode elicitation to the page), or
        (``input_<n>``, the upstream's own form question), or None."""
        if call.input_request is not None:
            return call_tasks.input_key(call), call_tasks.form_elicitation(call.input_request)
        if call.status == "awaiting_approval":
            url = base_url.rstrip("/") + APPROVAL_PAGE.format(pending_id=call.id)
            message = f"{call.tool_name} of {call.service_name} waits for a person's approval: {url}"
            return "approval", {"mode": "url", "message": message, "url": url}
        if call.status == "awaiting_oauth":
            authorization_url = self._broker().authorization_url(call, principal)
            if authorization_url is not None:
                message = f"{call.tool_name} of {call.service_name} needs your authorization of {call.service_name}"
                return "oauth", {"mode": "url", "message": message, "url": authorization_url}
        return None

    def _relay_answer(self, principal: Principal, call: ToolCall, response: Any) -> ToolCall:
        """The client's answer to its upstream's question (an ``ElicitResult``): ``accept`` with content runs the
        call again with it (content that does not fit the question's schema raises ``InvalidInput``, nothing
        changes); ``decline`` or ``cancel`` ends the call rejected, nothing runs again."""
        broker = self._broker()
        action = response.get("action") if isinstance(response, Mapping) else None
        if action == "accept":
            content = response.get("content")
            return broker.resolve_approval(principal, call.id, decision="approve", content=content, content_given=True)
        if action in ("decline", "cancel"):
            reason = f"the user chose {action} when asked by the service"
            return broker.resolve_approval(principal, call.id, decision="reject", reason=reason)
        raise InvalidInput("the answer to the service's question must be an elicitation result", code="invalid_content")

    # -- Tasks (mcpbridge.agent.call_tasks) ------------------------------------------------------------------------

    def task(
        self,
        publication: Publication,
        principal: Principal,
        method: str,
        task_id: str,
        input_responses: Mapping[str, Any] | None,
        base_url: str,
    ) -> dict[str, Any]:
        """``tasks/get``, ``tasks/update`` or ``tasks/cancel`` of a call of this caller through this endpoint
        (blocking: store reads and writes). Raises ``NotFound`` for any other id."""
        broker = self._broker()
        call = broker.get(principal, task_id)
        if call.agent_id != publication.endpoint_id or call.owner_user_id != principal.user_id:
            raise NotFound("no such task", code="task_not_found")
        if method == "tasks/cancel":
            broker.withdraw(principal, call.id)
            return {"resultType": "complete"}
        if method == "tasks/update":
            asked = call_tasks.asked_of(call)
            keys = set(input_responses or {})
            if call.input_request is not None and asked is not None and asked in keys:
                self._relay_answer(principal, call, (input_responses or {})[asked])
                return {"resultType": "complete"}
            if asked is not None and asked in keys and asked not in call_tasks.answered(call):
                broker.records.note(call, {call_tasks.ANSWERED: [*call_tasks.answered(call), asked]})
            return {"resultType": "complete"}
        ttl = broker.records.retention_seconds
        result = (
            None
            if call.status not in TERMINAL or call.status == "cancelled"
            else self._answer(call, principal, base_url)
        )
        question = self._question(call, principal, base_url)
        return {"resultType": "complete", **call_tasks.detailed(call, ttl, question=question, result=result)}

    def check(self, publication: Publication, principal: Principal, arguments: Mapping[str, Any], base_url: str) -> Any:
        """``check_call``: a call of this caller through this endpoint, as it stands (blocking: a store read)."""
        call_id = arguments.get("call_id")
        if not isinstance(call_id, str) or not call_id.strip():
            raise InvalidInput("call_id is required (the call_id a paused call answered)", code="missing_argument")
        call = self._broker().get(principal, call_id.strip())
        if call.agent_id != publication.endpoint_id:
            raise NotFound("no such tool call", code="pending_not_found")
        return self._answer(call, principal, base_url)

    def answer(
        self, publication: Publication, principal: Principal, arguments: Mapping[str, Any], base_url: str
    ) -> Any:
        """``answer_call``: the caller's answer to the question its upstream put during a call of this caller
        through this endpoint (blocking); the call as it stands then. Content that does not fit the question's
        schema is refused (``InvalidInput``, nothing changes)."""
        call_id = arguments.get("call_id")
        if not isinstance(call_id, str) or not call_id.strip():
            raise InvalidInput("call_id is required (the call_id a paused call answered)", code="missing_argument")
        call = self._broker().get(principal, call_id.strip())
        if call.agent_id != publication.endpoint_id or call.owner_user_id != principal.user_id:
            raise NotFound("no such tool call", code="pending_not_found")
        if call.input_request is None:
            raise InvalidInput("this call does not wait for an answer to its service's question", code="no_question")
        if not isinstance(arguments.get("content"), Mapping):
            raise InvalidInput("content (a JSON object matching requested_schema) is required", code="invalid_content")
        answered = self._relay_answer(principal, call, {"action": "accept", "content": dict(arguments["content"])})
        return self._answer(answered, principal, base_url)

    def _answer(
        self, call: ToolCall, principal: Principal, base_url: str, *, notice: str | None = None
    ) -> dict[str, Any]:
        if call.status == "completed":
            return dict(call.result or {"content": [], "isError": False})
        if call.status in _WAITING:
            return waiting_notice(call, base_url, self._broker().authorization_url(call, principal))
        error = call.error or {}
        reason = str(error.get("message") or notice or call.status)
        data = {"call_id": call.id, "status": call.status, "reason": reason, "code": error.get("code", call.status)}
        return tool_result(data, f"The call did not run: {call.status} ({reason}).", is_error=True)


def _declined(responses: Mapping[str, Any] | None) -> bool:
    """Whether the client's person declined or dismissed what they were asked (URL-mode elicitation results)."""
    return any(
        isinstance(response, Mapping) and response.get("action") in ("decline", "cancel")
        for response in (responses or {}).values()
    )
