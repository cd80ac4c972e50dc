"""The connection test of a registered service (``POST /api/v1/mcp-services/{id}/test``), as the calling user would
connect, within the budget of a synchronous request.

* none / API key / bearer: the service's own credentials (:func:`~mcpbridge.client.specs.connection_spec`).
* OAuth: the calling user's token, refreshed first when due; a 401 gets one forced refresh and one retry (the rule
  of :func:`~mcpbridge.client.oauth_calls.call_with_oauth`). A user without a token is told ``oauth_required``
  (the server is still tried without one, so an unreachable URL says so), and so is a user whose refresh was refused.

Budget: API Gateway ends a synchronous request after 29 s. The whole test (getting or refreshing a token, connecting
with the service's retries, listing tools and resources, the RFC 9728 look-up) ends within :data:`TEST_BUDGET`; each
step keeps its own deadline (the service's ``timeout``) when that comes first, and messages give the deadline that
was applied. Closing the session may take up to a second more.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import anyio
from anyio import to_thread

from mcpbridge.client.bearer_auth import BearerSource
from mcpbridge.client.connection import ConnectionSpec, ProbeResult, probe
from mcpbridge.client.oauth_calls import call_with_oauth
from mcpbridge.client.registry import ServiceRegistry
from mcpbridge.client.specs import connection_spec
from mcpbridge.domain.external_services import ExternalService
from mcpbridge.domain.identity import Principal
from mcpbridge.errors import OAuthRequired, UpstreamError
from mcpbridge.outbound.policy import EgressPolicy

__all__ = ["TEST_BUDGET", "Verdict", "probe_service", "verdict"]

TEST_BUDGET = 20.0
"""Seconds the whole connection test may spend upstream: inside API Gateway's 29 s, with room for the store and KMS
calls around it, closing the session and the Lambda's own overhead."""


class _Refused(UpstreamError):
    """Internal: the probe was answered 401 (carries its result, for when the retry is refused too)."""

    default_code = "upstream_unauthorized"

    def __init__(self, result: ProbeResult) -> None:
        super().__init__("refused", details={"status": 401})
        self.result = result


async def probe_service(
    service: ExternalService,
    principal: Principal,
    *,
    registry: ServiceRegistry,
    policy: EgressPolicy,
    tokens: Callable[[], BearerSource] | None = None,
    budget: float = TEST_BUDGET,
) -> ProbeResult:
    """Test ``service`` as ``principal`` would connect to it (see the module docstring). Upstream failures are
    reported in the result; policy refusals (InvalidInput) are raised."""
    until = anyio.current_time() + budget
    if service.auth.auth_type != "oauth":
        secrets = await to_thread.run_sync(registry.connection_secrets, service)
        return await probe(connection_spec(service, secrets), policy, until=until)
    if tokens is None:
        return await _without_token(service, policy, until)

    async def attempt(spec: ConnectionSpec) -> ProbeResult:
        result = await probe(spec, policy, until=until, detect_oauth=False)
        if result.error is not None and result.error.code == "upstream_unauthorized":
            raise _Refused(result)
        return result

    try:
        return await call_with_oauth(
            tokens(), service, principal.workspace_id, "user", principal.user_id, attempt, until=until
        )
    except _Refused as refused:  # the renewed token was refused as well
        return refused.result
    except OAuthRequired:  # no token, or its refresh was refused
        return await _without_token(service, policy, until)
    except UpstreamError as failed:  # the authorization server could not be reached, or took too long
        return ProbeResult(ok=False, error=failed)


async def _without_token(service: ExternalService, policy: EgressPolicy, until: float) -> ProbeResult:
    result = await probe(connection_spec(service, {}), policy, until=until, detect_oauth=False)
    if result.error is None or result.error.code != "upstream_unauthorized":
        return result
    return ProbeResult(
        ok=False,
        oauth_required=True,
        error=UpstreamError(
            f"the MCP service {service.name} needs an OAuth authorization by this user",
            code="oauth_required",
            details={"status": 401},
        ),
    )


@dataclass(frozen=True)
class Verdict:
    """What a connection test concludes: ``success`` is false only when the connection, the handshake or the tool
    listing failed, or when the server declared resources it then could not list."""

    success: bool
    message: str
    error_code: str | None
    warnings: tuple[str, ...]


def verdict(service: ExternalService, result: ProbeResult) -> Verdict:
    warnings: list[str] = []
    declared_resources = result.capabilities is not None and result.capabilities.resources is not None
    resources_failed = result.resources_error is not None
    if resources_failed and not declared_resources:
        warnings.append("the server lists no resources")
    success = result.ok and not (resources_failed and declared_resources)
    error = result.error or (result.resources_error if declared_resources else None)
    if result.oauth_required and service.auth.auth_type != "oauth":
        warnings.append("the server asks for OAuth: set auth_type to oauth and authorize it")
    return Verdict(
        success=success,
        message="connected" if success else (error.message if error else "the test failed"),
        error_code=None if success or error is None else error.code,
        warnings=tuple(warnings),
    )
