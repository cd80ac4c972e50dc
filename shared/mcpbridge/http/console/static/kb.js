// One knowledge base (/console/kbs/{kb_id}): its documents with their parse status (followed until indexed), file
// uploads with their progress, a document from text or a URL, deleting one, and a search playground; its shares with
// other workspaces (kb-shares.js). A base shared with this workspace offers only what its share allows.
import { api, upload } from "./api.js";
import { confirmButton, fieldError, h, problemText, show, size, when } from "./dom.js";
import { receivedFacts, receivedShare, watchShares } from "./kb-shares.js";
import { fillLanguages } from "./languages.js";
import { startPage } from "./layout.js";
import { managesKnowledge, writesDocuments } from "./powers.js";

const id = decodeURIComponent(location.pathname.split("/").pop());
const base = `/api/v1/knowledge-bases/${encodeURIComponent(id)}`;
const problem = document.getElementById("problem");
const status = document.getElementById("status");
const docs = document.getElementById("docs");
const docsStatus = document.getElementById("docs-status");
const more = document.getElementById("more");
const WORKING = new Set(["pending", "processing"]);
let cursor = null;
let canWrite = false;
let timer = null;

function facts(kb) {
  const rows = [
    ["Description", kb.description || "—"],
    ["Documents", String(kb.document_count)],
    ["Search", kb.capabilities.join(", ")],
    ["Keyword language", kb.language + (kb.reanalysis ? " (re-analysing the index)" : "")],
    ["Id", kb.id],
    ["Created", when(kb.created_at)],
  ];
  document.getElementById("facts").replaceChildren(...rows.flatMap(([term, value]) => [h("dt", {}, term), h("dd", {}, value)]));
}

function statusCell(doc) {
  const text = doc.parse_status === "failed" ? `failed: ${doc.parse_error || "no reason given"}` : doc.parse_status;
  return h("td", { class: `parse ${doc.parse_status}` }, text);
}

function row(doc) {
  const remove = canWrite ? confirmButton("Delete", "Delete: sure?", { "data-delete": doc.id }, () => removeDoc(doc)) : "";
  return h(
    "tr",
    { "data-doc": doc.id, "data-status": doc.parse_status },
    h("td", {}, doc.title, doc.url ? h("span", { class: "help" }, ` ${doc.url}`) : ""),
    statusCell(doc),
    h("td", {}, size(doc.size_bytes)),
    h("td", {}, String(doc.line_count)),
    h("td", {}, when(doc.created_at)),
    h("td", {}, remove),
  );
}

async function removeDoc(doc) {
  try {
    await api("DELETE", `/api/v1/documents/${encodeURIComponent(doc.id)}`);
    show(docsStatus, `“${doc.title}” deleted.`);
    await loadDocs(true);
  } catch (error) {
    show(problem, `Could not delete “${doc.title}”: ${problemText(error)}`);
  }
}

async function loadDocs(reset) {
  const query = new URLSearchParams({ limit: "50" });
  if (!reset && cursor) query.set("cursor", cursor);
  try {
    const page = await api("GET", `${base}/documents?${query}`);
    if (reset) docs.replaceChildren();
    docs.append(...page.items.map(row));
    cursor = page.next_cursor;
    more.hidden = !cursor;
    const working = docs.querySelectorAll("tr[data-status=pending], tr[data-status=processing]").length;
    const count = docs.children.length;
    show(docsStatus, count ? `${count} document${count === 1 ? "" : "s"}${working ? `, ${working} being indexed` : ""}.` : "No document yet.");
    follow(working > 0);
  } catch (error) {
    show(problem, `Could not load the documents: ${error.message}`);
  }
}

/** While a document is being indexed, the list is read again every two seconds. */
function follow(yes) {
  if (yes && timer === null) timer = setInterval(() => loadDocs(true), 2000);
  if (!yes && timer !== null) {
    clearInterval(timer);
    timer = null;
  }
}

// ------------------------------------------------------------------------------------------------ adding

const fileField = document.getElementById("file");
const uploads = document.getElementById("uploads");

async function sendFile(file) {
  const bar = h("progress", { max: "100", value: "0", "aria-label": `Upload of ${file.name}` });
  const said = h("span", { class: "upload-state" }, "waiting");
  const item = h("li", { "data-upload": file.name }, h("span", { class: "upload-name" }, file.name), bar, said);
  uploads.append(item);
  const form = new FormData();
  form.append("file", file, file.name);
  try {
    const doc = await upload(`${base}/documents/upload`, form, (loaded, total) => {
      bar.value = Math.round((loaded / total) * 100);
      said.textContent = `${size(loaded)} of ${size(total)}`;
    });
    bar.value = 100;
    said.textContent = `uploaded: ${doc.parse_status}`;
    item.dataset.done = doc.id;
  } catch (error) {
    item.dataset.failed = error.code || "failed";
    said.textContent = `refused: ${problemText(error)}`;
    said.className = "upload-state field-error";
  }
}

document.getElementById("upload").addEventListener("submit", async (event) => {
  event.preventDefault();
  const error = document.getElementById("upload-error");
  const files = [...fileField.files];
  if (!files.length) {
    fieldError(fileField, error, "Choose one or more files first.");
    return;
  }
  fieldError(fileField, error, "");
  for (const file of files) await sendFile(file);
  fileField.value = "";
  await loadDocs(true);
});

document.getElementById("add-text").addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = event.target;
  const error = document.getElementById("add-error");
  const title = form.title.value.trim();
  const url = form.url.value.trim();
  const content = form.content.value;
  if (!title) return fieldError(form.title, error, "Give the document a title.");
  if (!url === !content.trim()) return fieldError(url ? form.url : form.content, error, "Give a URL or the text, not both.");
  fieldError(form.title, error, "");
  try {
    await api("POST", `${base}/documents`, url ? { title, url } : { title, content });
    form.reset();
    await loadDocs(true);
  } catch (failure) {
    show(error, problemText(failure));
  }
});

// ------------------------------------------------------------------------------------------------ search

function hit(result) {
  const where = `${result.document_title} · lines ${result.start_line}–${result.end_line} · score ${result.score.toFixed(4)}`;
  return h(
    "li",
    { class: "hit", "data-document": result.document_id },
    h("p", { class: "hit-where" }, where),
    result.heading_path.length ? h("p", { class: "help" }, result.heading_path.join(" › ")) : "",
    h("pre", { class: "json" }, result.text),
  );
}

document.getElementById("search").addEventListener("submit", async (event) => {
  event.preventDefault();
  const query = document.getElementById("q");
  const error = document.getElementById("search-error");
  const said = document.getElementById("search-status");
  const hits = document.getElementById("hits");
  if (!query.value.trim()) return fieldError(query, error, "Type what to search for.");
  fieldError(query, error, "");
  show(said, "Searching…");
  try {
    const mode = document.getElementById("mode").value;
    const found = await api("POST", "/api/v1/knowledge/search", { query: query.value.trim(), mode, limit: 10, knowledge_base_ids: [id] });
    hits.replaceChildren(...found.results.map(hit));
    const notes = found.notices.length ? ` ${found.notices.join(" ")}` : "";
    show(said, `${found.results.length} hit${found.results.length === 1 ? "" : "s"} (${found.mode}).${notes}`);
  } catch (failure) {
    show(said, "");
    fieldError(query, error, problemText(failure));
  }
});

more.addEventListener("click", () => loadDocs(false));

const settings = document.getElementById("settings");
const SETTING_FIELDS = ["name", "description", "language"];

function named(kb) {
  document.getElementById("title").textContent = kb.name;
  document.title = `${kb.name} · mcpbridge`;
  facts(kb);
}

async function fillSettings(kb) {
  document.getElementById("kb-set-name").value = kb.name;
  document.getElementById("kb-set-description").value = kb.description || "";
  await fillLanguages(document.getElementById("kb-set-language"), kb.language);
}

/** A refusal shown by the field it names (a 422's fields, or an unknown language), else under the form. */
function settingsRefused(error) {
  let placed = false;
  for (const each of error.errors || []) {
    const field = (each.loc || []).filter((part) => part !== "body")[0];
    if (!SETTING_FIELDS.includes(field)) continue;
    fieldError(document.getElementById(`kb-set-${field}`), document.getElementById(`kb-set-${field}-error`), each.msg);
    placed = true;
  }
  if (!placed && (error.code === "invalid_language" || error.details?.field === "language")) {
    fieldError(document.getElementById("kb-set-language"), document.getElementById("kb-set-language-error"), error.message);
    placed = true;
  }
  if (!placed) show(document.getElementById("settings-error"), problemText(error));
}

async function watchSettings(kb) {
  await fillSettings(kb);
  document.getElementById("settings-place").hidden = false;
  settings.addEventListener("submit", async (event) => {
    event.preventDefault();
    for (const field of SETTING_FIELDS) fieldError(document.getElementById(`kb-set-${field}`), document.getElementById(`kb-set-${field}-error`), "");
    show(document.getElementById("settings-error"), "");
    const name = document.getElementById("kb-set-name");
    if (!name.value.trim()) return fieldError(name, document.getElementById("kb-set-name-error"), "Give the knowledge base a name.");
    const body = {
      name: name.value.trim(),
      description: document.getElementById("kb-set-description").value,
      language: document.getElementById("kb-set-language").value,
    };
    const button = settings.querySelector("button[type=submit]");
    button.disabled = true;
    try {
      const saved = await api("PUT", base, body);
      named(saved);
      await fillSettings(saved);
      show(status, "Settings saved.");
    } catch (error) {
      settingsRefused(error);
    } finally {
      button.disabled = false;
    }
  });
}

async function main() {
  const session = await startPage();
  let kb;
  try {
    kb = await api("GET", base);
  } catch (error) {
    show(status, "");
    show(problem, error.status === 404 ? "No such knowledge base (or not one this key may read)." : `Could not load it: ${error.message}`);
    return;
  }
  named(kb);
  const received = await receivedShare(id).catch(() => null);
  if (received) receivedFacts(received);
  show(status, "");
  if (!received && managesKnowledge(session)) await watchSettings(kb);
  if (!received) await watchShares(base);
  canWrite = writesDocuments(session) && (!received || received.permission === "write");
  document.getElementById("add").hidden = !canWrite;
  await loadDocs(true);
}

main().catch((error) => show(problem, `The page could not start: ${error.message}`));
