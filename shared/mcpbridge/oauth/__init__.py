"""OAuth 2.x for external MCP services, per principal, across stateless instances (SPEC Part D).

The SDK's ``OAuthClientProvider`` runs the browser redirect and the callback inside one coroutine; here they arrive in
different requests (different Lambda invocations), so mcpbridge owns the authorize and callback steps and keeps every
piece of state in the store. The SDK's models and RFC helpers (``mcp.shared.auth``, ``mcp.client.auth.utils``) do the
protocol work.

    service_oauth.py  ServiceOAuth: the one object the routes, the connection layer and the agent use
    authorization.py  authorization code + PKCE: start, callback, status of an attempt
    refresh.py        the bearer the connection sends, refreshed when due or refused, under the lease
    revocation.py     RFC 7009, when a user disconnects a service
    assertion.py      RFC 7523 JWT-bearer grant, for callers without a browser
    discovery.py      RFC 9728 protected-resource metadata, RFC 8414 / OpenID configuration, or a pinned metadata URL
    registration.py   pre-registered client, client ID metadata document, RFC 7591 dynamic registration (stored)
    pkce.py           RFC 7636 S256 verifier and challenge, the state
    attempts.py       pending authorizations (single-use state, 10-minute TTL) and the attempts a front end polls
    tokens.py         stored tokens, the token endpoint exchange, failure classification, the refresh lease
    rows.py           where tokens and registered clients are kept, forgotten with their service
    rules.py          what every operation checks (OAuth services only, tokens bound to the service's URL)
    token_events.py   who hears when a token is stored or removed
    redirects.py      the callback URL and the validation of front-end redirects

Outbound HTTP for OAuth (the SSRF guard, https outside the allowlist, no redirects, bounds) is
``outbound/json_http``.

Nothing here is imported by the HTTP route modules at import time: the admin API and the callback function import it
on first use (cold start).
"""
