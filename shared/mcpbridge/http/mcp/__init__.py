"""The MCP protocol edge of published endpoints: stateless Streamable HTTP on the SDK's low-level server
(``transport``) and the tool handlers (``tools``), both rendering the views REST shares (``http/views``)."""

from mcpbridge.http.mcp.sdk import defer_package_inits

defer_package_inits()
