"""Lambda entry point: the indexer's failed jobs (its failure queue) and the periodic sweep of stuck work."""

from mcpbridge.lambda_entry import make_recovery_handler

handler = make_recovery_handler()
