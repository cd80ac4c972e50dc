// One endpoint (/console/endpoints/{id}): what it publishes, enable or disable it, rotate its token (the new configs
// shown once), its settings (name, description, default agent, scope, rate limit, sign-in, the external services'
// tools it publishes, ticked among those they list; the knowledge bases other workspaces share with this one offered
// beside its own, marked as shared), the OAuth sign-ins on it (revocable), and deleting it.
import { api } from "./api.js";
import { confirmButton, fieldError, h, problemText, show, when } from "./dom.js";
import { showIssued } from "./issued.js";
import { managesEndpoints } from "./powers.js";
import { startPage } from "./layout.js";

const id = decodeURIComponent(location.pathname.split("/").pop());
const path = `/api/v1/mcp-endpoints/${encodeURIComponent(id)}`;
const problem = document.getElementById("problem");
const status = document.getElementById("status");
const toggle = document.getElementById("toggle");
let endpoint = null;
const sharedKbs = new Set();

function facts(kbNames) {
  const kbs = endpoint.knowledge_base_ids.length ? endpoint.knowledge_base_ids.map((kb) => kbNames.get(kb) || kb).join(", ") : "every knowledge base";
  const services = endpoint.services.map((each) => `${each.service_id}: ${each.tools.join(", ")}`).join("; ");
  const rows = [
    ["State", endpoint.enabled ? "enabled" : "disabled (its clients are refused)"],
    ["URL", `${location.origin}/mcp/${endpoint.id}`],
    ["Description", endpoint.description || "none"],
    ["Default agent", endpoint.default_agent_id || "none (the built-in answer)"],
    ["Knowledge bases", kbs],
    ["Tools", endpoint.tools.join(", ")],
    ["External tools", services ? `${services} (${endpoint.external_tool_mode === "search" ? "searched" : "each listed"})` : "none"],
    ["Rate limit", `${endpoint.rate_limit_per_minute} calls per minute, per ${endpoint.rate_limit_scope}`],
    ["Sign-in", { both: "token or OAuth", static: "token only", oauth: "OAuth only" }[endpoint.auth_mode]],
    ["Token", `${endpoint.token_hint}…`],
    ["Last used", endpoint.last_used_at ? when(endpoint.last_used_at) : "never"],
    ["Created", when(endpoint.created_at)],
  ];
  document.getElementById("facts").replaceChildren(...rows.flatMap(([term, value]) => [h("dt", {}, term), h("dd", {}, value)]));
  document.getElementById("title").textContent = endpoint.name;
  document.title = `${endpoint.name} · mcpbridge`;
  toggle.textContent = endpoint.enabled ? "Disable" : "Enable";
}

const edit = document.getElementById("edit");
const FIELD_ERRORS = {
  name: "ed-name-error",
  description: "ed-description-error",
  default_agent_id: "ed-agent-error",
  rate_limit_per_minute: "ed-rate-error",
  tools: "ed-tools-error",
  services: "ed-services-error",
};
/** The field a refusal's code names, when the problem does not say it in details.field. */
const CODE_FIELDS = {
  invalid_name: "name",
  invalid_description: "description",
  agent_not_found: "default_agent_id",
  unknown_tool: "tools",
  no_tools: "tools",
  invalid_rate_limit: "rate_limit_per_minute",
};
const EVERY_TOOL = "*";

function check(name, value, label, checked, attributes = {}) {
  const id = `ed-${name}-${value}`;
  return h("label", { for: id }, h("input", { type: "checkbox", id, name, value, checked, ...attributes }), label);
}

/** A service's tools to tick: its catalog (pulled if it has none yet), those it publishes now among them. */
async function serviceTools(serviceId, name, published, index) {
  const prefix = `svc${index}`;
  const box = h("fieldset", { class: "checks", "data-service": serviceId }, h("legend", {}, `${name} tools`));
  box.append(check(prefix, "all", "Every enabled tool (*)", published.includes(EVERY_TOOL), { "data-tool": EVERY_TOOL }));
  let names = [];
  try {
    const page = await api("GET", `/api/v1/mcp-services/${encodeURIComponent(serviceId)}/tools?limit=200`);
    names = page.items.map((tool) => tool.name);
  } catch (error) {
    box.append(h("p", { class: "help" }, `Its tools could not be listed: ${problemText(error)}`));
  }
  for (const tool of published) if (tool !== EVERY_TOOL && !names.includes(tool)) names.push(tool);
  names.forEach((tool, at) => box.append(check(`${prefix}-t`, String(at), tool, published.includes(tool), { "data-tool": tool })));
  return box;
}

/** The form as the endpoint is now: its name, description and default agent, its knowledge bases and tools ticked,
 * each service's published tools ticked among the tools it lists. */
async function fillEdit(kbNames) {
  const [catalog, services, agents] = await Promise.all([
    api("GET", "/api/v1/mcp-endpoints/tools"),
    api("GET", "/api/v1/mcp-services?limit=200").catch(() => ({ items: [] })),
    api("GET", "/api/v1/agents?limit=200").catch(() => ({ items: [] })),
  ]);
  document.getElementById("ed-name").value = endpoint.name;
  document.getElementById("ed-description").value = endpoint.description || "";
  const agentSelect = document.getElementById("ed-agent");
  const agentNames = new Map(agents.items.map((agent) => [agent.id, agent.name]));
  if (endpoint.default_agent_id && !agentNames.has(endpoint.default_agent_id)) agentNames.set(endpoint.default_agent_id, endpoint.default_agent_id);
  agentSelect.append(...[...agentNames].map(([agentId, name]) => h("option", { value: agentId }, name)));
  agentSelect.value = endpoint.default_agent_id || "";
  const kbBox = document.getElementById("ed-kbs");
  const kbs = new Map(kbNames);
  for (const kb of endpoint.knowledge_base_ids) if (!kbs.has(kb)) kbs.set(kb, kb);
  kbBox.append(
    ...[...kbs].map(([kb, name]) => check("kb", kb, name, endpoint.knowledge_base_ids.includes(kb), { "data-shared": sharedKbs.has(kb) })),
  );
  const toolBox = document.getElementById("ed-tools");
  for (const group of catalog.groups) {
    toolBox.append(h("p", { class: "help" }, group.title), ...group.tools.map((tool) => check("tool", tool.name, `${tool.title} (${tool.name})`, endpoint.tools.includes(tool.name))));
  }
  const published = new Map(endpoint.services.map((each) => [each.service_id, each.tools]));
  const names = new Map(services.items.map((service) => [service.id, service.name]));
  for (const serviceId of published.keys()) if (!names.has(serviceId)) names.set(serviceId, serviceId);
  const box = document.getElementById("ed-services");
  if (!names.size) box.append(h("p", { class: "help" }, "No external service registered yet."));
  const boxes = await Promise.all([...names].map(([serviceId, name], index) => serviceTools(serviceId, name, published.get(serviceId) || [], index)));
  box.append(...boxes);
  document.getElementById("ed-rate").value = String(endpoint.rate_limit_per_minute);
  document.getElementById("ed-auth").value = endpoint.auth_mode;
  document.getElementById("ed-mode").value = endpoint.external_tool_mode;
}

function clearErrors() {
  for (const id of [...Object.values(FIELD_ERRORS), "edit-error"]) show(document.getElementById(id), "");
  for (const field of edit.querySelectorAll("[aria-invalid=true]")) field.setAttribute("aria-invalid", "false");
}

/** The body of the PUT, or null when a field is wrong (its error shown by it). */
function editBody() {
  const chosen = (field) => [...edit.querySelectorAll(`input[name=${field}]:checked`)].map((box) => box.value);
  const name = document.getElementById("ed-name");
  if (!name.value.trim()) {
    fieldError(name, document.getElementById("ed-name-error"), "Give the endpoint a name.");
    return null;
  }
  const tools = chosen("tool");
  if (!tools.length) {
    show(document.getElementById("ed-tools-error"), "Tick at least one tool.");
    edit.querySelector("input[name=tool]")?.focus();
    return null;
  }
  const rate = document.getElementById("ed-rate");
  const perMinute = Number(rate.value);
  if (rate.value.trim() === "" || !Number.isInteger(perMinute) || perMinute < 1 || perMinute > 6000) {
    fieldError(rate, document.getElementById("ed-rate-error"), "A whole number from 1 to 6000.");
    return null;
  }
  const services = [];
  for (const fieldset of edit.querySelectorAll("fieldset[data-service]")) {
    const names = [...fieldset.querySelectorAll("input[data-tool]:checked")].map((box) => box.dataset.tool);
    if (names.length) services.push({ service_id: fieldset.dataset.service, tools: names });
  }
  return {
    name: name.value.trim(),
    description: document.getElementById("ed-description").value,
    default_agent_id: document.getElementById("ed-agent").value || null,
    knowledge_base_ids: chosen("kb"),
    tools,
    rate_limit_per_minute: perMinute,
    auth_mode: document.getElementById("ed-auth").value,
    services,
    external_tool_mode: document.getElementById("ed-mode").value,
  };
}

/** A refusal shown by the field it names (a 422's fields, or the problem's details.field), or under the form. */
function showRefusal(error) {
  const placed = new Set();
  for (const each of error.errors || []) {
    const field = (each.loc || []).filter((part) => part !== "body")[0];
    const target = FIELD_ERRORS[field];
    if (!target) continue;
    const element = document.getElementById(target);
    element.textContent = `${element.textContent} ${each.msg}`.trim();
    placed.add(each);
  }
  const named = FIELD_ERRORS[error.details?.field] || FIELD_ERRORS[CODE_FIELDS[error.code]];
  if (named && !placed.size) {
    show(document.getElementById(named), error.message);
    return;
  }
  const rest = (error.errors || []).filter((each) => !placed.has(each));
  if (!placed.size || rest.length) show(document.getElementById("edit-error"), problemText({ message: error.message, errors: rest }));
}

async function grants(session) {
  const said = document.getElementById("grants-status");
  const list = document.getElementById("grants");
  try {
    const page = await api("GET", `${path}/oauth-grants?limit=200`);
    list.replaceChildren(
      ...page.items.map((grant) =>
        h(
          "li",
          { "data-grant": grant.id },
          `${grant.client_name || grant.client_id} for ${grant.user_id} (${grant.scopes.join(" ")}), since ${when(grant.created_at)} `,
          confirmButton("Revoke", "Revoke: sure?", {}, async () => {
            await api("DELETE", `/api/v1/users/${encodeURIComponent(grant.user_id)}/oauth-grants/${encodeURIComponent(grant.id)}`);
            await grants(session);
          }),
        ),
      ),
    );
    show(said, page.items.length ? "" : "No OAuth client signed in to this endpoint.");
  } catch (error) {
    show(said, error.status === 403 ? "Listing sign-ins needs an admin key with manage_users." : `Could not list them: ${error.message}`);
  }
}

async function main() {
  const session = await startPage();
  const [found, kbs, shared] = await Promise.allSettled([
    api("GET", path),
    api("GET", "/api/v1/knowledge-bases?limit=200"),
    api("GET", "/api/v1/shared-knowledge-bases?limit=200"),
  ]);
  if (found.status === "rejected") {
    show(status, "");
    show(problem, found.reason.status === 404 ? "No such endpoint (or not one this key may see)." : `Could not load it: ${found.reason.message}`);
    return;
  }
  endpoint = found.value;
  const kbNames = new Map(kbs.status === "fulfilled" ? kbs.value.items.map((kb) => [kb.id, kb.name]) : []);
  // Knowledge bases other workspaces share with this one, marked as such, beside the workspace's own.
  for (const kb of shared.status === "fulfilled" ? shared.value.items : []) {
    if (!kbNames.has(kb.id)) kbNames.set(kb.id, `${kb.name} (shared by ${kb.owner_workspace_id}, ${kb.permission})`);
    sharedKbs.add(kb.id);
  }
  facts(kbNames);
  show(status, "");
  await grants(session);
  if (!managesEndpoints(session)) return;
  document.getElementById("manage").hidden = false;
  await fillEdit(kbNames);
  edit.hidden = false;
  edit.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearErrors();
    const body = editBody();
    if (!body) return;
    const button = edit.querySelector("button[type=submit]");
    button.disabled = true;
    try {
      endpoint = await api("PUT", path, body);
      facts(kbNames);
      show(status, "Saved.");
    } catch (error) {
      showRefusal(error);
    } finally {
      button.disabled = false;
    }
  });
  document.getElementById("danger").hidden = false;
  toggle.addEventListener("click", async () => {
    try {
      endpoint = await api("PUT", path, { enabled: !endpoint.enabled });
      facts(kbNames);
      show(status, endpoint.enabled ? "Enabled." : "Disabled: its clients are refused from their next request.");
    } catch (error) {
      show(problem, problemText(error));
    }
  });
  document.getElementById("rotate").addEventListener("click", async () => {
    try {
      const issued = await api("POST", `${path}/rotate-token`);
      endpoint = issued;
      facts(kbNames);
      showIssued(document.getElementById("issued"), issued);
    } catch (error) {
      show(problem, problemText(error));
    }
  });
  document.getElementById("delete-place").append(
    confirmButton("Delete the endpoint", "Delete it: sure?", { id: "delete" }, async () => {
      try {
        await api("DELETE", path);
        location.assign("/console/endpoints");
      } catch (error) {
        show(problem, problemText(error));
      }
    }),
  );
}

main().catch((error) => show(problem, `The page could not start: ${error.message}`));
