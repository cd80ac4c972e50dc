"""The web console's server side over HTTP: its pages and assets, the session cookie and its CSRF token, on both
backends, in the app ``serve`` runs and in the admin API function's (routers included on demand), and through the
resolutions function's app, which API Gateway sends approvals to.

The browser's own view (the pages' scripts, the CSP enforced) is in ``test_console_browser.py``.
"""

from __future__ import annotations

import base64
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from mcpbridge.bootstrap import Container
from mcpbridge.http.apps import create_app, create_combined_app
from mcpbridge.http.auth import CONSOLE_COOKIE
from mcpbridge.http.console.session import SESSION_SECONDS
from tests.support.aws import REPO_ROOT
from tests.support.clock import FakeClock
from tests.support.containers import container_on
from tests.support.oauth_flow import lambda_hub

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
PAGES = [
    "/console",
    "/console/approvals/agc_01jd8x2k7m0000000000000000",
    "/console/calls",
    "/console/kbs",
    "/console/kbs/kb_01jd8x2k7m0000000000000000",
    "/console/endpoints",
    "/console/endpoints/ep_01jd8x2k7m0000000000000000",
    "/console/services",
    "/console/services/svc_01jd8x2k7m0000000000000000",
    "/console/people",
    "/console/quarantine",
    "/console/rules",
    "/console/groups",
    "/console/webhooks",
    "/console/workspaces",
    "/console/signin",
]
STATIC = REPO_ROOT / "shared" / "mcpbridge" / "http" / "console" / "static"
KEYS = "/api/v1/api-keys"


@pytest.fixture(params=["local", "aws"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def container(backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: FakeClock) -> Iterator[Container]:
    with container_on(backend, tmp_path, monkeypatch, clock=clock) as built:
        yield built


@pytest.fixture
def admin_key(container: Container) -> str:
    key = container.identity.initialize().api_key
    assert key is not None
    return key


@pytest.fixture(params=["serve", "lambda"])
def app(request: pytest.FixtureRequest, container: Container) -> FastAPI:
    """The app ``mcpbridge serve`` runs, or the admin API function's on an on-demand cold start."""
    if request.param == "serve":
        return create_combined_app(container)
    return create_app(container, "admin_api", lazy=True)


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


def sign_in(client: TestClient, key: str) -> dict[str, Any]:
    answer = client.post("/console/session", json={"api_key": key})
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def set_cookie(response: Any) -> SimpleCookie:
    cookie: SimpleCookie = SimpleCookie()
    for header in response.headers.get_list("set-cookie"):
        cookie.load(header)
    return cookie


def problem(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["code"] == code, response.text


def secured(response: Any) -> None:
    assert response.headers["content-security-policy"] == CSP, response.request.url
    assert response.headers["x-content-type-options"] == "nosniff", response.request.url
    assert response.headers["referrer-policy"] == "no-referrer", response.request.url


def key_names(client: TestClient, admin_key: str) -> list[str]:
    listed = client.get(KEYS, headers={"Authorization": f"Bearer {admin_key}"})  # the header wins over the cookie
    assert listed.status_code == 200, listed.text
    return sorted(key["name"] for key in listed.json()["items"] if not key.get("revoked_at"))


# ------------------------------------------------------------------------------------------------ signing in


def test_signing_in_with_a_good_key_sets_a_sealed_http_only_strict_cookie(client: TestClient, admin_key: str) -> None:
    answer = client.post("/console/session", json={"api_key": admin_key})
    assert answer.status_code == 200, answer.text
    secured(answer)
    assert answer.headers["cache-control"] == "no-store"
    morsel = set_cookie(answer)[CONSOLE_COOKIE]
    assert morsel["httponly"] is True
    assert morsel["samesite"].lower() == "strict"
    assert morsel["path"] == "/"
    assert morsel["max-age"] == str(SESSION_SECONDS)
    assert not morsel["secure"], "plain http (a local serve): a Secure cookie would never come back"
    # The key is sealed: neither its text nor any of its bytes in the clear, in the cookie or the body.
    value = morsel.value
    assert admin_key not in value
    assert admin_key.removeprefix("sk_") not in value
    opened = base64.urlsafe_b64decode(value.removeprefix("enc:v1:") + "==")
    assert admin_key.encode() not in opened
    assert admin_key.removeprefix("sk_").encode() not in opened
    assert admin_key not in answer.text
    body = answer.json()
    assert body["role"] == "admin"
    assert body["is_platform_admin"] is True  # the operator's key from init
    assert body["can_approve_calls"] is True
    assert body["capabilities"] is None
    assert len(body["csrf_token"]) >= 32
    assert body["csrf_token"] not in value


def test_the_cookie_is_secure_over_https(app: FastAPI, admin_key: str) -> None:
    with TestClient(app, base_url="https://console.example") as client:
        morsel = set_cookie(client.post("/console/session", json={"api_key": admin_key}))[CONSOLE_COOKIE]
        assert morsel["secure"] is True
        assert client.get("/api/v1/me").status_code == 200  # and it comes back over https


def test_a_bad_key_is_refused_and_sets_no_cookie(client: TestClient, admin_key: str) -> None:
    for key in ("sk_" + "A" * 43, "not-a-key"):
        answer = client.post("/console/session", json={"api_key": key})
        problem(answer, 401, "invalid_api_key")
        secured(answer)
        assert "set-cookie" not in answer.headers
    for body in ({}, {"api_key": ""}, {"api_key": admin_key, "remember": True}, {"api_key": 42}):
        answer = client.post("/console/session", json=body)
        problem(answer, 400, "invalid_sign_in")
        assert "set-cookie" not in answer.headers
    # A form (what another site could make a browser post) does not sign in, even with a good key.
    form = client.post("/console/session", data={"api_key": admin_key})
    problem(form, 415, "unsupported_media_type")
    assert "set-cookie" not in form.headers
    assert CONSOLE_COOKIE not in client.cookies
    problem(client.get("/console/session"), 401, "console_session_missing")


def test_a_revoked_key_cannot_sign_in_and_its_sessions_end(client: TestClient, admin_key: str) -> None:
    created = client.post(
        KEYS, json={"name": "browser", "role": "admin"}, headers={"Authorization": f"Bearer {admin_key}"}
    )
    assert created.status_code == 201, created.text
    sign_in(client, created.json()["key"])
    assert client.get("/api/v1/me").json()["api_key_id"] == created.json()["id"]
    revoked = client.delete(f"{KEYS}/{created.json()['id']}", headers={"Authorization": f"Bearer {admin_key}"})
    assert revoked.status_code == 204, revoked.text
    problem(client.get("/api/v1/me"), 401, "invalid_api_key")
    problem(client.get("/console/session"), 401, "invalid_api_key")
    problem(client.post("/console/session", json={"api_key": created.json()["key"]}), 401, "invalid_api_key")


# ------------------------------------------------------------------------------------------------ the session


def test_the_cookie_authenticates_reads(client: TestClient, admin_key: str) -> None:
    session = sign_in(client, admin_key)
    me = client.get("/api/v1/me")
    assert me.status_code == 200, me.text
    assert me.json()["user_id"] == session["user_id"]
    assert client.get(KEYS).status_code == 200
    again = client.get("/console/session")
    assert again.status_code == 200
    secured(again)
    assert again.json() == session  # the same session: the same CSRF token and expiry


def test_a_change_with_the_cookie_needs_the_sessions_csrf_token(client: TestClient, admin_key: str) -> None:
    session = sign_in(client, admin_key)
    before = key_names(client, admin_key)
    missing = client.post(KEYS, json={"name": "forged"})
    problem(missing, 403, "csrf_token_missing")
    assert "X-CSRF-Token" in missing.json()["detail"]
    for wrong in ("x", session["csrf_token"][:-1], session["csrf_token"] + "x", "x" * 4000):
        problem(client.post(KEYS, json={"name": "forged"}, headers={"X-CSRF-Token": wrong}), 403, "csrf_token_invalid")
    assert key_names(client, admin_key) == before, "nothing was created"

    made = client.post(KEYS, json={"name": "from the console"}, headers={"X-CSRF-Token": session["csrf_token"]})
    assert made.status_code == 201, made.text
    assert key_names(client, admin_key) == sorted([*before, "from the console"])

    # DELETE (and any other change) alike: refused without the token, the key still there; done with it.
    target = f"{KEYS}/{made.json()['id']}"
    problem(client.delete(target), 403, "csrf_token_missing")
    problem(client.delete(target, headers={"X-CSRF-Token": "nope"}), 403, "csrf_token_invalid")
    assert "from the console" in key_names(client, admin_key)
    assert client.delete(target, headers={"X-CSRF-Token": session["csrf_token"]}).status_code == 204
    assert key_names(client, admin_key) == before


def test_another_sessions_token_does_not_do(app: FastAPI, admin_key: str) -> None:
    with TestClient(app) as mine, TestClient(app) as theirs:
        sign_in(mine, admin_key)
        other = sign_in(theirs, admin_key)
        problem(
            mine.post(KEYS, json={"name": "x"}, headers={"X-CSRF-Token": other["csrf_token"]}),
            403,
            "csrf_token_invalid",
        )


def test_a_key_in_a_header_needs_no_csrf_token_and_wins_over_the_cookie(client: TestClient, admin_key: str) -> None:
    sign_in(client, admin_key)
    viewer = client.post(
        KEYS, json={"name": "viewer", "role": "viewer"}, headers={"Authorization": f"Bearer {admin_key}"}
    )
    assert viewer.status_code == 201, viewer.text
    # The header's key acts, unchanged, whatever cookie the client holds.
    assert client.get("/api/v1/me", headers={"X-API-Key": viewer.json()["key"]}).json()["role"] == "viewer"
    made = client.post(KEYS, json={"name": "by header"}, headers={"Authorization": f"Bearer {admin_key}"})
    assert made.status_code == 201, made.text
    problem(client.get("/api/v1/me", headers={"Authorization": "Bearer sk_" + "B" * 43}), 401, "invalid_api_key")


def test_a_tampered_or_expired_cookie_is_refused(client: TestClient, admin_key: str, clock: FakeClock) -> None:
    sign_in(client, admin_key)
    good = client.cookies[CONSOLE_COOKIE]
    flipped = good[:-5] + ("A" if good[-5] != "A" else "B") + good[-4:]
    for bad in (flipped, "enc:v1:AAAA", admin_key, "garbage"):
        client.cookies.clear()
        client.cookies.set(CONSOLE_COOKIE, bad)
        problem(client.get("/api/v1/me"), 401, "invalid_console_session")
        problem(client.get("/console/session"), 401, "invalid_console_session")
    client.cookies.clear()
    client.cookies.set(CONSOLE_COOKIE, good)
    assert client.get("/api/v1/me").status_code == 200
    clock.advance(SESSION_SECONDS + 1)
    problem(client.get("/api/v1/me"), 401, "console_session_expired")


def test_signing_out_clears_the_cookie(client: TestClient, admin_key: str) -> None:
    sign_in(client, admin_key)
    out = client.delete("/console/session")
    assert out.status_code == 204, out.text
    secured(out)
    morsel = set_cookie(out)[CONSOLE_COOKIE]
    assert morsel.value == ""
    assert morsel["max-age"] == "0"
    assert morsel["path"] == "/"
    assert CONSOLE_COOKIE not in client.cookies
    problem(client.get("/api/v1/me"), 401, "unauthenticated")
    problem(client.get("/console/session"), 401, "console_session_missing")


def test_signing_out_ends_the_session_on_the_server_for_every_copy_of_the_cookie(
    app: FastAPI, admin_key: str, container: Container, clock: FakeClock
) -> None:
    """A cookie copied before the sign-out (another tab's, a stolen one) opens nothing afterwards, while another
    session of the same key goes on; the session's record expires with it."""
    with TestClient(app) as browser, TestClient(app) as thief, TestClient(app) as other:
        session = sign_in(browser, admin_key)
        sign_in(other, admin_key)
        thief.cookies.set(CONSOLE_COOKIE, browser.cookies[CONSOLE_COOKIE])
        assert thief.get("/api/v1/me").status_code == 200
        assert browser.delete("/console/session").status_code == 204
        problem(thief.get("/api/v1/me"), 401, "console_session_ended")
        problem(thief.get("/console/session"), 401, "console_session_ended")
        ended = thief.post(KEYS, json={"name": "after"}, headers={"X-CSRF-Token": session["csrf_token"]})
        problem(ended, 401, "console_session_ended")
        assert "after" not in key_names(other, admin_key)
        assert other.get("/api/v1/me").status_code == 200  # another session of the key is not touched
        # Signing out again (the copy's cookie) is harmless; a new sign-in works.
        assert thief.delete("/console/session").status_code == 204
        assert other.get("/api/v1/me").status_code == 200
        sign_in(browser, admin_key)
        assert browser.get("/api/v1/me").status_code == 200
    records = container.store.query(f"WS#{container.identity.installed_workspace_id()}", sk_prefix="CONSOLE#")
    assert len(records.items) == 2, "the open sessions' records: the other one and the new sign-in"
    assert all(item["expires_at"] == int(clock.now()) + SESSION_SECONDS for item in records.items)
    assert all(set(item) == {"pk", "sk", "expires_at"} for item in records.items), "nothing but the expiry"


def test_the_resolutions_function_takes_the_session_too(container: Container, app: FastAPI, admin_key: str) -> None:
    """On AWS, POST /api/v1/agent/tool-approvals/{id} is the resolutions function's: the console's cookie and CSRF
    token work there as on the admin API."""
    missing = "/api/v1/agent/tool-approvals/agc_" + "0" * 26
    with TestClient(app) as console, TestClient(create_app(container, "resolutions")) as resolutions:
        session = sign_in(console, admin_key)
        resolutions.cookies.set(CONSOLE_COOKIE, console.cookies[CONSOLE_COOKIE])
        problem(resolutions.post(missing, json={"decision": "approve"}), 403, "csrf_token_missing")
        answer = resolutions.post(
            missing, json={"decision": "approve"}, headers={"X-CSRF-Token": session["csrf_token"]}
        )
        problem(answer, 404, "pending_not_found")  # signed in: the call itself is what is missing


# ------------------------------------------------------------------------------------------------ pages and assets


def test_the_root_leads_to_the_console(client: TestClient) -> None:
    for method in ("GET", "HEAD"):
        root = client.request(method, "/", follow_redirects=False)
        assert (root.status_code, root.headers["location"]) == (302, "/console"), root.text
        secured(root)


def test_pages_without_a_session_lead_to_the_sign_in_page_and_back(client: TestClient) -> None:
    for page in PAGES[:-1]:
        answer = client.get(page + "?x=1", follow_redirects=False)
        assert answer.status_code == 303, page
        assert answer.headers["location"] == f"/console/signin?next={page}%3Fx%3D1"
        secured(answer)
    signin = client.get("/console/signin")
    assert signin.status_code == 200
    assert '<form id="sign-in"' in signin.text


def test_every_page_and_asset_carries_the_security_headers(client: TestClient, admin_key: str) -> None:
    sign_in(client, admin_key)
    for page in PAGES:
        answer = client.get(page)
        assert answer.status_code == 200, page
        assert answer.headers["content-type"] == "text/html; charset=utf-8"
        secured(answer)
        for inline in ("<script>", "style=", "<style"):  # no inline script or style
            assert inline not in answer.text, (page, inline)
        assert not re.search(r"\son[a-z]+=", answer.text), page  # nor an inline event handler
        scripts = re.findall(r'<script type="module" src="([^"]+)"></script>', answer.text)
        assert len(scripts) == 1, page
        for reference in [*scripts, *re.findall(r'href="(/console/static/[^"]+)"', answer.text)]:
            asset = client.get(reference)
            assert asset.status_code == 200, reference
            secured(asset)
    problem(client.get("/console/static/nothing.js"), 404, "not_found")
    secured(client.get("/console/static/nothing.js"))


def test_every_page_is_the_one_shell_filled_with_its_own_main_section(client: TestClient, admin_key: str) -> None:
    """One head, one header (its nav with the page's own link marked current, the sign-out) and the page's main
    section, whatever the page: a change to the shell reaches every page."""
    sign_in(client, admin_key)
    shell = (STATIC / "shell.html").read_text(encoding="utf-8")
    head = shell[: shell.index("<title>")]
    for page in PAGES:
        html = client.get(page).text
        assert html.startswith(head), page
        assert (html.count("<main "), html.count("</main>")) == (1, 1), page
        assert html.rstrip().endswith("</main>\n</body>\n</html>"), page
        assert "{" + "main}" not in html, page
        assert "{" + "title}" not in html, page
        if page == "/console/signin":
            assert "<header" not in html
            assert 'id="sign-out"' not in html
            continue
        assert (html.count('<header class="top">'), html.count('id="sign-out"')) == (1, 1), page
        current = re.findall(r'<a href="([^"]+)" aria-current="page">', html)
        assert len(current) == 1, (page, current)
        assert page.startswith(current[0]), (page, current)
        assert html.count("<li><a href=") == 10, page
        assert html.count('<li hidden data-platform-admin><a href="/console/workspaces"') == 1, page


def test_assets_are_served_with_their_types_and_nothing_else_is(client: TestClient) -> None:
    types = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
    served = 0
    for path in sorted(STATIC.iterdir()):
        answer = client.get(f"/console/static/{path.name}")
        if path.suffix in types:
            assert answer.status_code == 200, path.name
            assert answer.headers["content-type"] == types[path.suffix], path.name
            assert answer.content == path.read_bytes()
            unchanged = client.get(f"/console/static/{path.name}", headers={"If-None-Match": answer.headers["etag"]})
            assert unchanged.status_code == 304, path.name
            served += 1
        else:  # the pages themselves only at their routes
            assert answer.status_code == 404, path.name
    assert served >= 10
    for name in ("../session.py", "..%2Fsession.py", "%2e%2e%2Fsession.py", ".hidden.js", "API.JS", "x.py"):
        assert client.get(f"/console/static/{name}").status_code == 404, name


def test_the_static_files_are_in_the_built_wheel(tmp_path: Path) -> None:
    """What the Lambda layer and a pip install get: the package as built (``infra/build_artifacts.py`` installs it
    the same way)."""
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path), str(REPO_ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = tmp_path.glob("mcpbridge-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for path in STATIC.iterdir():
        assert f"mcpbridge/http/console/static/{path.name}" in names, path.name


# ------------------------------------------------------------------------------------------------ on AWS


def test_the_console_through_api_gateway_and_the_lambda_functions(monkeypatch: pytest.MonkeyPatch) -> None:
    """The template's routes and the real handlers (state in moto): pages, assets and the session reach the admin
    API function, an approval made with the session the resolutions function."""
    with lambda_hub(monkeypatch) as hub, httpx.Client(base_url=hub.base_url, timeout=60) as browser:
        root = browser.get("/", follow_redirects=False)
        assert (root.status_code, root.headers["location"]) == (302, "/console")
        secured(root)
        assert browser.get("/console", follow_redirects=False).headers["location"] == "/console/signin?next=/console"
        signin = browser.get("/console/signin")
        assert signin.status_code == 200
        secured(signin)
        for name in ("inbox.js", "console.css", "icon.svg"):
            asset = browser.get(f"/console/static/{name}")
            assert asset.status_code == 200, name
            assert asset.content == (STATIC / name).read_bytes(), name
            secured(asset)

        problem(browser.post("/console/session", json={"api_key": "sk_" + "C" * 43}), 401, "invalid_api_key")
        assert CONSOLE_COOKIE not in browser.cookies
        signed = browser.post("/console/session", json={"api_key": hub.admin_key})
        assert signed.status_code == 200, signed.text
        assert set_cookie(signed)[CONSOLE_COOKIE]["httponly"] is True
        csrf = {"X-CSRF-Token": signed.json()["csrf_token"]}
        assert browser.get("/console").status_code == 200
        assert browser.get("/api/v1/me").status_code == 200

        problem(browser.post(KEYS, json={"name": "forged"}), 403, "csrf_token_missing")
        assert browser.post(KEYS, json={"name": "from the console"}, headers=csrf).status_code == 201
        missing = "/api/v1/agent/tool-approvals/agc_" + "0" * 26  # the resolutions function's route
        problem(browser.post(missing, json={"decision": "approve"}), 403, "csrf_token_missing")
        problem(browser.post(missing, json={"decision": "approve"}, headers=csrf), 404, "pending_not_found")

        assert browser.delete("/console/session").status_code == 204
        problem(browser.get("/api/v1/me"), 401, "unauthenticated")


def test_the_session_says_what_the_key_may_do_as_the_api_decides_it(client: TestClient, admin_key: str) -> None:
    """The pages show the approve buttons from these flags; the REST API decides the same way (and has the last
    word): an admin key with approve_calls approves every call, a key with call_tools its own user's."""
    admin = {"Authorization": f"Bearer {admin_key}"}
    cases = {
        "approver": ({"role": "admin", "capabilities": ["approve_calls", "read"]}, (False, True)),
        "agent": ({"role": "viewer", "capabilities": ["call_tools"]}, (True, False)),
        "viewer approving": ({"role": "viewer", "capabilities": ["approve_calls"]}, (False, False)),
        "reader": ({"role": "admin", "capabilities": ["read"]}, (False, False)),
    }
    for name, (scope, (calls_tools, approves)) in cases.items():
        made = client.post(KEYS, json={"name": name, **scope}, headers=admin)
        assert made.status_code == 201, made.text
        session = sign_in(client, made.json()["key"])
        assert (session["can_call_tools"], session["can_approve_calls"]) == (calls_tools, approves), name
        assert session["is_platform_admin"] is False, name  # none has manage_workspaces
        assert session["role"] == scope["role"]
        assert session["capabilities"] == sorted(scope["capabilities"])
        pending = client.get("/api/v1/agent/pending")
        assert pending.status_code == (200 if calls_tools or approves else 403), (name, pending.text)
