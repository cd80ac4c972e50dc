"""``mcpbridge agents resources|read|prompts|prompt|refresh`` against a running ``mcpbridge serve`` (a subprocess)
that reaches the real ``@modelcontextprotocol/server-everything``; the command runs in this process."""

from __future__ import annotations

import pytest

from mcpbridge.agent.external_reads import REFRESHES_PER_MINUTE
from tests.functional.test_cli_client import Cli, Server, cli, server  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.slow]


@pytest.fixture
def env(server: Server, cli: Cli) -> dict[str, str]:  # noqa: F811
    values = {"MCPBRIDGE_URL": server.process.base_url, "MCPBRIDGE_API_KEY": server.admin_key}
    added = cli.json("services", "add", "everything", server.everything.url, env=values)
    assert added["name"] == "everything"
    return values


def test_resources_prompts_and_refresh_from_the_terminal(cli: Cli, env: dict[str, str]) -> None:  # noqa: F811
    listed = cli.json("agents", "resources", "everything", env=env)
    uris = [item["uri"] for item in listed["items"]]
    static = next(uri for uri in uris if uri.startswith("demo://resource/static/document/"))
    assert listed["next_cursor"] is None

    read = cli.run("agents", "read", "everything", static, env=env)
    assert read.code == 0, read
    assert cli.json("agents", "read", "everything", static, env=env)["contents"][0]["text"] in read.out
    assert "untrusted data" in read.out

    assert "args-prompt" in cli.run("agents", "prompts", "everything", env=env).out
    prompt = cli.run("agents", "prompt", "everything", "args-prompt", "--args", '{"city": "Lyon"}', env=env)
    assert prompt.code == 0, prompt
    assert "user: What's weather in Lyon?" in prompt.out
    missing = cli.run("agents", "prompt", "everything", "args-prompt", "--args", "{}", env=env)
    assert missing.code == 1, missing
    assert "needs the argument 'city'" in missing.err

    bad = cli.run("agents", "read", "everything", "not a uri", env=env)
    assert bad.code == 1, bad
    assert "absolute URI" in bad.err

    for _ in range(REFRESHES_PER_MINUTE):
        refreshed = cli.json("agents", "refresh", "--service", "everything", env=env)
        assert [item["outcome"] for item in refreshed["items"]] == ["refreshed"]
    limited = cli.run("agents", "refresh", env=env)
    assert limited.code == 1, limited
    assert "catalog refreshes a minute" in limited.err
    assert "Traceback" not in limited.err
