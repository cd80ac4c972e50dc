"""OAuth's outbound HTTP: the SSRF guard on every URL, HTTPS outside the allowlist, no redirects, bounded answers.

Every request (metadata documents, registration, token, revocation, the unauthenticated probe of the MCP server)
goes through :func:`mcpbridge.outbound.http.guarded_async_client`, which checks the URL and pins each connection to an
address the :class:`~mcpbridge.outbound.policy.EgressPolicy` approved. On top of that:

* **HTTPS.** Plain ``http`` is refused unless the host is on the SSRF allowlist (``MCPBRIDGE_SSRF_ALLOWLIST``): tokens,
  codes and client secrets never cross the network in clear text. The tests run their authorization server on
  ``http://127.0.0.1`` with ``ssrf_allowlist=["127.0.0.1"]``; an operator may allowlist an internal server the same way.
* **No redirects.** A 3xx is an answer like any other (metadata "not here", a token request failed), as the MCP SDK
  does: a redirect can neither lead a token request elsewhere nor bypass the checks above.
* **Bounds.** One deadline per request; answers larger than 256 KiB are refused.

Messages name the host, never the URL (its query may carry a code or a state) and never a body.
"""

from __future__ import annotations

import contextlib
import json
import ssl
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2

from mcpbridge.errors import InvalidInput, UpstreamError
from mcpbridge.outbound.http import AnswerTooLarge, guarded_async_client
from mcpbridge.outbound.policy import EgressPolicy, Target

MAX_ANSWER_BYTES = 256 * 1024
FORM = "application/x-www-form-urlencoded"


def require_https(policy: EgressPolicy, url: str, what: str) -> Target:
    """Accept ``url`` (the SSRF rules, then https unless the host is allowlisted) or raise InvalidInput."""
    target = policy.check_url(url)
    if target.scheme != "https" and not policy.is_allowlisted_host(target.host, target.port):
        raise InvalidInput(
            f"refused: the {what} at {target.host} must use https",
            code="url_scheme_not_allowed",
            details={"what": what},
        )
    return target


@dataclass(frozen=True)
class Answer:
    """An HTTP answer: status, headers and the body parsed as JSON (None when it is not JSON)."""

    status: int
    headers: httpx2.Headers
    body: Any

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def json_object(self) -> dict[str, Any] | None:
        return self.body if isinstance(self.body, dict) else None


@contextlib.contextmanager
def _failures(host: str, what: str, timeout: float, max_bytes: int) -> Iterator[None]:
    try:
        yield
    except AnswerTooLarge as exc:
        raise UpstreamError(
            f"the {what} at {host} answered with more than {max_bytes} bytes",
            code="oauth_answer_too_large",
            details={"what": what, "max_bytes": max_bytes},
        ) from exc
    except TimeoutError as exc:
        raise UpstreamError(
            f"the {what} at {host} did not answer within {timeout:g} s",
            code="oauth_server_timeout",
            details={"what": what},
        ) from exc
    except httpx2.TimeoutException as exc:
        raise UpstreamError(
            f"the {what} at {host} did not answer within {timeout:g} s",
            code="oauth_server_timeout",
            details={"what": what},
        ) from exc
    except httpx2.HTTPError as exc:
        raise UpstreamError(
            f"could not reach the {what} at {host} ({type(exc).__name__})",
            code="oauth_server_unreachable",
            details={"what": what},
        ) from exc


async def request(
    policy: EgressPolicy,
    method: str,
    url: str,
    *,
    what: str,
    timeout: float,
    form: Mapping[str, str] | None = None,
    json_body: Any = None,
    headers: Mapping[str, str] | None = None,
    ssl_context: ssl.SSLContext | None = None,
    max_bytes: int = MAX_ANSWER_BYTES,
) -> Answer:
    """Send one request (no redirect followed) and read its answer (at most ``max_bytes``). ``ssl_context``: the
    certificates to trust instead of the default ones.

    Raises InvalidInput for a refused URL (``url_*`` codes) and UpstreamError ``oauth_server_timeout`` /
    ``oauth_server_unreachable`` / ``oauth_answer_too_large``; every HTTP status is returned, not raised.
    """
    target = require_https(policy, url, what)
    sent = {"accept": "application/json", **(headers or {})}
    http = guarded_async_client(policy, timeout=timeout, ssl_context=ssl_context, max_answer_bytes=max_bytes)
    async with http:
        with _failures(target.host, what, timeout, max_bytes), anyio.fail_after(timeout):
            async with http.stream(method, url, data=form, json=json_body, headers=sent) as response:
                raw = await response.aread()
    body: Any = None
    if raw:
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
    return Answer(status=response.status_code, headers=response.headers, body=body)


async def get_json(
    policy: EgressPolicy,
    url: str,
    *,
    what: str,
    timeout: float,
    ssl_context: ssl.SSLContext | None = None,
    max_bytes: int = MAX_ANSWER_BYTES,
) -> Answer:
    return await request(policy, "GET", url, what=what, timeout=timeout, ssl_context=ssl_context, max_bytes=max_bytes)


async def post_form(
    policy: EgressPolicy,
    url: str,
    form: Mapping[str, str],
    *,
    what: str,
    timeout: float,
    headers: Mapping[str, str] | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> Answer:
    return await request(
        policy,
        "POST",
        url,
        what=what,
        timeout=timeout,
        form=form,
        headers={"content-type": FORM, **(headers or {})},
        ssl_context=ssl_context,
    )
