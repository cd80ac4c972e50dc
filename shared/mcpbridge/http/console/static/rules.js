// The workspace's rules for tool calls (GET /api/v1/policy-rules): the current set as rows and as JSON, the switch
// between enforce and log-only, and the set edited as JSON, saved with the version read (409: changed since).
import { api } from "./api.js";
import { fieldError, h, pretty, problemText, show, when } from "./dom.js";
import { startPage } from "./layout.js";
import { managesServices } from "./powers.js";

const status = document.getElementById("status");
const problem = document.getElementById("problem");
const rows = document.getElementById("rows");
const field = document.getElementById("rules-json");
const fieldErrorText = document.getElementById("rules-error");
const editStatus = document.getElementById("edit-status");
const mode = document.getElementById("mode");
let loaded = null; // the rule set as this page read it: its version is what a save expects

function brief(value) {
  return value === undefined || value === null ? "" : JSON.stringify(value);
}

function detailsOf(rule) {
  const parts = [];
  if (rule.reason) parts.push(`reason: ${rule.reason}`);
  if (rule.approvers) parts.push(`approvers: ${brief(rule.approvers)}`);
  if (rule.redact) parts.push(`redacts: ${brief(rule.redact)}`);
  if (rule.description) parts.push(rule.description);
  return parts.join("; ");
}

function render(set) {
  loaded = set;
  const facts = document.getElementById("facts");
  const pairs = [
    ["Version", set.version ? String(set.version) : "none saved yet (0)"],
    ["Mode", set.mode === "log_only" ? "log-only: decisions recorded, none acted on" : "enforce"],
    ["Default", set.default],
    ["Updated", set.updated_at ? `${when(set.updated_at)}${set.updated_by ? ` by ${set.updated_by}` : ""}` : "never"],
  ];
  facts.replaceChildren(...pairs.flatMap(([term, value]) => [h("dt", {}, term), h("dd", { "data-fact": term.toLowerCase() }, value)]));
  rows.replaceChildren(
    ...set.rules.map((rule, index) =>
      h("tr", { "data-rule": rule.id || "" }, h("td", {}, String(index + 1)), h("td", {}, rule.id || ""), h("td", {}, rule.outcome || ""), h("td", {}, h("code", {}, brief(rule.match) || "every call")), h("td", {}, detailsOf(rule))),
    ),
  );
  const body = { mode: set.mode, default: set.default, rules: set.rules };
  document.getElementById("current-json").textContent = pretty(body);
  field.value = pretty(body);
  mode.value = set.mode;
  show(status, set.rules.length ? `Version ${set.version}: ${set.rules.length} rule${set.rules.length === 1 ? "" : "s"}, ${set.mode === "log_only" ? "log-only" : "enforced"}.` : `Version ${set.version}: no rule; the default (${set.default}) decides every call.`);
}

async function load() {
  try {
    render(await api("GET", "/api/v1/policy-rules"));
    show(problem, "");
  } catch (error) {
    show(status, "");
    show(problem, `Could not load the rules: ${error.message}`);
  }
}

document.getElementById("edit").addEventListener("submit", async (event) => {
  event.preventDefault();
  show(editStatus, "");
  let body;
  try {
    body = JSON.parse(field.value);
  } catch (failure) {
    return fieldError(field, fieldErrorText, `Not valid JSON: ${failure.message}`);
  }
  if (!body || typeof body !== "object" || Array.isArray(body)) return fieldError(field, fieldErrorText, 'The rule set is an object: {"mode": …, "default": …, "rules": [ … ]}.');
  fieldError(field, fieldErrorText, "");
  const button = document.getElementById("rules-save");
  button.disabled = true;
  try {
    const saved = await api("PUT", "/api/v1/policy-rules", { ...body, expected_version: loaded.version });
    render(saved);
    show(editStatus, `Saved as version ${saved.version}.`);
  } catch (failure) {
    if (failure.status === 409) {
      fieldError(field, fieldErrorText, `The rules changed since you loaded them (you edited version ${loaded.version}): nothing was saved. Reload the current rules, then make your change again.`);
    } else {
      const where = failure.details && failure.details.field ? ` (at ${failure.details.field})` : "";
      fieldError(field, fieldErrorText, `${problemText(failure)}${where} Nothing was saved.`);
    }
  } finally {
    button.disabled = false;
  }
});

document.getElementById("reload").addEventListener("click", async () => {
  fieldError(field, fieldErrorText, "");
  await load();
  show(editStatus, `Loaded version ${loaded ? loaded.version : 0}.`);
});

document.getElementById("mode-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const error = document.getElementById("mode-error");
  show(error, "");
  try {
    render(await api("PUT", "/api/v1/policy-rules/mode", { mode: mode.value }));
    show(document.getElementById("mode-status"), mode.value === "enforce" ? "The rules are enforced." : "The rules only log from now on.");
  } catch (failure) {
    show(error, failure.status === 404 ? "Save a rule set first: there is none to switch." : problemText(failure));
  }
});

startPage()
  .then((session) => {
    const manages = managesServices(session);
    document.getElementById("edit").hidden = !manages;
    document.getElementById("mode-form").hidden = !manages;
    return load();
  })
  .catch((error) => show(problem, `The page could not start: ${error.message}`));
