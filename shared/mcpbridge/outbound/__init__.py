"""Guarded outbound HTTP: the one way mcpbridge reaches a URL that someone else chose (SSRF protection).

Document URL import, external MCP service URLs and OAuth metadata documents are attacker-controlled addresses. Every
such request goes through :class:`~mcpbridge.outbound.policy.EgressPolicy` (which URLs and which resolved addresses
may be reached) and the transports in :mod:`mcpbridge.outbound.http` (which connect only to the address that was
checked, so DNS rebinding between check and connect cannot work, and which re-check every redirect hop).

    policy.py   EgressPolicy, Target, forbidden_reason: pure URL and address rules, no I/O except name resolution
    http.py     fetch / fetch_async, guarded_client / guarded_async_client, the pinned httpx transports
"""
