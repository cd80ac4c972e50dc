"""How often the authorization server's unauthenticated doors may be knocked on, counted by the exact sliding-window
limiter of the published endpoints (:class:`~mcpbridge.publishing.rate_limit.RateLimiter`), under logs of their own:

* dynamic registration (RFC 7591 is open, as MCP clients expect): at most ``registrations_per_minute`` per endpoint,
  and as many from one client address across endpoints; the registrations of an endpoint that no sign-in used yet
  are bounded too (``max_unused_clients``, see :mod:`.clients`);
* API keys typed into the consent page: at most ``sign_ins_per_minute`` tries from one client address, refused
  before the key is looked up; and :data:`MAX_WRONG_KEYS` wrong keys per pending request, after which the request
  is used up and the person starts again from the application (:mod:`.consent`).

A client address is the connection's peer (API Gateway's ``sourceIp`` on AWS); an IPv6 address counts by its /64,
which one subscriber usually holds whole. Behind a proxy of the operator's own, every browser shares its address:
the counts then apply to all of them together. A refusal is ``RateLimited`` with ``retry_after_seconds`` in its
details; nothing is recorded of it but the count.
"""

from __future__ import annotations

import ipaddress

from mcpbridge.errors import RateLimited
from mcpbridge.publishing.rate_limit import RateLimiter

MAX_WRONG_KEYS = 5
"""Wrong API keys one pending sign-in takes before it is used up."""


def address_of(host: str | None) -> str:
    """The count a client address falls under: itself, or its /64 for IPv6; ``unknown`` when there is none."""
    if not host:
        return "unknown"
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return host[:64]
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


class Throttles:
    def __init__(
        self,
        limiter: RateLimiter,
        *,
        registrations_per_minute: int,
        sign_ins_per_minute: int,
        max_unused_clients: int = 200,
    ) -> None:
        self._limiter = limiter
        self.registrations_per_minute = registrations_per_minute
        self.sign_ins_per_minute = sign_ins_per_minute
        self.max_unused_clients = max_unused_clients
        """Registered clients of one endpoint that no sign-in has used yet (each forgotten a day after it
        registered) before registration there is refused."""

    def registration(self, endpoint_id: str, address: str) -> None:
        """Count a registration at the endpoint from the address; ``RateLimited`` when either count is full."""
        self._hit(f"oauth-register#{endpoint_id}", self.registrations_per_minute, "this endpoint")
        self._hit(f"oauth-register-from#{address}", self.registrations_per_minute, "your address")

    def sign_in(self, address: str) -> None:
        """Count an API key typed into a consent page from the address; ``RateLimited`` when the count is full."""
        self._hit(f"oauth-sign-in-from#{address}", self.sign_ins_per_minute, "your address")

    def _hit(self, log: str, limit: int, whose: str) -> None:
        decision = self._limiter.hit(log, limit)
        if not decision.allowed:
            raise RateLimited(
                f"too many attempts from {whose}: retry in {decision.retry_after_seconds} s",
                code="rate_limited",
                details={"retry_after_seconds": decision.retry_after_seconds},
            )
