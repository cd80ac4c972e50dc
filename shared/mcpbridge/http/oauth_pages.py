"""The sign-in and consent page of the authorization server, rendered on the server: plain HTML forms, no script.

Every page is sent with headers that keep it out of frames (``X-Frame-Options: DENY``, CSP ``frame-ancestors
'none'``), out of caches and referrers, and lets it load nothing but its own inline style (by nonce). Forms may post
only to mcpbridge, and be redirected only to the client (its redirect URI) or the identity provider. Every value shown
is escaped; the page never holds a token, code or the client's state (the CSRF secret is the only hidden value).
"""

from __future__ import annotations

import html
import secrets
from urllib.parse import urlsplit

from fastapi.responses import HTMLResponse

from mcpbridge.authserver.consent import ConsentPage

_STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;background:#f4f5f7;color:#1d2430;margin:0}
main{max-width:30rem;margin:3rem auto;background:#fff;border-radius:12px;padding:2rem;
box-shadow:0 1px 3px rgba(0,0,0,.12)}
h1{font-size:1.3rem;margin:0 0 1rem}
p,li{line-height:1.45}
.muted{color:#5b6473;font-size:.9rem}
.box{background:#f4f5f7;border-radius:8px;padding:.75rem 1rem;margin:1rem 0;word-break:break-all}
.error{background:#fdecec;color:#8a1c1c;border-radius:8px;padding:.75rem 1rem;margin:1rem 0}
.warn{color:#8a5a00}
label{display:block;font-weight:600;margin:1rem 0 .35rem}
input[type=password]{width:100%;box-sizing:border-box;padding:.6rem;border:1px solid #c5cad3;border-radius:6px;
font-size:1rem}
.actions{display:flex;gap:.75rem;margin-top:1.5rem}
button{flex:1;padding:.7rem;border-radius:6px;border:1px solid #c5cad3;background:#fff;font-size:1rem;cursor:pointer}
button.primary{background:#1f5fd6;border-color:#1f5fd6;color:#fff}
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _origin(url: str) -> str | None:
    """A CSP source for where a form's redirect may lead (``https://host:port``, or a private scheme ``cursor:``)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme in ("http", "https") and parts.netloc:
        return f"{parts.scheme}://{parts.netloc}"
    return f"{parts.scheme}:" if parts.scheme else None


def _headers(nonce: str, form_targets: list[str]) -> dict[str, str]:
    targets = " ".join(dict.fromkeys(t for t in form_targets if t))
    policy = (
        f"default-src 'none'; style-src 'nonce-{nonce}'; img-src 'none'; base-uri 'none'; "
        f"frame-ancestors 'none'; form-action 'self' {targets}".strip()
    )
    return {
        "Content-Security-Policy": policy,
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        "Cache-Control": "no-store",
        "Pragma": "no-cache",
        # Not no-referrer: with it a browser sends "Origin: null" on the form's POST, which the CSRF check refuses.
        "Referrer-Policy": "same-origin",
    }


def _document(title: str, body: str, nonce: str) -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<title>{_e(title)} - mcpbridge</title><style nonce="{nonce}">{_STYLE}</style></head>'
        f"<body><main>{body}</main></body></html>"
    )


def consent_response(page: ConsentPage, *, action: str, provider_origin: str | None = None) -> HTMLResponse:
    """The consent page for ``page``; its forms post to ``action``."""
    nonce = secrets.token_urlsafe(16)
    hidden = (
        f'<input type="hidden" name="consent" value="{_e(page.handle)}">'
        f'<input type="hidden" name="csrf" value="{_e(page.csrf)}">'
    )
    parts = [
        f"<h1>Allow {_e(page.client_name)} to use {_e(page.endpoint_name)}?</h1>",
        _client_facts(page),
        "<p>It asks to:</p><ul>" + "".join(f"<li>{_e(t)}</li>" for _, t in page.scope_titles) + "</ul>",
    ]
    if page.error:
        parts.append(f'<p class="error" role="alert">{_e(page.error)}</p>')
    parts.append(_decision_form(page, action, hidden))
    body = "".join(parts)
    status = 400 if page.error else 200
    targets = [_origin(page.redirect_uri) or "", provider_origin or ""]
    return HTMLResponse(_document("Authorize", body, nonce), status_code=status, headers=_headers(nonce, targets))


def _client_facts(page: ConsentPage) -> str:
    if page.client_kind == "metadata_document":
        host = urlsplit(page.client_id).hostname or page.client_id
        identity = f'<p class="muted">Its identity is published by <strong>{_e(host)}</strong>.</p>'
    else:
        identity = '<p class="muted warn">This application registered itself: its name is unverified.</p>'
    return (
        identity
        + f'<p class="muted">After your answer you will be sent to:</p><p class="box">{_e(page.redirect_uri)}</p>'
    )


def _decision_form(page: ConsentPage, action: str, hidden: str) -> str:
    deny = '<button type="submit" name="decision" value="deny" formnovalidate>Deny</button>'
    if page.sign_in_with == "oidc" and page.signed_in is None:
        return (
            f'<form method="post" action="{_e(action)}">{hidden}'
            f"<p>Sign in to answer.</p>"
            f'<div class="actions">{deny}'
            f'<button class="primary" type="submit" name="decision" value="sign_in">'
            f"Sign in with {_e(page.provider_name)}</button></div></form>"
        )
    if page.sign_in_with == "oidc" and page.signed_in is not None:
        who = f"<p>Signed in as <strong>{_e(page.signed_in.label)}</strong>.</p>"
        fields = ""
    else:
        who = ""
        fields = (
            '<label for="api_key">Your mcpbridge API key</label>'
            '<input id="api_key" type="password" name="api_key" autocomplete="off" required '
            'placeholder="sk_...">'
            '<p class="muted">It signs you in for this approval only; the application never sees it.</p>'
        )
    return (
        f'<form method="post" action="{_e(action)}">{hidden}{who}{fields}'
        f'<div class="actions">{deny}'
        f'<button class="primary" type="submit" name="decision" value="approve">Allow</button></div></form>'
    )


def error_response(status: int, title: str, detail: str, *, headers: dict[str, str] | None = None) -> HTMLResponse:
    nonce = secrets.token_urlsafe(16)
    body = f"<h1>{_e(title)}</h1><p>{_e(detail)}</p>"
    return HTMLResponse(
        _document(title, body, nonce), status_code=status, headers={**_headers(nonce, []), **(headers or {})}
    )
