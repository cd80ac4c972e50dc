// The tools the quarantine holds (GET /api/v1/tool-quarantine), each with the difference between its approved and
// current definitions (the REST diff, line by line) and an Approve button that names the definition reviewed; and
// a service's rule for tools that appear after its first catalog.
import { api } from "./api.js";
import { h, problemText, show, when } from "./dom.js";
import { startPage } from "./layout.js";
import { managesServices } from "./powers.js";

const held = document.getElementById("held");
const status = document.getElementById("status");
const problem = document.getElementById("problem");
const more = document.getElementById("more");
const form = document.getElementById("new-tools");
const serviceField = document.getElementById("nt-service");
const rule = document.getElementById("nt-rule");
let cursor = null;
let approves = false;

function toolPath(tool) {
  return `/api/v1/mcp-services/${encodeURIComponent(tool.service_id)}/quarantine/${encodeURIComponent(tool.tool_name)}`;
}

/** A unified diff as lines, each marked added, removed or context (text only: the definitions are untrusted). */
function diffBlock(diff, id) {
  const lines = diff.split("\n").filter((line, index, all) => line || index < all.length - 1);
  const marked = lines.map((line) => {
    const kind = line.startsWith("+++") || line.startsWith("---") ? "head" : line.startsWith("@@") ? "hunk" : line.startsWith("+") ? "added" : line.startsWith("-") ? "removed" : "same";
    return h("span", { class: `diff-${kind}` }, `${line}\n`);
  });
  return h("pre", { class: "json diff", id, tabindex: "0", "aria-label": "Difference, unified diff" }, marked);
}

function renumber() {
  const count = held.children.length;
  show(status, count ? `${count} held tool${count === 1 ? "" : "s"}.` : "No tool is held.");
}

function card(tool, index) {
  const id = `held-${index}`;
  const body = h("div", {}, h("p", { class: "status", role: "status" }, "Loading the difference…"));
  const article = h(
    "article",
    { class: "card", "data-tool": `${tool.service_id}/${tool.tool_name}`, "aria-labelledby": `${id}-title` },
    h("h2", { id: `${id}-title` }, `${tool.tool_name} · ${tool.service_name}`),
    h(
      "dl",
      { class: "facts" },
      h("dt", {}, "Why held"),
      h("dd", {}, tool.reason === "new" ? "new: appeared after the first catalog" : "changed since it was approved"),
      h("dt", {}, "Seen"),
      h("dd", {}, when(tool.seen_at) || "not yet"),
    ),
    body,
  );
  api("GET", toolPath(tool))
    .then((difference) => {
      const said = h("p", { class: "field-error", role: "alert" });
      const done = h("p", { class: "status", role: "status", "aria-live": "polite" });
      const parts = [
        h("h3", {}, difference.changed_fields.length ? `Changed: ${difference.changed_fields.join(", ")}` : "Definition"),
        difference.diff ? diffBlock(difference.diff, `${id}-diff`) : h("pre", { class: "json", tabindex: "0", "aria-label": "Current definition" }, JSON.stringify(difference.current_definition, null, 2)),
        said,
        done,
      ];
      if (approves) {
        const button = h("button", { type: "button", class: "primary", "data-approve": `${tool.service_id}/${tool.tool_name}` }, `Approve ${tool.tool_name}`);
        button.addEventListener("click", async () => {
          button.disabled = true;
          show(said, "");
          try {
            // The hash of the definition shown above: if it changed again since, the server answers 409.
            await api("POST", `${toolPath(tool)}/approve`, { definition_hash: difference.tool.current_hash });
            article.remove();
            renumber();
            show(status, `${status.textContent} Approved ${tool.tool_name}: agents describe it again to call it.`);
          } catch (failure) {
            button.disabled = false;
            if (failure.status === 409) show(said, "The tool changed again since this difference was loaded: reload the page and review it again.");
            else show(said, problemText(failure));
          }
        });
        parts.push(h("div", { class: "actions" }, button));
      }
      body.replaceChildren(...parts);
    })
    .catch((failure) => body.replaceChildren(h("p", { class: "alert", role: "alert" }, `Could not load the difference: ${failure.message}`)));
  return article;
}

async function load(reset) {
  const query = new URLSearchParams({ limit: "50" });
  if (!reset && cursor) query.set("cursor", cursor);
  try {
    const page = await api("GET", `/api/v1/tool-quarantine?${query}`);
    if (reset) held.replaceChildren();
    const start = held.children.length;
    held.append(...page.items.map((tool, index) => card(tool, start + index)));
    cursor = page.next_cursor;
    more.hidden = !cursor;
    renumber();
  } catch (error) {
    show(status, "");
    show(problem, `Could not load the held tools: ${error.message}`);
  }
}

async function loadRule() {
  show(document.getElementById("new-tools-status"), "");
  if (!serviceField.value) return;
  try {
    const settings = await api("GET", `/api/v1/mcp-services/${encodeURIComponent(serviceField.value)}/quarantine`);
    rule.value = settings.new_tools;
  } catch (failure) {
    show(document.getElementById("new-tools-error"), problemText(failure));
  }
}

async function loadServices() {
  const services = await api("GET", "/api/v1/mcp-services?limit=100");
  const own = services.items.filter((service) => !service.builtin);
  serviceField.replaceChildren(...own.map((service) => h("option", { value: service.id }, service.name)));
  form.hidden = own.length === 0;
  await loadRule();
}

serviceField.addEventListener("change", loadRule);
form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const error = document.getElementById("new-tools-error");
  const said = document.getElementById("new-tools-status");
  show(error, "");
  try {
    const settings = await api("PUT", `/api/v1/mcp-services/${encodeURIComponent(serviceField.value)}/quarantine`, { new_tools: rule.value });
    show(said, settings.new_tools === "hold" ? "Saved: new tools are held." : "Saved: new tools are approved as they appear.");
  } catch (failure) {
    show(error, problemText(failure));
  }
});
more.addEventListener("click", () => load(false));

startPage()
  .then(async (session) => {
    approves = managesServices(session);
    rule.disabled = !approves;
    document.getElementById("nt-save").hidden = !approves;
    await load(true);
    await loadServices();
  })
  .catch((error) => show(problem, `The page could not start: ${error.message}`));
