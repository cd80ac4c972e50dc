"""The official MCP conformance suite (npm ``@modelcontextprotocol/conformance``, server side) against a published
endpoint of the real combined app, served in-process on 127.0.0.1.

In-process rather than ``mcpbridge serve``: the offline test embedder and a tmp data dir need no configuration, the
knowledge base and the endpoint are made through the real admin API all the same, and the endpoint's bearer token
can be added at the ASGI edge (below). ``mcpbridge serve`` itself is covered by tests/functional/test_cli_serve.py.

The suite cannot send a header: its server scenarios connect with the SDK's ``StreamableHTTPClientTransport`` built
from the URL alone, and its raw checks (DNS rebinding, SSE) send fixed headers; it has no ``--header`` flag and reads
no environment variable for one (0.1.16, and 0.2.0-alpha.12 likewise). So the endpoint's ``Authorization: Bearer``
header is added to every request for the endpoint's path that arrives without one, before the app sees it: the Host
and Origin checks, the token check and the MCP server all run unchanged on what the suite sent.

Both the pinned release (``package.json``) and the newest one (a pre-release, installed as ``conformance-next``)
run, each with its active suite; the same scenarios fail in both, for the reasons ``expected-failures.txt`` gives.
The newest suite's ``--requirements 2026-07-28`` set (what that revision requires of a server, Tasks and
input-required results included) runs too, against the same kind of endpoint; ``expected-failures-2026-07-28.txt``
lists the scenarios of that set a knowledge server cannot pass, each with its reason: nearly all call the suite's own
reference tools and prompts (``slow_compute``, ``confirm_delete``, ``test_prompt_with_arguments``...).

A scenario passes when none of its checks is FAILURE or WARNING (the suite's own baseline rule).
``expected-failures.txt`` lists the scenarios a knowledge server is not meant to pass, one a line with its reason;
the test fails on any other failing scenario and on any listed scenario that passes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.node import (
    CONFORMANCE,
    CONFORMANCE_NEXT,
    HERE,
    NPM_CI_TIMEOUT,
    PublishedEndpoint,
    node_env,
    package_bin,
    published_endpoint,
    run_node,
)

SUITE_TIMEOUT = 600.0
"""The CPU the suite (with what it starts) may use, and a term of the test's last-resort timeout."""
pytestmark = [pytest.mark.slow, pytest.mark.timeout(NPM_CI_TIMEOUT + SUITE_TIMEOUT + 180)]

EXPECTED_FAILURES = HERE / "expected-failures.txt"
EXPECTED_FAILURES_2026 = HERE / "expected-failures-2026-07-28.txt"
REQUIREMENTS_2026 = "2026-07-28"
# Must pass, and may never be listed as expected failures.
MUST_PASS = ("server-initialize", "ping", "tools-list", "dns-rebinding-protection", "resources-list", "prompts-list")
# The same for the 2026-07-28 requirements (no initialize nor ping in that revision).
MUST_PASS_2026 = (
    "tools-list",
    "dns-rebinding-protection",
    "resources-list",
    "prompts-list",
    "caching",
    "http-header-validation",
    "sep-2164-resource-not-found",
    "input-required-result-unsupported-methods",
    "input-required-result-validate-input",
    "tasks-status-notifications",
)
_RUNNING = re.compile(r"^=== Running scenario: (?P<name>\S+) ===$", re.MULTILINE)
_RESULT_DIR = re.compile(r"^server-(?P<name>.+)-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d{3}Z$")


def read_expected_failures(path: Path = EXPECTED_FAILURES) -> dict[str, str]:
    """``scenario: reason`` lines; blank lines and ``#`` comments are skipped. Every entry needs a reason."""
    expected: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, _, reason = line.partition(":")
        name, reason = name.strip(), reason.strip()
        assert re.fullmatch(r"[a-z0-9][a-z0-9/_-]*", name), f"{path.name}:{number}: not a scenario name: {name!r}"
        assert reason, f"{path.name}:{number}: {name} has no reason"
        assert name not in expected, f"{path.name}:{number}: {name} listed twice"
        expected[name] = reason
    return expected


class BearerInjector:
    """ASGI: add ``Authorization: Bearer <token>`` to HTTP requests for ``path`` that carry no Authorization."""

    def __init__(self, app: Any, path: str, token: str) -> None:
        self._app = app
        self._path = path
        self._header = (b"authorization", f"Bearer {token}".encode())

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == self._path:
            headers = list(scope["headers"])
            if not any(name.lower() == b"authorization" for name, _ in headers):
                scope = {**scope, "headers": [*headers, self._header]}
        await self._app(scope, receive, send)


def inject_bearer(app: Any, endpoint: PublishedEndpoint) -> BearerInjector:
    return BearerInjector(app, f"/mcp/{endpoint.created['id']}", endpoint.token)


@dataclass
class Scenario:
    name: str
    checks: list[dict[str, Any]] = field(default_factory=list)
    crashed: bool = False

    @property
    def problems(self) -> list[dict[str, Any]]:
        return [c for c in self.checks if c.get("status") in ("FAILURE", "WARNING")]

    @property
    def passed(self) -> bool:
        return not self.crashed and bool(self.checks) and not self.problems

    def explain(self) -> str:
        if self.crashed:
            return f"{self.name}: the scenario did not run to the end (see the suite's output)"
        if not self.checks:
            return f"{self.name}: no checks recorded"
        lines = [f"{self.name}:"]
        for check in self.problems:
            lines.append(
                f"  {check['status']} {check.get('id')}: {check.get('errorMessage') or check.get('description')}"
            )
            details = check.get("details")
            if details:
                lines.append(f"    details: {json.dumps(details)[:1500]}")
        return "\n".join(lines)


@dataclass
class SuiteRun:
    url: str
    returncode: int
    stdout: str
    stderr: str
    scenarios: dict[str, Scenario]
    requirements: bool = False
    """The run of the newest suite's ``--requirements 2026-07-28`` set (else its active suite)."""

    @property
    def expected_failures(self) -> dict[str, str]:
        return read_expected_failures(EXPECTED_FAILURES_2026 if self.requirements else EXPECTED_FAILURES)

    @property
    def must_pass(self) -> tuple[str, ...]:
        return MUST_PASS_2026 if self.requirements else MUST_PASS

    def tail(self) -> str:
        return f"--- suite stdout (tail)\n{self.stdout[-6000:]}\n--- suite stderr (tail)\n{self.stderr[-3000:]}"


def parse_suite(stdout: str, output_dir: Path) -> dict[str, Scenario]:
    scenarios = {m["name"]: Scenario(m["name"]) for m in _RUNNING.finditer(stdout)}
    for result_dir in sorted(output_dir.iterdir()):
        match = _RESULT_DIR.match(result_dir.name)
        if match is None or not (result_dir / "checks.json").is_file():
            continue
        name = match["name"]
        scenario = scenarios.setdefault(name, Scenario(name))
        scenario.checks = json.loads((result_dir / "checks.json").read_text())
    for scenario in scenarios.values():
        # A scenario that threw leaves no checks.json; the suite prints "Failed to run scenario <name>".
        scenario.crashed = not scenario.checks or f"Failed to run scenario {scenario.name}:" in stdout
    return scenarios


@pytest.fixture(
    scope="module",
    params=[(CONFORMANCE, None), (CONFORMANCE_NEXT, None), (CONFORMANCE_NEXT, REQUIREMENTS_2026)],
    ids=["pinned", "newest", "newest-2026-07-28"],
)
def suite(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> SuiteRun:
    package, requirements = request.param
    entry = package_bin(package, "conformance")
    work = tmp_path_factory.mktemp("conformance")
    output_dir = work / "results"
    chosen = ["--requirements", requirements] if requirements else ["--suite", "active"]
    with published_endpoint(work / "data", wrap=inject_bearer) as endpoint:
        done = run_node(
            entry,
            ["server", "--url", endpoint.url, *chosen, "--output-dir", str(output_dir)],
            env=node_env(home=work),
            cwd=work,
            cpu_budget=SUITE_TIMEOUT,
        )
    assert output_dir.is_dir(), f"the suite wrote no results ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    scenarios = parse_suite(done.stdout, output_dir)
    return SuiteRun(endpoint.url, done.returncode, done.stdout, done.stderr, scenarios, requirements is not None)


@pytest.mark.parametrize(
    ("path", "must_pass"), [(EXPECTED_FAILURES, MUST_PASS), (EXPECTED_FAILURES_2026, MUST_PASS_2026)]
)
def test_expected_failures_file_is_well_formed(path: Path, must_pass: tuple[str, ...]) -> None:
    expected = read_expected_failures(path)
    assert expected, f"{path.name} is empty"
    listed = sorted(set(must_pass) & set(expected))
    assert not listed, f"these scenarios must pass and may not be listed as expected failures: {listed}"


def test_the_suite_ran_its_server_scenarios(suite: SuiteRun) -> None:
    assert len(suite.scenarios) >= 20, f"only {sorted(suite.scenarios)} ran\n{suite.tail()}"
    missing = [name for name in suite.must_pass if name not in suite.scenarios]
    assert not missing, f"the suite no longer has {missing}\n{suite.tail()}"


def test_core_scenarios_pass(suite: SuiteRun) -> None:
    failing = []
    for name in suite.must_pass:
        scenario = suite.scenarios.get(name)
        if scenario is None:
            failing.append(f"{name} did not run")
        elif not scenario.passed:
            failing.append(scenario.explain())
    assert not failing, "\n".join(failing) + f"\n{suite.tail()}"


def test_only_the_expected_scenarios_fail(suite: SuiteRun) -> None:
    expected = suite.expected_failures
    failed = {name for name, scenario in suite.scenarios.items() if not scenario.passed}
    unexpected = sorted(failed - set(expected))
    stale = sorted(name for name in expected if name in suite.scenarios and name not in failed)
    unknown = sorted(name for name in expected if name not in suite.scenarios)
    report = []
    if unexpected:
        report.append(
            "failing, not in the expected failures:\n" + "\n".join(suite.scenarios[n].explain() for n in unexpected)
        )
    if stale:
        report.append(f"passing, yet listed in expected-failures.txt (remove them): {stale}")
    if unknown:
        report.append(f"listed in expected-failures.txt, but the suite has no such scenario: {unknown}")
    assert not report, "\n\n".join(report)
    # The suite's own verdict agrees: it exits non-zero exactly when some check failed or some scenario crashed.
    some_failure = any(
        s.crashed or any(c.get("status") == "FAILURE" for c in s.checks) for s in suite.scenarios.values()
    )
    assert (suite.returncode != 0) == some_failure, suite.tail()
