"""Lambda entry point: one step of an agent tool call, run as a task of the tool-call state machine
(infra/tool_call_state_machine.asl.json)."""

from mcpbridge.agent.lambda_steps import make_steps_handler
from mcpbridge.lambda_entry import lambda_container
from mcpbridge.observability import LambdaLogging

container = lambda_container()
# The steps (and what they import) are built at the first invocation.
handler = make_steps_handler(
    lambda: container.tool_call_steps,
    lambda_logging=LambdaLogging(container.settings.log_level),
    telemetry=container.telemetry,
)
