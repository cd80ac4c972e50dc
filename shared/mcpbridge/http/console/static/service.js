// One external service (/console/services/{id}): its settings, a connection test with its verdict, its catalog of
// tools with each tool's policy (enabled, needs a person's approval), write-only credentials, the signed-in user's
// own OAuth connection to it, and deleting it.
import { api } from "./api.js";
import { confirmButton, h, problemText, show, when } from "./dom.js";
import { startPage } from "./layout.js";
import { managesServices } from "./powers.js";

const id = decodeURIComponent(location.pathname.split("/").pop());
const path = `/api/v1/mcp-services/${encodeURIComponent(id)}`;
const problem = document.getElementById("problem");
const status = document.getElementById("status");
const toolsStatus = document.getElementById("tools-status");
const SECRETS = { bearer: ["token", "Bearer token"], api_key: ["api_key", "API key"], oauth: ["client_secret", "OAuth client secret"] };
let service = null;
let manages = false;

function facts() {
  const auth = service.auth_config;
  const rows = [
    ["State", service.enabled ? "enabled" : "disabled"],
    ["URL", service.builtin ? "builtin" : service.url],
    ["Transport", service.transport],
    ["Sign-in", auth ? auth.auth_type + (auth.auth_type === "api_key" ? ` (header ${auth.api_key_header})` : "") : "builtin"],
    ["Credentials", Object.entries(service.credentials).map(([name, state]) => `${name}: ${state.configured ? "set" : "not set"}`).join(", ") || "none"],
    ["Usage instructions", service.usage_instructions || "—"],
    ["Catalog", service.catalog_stale ? "stale: settings changed since the last refresh" : "current"],
  ];
  document.getElementById("facts").replaceChildren(...rows.flatMap(([term, value]) => [h("dt", {}, term), h("dd", {}, value)]));
  document.getElementById("title").textContent = service.name;
  document.title = `${service.name} · mcpbridge`;
}

async function setPolicy(tool, change, box) {
  box.disabled = true;
  try {
    const policy = await api("PUT", `${path}/tool-approvals/${encodeURIComponent(tool.name)}`, change);
    tool.enabled = policy.enabled;
    tool.require_approval = policy.require_approval;
    show(toolsStatus, `${tool.name}: ${policy.enabled ? "enabled" : "disabled"}, ${policy.require_approval ? "needs an approval" : "no approval needed"}.`);
  } catch (error) {
    box.checked = !box.checked;
    show(toolsStatus, `Could not change ${tool.name}: ${problemText(error)}`);
  } finally {
    box.disabled = false;
  }
}

function toolRow(tool) {
  const switchOf = (field, label) => {
    const boxId = `${field}-${tool.name}`;
    const box = h("input", { type: "checkbox", id: boxId, "data-policy": field, checked: tool[field], disabled: !manages });
    box.addEventListener("change", () => setPolicy(tool, { [field]: box.checked }, box));
    return h("label", { class: "switch", for: boxId }, box, h("span", { class: "visually-hidden" }, `${label} ${tool.name}`));
  };
  return h(
    "tr",
    { "data-tool": tool.name },
    h("th", { scope: "row" }, tool.title || tool.name, tool.title ? h("span", { class: "help" }, ` ${tool.name}`) : ""),
    h("td", { class: "desc" }, tool.description || ""),
    h("td", {}, switchOf("enabled", "Enabled:")),
    h("td", {}, switchOf("require_approval", "Needs approval:")),
  );
}

async function loadTools() {
  const rows = document.getElementById("tools");
  show(toolsStatus, "Loading the tools…");
  try {
    const items = [];
    let cursor = null;
    do {
      const query = new URLSearchParams({ limit: "200" });
      if (cursor) query.set("cursor", cursor);
      const page = await api("GET", `${path}/tools?${query}`);
      items.push(...page.items);
      cursor = page.next_cursor;
      if (!cursor) show(toolsStatus, `${items.length} tool${items.length === 1 ? "" : "s"}${page.synced_at ? `, listed ${when(page.synced_at)}` : ""}${page.stale ? " (stale: refresh)" : ""}.`);
    } while (cursor);
    rows.replaceChildren(...items.map(toolRow));
  } catch (error) {
    rows.replaceChildren();
    show(toolsStatus, `No tools to show: ${problemText(error)}`);
  }
}

async function test() {
  const box = document.getElementById("verdict-box");
  const verdict = document.getElementById("verdict");
  const notes = document.getElementById("verdict-notes");
  box.hidden = false;
  verdict.className = "";
  verdict.textContent = "Connecting…";
  notes.replaceChildren();
  try {
    const result = await api("POST", `${path}/test`);
    verdict.className = result.success ? "outcome" : "outcome failed";
    const who = result.server_name ? ` ${result.server_name}${result.server_version ? ` ${result.server_version}` : ""}` : "";
    verdict.textContent = `${result.success ? "Works" : "Fails"}:${who} ${result.message}`;
    notes.append(
      h("li", {}, `${result.tools.length} tools, ${result.resources.length} resources, protocol ${result.protocol_version || "unknown"}.`),
      ...(result.oauth_required ? [h("li", {}, "The server wants OAuth: set the sign-in to OAuth.")] : []),
      ...result.warnings.map((warning) => h("li", {}, warning)),
    );
  } catch (error) {
    verdict.className = "outcome failed";
    verdict.textContent = `Could not test: ${problemText(error)}`;
  }
}

async function refresh() {
  show(toolsStatus, "Refreshing the tools…");
  try {
    const catalog = await api("POST", `${path}/metadata/refresh`);
    if (catalog.last_error) show(problem, `The refresh failed: ${catalog.last_error.message}`);
    service = await api("GET", path);
    facts();
  } catch (error) {
    show(problem, `The refresh failed: ${problemText(error)}`);
  }
  await loadTools();
}

function credentials() {
  const form = document.getElementById("credentials");
  const auth = service.auth_config ? service.auth_config.auth_type : "none";
  if (!manages || !(auth in SECRETS)) return;
  const [field, label] = SECRETS[auth];
  const state = service.credentials[field]?.configured ? "set" : "not set";
  document.getElementById("credential-fields").replaceChildren(
    h("label", { for: `cred-${field}` }, `${label} (${state})`),
    h("input", { type: "password", id: `cred-${field}`, name: field, autocomplete: "new-password" }),
  );
  form.hidden = false;
  form.onsubmit = async (event) => {
    event.preventDefault();
    const value = form.elements[field].value;
    const error = document.getElementById("credentials-error");
    if (!value) return show(error, "Type the new value first (the stored one is never shown).");
    show(error, "");
    try {
      service = await api("PUT", `${path}/credentials`, { [field]: value });
      form.reset();
      facts();
      credentials();
      show(document.getElementById("credentials-status"), `${label} saved.`);
    } catch (failure) {
      show(error, problemText(failure));
    }
  };
}

async function oauth() {
  if (!service.auth_config || service.auth_config.auth_type !== "oauth") return;
  const box = document.getElementById("oauth-box");
  const said = document.getElementById("oauth-status");
  const connect = document.getElementById("connect");
  const disconnect = document.getElementById("disconnect");
  box.hidden = false;
  try {
    const state = await api("GET", `${path}/oauth/status`);
    said.textContent = { authorized: "Connected.", refreshable: "Connected (the token is refreshed when needed).", reauth_required: "Not connected." }[state.status];
    disconnect.hidden = state.status === "reauth_required";
    connect.textContent = state.status === "reauth_required" ? "Connect" : "Connect again";
  } catch (error) {
    said.textContent = `Could not read your connection: ${problemText(error)}`;
  }
  connect.onclick = async () => {
    try {
      const started = await api("POST", `${path}/oauth/authorize-url`, { frontend_redirect: location.pathname });
      location.assign(started.authorization_url);
    } catch (error) {
      said.textContent = `Could not start: ${problemText(error)}`;
    }
  };
  disconnect.onclick = async () => {
    try {
      await api("DELETE", `/api/v1/me/oauth-connections/${encodeURIComponent(id)}`);
      await oauth();
    } catch (error) {
      said.textContent = `Could not disconnect: ${problemText(error)}`;
    }
  };
}

async function main() {
  const session = await startPage();
  try {
    service = await api("GET", path);
  } catch (error) {
    show(status, "");
    show(problem, error.status === 404 ? "No such service (or not one this key may see)." : `Could not load it: ${error.message}`);
    return;
  }
  manages = managesServices(session) && !service.builtin;
  facts();
  const back = new URLSearchParams(location.hash.slice(1));
  show(status, back.has("mcp_oauth_error") ? `The OAuth connection failed: ${back.get("mcp_oauth_error")}` : back.has("mcp_oauth_result") ? "Connected." : "");
  if (manages) {
    document.getElementById("manage").hidden = false;
    document.getElementById("danger").hidden = false;
    document.getElementById("test").addEventListener("click", test);
    document.getElementById("refresh").addEventListener("click", refresh);
    document.getElementById("delete-place").append(
      confirmButton("Delete the service", "Delete it: sure?", { id: "delete" }, async () => {
        try {
          await api("DELETE", path);
          location.assign("/console/services");
        } catch (error) {
          show(problem, problemText(error));
        }
      }),
    );
  }
  credentials();
  await Promise.all([oauth(), loadTools()]);
}

main().catch((error) => show(problem, `The page could not start: ${error.message}`));
