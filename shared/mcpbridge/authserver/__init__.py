"""mcpbridge as the OAuth 2.1 authorization server of its published endpoints (MCP authorization, 2025-06-18+).

Each endpoint ``/mcp/<ep>`` is a protected resource whose authorization server is mcpbridge itself, with one issuer
per endpoint, ``<base>/oauth/<ep>``: a client registered at one endpoint is unknown at every other, and a token is
bound to its endpoint by construction as well as by the RFC 8707 ``resource`` the client names.

    /.well-known/oauth-protected-resource/mcp/<ep>     RFC 9728 metadata of the resource (and /mcp/<ep>/.well-known/...)
    /.well-known/oauth-authorization-server/oauth/<ep> RFC 8414 metadata of the issuer (and /oauth/<ep>/.well-known/...)
    /oauth/<ep>/authorize      sign-in and consent (GET the page, POST the decision)
    /oauth/<ep>/token          authorization code (PKCE S256 only) and refresh token (rotating) grants
    /oauth/<ep>/register       RFC 7591 dynamic registration
    /oauth/<ep>/revoke         RFC 7009 revocation
    /oauth/oidc/callback       the return of an external OpenID Connect sign-in

Clients identify themselves by a client ID metadata document (an https URL as ``client_id``, fetched through the SSRF
guard), or by a ``client_id`` from dynamic registration. A person signs in (with the operator's OpenID Connect
provider, or with their own mcpbridge API key) and approves the client for the endpoint: that approval is a *grant*
of one user, one endpoint, one client. Calls made with its tokens run as that user, with the endpoint's scope
intersected with the user's access, the token's scopes and, for a sign-in with an API key, that key's scope.

Modules: :mod:`.records` (items and lifetimes), :mod:`.clients` (both kinds of client and the redirect URI rules),
:mod:`.grants` (consents and their revocation), :mod:`.tokens` (codes, access and refresh tokens), :mod:`.access`
(what a token opens, on every MCP request), :mod:`.server` (Authlib's grants and endpoints wired to these),
:mod:`.consent` (the sign-in and consent flow), :mod:`.oidc` (external sign-in), :mod:`.metadata` (RFC 8414/9728).
"""
