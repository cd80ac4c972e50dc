"""Lambda entry point: approval and OAuth resolutions of paused agent calls."""

from mcpbridge.lambda_entry import make_handler

handler = make_handler("resolutions")
