// The calls' history (GET /api/v1/calls), newest first, with the audit's filters; older pages on demand.
import { api } from "./api.js";
import { h, show, when } from "./dom.js";
import { startPage } from "./layout.js";

const form = document.getElementById("filters");
const rows = document.getElementById("rows");
const status = document.getElementById("status");
const problem = document.getElementById("problem");
const more = document.getElementById("more");
let cursor = null;
// The filters fill a phone's screen: folded there, open on a wider one.
document.getElementById("filter-box").open = window.matchMedia("(min-width: 40rem)").matches;
let filters = new URLSearchParams();

function isoOf(local) {
  const date = new Date(local);
  return Number.isNaN(date.getTime()) ? local : date.toISOString().replace(/\.\d{3}Z$/, "Z");
}

function row(entry) {
  const through = entry.endpoint_id ? `endpoint ${entry.endpoint_id}` : entry.agent_id ? `agent ${entry.agent_id}` : "";
  const approval = entry.approval
    ? `${entry.approval.decision}${entry.approval.modified_args ? " (changed)" : ""} by ${entry.approval.by}`
    : entry.approval_required ? "waiting" : "";
  return h(
    "tr",
    {},
    h("td", {}, when(entry.created_at)),
    h("td", {}, h("a", { href: `/console/approvals/${encodeURIComponent(entry.call_id)}` }, entry.tool)),
    h("td", {}, entry.service_name),
    h("td", {}, entry.user_id),
    h("td", {}, through),
    h("td", {}, entry.outcome + (entry.error_code ? ` (${entry.error_code})` : "")),
    h("td", {}, approval),
    h("td", {}, entry.duration_ms === null ? "" : `${entry.duration_ms} ms`),
  );
}

async function load(reset) {
  const query = new URLSearchParams(filters);
  query.set("limit", "50");
  if (!reset && cursor) query.set("cursor", cursor);
  try {
    const page = await api("GET", `/api/v1/calls?${query}`);
    if (reset) rows.replaceChildren();
    rows.append(...page.items.map(row));
    cursor = page.next_cursor;
    more.hidden = !cursor;
    show(problem, "");
    const count = rows.children.length;
    show(status, count ? `${count} call${count === 1 ? "" : "s"} shown.` : "No call matches.");
  } catch (error) {
    show(problem, `Could not load the calls: ${error.message}`);
  }
}

form.addEventListener("submit", (event) => {
  event.preventDefault();
  filters = new URLSearchParams();
  for (const [name, value] of new FormData(form)) {
    if (!value) continue;
    filters.set(name, name === "since" || name === "until" ? isoOf(value) : value);
  }
  load(true);
});
form.addEventListener("reset", () => {
  filters = new URLSearchParams();
  setTimeout(() => load(true));
});
more.addEventListener("click", () => load(false));

startPage()
  .then(() => load(true))
  .catch((error) => show(problem, `The page could not start: ${error.message}`));
