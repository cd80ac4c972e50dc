"""OAuth 2.x for external MCP services, per principal, across stateless instances (SPEC Part D).

The SDK's ``OAuthClientProvider`` runs the browser redirect and the callback inside one coroutine; here they arrive in
different requests (different Lambda invocations), so mcpbridge owns the authorize and callback steps and keeps every
piece of state in the store. The SDK's models and RFC helpers (``mcp.shared.auth``, ``mcp.client.auth.utils``) do the
protocol work.

    egress.py         outbound HTTP for OAuth: the SSRF guard, https outside the allowlist, no redirects, bounds
    discovery.py      RFC 9728 protected-resource metadata, RFC 8414 / OpenID configuration, or a pinned metadata URL
    registration.py   pre-registered client, client ID metadata document, RFC 7591 dynamic registration (stored)
    pkce.py           RFC 7636 S256 verifier and challenge, the state
    attempts.py       pending authorizations (single-use state, 10-minute TTL) and the attempts a front end polls
    tokens.py         stored tokens, the token endpoint exchange, failure classification, the refresh lease
    redirects.py      the callback URL and the validation of front-end redirects
    manager.py        OAuthManager, the facade (authorize, callback, status, revoke, assertion grant, bearer tokens)

Nothing here is imported by the HTTP route modules at import time: the admin API and the callback function import it
on first use (cold start).
"""
