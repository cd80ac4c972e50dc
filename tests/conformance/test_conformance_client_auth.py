"""The official MCP conformance suite's client auth scenarios (npm ``@modelcontextprotocol/conformance``,
``client --suite auth`` and ``--suite backcompat``) against mcpbridge's OAuth client, in the pinned release and in the
newest one (a pre-release, installed as ``conformance-next``).

For each scenario the suite starts its own authorization server and an MCP server protected by it, then runs
``tests/conformance/oauth_client.py <server-url>`` (with this venv's python), which drives mcpbridge's real pieces:
a temporary embedded Container, the URL registered as an ``oauth`` service, ``ServiceOAuth.start_authorization``,
the authorization URL followed headlessly (the suite's server approves at once), ``complete_callback`` with the
redirect's query, then ``call_with_oauth`` + ``Connection`` to list the tools and call one. The suite judges what
its servers saw: discovery paths, registration, PKCE, the ``resource`` parameter, scopes, token-endpoint
authentication.

A scenario passes when none of its checks is FAILURE or WARNING (the suite's own rule).
``client-expected-failures.txt`` lists the scenarios mcpbridge is not meant to pass, one a line with its reason (a
reason that starts with ``pinned suite only:`` applies to the pinned release alone); the test fails on any other
failing scenario and on any listed scenario that passes.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conformance.node import (
    CONFORMANCE,
    CONFORMANCE_NEXT,
    HERE,
    NPM_CI_TIMEOUT,
    node_env,
    package_bin,
    run_node,
)
from tests.conformance.test_conformance import Scenario, read_expected_failures

SUITE_TIMEOUT = 300.0
"""The CPU one suite run (with what it starts) may use, and a term of the test's last-resort timeout."""
PINNED_ONLY = "pinned suite only:"
SUITES = ("auth", "backcompat")
"""The suite's ``auth`` scenarios and its ``backcompat`` ones (MCP 2025-03-26: no resource metadata, authorization
server metadata at the server's origin, or none and the default ``/authorize``, ``/token``, ``/register``)."""
DRAFT_SUITE = "draft"
"""The newest release's scenarios introduced by MCP 2026-07-28, of which only the ``auth/`` ones are kept (issuer
checks of RFC 9207, resource and metadata mismatches, ``offline_access``, a change of authorization server): the
others judge an MCP client's requests, which this entry point does not make as the suite expects."""
SCENARIO_TIMEOUT_MS = 90_000
"""Per scenario (the suite runs them in parallel: 14 Python processes start at once)."""
pytestmark = [pytest.mark.slow, pytest.mark.timeout(NPM_CI_TIMEOUT + (len(SUITES) + 1) * SUITE_TIMEOUT + 120)]

CLIENT = HERE / "oauth_client.py"
EXPECTED_FAILURES = HERE / "client-expected-failures.txt"
# Discovery (including MCP 2025-03-26's), registration, pre-registration, client ID metadata documents, token-endpoint
# authentication and scope step-up: must pass, and may never be listed as expected failures.
MUST_PASS = (
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
    "auth/scope-step-up",
    "auth/2025-03-26-oauth-endpoint-fallback",
)
# The newest release's 2026-07-28 scenarios (its draft suite): must pass there.
MUST_PASS_NEWEST = (
    "auth/authorization-server-migration",
    "auth/resource-mismatch",
    "auth/metadata-issuer-mismatch",
    "auth/iss-supported",
    "auth/iss-not-advertised",
    "auth/iss-supported-missing",
    "auth/iss-wrong-issuer",
    "auth/iss-unexpected",
    "auth/iss-normalized",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
)
# Scenarios whose MCP server never accepts the token (a 403 on every call), and those where the client must stop
# before asking for a token (an issuer or resource that is not the one discovered): the client fails by design there.
CLIENT_MAY_FAIL = frozenset(
    {
        "auth/scope-retry-limit",
        "auth/resource-mismatch",
        "auth/metadata-issuer-mismatch",
        "auth/iss-supported-missing",
        "auth/iss-wrong-issuer",
        "auth/iss-unexpected",
        "auth/iss-normalized",
    }
)
# What the suite's servers issue: a code, tokens and client secrets that must never appear in the client's output.
SUITE_SECRETS = ("test-auth-code", "test-token-", "test-client-secret", "test-secret-", "pre-registered-secret")
_SUMMARY = re.compile(r"^[✓✗] (?P<name>\S+): \d+ passed, \d+ failed", re.MULTILINE)
_RESULT_DIR = re.compile(r"^(?P<name>.+)-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d{3}Z$")


@dataclass
class ClientRun:
    package: str
    returncode: int
    stdout: str
    stderr: str
    scenarios: dict[str, Scenario]
    client_output: dict[str, str]
    """stdout and stderr of the client, per scenario."""

    def tail(self) -> str:
        return f"--- suite stdout (tail)\n{self.stdout[-6000:]}\n--- suite stderr (tail)\n{self.stderr[-3000:]}"


def parse_client_suite(stdout: str, output_dir: Path) -> tuple[dict[str, Scenario], dict[str, str]]:
    """Scenarios from the suite's summary and the ``<output>/auth/<name>-<timestamp>/checks.json`` files."""
    scenarios = {m["name"]: Scenario(m["name"]) for m in _SUMMARY.finditer(stdout)}
    outputs: dict[str, str] = {}
    for checks in sorted(output_dir.rglob("checks.json")):
        match = _RESULT_DIR.match(checks.parent.relative_to(output_dir).as_posix())
        if match is None:
            continue
        name = match["name"]
        scenario = scenarios.setdefault(name, Scenario(name))
        scenario.checks = json.loads(checks.read_text())
        outputs[name] = "".join(
            (checks.parent / part).read_text(errors="replace")
            for part in ("stdout.txt", "stderr.txt")
            if (checks.parent / part).is_file()
        )
    for scenario in scenarios.values():
        # A scenario that threw leaves no checks.json (the suite then reports a "Failed to run scenario" check).
        scenario.crashed = not scenario.checks
    return scenarios, outputs


def _run_suite(package: str, name: str, work: Path) -> ClientRun:
    entry = package_bin(package, "conformance")
    output_dir = work / f"results-{name}"
    # The suite splits the command on spaces and runs it through a shell, so shell quoting survives.
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(CLIENT))}"
    done = run_node(
        entry,
        [
            "client",
            "--suite",
            name,
            "--command",
            command,
            "--timeout",
            str(SCENARIO_TIMEOUT_MS),
            "--output-dir",
            str(output_dir),
        ],
        env=node_env(home=work),
        cwd=work,
        cpu_budget=SUITE_TIMEOUT,
    )
    assert output_dir.is_dir(), f"the suite wrote no results ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    scenarios, outputs = parse_client_suite(done.stdout, output_dir)
    return ClientRun(package, done.returncode, done.stdout, done.stderr, scenarios, outputs)


@pytest.fixture(scope="module", params=[CONFORMANCE, CONFORMANCE_NEXT], ids=["pinned", "newest"])
def suite(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> ClientRun:
    package = str(request.param)
    work = tmp_path_factory.mktemp("conformance-client")
    runs = [_run_suite(package, name, work) for name in SUITES]
    if package == CONFORMANCE_NEXT:
        draft = _run_suite(package, DRAFT_SUITE, work)
        draft.scenarios = {name: s for name, s in draft.scenarios.items() if name.startswith("auth/")}
        draft.client_output = {name: out for name, out in draft.client_output.items() if name in draft.scenarios}
        # Its verdict counts the scenarios left out too: the auth ones' own problems stand for it.
        draft.returncode = int(any(s.crashed or s.problems for s in draft.scenarios.values()))
        runs.append(draft)
    return ClientRun(
        package,
        # Non-zero when any suite's own verdict was a failure.
        max(run.returncode for run in runs),
        "\n".join(run.stdout for run in runs),
        "\n".join(run.stderr for run in runs),
        {name: scenario for run in runs for name, scenario in run.scenarios.items()},
        {name: output for run in runs for name, output in run.client_output.items()},
    )


def test_expected_failures_file_is_well_formed() -> None:
    expected = read_expected_failures(EXPECTED_FAILURES)
    listed = sorted(set(MUST_PASS + MUST_PASS_NEWEST) & set(expected))
    assert not listed, f"these scenarios must pass and may not be listed as expected failures: {listed}"
    assert all(name.startswith("auth/") for name in expected), sorted(expected)


def test_the_suite_ran_its_auth_scenarios(suite: ClientRun) -> None:
    assert len(suite.scenarios) >= 16, f"only {sorted(suite.scenarios)} ran\n{suite.tail()}"
    must = MUST_PASS + (MUST_PASS_NEWEST if suite.package == CONFORMANCE_NEXT else ())
    missing = [name for name in must if name not in suite.scenarios]
    assert not missing, f"the suite no longer has {missing}\n{suite.tail()}"


@pytest.mark.parametrize("name", MUST_PASS)
def test_core_scenario_passes(suite: ClientRun, name: str) -> None:
    scenario = suite.scenarios.get(name)
    assert scenario is not None, f"{name} did not run\n{suite.tail()}"
    assert scenario.passed, f"{scenario.explain()}\n--- client output\n{suite.client_output.get(name, '')[-3000:]}"


def test_the_2026_07_28_scenarios_pass(suite: ClientRun) -> None:
    """A change of authorization server (SEP-2352: the client registers anew with the new issuer, never presenting
    the old one's client), RFC 9207's issuer checks, mismatched resource and metadata, ``offline_access``."""
    if suite.package != CONFORMANCE_NEXT:
        pytest.skip("2026-07-28 scenarios: the newest release only")
    failing = []
    for name in MUST_PASS_NEWEST:
        scenario = suite.scenarios.get(name)
        if scenario is None:
            failing.append(f"{name} did not run")
        elif not scenario.passed:
            failing.append(f"{scenario.explain()}\n--- client output\n{suite.client_output.get(name, '')[-2000:]}")
    assert not failing, "\n\n".join(failing) + f"\n{suite.tail()}"


def expected_failures(package: str) -> dict[str, str]:
    """The expected failures of ``package``'s suite: every entry, but the pinned-only ones for the pinned suite only."""
    return {
        name: reason
        for name, reason in read_expected_failures(EXPECTED_FAILURES).items()
        if package == CONFORMANCE or not reason.startswith(PINNED_ONLY)
    }


def test_only_the_expected_scenarios_fail(suite: ClientRun) -> None:
    expected = expected_failures(suite.package)
    failed = {name for name, scenario in suite.scenarios.items() if not scenario.passed}
    unexpected = sorted(failed - set(expected))
    stale = sorted(name for name in expected if name in suite.scenarios and name not in failed)
    unknown = sorted(name for name in expected if name not in suite.scenarios)
    report = []
    if unexpected:
        report.append(
            "failing, not in client-expected-failures.txt:\n"
            + "\n".join(
                f"{suite.scenarios[n].explain()}\n  client output: {suite.client_output.get(n, '')[-1500:]}"
                for n in unexpected
            )
        )
    if stale:
        report.append(f"passing, yet listed in client-expected-failures.txt (remove them): {stale}")
    if unknown:
        report.append(f"listed in client-expected-failures.txt, but the suite has no such scenario: {unknown}")
    assert not report, "\n\n".join(report)
    # The suite's own verdict agrees: in suite mode it exits non-zero exactly when a check failed or warned.
    some_problem = any(s.crashed or s.problems for s in suite.scenarios.values())
    assert (suite.returncode != 0) == some_problem, suite.tail()


def test_every_passing_scenario_ended_with_a_tool_call(suite: ClientRun) -> None:
    """The token mcpbridge obtained worked: the client listed the tools and called one through call_with_oauth."""
    silent = [
        name
        for name, scenario in suite.scenarios.items()
        if scenario.passed and name not in CLIENT_MAY_FAIL and "called test-tool" not in suite.client_output[name]
    ]
    assert not silent, {name: suite.client_output.get(name, "")[-1500:] for name in silent}


def test_the_client_never_prints_a_code_a_token_or_a_secret(suite: ClientRun) -> None:
    leaks = {
        name: [secret for secret in SUITE_SECRETS if secret in output]
        for name, output in suite.client_output.items()
        if any(secret in output for secret in SUITE_SECRETS)
    }
    assert not leaks, leaks
