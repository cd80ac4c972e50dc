"""Lambda entry point: background jobs (document indexing, knowledge-base purges), invoked asynchronously."""

from mcpbridge.lambda_entry import make_job_handler

handler = make_job_handler()
