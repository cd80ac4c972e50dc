"""Published MCP endpoints as a service: endpoint records and tokens, scope, rate limit, and the catalog of tools an
endpoint can offer. The MCP protocol edge that serves them is ``http/mcp``."""
