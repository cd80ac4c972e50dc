"""Headless Chromium (Debian's ``chromium``) driven over the DevTools protocol through a pipe
(``--remote-debugging-pipe``: the browser reads commands on fd 3 and writes answers and events on fd 4, each a JSON
message ending in NUL), so no WebSocket library is needed.

A page is operated the way a person does it, with page scripts turned off: typed into (``Input.insertText``), clicked
at the centre of an element (``Input.dispatchMouseEvent``), read through the DOM domain and photographed. Only
127.0.0.1 and the names mapped to it resolve; the browser has its own profile and stops with the block.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
TIMEOUT = 30.0


class BrowserError(AssertionError):
    pass


class Chromium:
    """One headless browser; :meth:`tab` opens a page session in it."""

    def __init__(self, process: subprocess.Popen[bytes], commands: int, answers: int) -> None:
        self._process = process
        self._commands = commands
        self._answers = answers
        self._next_id = 0
        self._lock = threading.Lock()
        self._waiting: dict[int, queue.Queue[dict[str, Any]]] = {}
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = os.read(self._answers, 65536)
            except OSError:
                return
            if not chunk:
                return
            buffer += chunk
            while b"\0" in buffer:
                raw, buffer = buffer.split(b"\0", 1)
                message = json.loads(raw)
                waiter = self._waiting.pop(message["id"], None) if "id" in message else None
                if waiter is not None:
                    waiter.put(message)
                else:
                    self.events.put(message)

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        with self._lock:
            self._next_id += 1
            message_id = self._next_id
            answer: queue.Queue[dict[str, Any]] = queue.Queue()
            self._waiting[message_id] = answer
            message: dict[str, Any] = {"id": message_id, "method": method, "params": params or {}}
            if session is not None:
                message["sessionId"] = session
            os.write(self._commands, json.dumps(message).encode() + b"\0")
        try:
            reply = answer.get(timeout=TIMEOUT)
        except queue.Empty:
            raise BrowserError(f"{method}: no answer from the browser in {TIMEOUT:.0f} s") from None
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error']}")
        return reply.get("result", {})  # type: ignore[no-any-return]

    def tab(self) -> Tab:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        tab = Tab(self, session, target)
        for domain in ("Page", "Network", "DOM", "Log"):
            tab.send(f"{domain}.enable")
        tab.send("Emulation.setScriptExecutionDisabled", {"value": True})
        tab.send(
            "Emulation.setDeviceMetricsOverride", {"width": 900, "height": 900, "deviceScaleFactor": 1, "mobile": False}
        )
        return tab


class Tab:
    """A page of the browser, with every event of its session kept in order."""

    def __init__(self, browser: Chromium, session: str, target: str) -> None:
        self.browser = browser
        self.session = session
        self.target = target
        self.seen: list[dict[str, Any]] = []

    def close(self) -> None:
        self.browser.send("Target.closeTarget", {"targetId": self.target})

    def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.browser.send(method, params, self.session)

    def _pump(self, until: float) -> dict[str, Any] | None:
        try:
            event = self.browser.events.get(timeout=max(0.01, until - time.monotonic()))
        except queue.Empty:
            return None
        if event.get("sessionId") == self.session:
            self.seen.append(event)
        return event

    def wait_for(self, method: str, since: int = 0, timeout: float = TIMEOUT) -> dict[str, Any]:
        """The first event ``method`` of this tab at or after index ``since`` of :attr:`seen`."""
        until = time.monotonic() + timeout
        while True:
            for event in self.seen[since:]:
                if event["method"] == method:
                    return event
            if time.monotonic() > until:
                raise BrowserError(f"no {method} in {timeout:.0f} s; saw {[e['method'] for e in self.seen[since:]]}")
            self._pump(until)

    def settle(self, seconds: float = 0.3) -> None:
        """Take in the events of the next ``seconds``."""
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            self._pump(until)

    def navigate(self, url: str) -> None:
        mark = len(self.seen)
        answer = self.send("Page.navigate", {"url": url})
        if answer.get("errorText"):
            raise BrowserError(f"navigating to the page failed: {answer['errorText']}")
        self.wait_for("Page.loadEventFired", since=mark)

    def click(self, selector: str) -> None:
        """Click the element's centre with the mouse and wait for the page that loads next."""
        node = self.node(selector)
        self.send("DOM.scrollIntoViewIfNeeded", {"nodeId": node})
        quad = self.send("DOM.getBoxModel", {"nodeId": node})["model"]["content"]
        x, y = sum(quad[0::2]) / 4, sum(quad[1::2]) / 4
        mark = len(self.seen)
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1})
        self.wait_for("Page.loadEventFired", since=mark)

    def type_into(self, selector: str, text: str) -> None:
        self.send("DOM.focus", {"nodeId": self.node(selector)})
        self.send("Input.insertText", {"text": text})

    def node(self, selector: str) -> int:
        root = self.send("DOM.getDocument", {"depth": 0})["root"]["nodeId"]
        node = self.send("DOM.querySelector", {"nodeId": root, "selector": selector})["nodeId"]
        if not node:
            raise BrowserError(f"the page has no {selector!r}")
        return int(node)

    def html(self) -> str:
        root = self.send("DOM.getDocument", {"depth": -1, "pierce": True})["root"]
        return str(self.send("DOM.getOuterHTML", {"backendNodeId": root["backendNodeId"]})["outerHTML"])

    def url(self) -> str:
        return str(self.send("Page.getFrameTree")["frameTree"]["frame"]["url"])

    def frames(self) -> list[dict[str, Any]]:
        """The page's child frames (Page.getFrameTree's ``frame`` of each)."""
        tree = self.send("Page.getFrameTree")["frameTree"]
        return [child["frame"] for child in tree.get("childFrames", [])]

    def responses(self) -> list[dict[str, Any]]:
        """Every response this tab received (Network.responseReceived's ``response``), in order."""
        return [e["params"]["response"] for e in self.seen if e["method"] == "Network.responseReceived"]

    def requests(self) -> list[dict[str, Any]]:
        """Every request this tab sent (Network.requestWillBeSent's ``request``), in order."""
        return [e["params"]["request"] for e in self.seen if e["method"] == "Network.requestWillBeSent"]

    def messages(self) -> list[str]:
        """What the browser said in the console (CSP and framing refusals among them)."""
        return [e["params"]["entry"]["text"] for e in self.seen if e["method"] == "Log.entryAdded"]

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path


def _spki(cert: Path) -> str:
    key = x509.load_pem_x509_certificate(cert.read_bytes()).public_key()
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


def _above_4(fd: int) -> int:
    """The same pipe end on a descriptor that wiring fds 3 and 4 cannot overwrite before it is read."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 5)
    os.close(fd)
    return moved


_WIRE = (
    "import os, sys; os.dup2(int(sys.argv[1]), 3); os.dup2(int(sys.argv[2]), 4); os.execv(sys.argv[3], sys.argv[3:])"
)


@contextlib.contextmanager
def chromium(profile: Path, *, names: tuple[str, ...] = (), trusted: tuple[Path, ...] = ()) -> Iterator[Chromium]:
    """A headless browser for the block. ``names``: host names that resolve to 127.0.0.1 (every other name but
    127.0.0.1 itself fails to resolve). ``trusted``: server certificates (PEM) accepted although no CA the browser
    knows signed them (by their public key's SHA-256)."""
    assert BROWSER is not None, "no Chromium on this machine"
    mapped = "".join(f"MAP {name} 127.0.0.1, " for name in names)
    pins = [f"--ignore-certificate-errors-spki-list={','.join(_spki(cert) for cert in trusted)}"] if trusted else []
    commands_read, commands_write = os.pipe()
    answers_read, answers_write = os.pipe()
    commands_read, answers_write = _above_4(commands_read), _above_4(answers_write)

    command = [
        BROWSER,
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        "--remote-debugging-pipe",
        f"--user-data-dir={profile}",
        f"--host-resolver-rules={mapped}MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        *pins,
        "about:blank",
    ]
    # A small Python puts the pipes where the browser expects them (fd 3 commands, fd 4 answers) and becomes it.
    process = subprocess.Popen(
        [sys.executable, "-c", _WIRE, str(commands_read), str(answers_write), *command],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        pass_fds=(commands_read, answers_write),
    )
    os.close(commands_read)
    os.close(answers_write)
    browser = Chromium(process, commands_write, answers_read)
    try:
        browser.send("Browser.getVersion")
        yield browser
    finally:
        with contextlib.suppress(BrowserError, OSError):
            browser.send("Browser.close")
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        os.close(commands_write)
        os.close(answers_read)
