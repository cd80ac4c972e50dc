"""The authorization server of the published endpoints (:mod:`mcpbridge.authserver`), and their RFC 9728 metadata.

    GET  /.well-known/oauth-protected-resource/mcp/{ep}      (also /mcp/{ep}/.well-known/oauth-protected-resource)
    GET  /.well-known/oauth-authorization-server/oauth/{ep}  (also /oauth/{ep}/.well-known/oauth-authorization-server)
    GET  /oauth/{ep}/authorize        the sign-in and consent page (or the client's error redirect)
    POST /oauth/{ep}/authorize        the person's decision (form: consent, csrf, decision, api_key)
    POST /oauth/{ep}/token            RFC 6749 token endpoint (form)
    POST /oauth/{ep}/register         RFC 7591 dynamic client registration (JSON)
    POST /oauth/{ep}/revoke           RFC 7009 revocation (form)
    GET  /oauth/oidc/callback         the return of the external sign-in

The protocol endpoints answer as their RFCs say (``{"error": ..., "error_description": ...}``), not problem+json, and
allow any browser origin (no cookie is involved there). A body is at most 16 KiB. Their query strings and bodies hold
codes, tokens and states: uvicorn's access log gets them blanked (:func:`redact_oauth_queries`), API Gateway's logs
the route only.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any
from urllib.parse import parse_qsl, urlsplit

import anyio.to_thread
from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response

from mcpbridge.authserver.consent import AuthorizeError, ConsentPage, Redirect, cookie_name
from mcpbridge.authserver.metadata import Issuer
from mcpbridge.authserver.server import OAuthHttpRequest, Reply
from mcpbridge.authserver.service import AuthorizationService
from mcpbridge.authserver.throttles import address_of
from mcpbridge.errors import MCPBridgeError
from mcpbridge.http.auth import container_of
from mcpbridge.http.oauth_pages import consent_response, error_response
from mcpbridge.settings import Settings

log = logging.getLogger("mcpbridge.authserver")

router = APIRouter(include_in_schema=False)

MAX_BODY_BYTES = 16 * 1024
COOKIE_PATH = "/oauth/"
_CORS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Headers": "authorization, content-type, mcp-protocol-version",
}
_NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}
_PREFIXES = ("/oauth/", "/console/oidc/")  # the console's sign-in callback too


class RedactOAuthQueries(logging.Filter):
    """Blank the query of authorization-server request lines in uvicorn's access log (codes, states), the
    console's provider sign-in's too."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            path = args[2]
            if path.startswith(_PREFIXES) and "?" in path:
                record.args = (*args[:2], path.split("?", 1)[0] + "?[redacted]", *args[3:])
        return True


def redact_oauth_queries(logger_name: str = "uvicorn.access") -> None:
    access = logging.getLogger(logger_name)
    if not any(isinstance(existing, RedactOAuthQueries) for existing in access.filters):
        access.addFilter(RedactOAuthQueries())


redact_oauth_queries()


def _service(request: Request) -> AuthorizationService:
    return container_of(request).authorization


ServiceDep = Annotated[AuthorizationService, Depends(_service)]


class _NotServed(Exception):
    def __init__(self, response: Response) -> None:
        self.response = response


def base_url(request: Request, settings: Settings) -> str | None:
    """Where clients reach mcpbridge: the configured public URL, else this request's (its host must be allowed)."""
    if settings.public_base_url:
        return settings.public_base_url.rstrip("/")
    host = (request.headers.get("host") or "").strip().lower()
    allowed = {h.strip().lower() for h in settings.allowed_hosts}
    event = request.scope.get("aws.event")
    if isinstance(event, dict):
        domain = event.get("requestContext", {}).get("domainName")
        if isinstance(domain, str):
            allowed.add(domain.lower())
    name = host[: host.find("]") + 1] if host.startswith("[") else host.split(":", 1)[0]
    if host not in allowed and name not in allowed:
        return None
    return str(request.base_url).rstrip("/")


def _issuer(request: Request, service: AuthorizationService, endpoint_id: str) -> Issuer:
    base = base_url(request, container_of(request).settings)
    if base is None:
        raise _NotServed(_oauth_error(421, "invalid_request", "this host name is not served here"))
    try:
        return service.issuer(base, endpoint_id)
    except MCPBridgeError as exc:
        raise _NotServed(_oauth_error(404, "not_found", exc.message)) from None


def _oauth_error(status: int, error: str, description: str) -> JSONResponse:
    return JSONResponse({"error": error, "error_description": description}, status, headers={**_CORS, **_NO_STORE})


def _reply(reply: Reply) -> Response:
    headers = {name: value for name, value in reply.headers if name.lower() != "content-type"}
    if reply.location is not None:
        return RedirectResponse(reply.location, status_code=303, headers={**headers, **_NO_STORE})
    return JSONResponse(reply.body, reply.status, headers={**headers, **_CORS, **_NO_STORE})


async def _form(request: Request) -> list[tuple[str, str]]:
    body = await request.body()
    if len(body) > MAX_BODY_BYTES:
        raise _NotServed(_oauth_error(413, "invalid_request", f"the body is larger than {MAX_BODY_BYTES} bytes"))
    if not (request.headers.get("content-type") or "").lower().startswith("application/x-www-form-urlencoded"):
        raise _NotServed(_oauth_error(400, "invalid_request", "send application/x-www-form-urlencoded"))
    try:
        return parse_qsl(body.decode(), keep_blank_values=True, max_num_fields=64)
    except (UnicodeDecodeError, ValueError):
        raise _NotServed(_oauth_error(400, "invalid_request", "the form is not valid")) from None


def _http(
    request: Request, issuer: Issuer, path: str, form: Sequence[tuple[str, str]] = (), json_body: Any = None
) -> OAuthHttpRequest:
    return OAuthHttpRequest(
        method=request.method,
        url=f"{issuer.issuer}{path}",
        headers={k.lower(): v for k, v in request.headers.items()},
        query=parse_qsl(request.url.query, keep_blank_values=True, max_num_fields=64),
        form=list(form),
        json=json_body,
        client_address=client_address(request),
    )


def client_address(request: Request) -> str:
    """Whom a request counts against: its peer (API Gateway's ``sourceIp`` on AWS, which Mangum makes the peer)."""
    return address_of(request.client.host if request.client else None)


def _served(handler: Callable[..., Awaitable[Response]]) -> Callable[..., Awaitable[Response]]:
    """Turn the early answers (bad host, unknown endpoint, bad body) raised as ``_NotServed`` into responses."""

    @functools.wraps(handler)
    async def wrapper(*args: Any, **kwargs: Any) -> Response:
        try:
            response: Response = await handler(*args, **kwargs)
        except _NotServed as stop:
            return stop.response
        return response

    return wrapper


# ---------------------------------------------------------------------------------------------------- metadata


@router.get("/.well-known/oauth-protected-resource/mcp/{endpoint_id}")
@router.get("/mcp/{endpoint_id}/.well-known/oauth-protected-resource")
@_served
async def protected_resource_metadata(endpoint_id: str, request: Request, service: ServiceDep) -> Response:
    issuer = _issuer(request, service, endpoint_id)
    return JSONResponse(issuer.protected_resource_metadata(), headers={**_CORS, "Cache-Control": "public, max-age=60"})


@router.get("/.well-known/oauth-authorization-server/oauth/{endpoint_id}")
@router.get("/oauth/{endpoint_id}/.well-known/oauth-authorization-server")
@_served
async def authorization_server_metadata(endpoint_id: str, request: Request, service: ServiceDep) -> Response:
    issuer = _issuer(request, service, endpoint_id)
    return JSONResponse(
        issuer.authorization_server_metadata(), headers={**_CORS, "Cache-Control": "public, max-age=60"}
    )


# ---------------------------------------------------------------------------------------------------- the page


def _page(page: ConsentPage, issuer: Issuer, request: Request, provider_origin: str | None) -> Response:
    response = consent_response(page, action=f"{issuer.issuer}/authorize", provider_origin=provider_origin)
    response.set_cookie(
        cookie_name(page.handle),
        page.cookie_value,
        max_age=600,
        path=COOKIE_PATH,
        secure=urlsplit(issuer.issuer).scheme == "https",
        httponly=True,
        samesite="lax",
    )
    return response


def _browser(outcome: ConsentPage | Redirect, issuer: Issuer, request: Request, provider: str | None) -> Response:
    if isinstance(outcome, Redirect):
        return RedirectResponse(outcome.location, status_code=303, headers=_NO_STORE)
    return _page(outcome, issuer, request, provider)


async def _provider_origin(service: AuthorizationService) -> str | None:
    if service.oidc is None:
        return None
    return await service.oidc.authorization_origin()


@router.get("/oauth/{endpoint_id}/authorize")
@_served
async def authorize(endpoint_id: str, request: Request, service: ServiceDep) -> Response:
    issuer = _issuer(request, service, endpoint_id)
    provider = await _provider_origin(service)
    try:
        handle = request.query_params.get("consent")
        if handle is not None:
            page = service.consent.resume(issuer, handle, request.cookies.get(cookie_name(handle)))
            return _page(page, issuer, request, provider)
        outcome = await service.consent.begin(issuer, _http(request, issuer, "/authorize"))
    except AuthorizeError as failed:
        return error_response(failed.status, failed.title, failed.detail)
    return _browser(outcome, issuer, request, provider)


@router.post("/oauth/{endpoint_id}/authorize")
@_served
async def decide(endpoint_id: str, request: Request, service: ServiceDep) -> Response:
    issuer = _issuer(request, service, endpoint_id)
    try:
        form = dict(await _form(request))
    except _NotServed:
        return error_response(400, "Request refused", "This form could not be read.")
    handle, csrf, decision = form.get("consent", ""), form.get("csrf", ""), form.get("decision", "")
    if not _same_origin(request, issuer):
        return error_response(403, "Request refused", "This form was not sent by the page mcpbridge showed you.")
    cookie = request.cookies.get(cookie_name(handle)) if handle else None
    try:
        if decision == "sign_in":
            redirect = await service.start_sign_in(issuer, handle, cookie, csrf)
            return RedirectResponse(redirect.location, status_code=303, headers=_NO_STORE)
        if decision not in ("approve", "deny"):
            return error_response(400, "Request refused", "Choose Allow or Deny.")
        outcome = await service.consent.decide(
            issuer,
            handle,
            cookie,
            csrf=csrf,
            approve=decision == "approve",
            api_key=form.get("api_key"),
            client_address=client_address(request),
        )
    except AuthorizeError as failed:
        headers = {"Retry-After": str(failed.retry_after or 60)} if failed.status == 429 else None
        return error_response(failed.status, failed.title, failed.detail, headers=headers)
    return _browser(outcome, issuer, request, await _provider_origin(service))


def _same_origin(request: Request, issuer: Issuer) -> bool:
    """A browser says where a form came from (``Origin``, ``Sec-Fetch-Site``): another site's form is refused."""
    if (request.headers.get("sec-fetch-site") or "same-origin") not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return origin is None
    mine = urlsplit(issuer.issuer)
    return origin.rstrip("/").lower() == f"{mine.scheme}://{mine.netloc}".lower()


@router.get("/oauth/oidc/callback")
async def oidc_callback(request: Request, service: ServiceDep) -> Response:
    params = request.query_params
    base = base_url(request, container_of(request).settings)
    state = params.get("state")
    if base is None or not state:
        return error_response(400, "Sign-in failed", "The identity provider returned no state: start again.")
    try:
        redirect = await service.finish_sign_in(
            base,
            state=state,
            code=params.get("code"),
            error=params.get("error"),
            iss=params.get("iss"),
            cookies=dict(request.cookies),
        )
    except AuthorizeError as failed:
        return error_response(failed.status, failed.title, failed.detail)
    return RedirectResponse(redirect.location, status_code=303, headers=_NO_STORE)


# ---------------------------------------------------------------------------------------------------- protocol


@router.options("/oauth/{endpoint_id}/{operation}")
async def preflight(endpoint_id: str, operation: str) -> Response:
    return Response(status_code=204, headers={**_CORS, "Access-Control-Allow-Methods": "GET, POST, OPTIONS"})


@router.post("/oauth/{endpoint_id}/token")
@_served
async def token(endpoint_id: str, request: Request, service: ServiceDep) -> Response:
    issuer = _issuer(request, service, endpoint_id)
    form = await _form(request)
    await _resolve_client(service, issuer, form, request)
    reply = await _in_thread(service.server(issuer).token, _http(request, issuer, "/token", form))
    return _reply(reply)


@router.post("/oauth/{endpoint_id}/revoke")
@_served
async def revoke(endpoint_id: str, request: Request, service: ServiceDep) -> Response:
    issuer = _issuer(request, service, endpoint_id)
    form = await _form(request)
    await _resolve_client(service, issuer, form, request)
    reply = await _in_thread(service.server(issuer).revocation, _http(request, issuer, "/revoke", form))
    return _reply(reply)


@router.post("/oauth/{endpoint_id}/register")
@_served
async def register(endpoint_id: str, request: Request, service: ServiceDep) -> Response:
    issuer = _issuer(request, service, endpoint_id)
    body = await request.body()
    if len(body) > MAX_BODY_BYTES:
        return _oauth_error(413, "invalid_client_metadata", f"the body is larger than {MAX_BODY_BYTES} bytes")
    try:
        metadata = json.loads(body)
    except ValueError:
        return _oauth_error(400, "invalid_client_metadata", "the body is not JSON")
    if not isinstance(metadata, dict):
        return _oauth_error(400, "invalid_client_metadata", "the body must be a JSON object of client metadata")
    registration = _http(request, issuer, "/register", json_body=metadata)
    reply = await _in_thread(service.server(issuer).registration, registration)
    return _reply(reply)


async def _resolve_client(
    service: AuthorizationService, issuer: Issuer, form: list[tuple[str, str]], request: Request
) -> None:
    """A metadata-document client at the token endpoint: its document fetched again if the cache let it go."""
    client_id = dict(form).get("client_id")
    if client_id:
        try:
            await service.clients.resolve(issuer.endpoint.workspace_id, client_id)
        except MCPBridgeError as exc:
            raise _NotServed(_oauth_error(401, "invalid_client", exc.message)) from None


async def _in_thread(function: Callable[[OAuthHttpRequest], Reply], argument: OAuthHttpRequest) -> Reply:
    reply: Reply = await anyio.to_thread.run_sync(function, argument)
    return reply
