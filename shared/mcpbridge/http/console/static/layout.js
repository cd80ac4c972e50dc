// What every signed-in page does first: who is signed in in the header, and the sign-out button.
import { loadSession, signOut } from "./api.js";

export async function startPage() {
  const session = await loadSession();
  const who = document.getElementById("who");
  const name = session.user_name || session.user_id;
  const powers = session.can_approve_calls ? "approver" : session.role;
  who.textContent = `${name} · ${session.workspace_name} · ${powers}`;
  // Links for the platform's admins only (the REST API refuses anyone else anyway).
  for (const link of document.querySelectorAll("[data-platform-admin]")) link.hidden = !session.is_platform_admin;
  document.getElementById("sign-out").addEventListener("click", async () => {
    try {
      await signOut();
    } finally {
      location.assign("/console/signin");
    }
  });
  return session;
}
