"""The one error tree of mcpbridge.

Every failure a user can see is one of these classes. Each carries a stable ``code`` (what clients branch on),
an HTTP ``status`` and whether retrying the same request may succeed (``retryable``). Edges render them: REST as
``application/problem+json``, MCP as ``isError`` results or JSON-RPC errors, Step Functions retries by class name.

    MCPBridgeError
    ├── InvalidInput        400
    ├── Unauthenticated     401
    ├── Forbidden           403
    │   └── OAuthRequired       an OAuth service the principal has not authorized (or whose authorization was lost)
    ├── NotFound            404
    ├── Conflict            409
    │   └── ConditionFailed     a store write whose named condition did not hold (carries the current item)
    ├── PayloadTooLarge     413
    ├── RateLimited         429
    ├── UpstreamError       502
    └── Unavailable         503

Messages are written for the person reading them and never contain a secret, token, code or state value.
"""

from __future__ import annotations

from typing import Any, ClassVar


class MCPBridgeError(Exception):
    """Base class: a failure with a stable code, an HTTP status and a retry hint."""

    status: ClassVar[int] = 500
    default_code: ClassVar[str] = "internal_error"
    retryable: ClassVar[bool] = False

    def __init__(self, message: str, *, code: str | None = None, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        # Safe, structured facts for the client (field names, limits); never secrets.
        self.details = details or {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"


class InvalidInput(MCPBridgeError):
    status = 400
    default_code = "invalid_input"


class Unauthenticated(MCPBridgeError):
    status = 401
    default_code = "unauthenticated"


class Forbidden(MCPBridgeError):
    status = 403
    default_code = "forbidden"


class OAuthRequired(Forbidden):
    """The principal holds no usable OAuth token for an external service: it must authorize (again) first.

    403, not 401: the caller's own credentials are fine (a 401 would tell it to fix its API key); what is missing is
    the user's consent at the service's authorization server. ``details`` carries ``service_id`` and ``reason``.
    """

    default_code = "oauth_required"


class NotFound(MCPBridgeError):
    status = 404
    default_code = "not_found"


class Conflict(MCPBridgeError):
    status = 409
    default_code = "conflict"


class ConditionFailed(Conflict):
    """A conditional store write lost: ``condition`` names the clause, ``current`` is the live item (or None)."""

    default_code = "condition_failed"

    def __init__(
        self,
        condition: str,
        current: dict[str, Any] | None,
        *,
        message: str | None = None,
        operation_index: int | None = None,
    ) -> None:
        super().__init__(message or f"condition {condition!r} does not hold")
        self.condition = condition
        self.current = current
        # Position of the failed operation inside a transaction, None outside one.
        self.operation_index = operation_index


class PayloadTooLarge(MCPBridgeError):
    status = 413
    default_code = "payload_too_large"


class RateLimited(MCPBridgeError):
    status = 429
    default_code = "rate_limited"
    retryable = True


class UpstreamError(MCPBridgeError):
    status = 502
    default_code = "upstream_error"
    retryable = True


class Unavailable(MCPBridgeError):
    status = 503
    default_code = "unavailable"
    retryable = True
