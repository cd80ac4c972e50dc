// The workspace's webhooks (GET /api/v1/webhooks): add one (its signing secret shown once, in this page only),
// delete one, and read one's deliveries log (GET /api/v1/webhooks/{id}/deliveries).
import { api } from "./api.js";
import { confirmButton, copyBlock, fieldError, h, problemText, show, when } from "./dom.js";
import { startPage } from "./layout.js";
import { managesServices } from "./powers.js";

const rows = document.getElementById("rows");
const status = document.getElementById("status");
const problem = document.getElementById("problem");
const more = document.getElementById("more");
const form = document.getElementById("add");
const log = document.getElementById("log");
let cursor = null;
let manages = false;

function attempts(delivery) {
  return delivery.attempts.map((each) => `${when(each.at)}: ${each.status_code ?? each.error ?? "?"}`).join("; ") || "none yet";
}

async function showLog(webhook) {
  log.hidden = false;
  document.getElementById("log-title").textContent = `Deliveries to ${webhook.url}`;
  const said = document.getElementById("log-status");
  const body = document.getElementById("deliveries");
  show(said, "Loading the deliveries…");
  try {
    const page = await api("GET", `/api/v1/webhooks/${encodeURIComponent(webhook.id)}/deliveries?limit=100`);
    body.replaceChildren(
      ...page.items.map((delivery) =>
        h("tr", { "data-delivery": delivery.id, "data-status": delivery.status }, h("td", {}, when(delivery.created_at)), h("td", {}, delivery.event), h("td", {}, delivery.call_id), h("td", {}, delivery.status), h("td", {}, attempts(delivery))),
      ),
    );
    show(said, page.items.length ? `${page.items.length} deliver${page.items.length === 1 ? "y" : "ies"}, newest first.` : "No delivery yet.");
  } catch (failure) {
    show(said, `Could not load the deliveries: ${failure.message}`);
  }
}

function row(webhook) {
  const actions = [h("button", { type: "button", "data-log": webhook.id, onclick: () => showLog(webhook) }, "Deliveries")];
  if (manages) {
    actions.push(
      confirmButton("Delete", "Delete: sure?", { "data-delete": webhook.id }, () =>
        api("DELETE", `/api/v1/webhooks/${encodeURIComponent(webhook.id)}`).then(
          () => {
            log.hidden = true;
            return load(true);
          },
          (failure) => show(problem, `Could not delete the webhook: ${problemText(failure)}`),
        ),
      ),
    );
  }
  return h(
    "tr",
    { "data-webhook": webhook.id },
    h("td", {}, webhook.url),
    h("td", {}, webhook.format),
    h("td", {}, webhook.events.join(", ")),
    h("td", {}, webhook.description),
    h("td", {}, when(webhook.created_at)),
    h("td", {}, h("div", { class: "actions" }, actions)),
  );
}

async function load(reset) {
  const query = new URLSearchParams({ limit: "50" });
  if (!reset && cursor) query.set("cursor", cursor);
  try {
    const page = await api("GET", `/api/v1/webhooks?${query}`);
    if (reset) rows.replaceChildren();
    rows.append(...page.items.map(row));
    cursor = page.next_cursor;
    more.hidden = !cursor;
    const count = rows.children.length;
    show(status, count ? `${count} webhook${count === 1 ? "" : "s"}.` : "No webhook yet.");
  } catch (error) {
    show(status, "");
    show(problem, `Could not load the webhooks: ${error.message}`);
  }
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const url = document.getElementById("wh-url");
  const urlError = document.getElementById("wh-url-error");
  const eventsError = document.getElementById("wh-events-error");
  const error = document.getElementById("add-error");
  show(error, "");
  if (!/^https?:\/\/\S+$/i.test(url.value.trim())) return fieldError(url, urlError, "An https:// URL (http:// only for allowlisted hosts).");
  fieldError(url, urlError, "");
  const events = [...document.querySelectorAll("#wh-events input:checked")].map((box) => box.value);
  if (!events.length) return show(eventsError, "Tick at least one event.");
  show(eventsError, "");
  const body = { url: url.value.trim(), format: document.getElementById("wh-format").value, events, description: document.getElementById("wh-description").value };
  const button = form.querySelector("button[type=submit]");
  button.disabled = true;
  try {
    const created = await api("POST", "/api/v1/webhooks", body);
    form.reset();
    const place = document.getElementById("created");
    place.replaceChildren(
      h(
        "section",
        { class: "card", "aria-labelledby": "created-title" },
        h("h2", { id: "created-title" }, `Added: ${created.url}`),
        h("p", {}, "Its signing secret is shown this once: keep it where the receiver verifies X-Mcpbridge-Signature. Leaving this page forgets it."),
        copyBlock("signing secret", created.signing_secret, "secret"),
      ),
    );
    await load(true);
    place.querySelector("pre").focus();
  } catch (failure) {
    if (/^url_/.test(failure.code)) fieldError(url, urlError, failure.message);
    else show(error, problemText(failure));
  } finally {
    button.disabled = false;
  }
});
more.addEventListener("click", () => load(false));

startPage()
  .then((session) => {
    manages = managesServices(session);
    form.hidden = !manages;
    return load(true);
  })
  .catch((error) => show(problem, `The page could not start: ${error.message}`));
