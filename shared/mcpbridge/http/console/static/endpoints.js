// The published MCP endpoints (GET /api/v1/mcp-endpoints) and a form to publish one: its knowledge bases, its tools
// (the REST API's catalog, default ticks), rate limit and sign-in. The new token and configs are shown once.
import { api } from "./api.js";
import { fieldError, h, problemText, show, when } from "./dom.js";
import { showIssued } from "./issued.js";
import { managesEndpoints } from "./powers.js";
import { startPage } from "./layout.js";

const rows = document.getElementById("rows");
const status = document.getElementById("status");
const problem = document.getElementById("problem");
const more = document.getElementById("more");
const form = document.getElementById("publish");
const kbNames = new Map();
let cursor = null;

function row(endpoint) {
  const kbs = endpoint.knowledge_base_ids.length ? endpoint.knowledge_base_ids.map((id) => kbNames.get(id) || id).join(", ") : "every one";
  return h(
    "tr",
    { "data-endpoint": endpoint.id },
    h("td", {}, h("a", { href: `/console/endpoints/${encodeURIComponent(endpoint.id)}` }, endpoint.name)),
    h("td", {}, endpoint.enabled ? "enabled" : "disabled"),
    h("td", {}, kbs),
    h("td", {}, endpoint.tools.join(", ")),
    h("td", {}, `${endpoint.rate_limit_per_minute}/min`),
    h("td", {}, endpoint.last_used_at ? when(endpoint.last_used_at) : "never"),
  );
}

async function load(reset) {
  const query = new URLSearchParams({ limit: "50" });
  if (!reset && cursor) query.set("cursor", cursor);
  try {
    const page = await api("GET", `/api/v1/mcp-endpoints?${query}`);
    if (reset) rows.replaceChildren();
    rows.append(...page.items.map(row));
    cursor = page.next_cursor;
    more.hidden = !cursor;
    const count = rows.children.length;
    show(status, count ? `${count} endpoint${count === 1 ? "" : "s"}.` : "No endpoint published yet.");
  } catch (error) {
    show(status, "");
    show(problem, `Could not load the endpoints: ${error.message}`);
  }
}

function check(name, value, label, checked) {
  const id = `${name}-${value}`;
  return h("label", { for: id }, h("input", { type: "checkbox", id, name, value, checked }), label);
}

async function fillForm() {
  const [kbs, catalog] = await Promise.all([api("GET", "/api/v1/knowledge-bases?limit=200"), api("GET", "/api/v1/mcp-endpoints/tools")]);
  for (const kb of kbs.items) kbNames.set(kb.id, kb.name);
  const kbBox = document.getElementById("ep-kbs");
  kbBox.append(...kbs.items.map((kb) => check("kb", kb.id, kb.name, false)));
  const toolBox = document.getElementById("ep-tools");
  for (const group of catalog.groups) {
    toolBox.append(h("p", { class: "help" }, group.title), ...group.tools.map((tool) => check("tool", tool.name, `${tool.title} (${tool.name})`, tool.default)));
  }
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const name = document.getElementById("ep-name");
  const rate = document.getElementById("ep-rate");
  const chosen = (field) => [...form.querySelectorAll(`input[name=${field}]:checked`)].map((box) => box.value);
  const tools = chosen("tool");
  const nameError = document.getElementById("ep-name-error");
  const toolsError = document.getElementById("ep-tools-error");
  const rateError = document.getElementById("ep-rate-error");
  if (!name.value.trim()) return fieldError(name, nameError, "Give the endpoint a name.");
  fieldError(name, nameError, "");
  if (!tools.length) {
    show(toolsError, "Tick at least one tool.");
    form.querySelector("input[name=tool]")?.focus();
    return;
  }
  show(toolsError, "");
  const perMinute = Number(rate.value);
  if (!Number.isInteger(perMinute) || perMinute < 1 || perMinute > 6000) return fieldError(rate, rateError, "A whole number from 1 to 6000.");
  fieldError(rate, rateError, "");
  const body = {
    name: name.value.trim(),
    description: document.getElementById("ep-description").value,
    knowledge_base_ids: chosen("kb"),
    tools,
    rate_limit_per_minute: perMinute,
    auth_mode: document.getElementById("ep-auth").value,
  };
  const button = form.querySelector("button[type=submit]");
  button.disabled = true;
  try {
    const issued = await api("POST", "/api/v1/mcp-endpoints", body);
    form.reset();
    show(document.getElementById("publish-error"), "");
    document.getElementById("issued-heading").textContent = `“${issued.name}” published`;
    showIssued(document.getElementById("issued"), issued);
    await load(true);
  } catch (failure) {
    show(document.getElementById("publish-error"), problemText(failure));
  } finally {
    button.disabled = false;
  }
});
more.addEventListener("click", () => load(false));

async function main() {
  const session = await startPage();
  if (managesEndpoints(session)) {
    await fillForm();
    form.hidden = false;
  } else {
    const kbs = await api("GET", "/api/v1/knowledge-bases?limit=200");
    for (const kb of kbs.items) kbNames.set(kb.id, kb.name);
  }
  await load(true);
}

main().catch((error) => show(problem, `The page could not start: ${error.message}`));
