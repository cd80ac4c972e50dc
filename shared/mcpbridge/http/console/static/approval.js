// A waiting call as a card: what it would run, and (for who may resolve it) approve, approve with changed
// arguments (checked against the tool's input schema before sending) or reject with a reason.
import { ApiError, api } from "./api.js";
import { age, h, pretty, remaining, show, when } from "./dom.js";
import { validate } from "./schema.js";

const schemas = new Map();

/** Whether the signed-in key may resolve this call, as the REST API decides it (approve_calls, or its own call). */
export function mayResolve(call, session) {
  return session.can_approve_calls || (session.can_call_tools && call.user_id === session.user_id);
}

async function inputSchema(call) {
  const key = `${call.service_id}\u0000${call.tool}`;
  if (!schemas.has(key)) {
    const query = new URLSearchParams({ service_id: call.service_id, tool_name: call.tool });
    schemas.set(
      key,
      api("GET", `/api/v1/agent/tools/describe?${query}`).then(
        (tool) => tool.input_schema,
        () => null, // not described to this key: the server still checks the arguments
      ),
    );
  }
  return schemas.get(key);
}

export function callerText(call, caller) {
  const parts = [`user ${call.user_id}`];
  if (caller) {
    if (caller.agent_id) parts.push(`agent ${caller.agent_id}`);
    if (caller.endpoint_id) parts.push(`endpoint ${caller.endpoint_id}`);
    if (caller.api_key_id) parts.push(`key ${caller.api_key_id}`);
  }
  return parts.join(" · ");
}

export function facts(call, caller, more = []) {
  const waiting = call.status === "awaiting_approval" || call.status === "awaiting_oauth";
  const rows = [
    ["Service", call.service_name],
    ["Caller", callerText(call, caller)],
    [waiting ? "Waiting since" : "Made", h("span", { "data-age": call.created_at }, `${when(call.created_at)} (${age(call.created_at)})`)],
    ...more,
  ];
  if (call.expires_at) {
    rows.push(["Expires", h("span", { "data-expires": call.expires_at }, `${when(call.expires_at)} (${remaining(call.expires_at)})`)]);
  }
  return h("dl", { class: "facts" }, rows.map(([term, value]) => [h("dt", {}, term), h("dd", {}, value)]));
}

/** Refresh the relative times ("3 min ago", "in 7 min") inside ``root``. */
export function retime(root) {
  for (const element of root.querySelectorAll("[data-age]")) {
    element.textContent = `${when(element.dataset.age)} (${age(element.dataset.age)})`;
  }
  for (const element of root.querySelectorAll("[data-expires]")) {
    element.textContent = `${when(element.dataset.expires)} (${remaining(element.dataset.expires)})`;
  }
}

/** A first answer to a service's question: each field's default, where the schema gives one. */
function defaults(schema) {
  const answer = {};
  for (const [name, field] of Object.entries((schema && schema.properties) || {})) {
    if (field && Object.hasOwn(field, "default")) answer[name] = field.default;
  }
  return answer;
}

function problemText(error) {
  if (!(error instanceof ApiError)) return `The request failed: ${error.message}`;
  return error.detail || error.message;
}

export function callCard(call, session, { caller = null, heading = "h2", onResolved = () => {} } = {}) {
  const id = call.pending_id;
  const titleId = `title-${id}`;
  const link = h("a", { href: `/console/approvals/${encodeURIComponent(id)}` }, call.tool);
  const title = h(heading, { id: titleId }, link, " ", h("span", { class: "badge" }, call.kind === "oauth" ? "authorization" : "approval"));
  const card = h("article", { class: "card call", id: `call-${id}`, "aria-labelledby": titleId, "data-call": id });
  card.append(title, facts(call, caller), h("h3", {}, "Arguments"), h("pre", { class: "json", tabindex: "0", "aria-label": `Arguments of ${call.tool}` }, pretty(call.arguments)));
  const outcome = h("p", { class: "outcome", role: "status" });

  if (call.kind === "oauth") {
    card.append(
      h("p", { class: "note" }, "This call waits for the user to authorize the service."),
      call.authorization_url ? h("p", {}, h("a", { href: call.authorization_url, rel: "noreferrer" }, "Authorize the service")) : null,
    );
    return card;
  }
  if (!mayResolve(call, session)) {
    card.append(h("p", { class: "note" }, "Only the user this call is for, or a workspace admin with approve_calls, may resolve it."));
    return card;
  }

  // A call waiting on its service's own question is answered (content checked against the question's schema).
  const question = call.input_request || null;
  if (question) {
    card.append(
      h("h3", {}, "The service asks"),
      h("p", { class: "question" }, question.message),
      h("pre", { class: "json", tabindex: "0", "aria-label": "The schema of the answer" }, pretty(question.requested_schema)),
    );
  }
  const argsId = `args-${id}`;
  const argsError = h("div", { class: "field-error", id: `args-error-${id}`, role: "alert" });
  const argsField = h("textarea", { id: argsId, name: question ? "content" : "arguments", spellcheck: "false", "aria-describedby": `args-help-${id} args-error-${id}` }, pretty(question ? defaults(question.requested_schema) : call.arguments));
  const reasonError = h("p", { class: "field-error", id: `reason-error-${id}`, role: "alert" });
  const reasonField = h("textarea", { id: `reason-${id}`, name: "reason", class: "reason", maxlength: "2000", "aria-describedby": `reason-error-${id}` });
  const buttons = [];
  const button = (label, attributes) => {
    const made = h("button", { type: "button", ...attributes }, label);
    buttons.push(made);
    return made;
  };

  const modifyForm = h(
    "form",
    { class: "modify", hidden: true, "aria-label": question ? `Answer the question of ${call.tool}` : `Approve ${call.tool} with other arguments`, novalidate: true },
    h("label", { for: argsId }, question ? "Your answer (JSON)" : "Arguments to approve (JSON)"),
    argsField,
    h("p", { class: "help", id: `args-help-${id}` }, question ? "A JSON object; checked against the schema the service asked for before it is sent." : "A JSON object; checked against the tool's input schema before it is sent."),
    argsError,
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, question ? "Send the answer" : "Approve with these arguments"), h("button", { type: "button", onclick: () => toggle(null) }, "Cancel")),
  );
  const rejectForm = h(
    "form",
    { class: "reject", hidden: true, "aria-label": `Reject ${call.tool}`, novalidate: true },
    h("label", { for: `reason-${id}` }, "Reason for the rejection"),
    reasonField,
    reasonError,
    h("div", { class: "actions" }, h("button", { type: "submit", class: "danger" }, "Reject the call"), h("button", { type: "button", onclick: () => toggle(null) }, "Cancel")),
  );
  const approve = button("Approve", { class: "primary", "data-action": "approve", hidden: Boolean(question) });
  const modify = button(question ? "Answer" : "Approve with changes", { "data-action": "modify", "aria-expanded": "false" });
  const reject = button("Reject", { "data-action": "reject", "aria-expanded": "false" });

  function toggle(form) {
    for (const [each, opener] of [[modifyForm, modify], [rejectForm, reject]]) {
      each.hidden = each !== form;
      opener.setAttribute("aria-expanded", String(each === form));
    }
    if (form === modifyForm) argsField.focus();
    if (form === rejectForm) reasonField.focus();
  }

  function busy(yes) {
    for (const each of [...buttons, ...card.querySelectorAll("form button")]) each.disabled = yes;
  }

  async function resolve(decision) {
    busy(true);
    try {
      const resolved = await api("POST", `/api/v1/agent/tool-approvals/${encodeURIComponent(id)}`, decision);
      modifyForm.hidden = true;
      rejectForm.hidden = true;
      card.querySelector(".actions").hidden = true;
      const changed = decision.modified_args ? " with your arguments" : "";
      const approved = decision.content ? "Answered: the call runs again with your answer." : `Approved${changed}: the call runs now.`;
      const what = decision.decision === "approve" ? approved : "Rejected: the call will not run.";
      outcome.className = decision.decision === "approve" ? "outcome" : "outcome failed";
      outcome.replaceChildren(what, " ", h("a", { href: `/console/approvals/${encodeURIComponent(id)}` }, "Follow the call"));
      card.dataset.resolved = decision.decision;
      onResolved(resolved);
      return null;
    } catch (error) {
      busy(false);
      return error;
    }
  }

  approve.addEventListener("click", async () => {
    toggle(null);
    const error = await resolve({ decision: "approve" });
    if (error) {
      outcome.className = "outcome failed";
      show(outcome, problemText(error));
    }
  });
  modify.addEventListener("click", () => toggle(modifyForm.hidden ? modifyForm : null));
  reject.addEventListener("click", () => toggle(rejectForm.hidden ? rejectForm : null));

  function fieldErrors(messages) {
    argsError.replaceChildren(...(messages.length ? [h("ul", {}, messages.map((message) => h("li", {}, message)))] : []));
    argsField.setAttribute("aria-invalid", messages.length ? "true" : "false");
    if (messages.length) argsField.focus();
  }

  modifyForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    let value;
    try {
      value = JSON.parse(argsField.value);
    } catch (error) {
      fieldErrors([`Not valid JSON: ${error.message}`]);
      return;
    }
    if (value === null || typeof value !== "object" || Array.isArray(value)) {
      fieldErrors(["The arguments must be a JSON object ({ … })."]);
      return;
    }
    const schema = question ? question.requested_schema : await inputSchema(call);
    const problems = schema ? validate(schema, value).map((each) => each.message) : [];
    if (problems.length) {
      fieldErrors(problems);
      return;
    }
    fieldErrors([]);
    const error = await resolve(question ? { decision: "approve", content: value } : { decision: "approve", modified_args: value });
    if (error) fieldErrors([problemText(error)]);
  });

  rejectForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    const reason = reasonField.value.trim();
    if (!reason) {
      show(reasonError, "Say why the call is rejected: the caller sees the reason.");
      reasonField.setAttribute("aria-invalid", "true");
      reasonField.focus();
      return;
    }
    show(reasonError, "");
    reasonField.setAttribute("aria-invalid", "false");
    const error = await resolve({ decision: "reject", reason });
    if (error) show(reasonError, problemText(error));
  });

  card.append(h("div", { class: "actions" }, approve, modify, reject), modifyForm, rejectForm, outcome);
  return card;
}
