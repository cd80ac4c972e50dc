// One call's page (/console/approvals/{pending_id}): resolve it while it waits, then follow it to its result.
import { api } from "./api.js";
import { callCard, facts, retime } from "./approval.js";
import { h, pretty, show, when } from "./dom.js";
import { startPage } from "./layout.js";

const EVERY_MS = 5000;
const FINAL = new Set(["completed", "failed", "rejected", "cancelled", "uncertain"]);
const place = document.getElementById("call");
const status = document.getElementById("status");
const problem = document.getElementById("problem");
const title = document.getElementById("title");
const id = decodeURIComponent(location.pathname.split("/").pop());
let shownStatus = null;
let timer = null;

function json(label, value) {
  return [h("h2", {}, label), h("pre", { class: "json", tabindex: "0", "aria-label": label }, pretty(value))];
}

/** The workspace rules' decision on the call: outcome, the rule (or the default) and the rule set's version. */
function ruling(policy) {
  const rule = policy.rule_id ? `rule ${policy.rule_id}` : "the default";
  const acted = policy.enforced === false ? ", log-only: not acted on" : "";
  const redacted = (policy.redacted_by || []).length ? `; redacted by ${policy.redacted_by.join(", ")}` : "";
  return `${policy.outcome} by ${rule} of version ${policy.rule_set_version}${acted}${redacted}`;
}

function details(call) {
  const card = h("article", { class: "card", "aria-labelledby": "call-heading" }, h("h2", { id: "call-heading" }, `${call.tool} `, h("span", { class: "badge" }, call.status)));
  const rows = [["Status", call.status]];
  if (call.approval) {
    const how = call.approval.answered_input
      ? "answered the service's question"
      : call.approval.modified_args ? `${call.approval.decision} with changed arguments` : call.approval.decision;
    rows.push(["Decision", `${how} by ${call.approval.by} at ${when(call.approval.at)}`]);
    if (call.approval.reason) rows.push(["Reason", call.approval.reason]);
  }
  if (call.policy) rows.push(["Rules' decision", ruling(call.policy)]);
  if (call.finished_at) rows.push(["Finished", when(call.finished_at)]);
  if (call.outcome_uncertain) rows.push(["Outcome", "uncertain: the call may have run and its answer was lost (not retried)"]);
  card.append(facts(call, null, rows));
  card.append(...json("Arguments it runs with", call.arguments));
  if (call.original_arguments) card.append(...json("Arguments the caller sent", call.original_arguments));
  if (call.error) card.append(h("h2", {}, "Error"), h("p", { class: "alert" }, `${call.error.code}: ${call.error.message}`));
  if (call.result) card.append(...json("Result (data from the service, untrusted)", call.result));
  return card;
}

async function refresh(session) {
  let call;
  try {
    call = await api("GET", `/api/v1/agent/tool-calls/${encodeURIComponent(id)}`);
  } catch (error) {
    show(status, "");
    show(problem, error.status === 404 ? "No such call (or not one this key may see)." : `Could not load the call: ${error.message}`);
    if (error.status === 403 || error.status === 404) stop();
    return;
  }
  show(problem, "");
  title.textContent = `Call of ${call.tool}`;
  document.title = `${call.tool} · mcpbridge`;
  const waiting = call.status === "awaiting_approval" || call.status === "awaiting_oauth";
  if (waiting && shownStatus === call.status) {
    retime(place);
  } else if (!(waiting && place.querySelector("[data-resolved]"))) {
    place.replaceChildren(waiting ? callCard(call, session, { heading: "h2", onResolved: () => refresh(session) }) : details(call));
  }
  shownStatus = call.status;
  show(status, waiting ? "This call waits for a decision." : FINAL.has(call.status) ? `This call is ${call.status}.` : `This call is ${call.status}; this page follows it.`);
  if (FINAL.has(call.status)) stop();
}

function stop() {
  if (timer !== null) clearInterval(timer);
  timer = null;
}

async function main() {
  const session = await startPage();
  await refresh(session);
  if (!FINAL.has(shownStatus) && shownStatus !== null) timer = setInterval(() => refresh(session), EVERY_MS);
}

main().catch((error) => show(problem, `The page could not start: ${error.message}`));
