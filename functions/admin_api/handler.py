"""Lambda entry point: the admin REST API (/api/v1)."""

from mcpbridge.lambda_entry import make_handler

handler = make_handler("admin_api")
