// The sign-in form: the key goes to POST /console/session as JSON, which sets the session cookie.
import { api, signIn } from "./api.js";

const form = document.getElementById("sign-in");
const field = document.getElementById("api-key");
const error = document.getElementById("key-error");

function destination() {
  const next = new URLSearchParams(location.search).get("next") || "";
  // Only a page of the console: never another site, nor a path this form could be tricked into leaving for.
  return /^\/console([/?][A-Za-z0-9_\-/.%?=&]*)?$/.test(next) && !next.startsWith("//") && !next.includes("..") ? next : "/console";
}

function fail(message) {
  error.textContent = message;
  field.setAttribute("aria-invalid", "true");
  field.focus();
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const key = field.value.trim();
  if (!key) {
    fail("Paste an API key first.");
    return;
  }
  const button = form.querySelector("button[type=submit]");
  button.disabled = true;
  try {
    await signIn(key);
    field.value = "";
    location.assign(destination());
  } catch (problem) {
    button.disabled = false;
    fail(problem.status === 401 ? "This key is not valid (or was revoked)." : problem.message);
  }
});


// The provider's button (present only where one is configured): a navigation to /console/oidc/start, which goes
// on to the provider (a form's submission could not, the page's form-action being 'self').
const provider = document.getElementById("oidc-sign-in");
const PROVIDER_ERRORS = {
  user_unknown: "No user of this workspace signs in as you: ask its admin to add you.",
  user_inactive: "Your account is disabled or being deleted.",
  domain_not_allowed: "Your e-mail domain may not sign in here.",
  workspace_not_found: "There is no such workspace: check its id or name.",
  workspace_ambiguous: "Several workspaces have this name: use the workspace's id.",
  workspace_inactive: "This workspace is disabled.",
  console_session_ended: "Your account or its workspace is no longer active.",
  oidc_denied: "The identity provider did not sign you in.",
  oidc_browser_mismatch: "This sign-in was started in another browser: start again here.",
  oidc_unavailable: "The identity provider cannot be reached now: try again later.",
};
if (provider) {
  const workspace = document.getElementById("oidc-workspace");
  const said = new URLSearchParams(location.search).get("oidc_error");
  if (said) {
    document.getElementById("oidc-error").textContent =
      PROVIDER_ERRORS[said] || "The sign-in with the identity provider failed: start again.";
    if (said.startsWith("workspace_")) workspace.setAttribute("aria-invalid", "true"); // the field is what is wrong
  }
  provider.addEventListener("submit", (event) => {
    event.preventDefault();
    const query = new URLSearchParams({ next: destination() });
    if (workspace.value.trim()) query.set("workspace", workspace.value.trim());
    location.assign(`/console/oidc/start?${query}`);
  });
}

// Already signed in? A link from another site (a chat message, a mail) arrives without the SameSite=Strict cookie,
// and the server sends it here; this page's own request carries the cookie, and the person goes on to the link.
api("GET", "/console/session").then(
  () => location.replace(destination()),
  () => {
    if (!new URLSearchParams(location.search).get("oidc_error")) field.focus();
  },
);
