"""Lambda entry point: published MCP endpoints (/mcp/{endpoint_id})."""

from mcpbridge.lambda_entry import make_handler

handler = make_handler("mcp_endpoint")
