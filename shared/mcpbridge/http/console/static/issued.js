// An endpoint as created or rotated: its URL, its token (shown this once) and every client configuration the REST
// API generated for it, each with a copy button. Nothing here is kept: leaving the page forgets the token.
import { copyBlock, h, pretty } from "./dom.js";

export function showIssued(section, issued) {
  const configs = issued.client_configs;
  section.querySelector("#issued-body").replaceChildren(
    h("dl", { class: "facts" }, h("dt", {}, "URL"), h("dd", {}, issued.url)),
    copyBlock("token", issued.token, "copy-token"),
    copyBlock("Cursor config (~/.cursor/mcp.json)", pretty(configs.cursor), "copy-cursor"),
    copyBlock("VS Code config (.vscode/mcp.json)", pretty(configs.vscode), "copy-vscode"),
    copyBlock("Claude Code command", configs.claude_code, "copy-claude"),
    copyBlock("mcp-remote config (Claude Desktop and other stdio clients)", pretty(configs.mcp_remote), "copy-mcp-remote"),
  );
  section.hidden = false;
  section.focus();
}

