"""The error answers each REST operation documents in ``/api/v1/openapi.json``: all ``application/problem+json``.

What every operation can answer is added here, from the operation itself, so no route has to repeat it:

* 401 and 403 when it authenticates (every operation under ``/api/v1`` but the public ones below);
* 400 (``malformed_json``) when it takes a JSON body, or (``invalid_cursor``) when it lists; 422
  (``validation_failed``) when it takes any input;
* 404 when its path names something (``{id}``);
* 503 everywhere: a store, key service or blob store that cannot be reached.

Every answer carries ``X-Request-Id``; every problem body its ``request_id``.

What only some operations answer (a 409 on a name taken, a 400 on a rule the shape cannot express, a 429, a 502 from
an upstream) each route states with ``responses=problems(...)``.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from mcpbridge.http.problems import PROBLEM_JSON

_PUBLIC_PATHS = frozenset(
    {"/healthz", "/readyz", "/api/v1/mcp-oauth/callback", "/api/v1/mcp-oauth/client-metadata.json"}
)

_DESCRIPTIONS = {
    400: "Bad input: the problem's code and detail name what is wrong; nothing was changed.",
    401: "No API key, or not a valid one.",
    403: "The key may not do this (role, capability, knowledge-base scope), or the workspace is not active.",
    404: "Nothing of that id here (or not visible to this key).",
    409: "A conflict: already resolved, a name taken, changed meanwhile.",
    413: "The request or its upload is too large.",
    422: "The request does not have the expected shape (the errors list where and why).",
    429: "Too many requests: retry after the time the problem says.",
    502: "The external service answered with an error or broke the connection.",
    503: "A backing service is unavailable right now: retry shortly.",
    504: "The external service did not answer in time.",
}

PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "An error (RFC 9457), with a stable code.",
    "required": ["type", "title", "status", "code", "detail"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "code": {"type": "string", "description": "Stable, machine-readable."},
        "detail": {"type": "string"},
        "retryable": {"type": "boolean"},
        "details": {"type": "object"},
        "errors": {"type": "array", "items": {"type": "object"}},
        "request_id": {
            "type": "string",
            "description": "The request's id, as in the X-Request-Id header and every log line of the request.",
        },
    },
}

REQUEST_ID_HEADER: dict[str, Any] = {
    "description": "The request's id (API Gateway's on AWS): quote it when asking about a request; its log lines "
    "carry it.",
    "schema": {"type": "string"},
}


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route: the problem answers it gives beyond the ones every operation documents."""
    return {status: _problem_response(status) for status in statuses}


def _problem_response(status: int) -> dict[str, Any]:
    return {
        "description": _DESCRIPTIONS.get(status, "An error."),
        "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
    }


def install_problem_docs(app: FastAPI) -> None:
    """Make ``app.openapi()`` document the problem answers of every operation (built once, then cached)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
            components = schema.setdefault("components", {})
            components.setdefault("schemas", {})["Problem"] = PROBLEM_SCHEMA
            components.setdefault("headers", {})["RequestId"] = REQUEST_ID_HEADER
            for path, operations in schema.get("paths", {}).items():
                for operation in operations.values():
                    _document(path, operation)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _document(path: str, operation: dict[str, Any]) -> None:
    responses: dict[str, Any] = operation.setdefault("responses", {})
    statuses = {503}
    if path not in _PUBLIC_PATHS and path.startswith("/api/v1/") and path != "/api/v1/openapi.json":
        statuses |= {401, 403}
    if operation.get("parameters") or "requestBody" in operation:
        statuses.add(422)
    body = operation.get("requestBody", {}).get("content", {})
    if "application/json" in body or any(p.get("name") == "cursor" for p in operation.get("parameters", [])):
        statuses.add(400)  # malformed_json, invalid_cursor
    if "{" in path:
        statuses.add(404)
    for status in statuses:
        responses.setdefault(str(status), _problem_response(status))
    if "422" in responses:  # FastAPI documents its own validation error shape; ours is a problem
        responses["422"] = _problem_response(422)
    for answered, response in responses.items():
        if answered[:1] in ("4", "5") and PROBLEM_JSON not in response.get("content", {}):
            response["content"] = {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}}
        response.setdefault("headers", {})["X-Request-Id"] = {"$ref": "#/components/headers/RequestId"}
