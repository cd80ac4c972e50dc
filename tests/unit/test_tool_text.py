"""What a tool is searched by (``agent.tool_search.tool_text``) and which tools the index holds at all."""

from __future__ import annotations

import dataclasses

from mcpbridge.agent.tool_search import MAX_TEXT_CHARS, document_id, indexed, tool_text
from mcpbridge.domain.external_services import AdvancedConfig, AuthConfig, ExternalService
from mcpbridge.domain.text_tokens import search_tokens

SERVICE = ExternalService(
    id="svc_1",
    workspace_id="ws_1",
    name="GitLab",
    description="Our self-hosted forge",
    enabled=True,
    transport="http-streamable",
    url="http://127.0.0.1:9/mcp",
    headers={},
    auth=AuthConfig(),
    advanced=AdvancedConfig(),
    usage_instructions="",
    catalog_stale=False,
    created_at="2026-01-01T00:00:00Z",
    updated_at="2026-01-01T00:00:00Z",
    version=1,
)


def test_the_text_holds_names_split_title_description_parameters_and_the_service() -> None:
    text = tool_text(
        SERVICE,
        {
            "name": "createMergeRequest",
            "title": "New MR",
            "description": "Open a merge request",
            "inputSchema": {
                "type": "object",
                "properties": {"source_branch": {"description": "Branch to merge from"}, "draftMode": {}},
            },
        },
    )
    terms = set(search_tokens(text))
    assert {"createmergerequest", "create", "merge", "request", "new", "mr", "open"} <= terms
    assert {"source", "branch", "from", "draft", "mode"} <= terms
    assert {"gitlab", "self", "hosted", "forge"} <= terms


def test_a_huge_definition_is_capped() -> None:
    text = tool_text(SERVICE, {"name": "x", "description": "word " * 5000})
    assert len(text) == MAX_TEXT_CHARS


def test_only_enabled_tools_of_enabled_services_are_indexed_and_documents_are_per_scope() -> None:
    assert indexed(SERVICE, True)
    assert not indexed(SERVICE, False)
    assert not indexed(dataclasses.replace(SERVICE, enabled=False), True)
    assert document_id("svc_1", "workspace") != document_id("svc_1", "user:u_1")
    assert document_id("svc_1", "workspace") == document_id("svc_1", "workspace")
