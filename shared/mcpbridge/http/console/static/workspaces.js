// The platform's workspaces (GET /api/v1/workspaces), for its admins only: each with its state and the calls waiting
// in it; rename, disable or enable, delete; a form to create one, whose first admin key is shown this once. Anyone
// else is refused by the REST API, and the page then shows no workspace and no form.
import { api } from "./api.js";
import { confirmButton, copyBlock, fieldError, h, problemText, show, when } from "./dom.js";
import { startPage } from "./layout.js";

const list = document.getElementById("workspaces");
const status = document.getElementById("status");
const problem = document.getElementById("problem");
const more = document.getElementById("more");
const form = document.getElementById("create");
const STATES = { active: "active", disabled: "disabled: its keys and tokens are refused", deleting: "being deleted" };
let cursor = null;
let own = null; // the platform's own workspace, which cannot be disabled nor deleted
let waiting = new Map(); // workspace id -> calls waiting for a person

/** The 422's message for one field of the body, if it names it. */
function fieldProblem(failure, field) {
  const named = (failure.errors || []).find((each) => (each.loc || []).includes(field));
  return named ? named.msg : "";
}

function card(workspace, index) {
  const id = `ws-${index}`;
  const said = h("p", { class: "field-error", role: "alert" });
  const state = h("dd", { "data-state": workspace.id }, STATES[workspace.status] || workspace.status);
  const count = waiting.get(workspace.id) || 0;
  const article = h(
    "article",
    { class: "card", "data-workspace": workspace.id, "aria-labelledby": `${id}-title` },
    h("h2", { id: `${id}-title` }, workspace.name),
    h(
      "dl",
      { class: "facts" },
      h("dt", {}, "Id"),
      h("dd", {}, workspace.id),
      h("dt", {}, "State"),
      state,
      h("dt", {}, "Created"),
      h("dd", {}, when(workspace.created_at)),
      h("dt", {}, "Waiting calls"),
      h("dd", {}, count ? String(count) : "none"),
    ),
  );
  if (workspace.status === "deleting") return article;
  const nameField = h("input", { type: "text", id: `${id}-name`, value: workspace.name, maxlength: "255", autocomplete: "off", "aria-describedby": `${id}-name-error` });
  const nameError = h("p", { class: "field-error", id: `${id}-name-error`, role: "alert" });
  const rename = h(
    "form",
    { novalidate: true, "data-rename": workspace.id },
    h("label", { for: `${id}-name` }, `New name of ${workspace.name}`),
    nameField,
    nameError,
    h("div", { class: "actions" }, h("button", { type: "submit" }, "Rename")),
  );
  rename.addEventListener("submit", async (event) => {
    event.preventDefault();
    const name = nameField.value.trim();
    if (!name) return fieldError(nameField, nameError, "Give the workspace a name.");
    fieldError(nameField, nameError, "");
    try {
      await api("PUT", `/api/v1/workspaces/${encodeURIComponent(workspace.id)}`, { name });
      await load(true);
    } catch (failure) {
      fieldError(nameField, nameError, fieldProblem(failure, "name") || problemText(failure));
    }
  });
  article.append(rename);
  if (workspace.id === own) {
    article.append(h("p", { class: "help" }, "The platform's own workspace: it cannot be disabled nor deleted."));
    return article;
  }
  const act = async (method, path) => {
    show(said, "");
    try {
      await api(method, path);
      await load(true);
    } catch (failure) {
      show(said, problemText(failure));
    }
  };
  const base = `/api/v1/workspaces/${encodeURIComponent(workspace.id)}`;
  const toggle =
    workspace.status === "disabled"
      ? h("button", { type: "button", "data-enable": workspace.id, onclick: () => act("POST", `${base}/enable`) }, "Enable")
      : confirmButton("Disable", "Disable it: sure?", { "data-disable": workspace.id }, () => act("POST", `${base}/disable`));
  const remove = confirmButton("Delete the workspace", "Delete it and all it holds: sure?", { "data-delete": workspace.id }, () => act("DELETE", base));
  article.append(said, h("div", { class: "actions" }, toggle, remove));
  return article;
}

async function loadWaiting() {
  waiting = new Map();
  try {
    const page = await api("GET", "/api/v1/workspaces/pending-calls?limit=200");
    for (const item of page.items) waiting.set(item.workspace_id, item.pending);
  } catch {
    // the counts are a help, not the page: without them each says none
  }
}

async function load(reset) {
  const query = new URLSearchParams({ limit: "50" });
  if (!reset && cursor) query.set("cursor", cursor);
  show(problem, "");
  try {
    if (reset) await loadWaiting();
    const page = await api("GET", `/api/v1/workspaces?${query}`);
    if (reset) list.replaceChildren();
    const start = list.children.length;
    list.append(...page.items.map((workspace, index) => card(workspace, start + index)));
    cursor = page.next_cursor;
    more.hidden = !cursor;
    form.hidden = false;
    const count = list.children.length;
    show(status, `${count} workspace${count === 1 ? "" : "s"}.`);
  } catch (error) {
    list.replaceChildren();
    form.hidden = true;
    more.hidden = true;
    show(status, "");
    show(problem, error.status === 403 ? "Only the platform's admins manage workspaces: this key is not one of theirs." : `Could not load the workspaces: ${error.message}`);
  }
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const name = document.getElementById("ws-name");
  const nameError = document.getElementById("ws-name-error");
  const admin = document.getElementById("ws-admin");
  const adminError = document.getElementById("ws-admin-error");
  const error = document.getElementById("create-error");
  show(error, "");
  fieldError(admin, adminError, "");
  if (!name.value.trim()) return fieldError(name, nameError, "Give the workspace a name.");
  fieldError(name, nameError, "");
  const body = { name: name.value.trim() };
  if (admin.value.trim()) body.admin_name = admin.value.trim();
  try {
    const created = await api("POST", "/api/v1/workspaces", body);
    form.reset();
    const section = document.getElementById("new-workspace");
    document.getElementById("new-workspace-body").replaceChildren(
      h("dl", { class: "facts" }, h("dt", {}, "Workspace"), h("dd", {}, `${created.name} (${created.id})`), h("dt", {}, "Its first user"), h("dd", {}, created.admin_user_id)),
      copyBlock(`admin key of ${created.name}`, created.admin_api_key.key, "copy-workspace-key"),
    );
    section.hidden = false;
    section.focus();
    await load(true);
  } catch (failure) {
    const onName = fieldProblem(failure, "name");
    const onAdmin = fieldProblem(failure, "admin_name");
    if (onName || failure.code === "invalid_name") fieldError(name, nameError, onName || failure.message);
    else if (onAdmin) fieldError(admin, adminError, onAdmin);
    else show(error, problemText(failure));
  }
});
more.addEventListener("click", () => load(false));

startPage()
  .then(async (session) => {
    own = session.workspace_id; // a platform admin's key is of the platform's own workspace
    await load(true);
  })
  .catch((error) => show(problem, `The page could not start: ${error.message}`));
