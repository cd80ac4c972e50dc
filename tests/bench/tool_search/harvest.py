"""Take the published tool definitions of MCP servers installed from npm: run each over stdio, ask ``tools/list``,
write ``servers/<name>.json``. Run once by hand (``python tests/bench/tool_search/harvest.py NODE_MODULES``); the
JSON files are the labelled set's tools, committed as data."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
# name -> (package's bin script relative to node_modules, extra arguments); dummy credentials only let them start.
SERVERS: dict[str, tuple[str, list[str]]] = {
    "everything": ("@modelcontextprotocol/server-everything/dist/index.js", ["stdio"]),
    "filesystem": ("@modelcontextprotocol/server-filesystem/dist/index.js", ["{tmp}"]),
    "memory": ("@modelcontextprotocol/server-memory/dist/index.js", []),
    "sequential-thinking": ("@modelcontextprotocol/server-sequential-thinking/dist/index.js", []),
    "github": ("@modelcontextprotocol/server-github/dist/index.js", []),
    "gitlab": ("@modelcontextprotocol/server-gitlab/dist/index.js", []),
    "postgres": ("@modelcontextprotocol/server-postgres/dist/index.js", ["postgresql://localhost:1/none"]),
    "puppeteer": ("@modelcontextprotocol/server-puppeteer/dist/index.js", []),
    "brave-search": ("@modelcontextprotocol/server-brave-search/dist/index.js", []),
    "google-maps": ("@modelcontextprotocol/server-google-maps/dist/index.js", []),
    "slack": ("@modelcontextprotocol/server-slack/dist/index.js", []),
    "redis": ("@modelcontextprotocol/server-redis/dist/index.js", ["redis://localhost:1"]),
    "everart": ("@modelcontextprotocol/server-everart/dist/index.js", []),
    "aws-kb-retrieval": ("@modelcontextprotocol/server-aws-kb-retrieval/dist/index.js", []),
    "playwright": ("@playwright/mcp/cli.js", []),
    "notion": ("@notionhq/notion-mcp-server/bin/cli.mjs", []),
    "kubernetes": ("mcp-server-kubernetes/dist/index.js", []),
    "tavily": ("tavily-mcp/build/index.js", []),
    "exa": ("exa-mcp-server/dist/stdio.cjs", []),
    "firecrawl": ("firecrawl-mcp/dist/index.js", []),
    "context7": ("@upstash/context7-mcp/dist/index.js", []),
}
DUMMY_ENV = {
    "GITHUB_PERSONAL_ACCESS_TOKEN": "x",
    "GITLAB_PERSONAL_ACCESS_TOKEN": "x",
    "BRAVE_API_KEY": "x",
    "GOOGLE_MAPS_API_KEY": "x",
    "SLACK_BOT_TOKEN": "x",
    "SLACK_TEAM_ID": "x",
    "EVERART_API_KEY": "x",
    "TAVILY_API_KEY": "x",
    "EXA_API_KEY": "x",
    "FIRECRAWL_API_KEY": "x",
    "OPENAPI_MCP_HEADERS": "{}",
    "AWS_REGION": "us-east-1",
}


def tools_of(script: Path, args: list[str]) -> list[dict[str, object]]:
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "harvest", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
    ]
    process = subprocess.Popen(
        ["node", str(script), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **DUMMY_ENV},
        text=True,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    for message in messages:
        process.stdin.write(json.dumps(message) + "\n")
        process.stdin.flush()
    try:
        for line in process.stdout:
            try:
                answer = json.loads(line)
            except ValueError:
                continue
            if answer.get("id") == 2:
                return list(answer["result"]["tools"])
        return []
    finally:
        process.kill()


def main() -> None:
    modules = Path(sys.argv[1])
    out = HERE / "servers"
    out.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, (script, args) in SERVERS.items():
            try:
                tools = tools_of(modules / script, [a.format(tmp=tmp) for a in args])
            except Exception as exc:  # a server that does not start is reported and skipped
                print(f"{name}: {exc}")
                continue
            print(f"{name}: {len(tools)} tools")
            if tools:
                (out / f"{name}.json").write_text(json.dumps({"server": name, "tools": tools}, indent=1) + "\n")


if __name__ == "__main__":
    main()
