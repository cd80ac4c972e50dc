"""``/api/v1/docs`` works offline: the page and every asset it references come from the app itself (the installed
Swagger UI package), nothing from another host; and in a real browser (headless Chromium, every host but 127.0.0.1
unresolvable) it renders the operations and the Authorize button from those files alone.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from starlette.testclient import TestClient
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcpbridge.bootstrap import Container
from mcpbridge.http.apps import create_combined_app
from mcpbridge.settings import Settings
from tests.support.readiness import Worker, wait_until

DOCS = "/api/v1/docs"
SCREENSHOT = Path("/tmp/mcpbridge-docs.png")
BROWSER = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
REFERENCE = re.compile(r"""(?:src|href)="([^"]+)"|url:\s*'([^']+)'""")


@pytest.fixture
def container(tmp_path: Path) -> Iterator[Container]:
    built = Container(Settings(data_dir=tmp_path / "data", jobs="inline"))
    yield built
    built.close()


def references(page: str) -> list[str]:
    return [a or b for a, b in REFERENCE.findall(page)]


def test_the_root_sends_a_browser_to_the_console(container: Container) -> None:
    with TestClient(create_combined_app(container)) as client:
        for method in ("GET", "HEAD"):
            root = client.request(method, "/", follow_redirects=False)
            assert (root.status_code, root.headers["location"]) == (302, "/console"), root.text
        assert client.get("/").url.path == "/console/signin"  # without a session, by way of its sign-in page
        assert client.get("/").headers["content-type"].startswith("text/html")
        assert "/" not in client.get("/api/v1/openapi.json").json()["paths"]


def test_the_page_and_every_asset_it_references_come_from_the_app(container: Container) -> None:
    with TestClient(create_combined_app(container)) as client:
        page = client.get(DOCS)
        assert page.status_code == 200, page.text
        assert page.headers["content-type"].startswith("text/html")
        policy = page.headers["content-security-policy"]
        assert "default-src 'none'" in policy
        assert "script-src 'self'" in policy
        assert "connect-src 'self'" in policy
        found = references(page.text)
        assert len(found) == 4, found  # the style sheet, the icon, the script and the OpenAPI document
        for reference in found:
            assert re.match(r"^/[^/]", reference), f"{reference} is on another host"
            asset = client.get(reference)
            assert asset.status_code == 200, (reference, asset.status_code)
            assert len(asset.content) > 100, reference
        assert "validatorUrl" in page.text
        assert '"validatorUrl": null' in page.text
        css = client.get(f"{DOCS}/assets/swagger-ui.css")
        assert css.headers["content-type"].startswith("text/css")
        external = [u for u in re.findall(r"url\(([^)]*)\)", css.text) if not u.strip("'\"").startswith("data:")]
        assert external == [], "the style sheet loads nothing but inline data"
        assert client.get(f"{DOCS}/assets/swagger-ui-bundle.js").headers["content-type"].startswith("text/javascript")
        # Only the files the page uses are served, and nothing outside the package's folder.
        for other in ("index.html", "..%2F__init__.py", "swagger-ui-bundle.js.map"):
            assert client.get(f"{DOCS}/assets/{other}").status_code == 404


class _Recorder:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.seen: list[tuple[str, int]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def record(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.seen.append((scope["path"], message["status"]))
            await send(message)

        await self.app(scope, receive, record if scope["type"] == "http" else send)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def live(container: Container) -> Iterator[tuple[str, _Recorder]]:
    recorder = _Recorder(create_combined_app(container))
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(recorder, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, Worker.thread("the test server", thread), what="starting")
    yield f"http://127.0.0.1:{port}", recorder
    server.should_exit = True
    thread.join(timeout=10)


def _chromium(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert BROWSER is not None
    command = [
        BROWSER,
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={cwd / 'profile'}",
        # Offline but for this machine: any other host name fails to resolve.
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        "--virtual-time-budget=20000",
        "--window-size=1280,1800",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=cwd, check=False)


@pytest.mark.slow
@pytest.mark.skipif(BROWSER is None, reason="no Chromium on this machine (Debian: apt-get install chromium)")
def test_the_page_renders_offline_in_a_browser(live: tuple[str, Any], tmp_path: Path) -> None:
    base, recorder = live
    dom = _chromium("--dump-dom", f"{base}{DOCS}", cwd=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "opblock-summary" in dom.stdout, "Swagger UI did not render the operations"
    assert "Authorize" in dom.stdout, "no Authorize button: the security schemes are missing"
    assert "List API keys" in dom.stdout
    assert "Create a knowledge base" in dom.stdout
    SCREENSHOT.unlink(missing_ok=True)
    shot = _chromium(f"--screenshot={SCREENSHOT}", f"{base}{DOCS}", cwd=tmp_path)
    assert shot.returncode == 0, shot.stderr[-2000:]
    assert SCREENSHOT.stat().st_size > 10_000
    wanted = {DOCS, f"{DOCS}/assets/swagger-ui.css", f"{DOCS}/assets/swagger-ui-bundle.js", "/api/v1/openapi.json"}
    answered = dict(recorder.seen)
    assert wanted <= set(answered), answered
    assert all(answered[path] == 200 for path in wanted), answered
