"""What the browser tests of the consent page share: the client application (its callback, and pages of "another
site" that frame the consent page or post a forged form to it), a scene (a hub, that client, a headless Chromium),
and the authorization URL of a freshly registered client."""

from __future__ import annotations

import contextlib
import html
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from tests.support.chromium import Chromium, Tab, chromium
from tests.support.live_server import live_server
from tests.support.oauth_flow import Hub, OAuthClient, pkce

SHOTS = Path("/tmp/oauth-shots")
OTHER_SITE = "client.test"
"""A host name the browser maps to 127.0.0.1: pages served under it are another site than the hub's."""
HIDDEN = r'<input type="hidden" name="(\w+)" value="([^"]*)"'


async def _callback(request: Request) -> HTMLResponse:
    outcome = "an error: " + html.escape(request.query_params["error"]) if "error" in request.query_params else "a code"
    return HTMLResponse(f"<!doctype html><title>Client</title><h1>Back at the client</h1><p>It received {outcome}.</p>")


async def _framing(request: Request) -> HTMLResponse:
    source = html.escape(request.query_params["src"])
    return HTMLResponse(
        f'<!doctype html><title>Framing</title><h1>Another site framing the page</h1><iframe id="framed" src="{source}"'
        ' width="800" height="500"></iframe>'
    )


async def _forged(request: Request) -> HTMLResponse:
    """Another site's form that posts to the consent action with every field it learnt (even the CSRF value)."""
    action = html.escape(request.query_params["action"])
    fields = "".join(
        f'<input type="hidden" name="{html.escape(name)}" value="{html.escape(value)}">'
        for name, value in request.query_params.items()
        if name != "action"
    )
    return HTMLResponse(
        f'<!doctype html><title>Prize</title><h1>Claim your prize</h1><form method="post" action="{action}">'
        f'{fields}<button id="claim" type="submit">Claim</button></form>'
    )


CLIENT_APP = Starlette(routes=[Route("/callback", _callback), Route("/framing", _framing), Route("/forged", _forged)])


@dataclass(frozen=True)
class Scene:
    backend: str
    hub: Hub
    browser: Chromium
    client_origin: str
    """The client application's origin (127.0.0.1): its callback."""
    other_site: str
    """The same server as another site (``client.test``)."""


@dataclass
class Authorization:
    client: OAuthClient
    url: str
    state: str
    verifier: str


def authorization(scene: Scene, name: str = "Field desktop") -> Authorization:
    """A client registered at a new endpoint of the scene's hub, and its authorization URL."""
    endpoint = scene.hub.publish()
    client = OAuthClient(endpoint["url"], redirect_uri=f"{scene.client_origin}/callback")
    client.discover()
    assert client.register(client_name=name).status_code == 201
    verifier, challenge = pkce()
    params = client.authorize_params(challenge)
    url = f"{client.metadata['authorization_endpoint']}?{urlencode(params)}"
    return Authorization(client, url, params["state"], verifier)


def shot(scene: Scene, tab: Tab, state: str) -> Path:
    return tab.screenshot(SHOTS / f"{scene.backend}-{state}.png")


def document_response(tab: Tab, url_prefix: str) -> dict[str, Any]:
    found = [r for r in tab.responses() if r["url"].startswith(url_prefix)]
    assert found, [r["url"] for r in tab.responses()]
    return found[-1]


@contextlib.contextmanager
def scene_of(backend: str, hub: Hub, profile: Path, trusted: tuple[Path, ...] = ()) -> Iterator[Scene]:
    """The client application served on 127.0.0.1 and a browser, around ``hub``."""
    with (
        live_server(CLIENT_APP) as client_origin,
        chromium(profile, names=(OTHER_SITE,), trusted=trusted) as browser,
    ):
        yield Scene(backend, hub, browser, client_origin, client_origin.replace("127.0.0.1", OTHER_SITE))
