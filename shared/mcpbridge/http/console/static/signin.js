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


// Already signed in? A link from another site (a chat message, a mail) arrives without the SameSite=Strict cookie,
// and the server sends it here; this page's own request carries the cookie, and the person goes on to the link.
api("GET", "/console/session").then(
  () => location.replace(destination()),
  () => field.focus(),
);
