// The knowledge bases the key may read (GET /api/v1/knowledge-bases), those other workspaces share with this one
// (GET /api/v1/shared-knowledge-bases), and a form to create one (admins with manage_knowledge, not limited to some
// knowledge bases: the REST API has the last word).
import { api } from "./api.js";
import { fieldError, h, problemText, show } from "./dom.js";
import { fillLanguages } from "./languages.js";
import { startPage } from "./layout.js";
import { createsKnowledgeBases } from "./powers.js";

const rows = document.getElementById("rows");
const status = document.getElementById("status");
const problem = document.getElementById("problem");
const more = document.getElementById("more");
const form = document.getElementById("create");
const name = document.getElementById("kb-name");
let cursor = null;

function row(kb) {
  return h(
    "tr",
    { "data-kb": kb.id },
    h("td", {}, h("a", { href: `/console/kbs/${encodeURIComponent(kb.id)}` }, kb.name)),
    h("td", {}, kb.description),
    h("td", {}, String(kb.document_count)),
    h("td", {}, kb.capabilities.join(", ")),
    h("td", {}, kb.language + (kb.reanalysis ? " (re-analysing)" : "")),
  );
}

async function load(reset) {
  const query = new URLSearchParams({ limit: "50" });
  if (!reset && cursor) query.set("cursor", cursor);
  try {
    const page = await api("GET", `/api/v1/knowledge-bases?${query}`);
    if (reset) rows.replaceChildren();
    rows.append(...page.items.map(row));
    cursor = page.next_cursor;
    more.hidden = !cursor;
    const count = rows.children.length;
    show(status, count ? `${count} knowledge base${count === 1 ? "" : "s"}.` : "No knowledge base yet.");
  } catch (error) {
    show(status, "");
    show(problem, `Could not load the knowledge bases: ${error.message}`);
  }
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const error = document.getElementById("create-error");
  const body = Object.fromEntries(new FormData(form));
  body.name = body.name.trim();
  if (!body.name) {
    fieldError(name, document.getElementById("kb-name-error"), "Give the knowledge base a name.");
    return;
  }
  fieldError(name, document.getElementById("kb-name-error"), "");
  body.language = body.language || "auto";
  const button = form.querySelector("button[type=submit]");
  button.disabled = true;
  try {
    const kb = await api("POST", "/api/v1/knowledge-bases", body);
    location.assign(`/console/kbs/${encodeURIComponent(kb.id)}`);
  } catch (failure) {
    button.disabled = false;
    if (failure.code === "conflict" || failure.status === 409) fieldError(name, document.getElementById("kb-name-error"), failure.message);
    else show(error, problemText(failure));
  }
});
more.addEventListener("click", () => load(false));

const sharedRows = document.getElementById("shared-rows");
const sharedStatus = document.getElementById("shared-status");
const sharedMore = document.getElementById("shared-more");
let sharedCursor = null;

function sharedRow(kb) {
  return h(
    "tr",
    { "data-shared-kb": kb.id, "data-permission": kb.permission },
    h("td", {}, h("a", { href: `/console/kbs/${encodeURIComponent(kb.id)}` }, kb.name)),
    h("td", {}, kb.description),
    h("td", {}, h("code", {}, kb.owner_workspace_id)),
    h("td", {}, kb.permission === "write" ? "read and write" : "read only"),
    h("td", {}, String(kb.document_count)),
  );
}

async function loadShared(reset) {
  const query = new URLSearchParams({ limit: "50" });
  if (!reset && sharedCursor) query.set("cursor", sharedCursor);
  try {
    const page = await api("GET", `/api/v1/shared-knowledge-bases?${query}`);
    if (reset) sharedRows.replaceChildren();
    sharedRows.append(...page.items.map(sharedRow));
    sharedCursor = page.next_cursor;
    sharedMore.hidden = !sharedCursor;
    const count = sharedRows.children.length;
    document.getElementById("shared-table").hidden = !count;
    show(sharedStatus, count ? `${count} shared with this workspace.` : "No other workspace shares a knowledge base with this one.");
  } catch (error) {
    show(sharedStatus, `Could not load the shared knowledge bases: ${problemText(error)}`);
  }
}
sharedMore.addEventListener("click", () => loadShared(false));

startPage()
  .then(async (session) => {
    form.hidden = !createsKnowledgeBases(session);
    if (!form.hidden) await fillLanguages(document.getElementById("kb-language"), "auto");
    await Promise.all([load(true), loadShared(true)]);
  })
  .catch((error) => show(problem, `The page could not start: ${error.message}`));
