"""Parameter types every REST route shares, so each is described once, in the same words, in
``/api/v1/openapi.json``: list paging (``?limit=&cursor=``) and the ids in paths. The time format of bodies is
:data:`mcpbridge.http.views.Timestamp`, which the MCP tools' views use too."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path

# ---------------------------------------------------------------------------------------------------- path ids

KnowledgeBaseId = Annotated[str, Path(description="The knowledge base's id (`kb_...`).")]
DocumentId = Annotated[str, Path(description="The document's id (`doc_...`), as lists and search results give it.")]
UploadId = Annotated[
    str, Path(description="The upload's id (`upl_...`, the `upload_id` of the answer that started it).")
]
WikiSlug = Annotated[str, Path(description="The page's slug; it may contain `/` (e.g. `concept/rag`).")]
ApiKeyId = Annotated[str, Path(description="The API key's id (`key_...`), not the key itself.")]
UserId = Annotated[str, Path(description="The user's id (`usr_...`).")]
WorkspaceId = Annotated[str, Path(description="The workspace's id (`ws_...`).")]
EndpointId = Annotated[str, Path(description="The MCP endpoint's id (`ep_...`).")]
ServiceId = Annotated[str, Path(description="The external MCP service's id (`svc_...`, or a builtin service's id).")]
CredentialField = Annotated[str, Path(description="The secret to clear: `api_key`, `token` or `client_secret`.")]
ToolName = Annotated[str, Path(description="The tool's name, as the service's catalog lists it.")]
AgentId = Annotated[str, Path(description="The agent profile's id (`agt_...`).")]
CallId = Annotated[str, Path(description="The tool call's id (`call_...`: `pending_id` in its answers).")]
PendingId = Annotated[str, Path(description="The paused call's `pending_id` (`call_...`).")]
