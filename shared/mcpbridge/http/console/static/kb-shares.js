// A knowledge base's shares with other workspaces (its page's "Sharing" section): the workspaces it is shared with,
// sharing it with one more (read or write) and withdrawing a share, all through
// /api/v1/knowledge-bases/{kb_id}/shares. The section appears only when that list answers: the REST API decides who
// may share (the owner's admin with manage_knowledge, not limited to some knowledge bases).
import { api } from "./api.js";
import { confirmButton, fieldError, h, problemText, show, when } from "./dom.js";

const PERMISSIONS = { read: "read (search and read)", write: "write (also add, change and delete documents)" };
/** The field a refusal's code names. */
const CODE_FIELDS = {
  workspace_not_found: "workspace",
  share_with_self: "workspace",
  invalid_share_permission: "permission",
};
const LOC_FIELDS = { workspace_id: "workspace", permission: "permission" };

function element(id) {
  return document.getElementById(id);
}

function row(base, share, refresh) {
  const withdraw = confirmButton(
    "Withdraw",
    "Withdraw: sure?",
    { "data-withdraw": share.workspace_id, "aria-label": `Withdraw the share with ${share.workspace_id}` },
    async () => {
      try {
        await api("DELETE", `${base}/shares/${encodeURIComponent(share.workspace_id)}`);
      } catch (error) {
        show(element("share-error"), `Could not withdraw it: ${problemText(error)}`);
        return;
      }
      await refresh(`Share with ${share.workspace_id} withdrawn.`);
    },
  );
  return h(
    "tr",
    { "data-share": share.workspace_id, "data-permission": share.permission },
    h("td", {}, h("code", {}, share.workspace_id)),
    h("td", {}, PERMISSIONS[share.permission] || share.permission),
    h("td", {}, when(share.created_at)),
    h("td", {}, withdraw),
  );
}

/** Every share, page after page (a base is shared with few workspaces). */
async function allShares(base) {
  const found = [];
  let cursor = null;
  do {
    const query = new URLSearchParams({ limit: "200" });
    if (cursor) query.set("cursor", cursor);
    const page = await api("GET", `${base}/shares?${query}`);
    found.push(...page.items);
    cursor = page.next_cursor;
  } while (cursor);
  return found;
}

function clearErrors() {
  fieldError(element("share-workspace"), element("share-workspace-error"), "");
  fieldError(element("share-permission"), element("share-permission-error"), "");
  show(element("share-error"), "");
}

/** A refusal shown by the field it names (a 422's fields, or the problem's code), else under the form. */
function refused(error) {
  let placed = false;
  for (const each of error.errors || []) {
    const field = LOC_FIELDS[(each.loc || []).filter((part) => part !== "body" && part !== "path")[0]];
    if (!field) continue;
    fieldError(element(`share-${field}`), element(`share-${field}-error`), each.msg);
    placed = true;
  }
  const field = CODE_FIELDS[error.code];
  if (!placed && field) {
    fieldError(element(`share-${field}`), element(`share-${field}-error`), error.message);
    placed = true;
  }
  if (!placed) show(element("share-error"), problemText(error));
}

/** Shows the section when the REST API lists the base's shares for this key; false when it does not. */
export async function watchShares(base) {
  const rows = element("shares");
  const said = element("shares-status");
  async function refresh(message) {
    const shares = await allShares(base);
    rows.replaceChildren(...shares.map((share) => row(base, share, (done) => refresh(done).catch(failed))));
    element("shares-table").hidden = !shares.length;
    const none = shares.length ? "" : " Not shared with any other workspace.";
    show(said, `${message || ""}${none}`.trim());
  }
  function failed(error) {
    show(said, `Could not list the shares: ${problemText(error)}`);
  }
  try {
    await refresh();
  } catch (error) {
    if (error.status === 403 || error.status === 404) return false; // not a key that may share this base
    failed(error);
  }
  element("sharing").hidden = false;
  const form = element("share");
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearErrors();
    show(said, "");
    const workspace = element("share-workspace");
    const workspaceId = workspace.value.trim();
    if (!workspaceId) return fieldError(workspace, element("share-workspace-error"), "Give the workspace's id (ws_…).");
    const permission = element("share-permission").value;
    const button = form.querySelector("button[type=submit]");
    button.disabled = true;
    try {
      const share = await api("PUT", `${base}/shares/${encodeURIComponent(workspaceId)}`, { permission });
      form.reset();
      await refresh(`Shared with ${share.workspace_id} (${share.permission}).`);
    } catch (error) {
      refused(error);
    } finally {
      button.disabled = false;
    }
  });
  return true;
}

/** The share that gives this workspace the knowledge base (owner_workspace_id, permission, shared_at), or null when
 * the base is the workspace's own. */
export async function receivedShare(kbId) {
  let cursor = null;
  do {
    const query = new URLSearchParams({ limit: "200" });
    if (cursor) query.set("cursor", cursor);
    const page = await api("GET", `/api/v1/shared-knowledge-bases?${query}`);
    const found = page.items.find((kb) => kb.id === kbId);
    if (found) return found;
    cursor = page.next_cursor;
  } while (cursor);
  return null;
}

/** The facts a received base adds: whose it is and what the share allows. */
export function receivedFacts(shared) {
  const rows = [
    ["Shared by", shared.owner_workspace_id],
    ["Permission", PERMISSIONS[shared.permission] || shared.permission],
    ["Shared since", when(shared.shared_at)],
  ];
  element("facts").append(...rows.flatMap(([term, value]) => [h("dt", {}, term), h("dd", {}, value)]));
}
