"""The MCP endpoint function loads neither the MCP SDK nor FastAPI (its cold start), and freezes what init built."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Settings a deployed function has, pointing at nothing that answers (import touches no network).
FAKE_AWS = {
    "MCPBRIDGE_BACKEND": "aws",
    "MCPBRIDGE_TABLE_NAME": "mcpbridge-test",
    "MCPBRIDGE_KMS_KEY_ID": "arn:aws:kms:eu-west-1:123456789012:key/00000000-0000-0000-0000-000000000000",
    "MCPBRIDGE_BUCKET_NAME": "mcpbridge-test",
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "eu-west-1",
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
    "AWS_EC2_METADATA_DISABLED": "true",
}

# What a published endpoint never uses: the MCP SDK (its own protocol module answers), FastAPI (it has one route),
# and what only they pull in.
HEAVY = ("mcp", "mcp_types", "fastapi", "httpx2", "sse_starlette")

LOAD_HANDLER = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("handler", "functions/mcp_endpoint/handler.py")
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
assert callable(module.handler)
{after}
loaded = sorted(name for name in sys.modules if name.partition(".")[0] in {heavy!r})
print(json.dumps(loaded))
"""


def _run(after: str = "") -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MCPBRIDGE_", "AWS_"))} | FAKE_AWS
    code = LOAD_HANDLER.format(heavy=HEAVY, after=after)
    done = subprocess.run(
        [sys.executable, "-I", "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    loaded: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


def test_the_mcp_handler_imports_neither_the_sdk_nor_fastapi() -> None:
    assert _run() == []


def test_the_sdk_still_imports_whole_beside_it() -> None:
    # The outbound side (agents' calls to external servers) uses the SDK's client in the same package.
    after = """
from mcp import Client, types
assert Client.__module__ == "mcp.client.client" and types is sys.modules["mcp.types"]
"""
    assert "mcp.client" in _run(after)


def test_the_handler_freezes_what_its_init_built_before_any_invocation() -> None:
    # What init built (settings, the container, the app, the tools) is in the collector's permanent generation, so
    # collections while it serves walk only what invocations made (mcpbridge.heap).
    after = """
import gc
from mcpbridge.http.mcp.transport import TOOLS
assert gc.get_freeze_count() > 20000, gc.get_freeze_count()
assert all(o is not TOOLS for o in gc.get_objects()), "the tool list is still in a collected generation"
"""
    _run(after)
