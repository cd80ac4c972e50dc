// The workspace's groups (GET /api/v1/groups): each with its members, which an admin replaces by ticking users,
// and deletes (409 while a rule names it); a form to create one.
import { api } from "./api.js";
import { confirmButton, fieldError, h, problemText, show } from "./dom.js";
import { startPage } from "./layout.js";
import { managesServices } from "./powers.js";

const list = document.getElementById("groups");
const status = document.getElementById("status");
const problem = document.getElementById("problem");
const more = document.getElementById("more");
const form = document.getElementById("create");
const NAME = /^[a-z0-9][a-z0-9_.-]{0,63}$/;
let cursor = null;
let users = []; // the workspace's users, to tick (empty when this key may not list them)
let manages = false;

function nameOf(id) {
  const user = users.find((each) => each.id === id);
  return user ? user.name : id;
}

/** Checkboxes for the workspace's users, those in ``members`` ticked; ids not among them kept as ticked too. */
function boxes(prefix, members) {
  const known = new Set(users.map((user) => user.id));
  const ids = [...users.map((user) => user.id), ...members.filter((id) => !known.has(id))];
  return ids.map((id, index) =>
    h("label", { for: `${prefix}-${index}` }, h("input", { type: "checkbox", id: `${prefix}-${index}`, value: id, checked: members.includes(id) }), nameOf(id)),
  );
}

function ticked(fieldset) {
  return [...fieldset.querySelectorAll("input[type=checkbox]:checked")].map((box) => box.value);
}

function card(group, index) {
  const id = `group-${index}`;
  const said = h("p", { class: "field-error", role: "alert" });
  const done = h("p", { class: "status", role: "status", "aria-live": "polite" });
  const members = h("p", { "data-members": group.name }, group.members.length ? group.members.map(nameOf).join(", ") : "No member.");
  const article = h(
    "article",
    { class: "card", "data-group": group.name, "aria-labelledby": `${id}-title` },
    h("h2", { id: `${id}-title` }, group.name),
    group.description ? h("p", {}, group.description) : null,
    h("h3", {}, "Members"),
    members,
  );
  if (manages) {
    const fieldset = h("fieldset", { class: "checks" }, h("legend", {}, `Members of ${group.name}`), boxes(`${id}-m`, group.members));
    const save = h("button", { type: "submit", "data-save": group.name }, "Save the members");
    const edit = h("form", { novalidate: true, "data-edit": group.name }, fieldset, said, done, h("div", { class: "actions" }, save));
    edit.addEventListener("submit", async (event) => {
      event.preventDefault();
      show(said, "");
      save.disabled = true;
      try {
        const saved = await api("PUT", `/api/v1/groups/${encodeURIComponent(group.name)}`, { description: group.description, members: ticked(fieldset) });
        members.textContent = saved.members.length ? saved.members.map(nameOf).join(", ") : "No member.";
        show(done, `Saved: ${saved.members.length} member${saved.members.length === 1 ? "" : "s"}.`);
      } catch (failure) {
        show(said, problemText(failure));
      } finally {
        save.disabled = false;
      }
    });
    const remove = confirmButton("Delete the group", "Delete it: sure?", { "data-delete": group.name }, async () => {
      try {
        await api("DELETE", `/api/v1/groups/${encodeURIComponent(group.name)}`);
        await load(true);
      } catch (failure) {
        show(said, failure.status === 409 ? `A rule names ${group.name}: change the rules first.` : problemText(failure));
      }
    });
    article.append(edit, h("div", { class: "actions" }, remove));
  }
  return article;
}

async function load(reset) {
  const query = new URLSearchParams({ limit: "50" });
  if (!reset && cursor) query.set("cursor", cursor);
  try {
    const page = await api("GET", `/api/v1/groups?${query}`);
    if (reset) list.replaceChildren();
    const start = list.children.length;
    list.append(...page.items.map((group, index) => card(group, start + index)));
    cursor = page.next_cursor;
    more.hidden = !cursor;
    const count = list.children.length;
    show(status, count ? `${count} group${count === 1 ? "" : "s"}.` : "No group yet.");
  } catch (error) {
    show(status, "");
    show(problem, `Could not load the groups: ${error.message}`);
  }
}

async function loadUsers() {
  try {
    const page = await api("GET", "/api/v1/users?limit=200");
    users = page.items.filter((user) => user.status === "active");
  } catch {
    users = []; // this key may not list users: members show by id
  }
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const name = document.getElementById("gr-name");
  const nameError = document.getElementById("gr-name-error");
  const error = document.getElementById("create-error");
  show(error, "");
  if (!NAME.test(name.value.trim())) return fieldError(name, nameError, "1 to 64 lower-case letters, digits, _, . or -.");
  fieldError(name, nameError, "");
  const body = { name: name.value.trim(), description: document.getElementById("gr-description").value, members: ticked(document.getElementById("gr-members")) };
  try {
    await api("POST", "/api/v1/groups", body);
    form.reset();
    await load(true);
  } catch (failure) {
    if (failure.status === 409) fieldError(name, nameError, `A group named ${body.name} exists already.`);
    else show(error, problemText(failure));
  }
});
more.addEventListener("click", () => load(false));

startPage()
  .then(async (session) => {
    manages = managesServices(session);
    await loadUsers();
    const fieldset = document.getElementById("gr-members");
    fieldset.append(...boxes("gr-m", []));
    form.hidden = !manages;
    await load(true);
  })
  .catch((error) => show(problem, `The page could not start: ${error.message}`));
