"""Lambda entry point: the OAuth callback (/api/v1/mcp-oauth/callback)."""

from mcpbridge.lambda_entry import make_handler

handler = make_handler("oauth_callback")
