// The external MCP services (GET /api/v1/mcp-services), a form to register one (its secret sent apart, to the
// write-only credentials route) and an import of a client's mcpServers JSON.
import { api } from "./api.js";
import { fieldError, h, problemText, show } from "./dom.js";
import { startPage } from "./layout.js";
import { managesServices } from "./powers.js";

const rows = document.getElementById("rows");
const status = document.getElementById("status");
const problem = document.getElementById("problem");
const more = document.getElementById("more");
const form = document.getElementById("register");
const auth = document.getElementById("sv-auth");
const SECRET_FIELD = { bearer: "token", api_key: "api_key" };
let cursor = null;

function row(service) {
  const sign = service.builtin ? "builtin" : service.auth_config ? service.auth_config.auth_type : "";
  return h(
    "tr",
    { "data-service": service.id },
    h("td", {}, h("a", { href: `/console/services/${encodeURIComponent(service.id)}` }, service.name)),
    h("td", {}, service.enabled ? "enabled" : "disabled"),
    h("td", {}, service.transport),
    h("td", {}, service.url || ""),
    h("td", {}, sign),
  );
}

async function load(reset) {
  const query = new URLSearchParams({ limit: "50" });
  if (!reset && cursor) query.set("cursor", cursor);
  try {
    const page = await api("GET", `/api/v1/mcp-services?${query}`);
    if (reset) rows.replaceChildren();
    rows.append(...page.items.map(row));
    cursor = page.next_cursor;
    more.hidden = !cursor;
    const count = rows.children.length;
    show(status, count ? `${count} service${count === 1 ? "" : "s"}.` : "No service registered yet.");
  } catch (error) {
    show(status, "");
    show(problem, `Could not load the services: ${error.message}`);
  }
}

auth.addEventListener("change", () => {
  document.getElementById("sv-secret-box").hidden = !(auth.value in SECRET_FIELD);
});

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const name = document.getElementById("sv-name");
  const url = document.getElementById("sv-url");
  if (!name.value.trim()) return fieldError(name, document.getElementById("sv-name-error"), "Give the service a name.");
  fieldError(name, document.getElementById("sv-name-error"), "");
  if (!/^https?:\/\/\S+$/i.test(url.value.trim())) return fieldError(url, document.getElementById("sv-url-error"), "An http:// or https:// URL.");
  fieldError(url, document.getElementById("sv-url-error"), "");
  const error = document.getElementById("register-error");
  const body = {
    name: name.value.trim(),
    url: url.value.trim(),
    transport: document.getElementById("sv-transport").value,
    auth_config: { auth_type: auth.value },
    usage_instructions: document.getElementById("sv-instructions").value,
  };
  const button = form.querySelector("button[type=submit]");
  button.disabled = true;
  try {
    const service = await api("POST", "/api/v1/mcp-services", body);
    const secret = document.getElementById("sv-secret").value;
    if (auth.value in SECRET_FIELD && secret) {
      await api("PUT", `/api/v1/mcp-services/${encodeURIComponent(service.id)}/credentials`, { [SECRET_FIELD[auth.value]]: secret });
    }
    location.assign(`/console/services/${encodeURIComponent(service.id)}`);
  } catch (failure) {
    button.disabled = false;
    if (failure.code === "ssrf_blocked" || /url/i.test(failure.code)) fieldError(url, document.getElementById("sv-url-error"), failure.message);
    else show(error, problemText(failure));
  }
});

document.getElementById("import").addEventListener("submit", async (event) => {
  event.preventDefault();
  const field = document.getElementById("import-json");
  const error = document.getElementById("import-error");
  let value;
  try {
    value = JSON.parse(field.value);
  } catch (failure) {
    return fieldError(field, error, `Not valid JSON: ${failure.message}`);
  }
  const servers = value && typeof value === "object" && value.mcpServers ? value.mcpServers : value;
  if (!servers || typeof servers !== "object" || Array.isArray(servers)) return fieldError(field, error, "Paste an object of servers: {\"mcpServers\": {\"name\": {\"url\": …}}}.");
  fieldError(field, error, "");
  try {
    const result = await api("POST", "/api/v1/mcp-services/import", { mcpServers: servers });
    const refused = result.refused.map((each) => `${each.name}: ${each.reason}`);
    show(document.getElementById("import-status"), `${result.created.length} registered.${refused.length ? ` Refused: ${refused.join("; ")}` : ""}`);
    await load(true);
  } catch (failure) {
    fieldError(field, error, problemText(failure));
  }
});
more.addEventListener("click", () => load(false));

startPage()
  .then((session) => {
    const manages = managesServices(session);
    form.hidden = !manages;
    document.getElementById("import").hidden = !manages;
    return load(true);
  })
  .catch((error) => show(problem, `The page could not start: ${error.message}`));
