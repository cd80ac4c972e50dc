"""Lambda entry point: the authorization server of the published MCP endpoints (/oauth/..., their metadata)."""

from mcpbridge.lambda_entry import make_handler

handler = make_handler("authorization_server")
