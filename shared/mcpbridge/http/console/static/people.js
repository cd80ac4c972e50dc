// People (/console/people): the workspace's users (enable, disable) and API keys (create, shown once; revoke) for
// admins with manage_users / manage_keys; for everyone, their own OAuth connections and the clients they approved.
import { api } from "./api.js";
import { confirmButton, copyBlock, fieldError, h, problemText, show, when } from "./dom.js";
import { startPage } from "./layout.js";
import { managesKeys, managesUsers } from "./powers.js";

const problem = document.getElementById("problem");
const status = document.getElementById("status");
const userNames = new Map();
let signedIn = null; // the session, once loaded

async function all(path) {
  const items = [];
  let cursor = null;
  do {
    const query = new URLSearchParams({ limit: "200" });
    if (cursor) query.set("cursor", cursor);
    const page = await api("GET", `${path}?${query}`);
    items.push(...page.items);
    cursor = page.next_cursor;
  } while (cursor);
  return items;
}

function failed(what) {
  return (error) => show(problem, `${what}: ${problemText(error)}`);
}

// ------------------------------------------------------------------------------------------------ users

async function loadUsers(session) {
  const users = await all("/api/v1/users");
  userNames.clear();
  for (const user of users) userNames.set(user.id, user.name);
  document.getElementById("users").replaceChildren(
    ...users.map((user) => {
      const self = user.id === session.user_id;
      const change = user.status === "active" ? "disable" : "enable";
      const button = self
        ? h("span", { class: "help" }, "you")
        : h("button", { type: "button", "data-user-action": change, onclick: () => api("POST", `/api/v1/users/${encodeURIComponent(user.id)}/${change}`).then(() => loadUsers(session), failed(`Could not ${change} ${user.name}`)) }, change === "disable" ? "Disable" : "Enable");
      return h("tr", { "data-user": user.id }, h("td", {}, user.name), h("td", {}, user.id), h("td", {}, user.status), h("td", {}, when(user.created_at)), h("td", {}, button));
    }),
  );
  const select = document.getElementById("key-user");
  select.replaceChildren(...users.filter((user) => user.status === "active").map((user) => h("option", { value: user.id, selected: user.id === session.user_id }, user.id === session.user_id ? `${user.name} (you)` : user.name)));
}

document.getElementById("add-user").addEventListener("submit", async (event) => {
  event.preventDefault();
  const field = document.getElementById("user-name");
  const error = document.getElementById("user-error");
  if (!field.value.trim()) return fieldError(field, error, "Give the user a name.");
  try {
    await api("POST", "/api/v1/users", { name: field.value.trim() });
    fieldError(field, error, "");
    field.value = "";
    await loadUsers(signedIn);
  } catch (failure) {
    fieldError(field, error, problemText(failure));
  }
});

// ------------------------------------------------------------------------------------------------ keys

function scopeText(key) {
  const caps = key.capabilities === null ? "every capability" : key.capabilities.join(" ") || "no capability";
  const kbs = key.knowledge_base_ids === null ? "" : `; ${key.knowledge_base_ids.length} knowledge bases`;
  return caps + kbs;
}

async function loadKeys(session) {
  const keys = (await all("/api/v1/api-keys")).filter((key) => key.status === "active");
  document.getElementById("keys").replaceChildren(
    ...keys.map((key) =>
      h(
        "tr",
        { "data-key": key.id },
        h("td", {}, key.name),
        h("td", {}, userNames.get(key.user_id) || key.user_id),
        h("td", {}, key.role),
        h("td", {}, scopeText(key)),
        h("td", {}, `${key.hint}…`),
        h("td", {}, key.last_used_at ? when(key.last_used_at) : "never"),
        h(
          "td",
          {},
          key.id === session.api_key_id
            ? h("span", { class: "help" }, "this session's")
            : confirmButton("Revoke", "Revoke: sure?", { "data-revoke": key.id }, () => api("DELETE", `/api/v1/api-keys/${encodeURIComponent(key.id)}`).then(() => loadKeys(session), failed(`Could not revoke ${key.name}`))),
        ),
      ),
    ),
  );
}

document.getElementById("add-key").addEventListener("submit", async (event) => {
  event.preventDefault();
  const session = signedIn;
  const name = document.getElementById("key-name");
  const error = document.getElementById("key-error");
  if (!name.value.trim()) return fieldError(name, error, "Give the key a name (what uses it).");
  const user = document.getElementById("key-user").value || session.user_id;
  const caps = document.getElementById("key-caps").value.trim();
  const body = { name: name.value.trim(), role: document.getElementById("key-role").value };
  if (caps) body.capabilities = caps.split(/[\s,]+/);
  const path = user === session.user_id ? "/api/v1/api-keys" : `/api/v1/users/${encodeURIComponent(user)}/api-keys`;
  try {
    const created = await api("POST", path, body);
    fieldError(name, error, "");
    event.target.reset();
    const box = document.getElementById("new-key");
    document.getElementById("new-key-body").replaceChildren(copyBlock(`key “${created.name}”`, created.key, "copy-key"));
    box.hidden = false;
    box.focus();
    await loadUsers(session);
    await loadKeys(session);
  } catch (failure) {
    fieldError(name, error, problemText(failure));
  }
});

// ------------------------------------------------------------------------------------------------ your own

async function loadMine() {
  const connections = document.getElementById("connections");
  try {
    const items = await all("/api/v1/me/oauth-connections");
    connections.replaceChildren(
      ...items.map((each) =>
        h(
          "li",
          { "data-connection": each.service_id },
          h("a", { href: `/console/services/${encodeURIComponent(each.service_id)}` }, each.service_name),
          ` (${each.status}) since ${when(each.connected_at)} `,
          confirmButton("Disconnect", "Disconnect: sure?", {}, () => api("DELETE", `/api/v1/me/oauth-connections/${encodeURIComponent(each.service_id)}`).then(loadMine, failed("Could not disconnect"))),
        ),
      ),
    );
    show(document.getElementById("connections-status"), items.length ? "" : "You have connected no service with OAuth: a service that needs it offers Connect on its page.");
  } catch (error) {
    show(document.getElementById("connections-status"), `Could not list them: ${problemText(error)}`);
  }
  const grants = document.getElementById("grants");
  try {
    const items = await all("/api/v1/me/oauth-grants");
    grants.replaceChildren(
      ...items.map((grant) =>
        h(
          "li",
          { "data-grant": grant.id },
          `${grant.client_name || grant.client_id} on endpoint ${grant.endpoint_id} (${grant.scopes.join(" ")}) `,
          confirmButton("Revoke", "Revoke: sure?", {}, () => api("DELETE", `/api/v1/me/oauth-grants/${encodeURIComponent(grant.id)}`).then(loadMine, failed("Could not revoke"))),
        ),
      ),
    );
    show(document.getElementById("grants-status"), items.length ? "" : "No client signed in as you.");
  } catch (error) {
    show(document.getElementById("grants-status"), `Could not list them: ${problemText(error)}`);
  }
}

async function main() {
  const session = await startPage();
  signedIn = session;
  if (managesUsers(session)) {
    document.getElementById("users-box").hidden = false;
    await loadUsers(session).catch(failed("Could not list the users"));
  }
  if (managesKeys(session)) {
    document.getElementById("keys-box").hidden = false;
    if (!managesUsers(session)) document.getElementById("key-user").append(h("option", { value: session.user_id }, "you"));
    await loadKeys(session).catch(failed("Could not list the keys"));
  }
  show(status, managesUsers(session) || managesKeys(session) ? "" : "Users and keys need an admin key with manage_users or manage_keys.");
  await loadMine();
}

main().catch((error) => show(problem, `The page could not start: ${error.message}`));
