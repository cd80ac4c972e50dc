"""The client the official conformance suite runs for its auth scenarios: mcpbridge's own OAuth and connection code.

    python tests/conformance/oauth_client.py <server-url>

``@modelcontextprotocol/conformance client --suite auth --command "<python> <this file>"`` starts, per scenario, an
authorization server and an MCP server protected by it, then runs the command with the MCP server's URL as its last
argument (``MCP_CONFORMANCE_SCENARIO`` names the scenario, ``MCP_CONFORMANCE_CONTEXT`` carries e.g. pre-registered
client credentials) and judges what its servers saw. This entry point does what an operator and a user of mcpbridge
would do, with mcpbridge's real pieces:

1. a temporary embedded :class:`~mcpbridge.bootstrap.Container` (SQLite and a key file in a temporary directory;
   ``localhost`` and ``127.0.0.1`` on the SSRF allowlist, since the suite serves plain http on loopback);
2. the URL registered as an ``oauth`` service of the default workspace (with the scenario's pre-registered
   ``client_id`` and ``client_secret`` when the context has them);
3. :meth:`ServiceOAuth.start_authorization` for the admin user (discovery, client registration, PKCE, state);
4. the browser, played headlessly: one GET of the authorization URL; the suite's server approves at once and
   redirects to mcpbridge's redirect URI with ``code`` and ``state``; that redirect is not followed (nothing listens
   there) but handed to :meth:`ServiceOAuth.complete_callback`, exactly as mcpbridge's callback route would;
5. :func:`~mcpbridge.client.oauth_calls.call_with_oauth` with a real :class:`~mcpbridge.client.connection.Connection`:
   list the tools and call the first one. When that is refused with ``OAuthRequired``, the user authorizes once
   more (steps 3-4), with the scope the refusal names when its reason is ``insufficient_scope`` (a 403 step-up
   challenge, SEP-835), and the operation runs once more; a second refusal is the answer.

Exit status 0 when the tool call worked, 1 otherwise (with the reason on stderr). Nothing printed carries a code, a
state or a token.

mcpbridge's client ID metadata document URL is set to the one the suite's ``auth/basic-cimd`` scenario expects of
the client under test: it is only used where the authorization server advertises client ID metadata documents.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx

from mcpbridge.bootstrap import Container
from mcpbridge.client.connection import Connection, ConnectionSpec
from mcpbridge.client.oauth_calls import call_with_oauth
from mcpbridge.errors import MCPBridgeError, OAuthRequired
from mcpbridge.oauth.rules import USER
from mcpbridge.settings import Settings

CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"
"""The client ID the suite's ``auth/basic-cimd`` authorization server expects (it does not fetch the document)."""
REDIRECT_BASE = "http://127.0.0.1:8080"
"""mcpbridge's base URL in its redirect URI; nothing listens there: the redirect is captured, not followed."""
BROWSER_TIMEOUT = 10.0


def _context() -> dict[str, Any]:
    raw = os.environ.get("MCP_CONFORMANCE_CONTEXT", "")
    if not raw:
        return {}
    value = json.loads(raw)
    return value if isinstance(value, dict) else {}


def _browser(authorization_url: str) -> dict[str, str]:
    """The user's browser at the authorization server: the query of the redirect it answers with."""
    with httpx.Client(timeout=BROWSER_TIMEOUT, follow_redirects=False, trust_env=False) as browser:
        answer = browser.get(authorization_url)
    location = answer.headers.get("location")
    if answer.status_code not in (301, 302, 303, 307, 308) or not location:
        raise SystemExit(f"the authorization server answered HTTP {answer.status_code} without a redirect")
    return {name: values[0] for name, values in parse_qs(urlsplit(location).query).items()}


async def run(server_url: str, data_dir: Path) -> str:
    context = _context()
    settings = Settings(
        data_dir=data_dir,
        ssrf_allowlist=["127.0.0.1", "localhost", "::1"],
        oauth_client_metadata_url=CLIENT_METADATA_URL,
        log_level="WARNING",
    )
    container = Container(settings)
    try:
        api_key = container.identity.initialize().api_key
        assert api_key is not None
        admin = container.identity.authenticate(api_key)
        auth: dict[str, Any] = {"auth_type": "oauth"}
        if context.get("client_id"):
            auth["client_id"] = str(context["client_id"])
        service = container.services.create(
            admin, name="conformance", url=server_url, transport="http-streamable", auth_config=auth
        ).service
        if context.get("client_secret"):
            service = container.services.set_credentials(
                admin, service.id, {"client_secret": str(context["client_secret"])}
            )

        async def authorize(scope: str | None = None) -> None:
            started = await container.oauth.start_authorization(admin, service.id, base_url=REDIRECT_BASE, scope=scope)
            redirect = await anyio.to_thread.run_sync(_browser, started.authorization_url)
            outcome = await container.oauth.complete_callback(
                redirect.get("state"), redirect.get("code"), redirect.get("iss"), redirect.get("error")
            )
            if outcome.error is not None:
                raise SystemExit(f"the authorization failed: {outcome.error}")

        await authorize()

        async def list_and_call(spec: ConnectionSpec) -> str:
            async with Connection(spec, container.egress) as connection:
                tools = await connection.list_tools()
                if not tools:
                    return "no tools"
                result = await connection.call_tool(tools[0].name, {})
            return f"called {tools[0].name}: isError={result.is_error}"

        try:
            return await call_with_oauth(
                container.oauth, service, admin.workspace_id, USER, admin.user_id, list_and_call
            )
        except OAuthRequired as refusal:
            # The user authorizes once more, as mcpbridge's answer asks, and only once: for the scopes the server
            # asked for after a 403 (step-up, SEP-835), or afresh after a token the server no longer takes, e.g.
            # once its authorization server changed (SEP-2352: discovery names the new issuer, and the client
            # registers there rather than presenting the old issuer's client).
            step_up = refusal.details.get("reason") == "insufficient_scope"
            await authorize(str(refusal.details.get("scope") or "") or None if step_up else None)
        return await call_with_oauth(container.oauth, service, admin.workspace_id, USER, admin.user_id, list_and_call)
    finally:
        container.close()


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: oauth_client.py <server-url>", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="mcpbridge-conformance-") as tmp:
        try:
            print(anyio.run(run, argv[-1], Path(tmp) / "data"))
        except MCPBridgeError as exc:
            print(f"mcpbridge: {exc.code}: {exc.message}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
