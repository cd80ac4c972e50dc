// One endpoint (/console/endpoints/{id}): what it publishes, enable or disable it, rotate its token (the new configs
// shown once), the OAuth sign-ins on it (revocable), and deleting it.
import { api } from "./api.js";
import { confirmButton, h, problemText, show, when } from "./dom.js";
import { showIssued } from "./issued.js";
import { managesEndpoints } from "./powers.js";
import { startPage } from "./layout.js";

const id = decodeURIComponent(location.pathname.split("/").pop());
const path = `/api/v1/mcp-endpoints/${encodeURIComponent(id)}`;
const problem = document.getElementById("problem");
const status = document.getElementById("status");
const toggle = document.getElementById("toggle");
let endpoint = null;

function facts(kbNames) {
  const kbs = endpoint.knowledge_base_ids.length ? endpoint.knowledge_base_ids.map((kb) => kbNames.get(kb) || kb).join(", ") : "every knowledge base";
  const services = endpoint.services.map((each) => `${each.service_id}: ${each.tools.join(", ")}`).join("; ");
  const rows = [
    ["State", endpoint.enabled ? "enabled" : "disabled (its clients are refused)"],
    ["URL", `${location.origin}/mcp/${endpoint.id}`],
    ["Knowledge bases", kbs],
    ["Tools", endpoint.tools.join(", ")],
    ["External tools", services || "none"],
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
  const [found, kbs] = await Promise.allSettled([api("GET", path), api("GET", "/api/v1/knowledge-bases?limit=200")]);
  if (found.status === "rejected") {
    show(status, "");
    show(problem, found.reason.status === 404 ? "No such endpoint (or not one this key may see)." : `Could not load it: ${found.reason.message}`);
    return;
  }
  endpoint = found.value;
  const kbNames = new Map(kbs.status === "fulfilled" ? kbs.value.items.map((kb) => [kb.id, kb.name]) : []);
  facts(kbNames);
  show(status, "");
  await grants(session);
  if (!managesEndpoints(session)) return;
  document.getElementById("manage").hidden = false;
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
