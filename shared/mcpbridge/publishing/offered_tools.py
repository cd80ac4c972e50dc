"""The tools a published endpoint can offer, in display order, with their group and the capability they need.

Groups: ``read`` (on by default), ``ask`` (on by default), ``wiki`` (on by default), ``write`` (off by default:
write tools change knowledge bases). A scoped API key may only publish tools whose capability it holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ToolGroup = Literal["read", "ask", "wiki", "write"]
GROUPS: tuple[ToolGroup, ...] = ("read", "ask", "wiki", "write")
GROUP_TITLES: dict[ToolGroup, str] = {
    "read": "Search and read",
    "ask": "Ask questions",
    "wiki": "Wiki",
    "write": "Add, update and delete documents",
}


@dataclass(frozen=True)
class CatalogTool:
    name: str
    group: ToolGroup
    title: str
    default: bool

    @property
    def capability(self) -> str:
        """The API-key capability needed to publish this tool (the group's name)."""
        return self.group

    @property
    def destructive(self) -> bool:
        return self.group == "write"


CATALOG: tuple[CatalogTool, ...] = (
    CatalogTool("list_knowledge_bases", "read", "List knowledge bases", True),
    CatalogTool("list_shared_knowledge_bases", "read", "List shared knowledge bases", True),
    CatalogTool("search_knowledge", "read", "Search knowledge", True),
    CatalogTool("grep_chunks", "read", "Grep chunks by regex", True),
    CatalogTool("list_documents", "read", "List documents", True),
    CatalogTool("read_document", "read", "Read a document", True),
    CatalogTool("find_documents", "read", "Find documents by file name", True),
    CatalogTool("ask", "ask", "Ask a question", True),
    CatalogTool("list_sessions", "ask", "List ask sessions", True),
    CatalogTool("get_session", "ask", "Read an ask session", True),
    CatalogTool("delete_session", "ask", "Delete an ask session", True),
    CatalogTool("wiki_search", "wiki", "Search wiki pages", True),
    CatalogTool("wiki_read_page", "wiki", "Read a wiki page", True),
    CatalogTool("wiki_index", "wiki", "Wiki index", True),
    CatalogTool("add_document", "write", "Add a document", False),
    CatalogTool("update_document", "write", "Update a document", False),
    CatalogTool("delete_document", "write", "Delete a document", False),
)
BY_NAME: dict[str, CatalogTool] = {tool.name: tool for tool in CATALOG}
DEFAULT_TOOLS: tuple[str, ...] = tuple(tool.name for tool in CATALOG if tool.default)


def normalise_tools(names: list[str]) -> list[str]:
    """Known names only, each once, in catalog order (an endpoint's create and update refuse unknown names first)."""
    wanted = {name.strip() for name in names}
    return [tool.name for tool in CATALOG if tool.name in wanted]


def capabilities_for(tools: list[str]) -> set[str]:
    return {BY_NAME[name].capability for name in tools if name in BY_NAME}
