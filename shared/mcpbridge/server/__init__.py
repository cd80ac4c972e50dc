"""Published MCP endpoints: endpoint records and tokens, auth, scope, rate limit, the tool catalog and the tools."""
