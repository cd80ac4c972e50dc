// The approvals inbox: the calls waiting for the signed-in person, oldest first, refreshed every few seconds
// without a reload. A card being worked on stays as it is; new calls are added, resolved ones leave.
import { api } from "./api.js";
import { callCard, retime } from "./approval.js";
import { h, show } from "./dom.js";
import { startPage } from "./layout.js";

const EVERY_MS = 5000;
const list = document.getElementById("calls");
const status = document.getElementById("status");
const problem = document.getElementById("problem");
const cards = new Map(); // pending id -> card
const callers = new Map(); // pending id -> audit entry (agent, endpoint, key)

async function learnCallers(session, ids) {
  if (!ids.some((id) => !callers.has(id))) return;
  try {
    const query = new URLSearchParams({ outcome: "awaiting_approval", limit: "100" });
    const audit = await api("GET", `/api/v1/calls?${query}`);
    for (const entry of audit.items) callers.set(entry.call_id, entry);
  } catch {
    // the audit is a nicety here: the inbox shows the user the call is for without it
  }
}

async function refresh(session) {
  let page;
  try {
    page = await api("GET", "/api/v1/agent/pending?limit=100");
  } catch (error) {
    show(problem, `Could not refresh the inbox: ${error.message}`);
    return;
  }
  show(problem, "");
  const items = page.items;
  await learnCallers(session, items.map((call) => call.pending_id));
  const waiting = new Set(items.map((call) => call.pending_id));
  for (const [id, card] of cards) {
    if (!waiting.has(id) && !card.dataset.resolved && !card.contains(document.activeElement)) {
      card.remove();
      cards.delete(id);
    }
  }
  let previous = null;
  for (const call of items) {
    let card = cards.get(call.pending_id);
    if (!card) {
      card = callCard(call, session, { caller: callers.get(call.pending_id) });
      cards.set(call.pending_id, card);
      if (previous) previous.after(card);
      else list.prepend(card);
    }
    previous = card;
  }
  retime(list);
  const count = items.length;
  const noun = count === 1 ? "call waits" : "calls wait";
  const whom = session.can_approve_calls ? "in this workspace" : "for you";
  show(status, count ? `${count} ${noun} ${whom}. Updated ${new Date().toLocaleTimeString()}.` : `Nothing waits ${whom}. Updated ${new Date().toLocaleTimeString()}.`);
}

async function main() {
  const session = await startPage();
  if (!session.can_call_tools && !session.can_approve_calls) {
    show(status, "");
    list.append(h("p", { class: "note" }, "This key can neither see nor resolve waiting calls: that needs call_tools (your own calls) or, on an admin key, approve_calls (every call of the workspace)."));
    return;
  }
  await refresh(session);
  setInterval(() => refresh(session), EVERY_MS);
}

main().catch((error) => show(problem, `The inbox could not start: ${error.message}`));
