"""Cold-start cost of each Lambda handler module, measured in fresh interpreters.

For every target, each run starts a new Python process that times, with ``time.perf_counter``, only the work a
Lambda cold start (or a SnapStart snapshot) does before the first invocation:

    baseline       import fastapi, mangum, boto3
    <function>     load functions/<function>/handler.py by path (imports + settings + container + app + Mangum)

The handler processes get ``MCPBRIDGE_BACKEND=aws`` and fake AWS settings whose endpoint is a closed port on
127.0.0.1, so nothing can reach the network even by mistake (import is meant to touch none), and the variables
Lambda's runtime sets in every function (``LAMBDA_TASK_ROOT``, ``AWS_LAMBDA_FUNCTION_NAME``...): libraries take
their Lambda path on them (the X-Ray SDK, for one, builds no sampling client there, ~0.18 s). Runs of the targets
are interleaved so drift on the machine affects them alike, after one discarded warm-up run each (``.pyc``).

    .venv/bin/python tests/bench/cold_start.py [--runs 7] [--warmup 1] [--json] [--build .aws-sam/smoke]
        [--init-type on-demand|snap-start] [--against /path/to/other/checkout]

``--init-type`` is what Lambda puts in ``AWS_LAMBDA_INITIALIZATION_TYPE``: ``on-demand`` (the default: a caller
waits for this init) or ``snap-start`` (the init of a SnapStart snapshot, which builds everything a request may need).
``--against`` adds, for each function, a target ``<function>@against`` loaded from another checkout (its
``functions/`` and ``shared/`` first on ``sys.path``), measured in the same interleaved rounds: before and after a
change in one run.

With ``--build`` (the tree ``make build-smoke`` writes) every target, the baseline included, runs on that build's
interpreter with ``-I -S`` and ``sys.path`` = the function's built code + the built CoreLayer, as Lambda loads it:
the layer's packages only, none of the development environment's (which has more, e.g. ``rich`` that ``httpx``
imports when it is there). Without it, the handlers load from this checkout's virtualenv.

Numbers depend on the machine: compare targets through their ratio to the baseline median of the same run, and
never assert on them (see tests/bench/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS = ("admin_api", "mcp_endpoint", "oauth_callback", "resolutions")
# Each target's resource in template.yaml (its folder in a build).
RESOURCES = {
    "admin_api": "AdminApiFunction",
    "mcp_endpoint": "McpEndpointFunction",
    "oauth_callback": "OAuthCallbackFunction",
    "resolutions": "ResolutionsFunction",
}
BASELINE = "baseline"
RUN_TIMEOUT = 120.0

_BASELINE_CODE = "import fastapi, mangum, boto3"
_HANDLER_CODE = """\
_spec = importlib.util.spec_from_file_location("handler", {path!r})
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)
assert callable(_module.handler)
"""
_PROBE = """\
import importlib.util, json, sys, time
sys.path[:0] = {path!r}
_t0 = time.perf_counter()
{body}
_ms = (time.perf_counter() - _t0) * 1000
_first = None
_event = {event!r}
if _event is not None:
    _t1 = time.perf_counter()
    _answer = _module.handler(_event, None)
    _first = (time.perf_counter() - _t1) * 1000
    assert _answer["statusCode"] == 401, _answer
print(json.dumps({{"ms": _ms, "first_ms": _first, "modules": len(sys.modules), "boto3": "boto3" in sys.modules}}))
"""

# The first request timed after init (--first-request): one a caller may send first, without a key (answered 401
# before any store call, so it touches no network), as API Gateway's HTTP API (payload 2.0) delivers it.
FIRST_REQUESTS = {"admin_api": "/api/v1/knowledge-bases"}


def _event(path: str) -> dict[str, Any]:
    return {
        "version": "2.0",
        "routeKey": "ANY /api/v1/{proxy+}",
        "rawPath": path,
        "rawQueryString": "",
        "headers": {"host": "abc123.execute-api.eu-west-1.amazonaws.com", "accept": "application/json"},
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "abc123",
            "domainName": "abc123.execute-api.eu-west-1.amazonaws.com",
            "http": {"method": "GET", "path": path, "protocol": "HTTP/1.1", "sourceIp": "192.0.2.1", "userAgent": "b"},
            "requestId": "bench",
            "routeKey": "ANY /api/v1/{proxy+}",
            "stage": "$default",
            "time": "01/Dec/2026:00:00:00 +0000",
            "timeEpoch": 1796083200000,
        },
        "isBase64Encoded": False,
    }


# Settings a deployed function has (template.yaml Globals), pointing at nothing that answers.
_FAKE_ENV = {
    "MCPBRIDGE_BACKEND": "aws",
    "MCPBRIDGE_TABLE_NAME": "mcpbridge-bench",
    "MCPBRIDGE_KMS_KEY_ID": "arn:aws:kms:eu-west-1:123456789012:key/00000000-0000-0000-0000-000000000000",
    "MCPBRIDGE_BUCKET_NAME": "mcpbridge-bench",
    "MCPBRIDGE_LOG_LEVEL": "INFO",
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "eu-west-1",
    "AWS_REGION": "eu-west-1",
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
    "AWS_EC2_METADATA_DISABLED": "true",
    "POWERTOOLS_SERVICE_NAME": "mcpbridge",
}


@dataclass
class Sample:
    ms: float
    process_ms: float
    modules: int
    boto3: bool
    first_ms: float | None = None


@dataclass
class Result:
    target: str
    runs: int
    median_ms: float
    p90_ms: float
    ratio_to_baseline: float
    process_median_ms: float
    modules: int
    boto3_imported: bool
    first_request_median_ms: float | None = None


@dataclass(frozen=True)
class Build:
    """Built artifacts (``make build-smoke``): the interpreter they are for, the layer and each function's code."""

    python: str
    layer: Path
    functions: dict[str, Path]

    @classmethod
    def load(cls, root: Path) -> Build:
        artifacts = json.loads((root / "artifacts.json").read_text())
        functions = {target: root / resource for target, resource in RESOURCES.items()}
        for target, directory in functions.items():
            if not (directory / "handler.py").is_file():
                raise SystemExit(f"{target}: no built handler at {directory} (run `make build-smoke`)")
        python = artifacts.get("smoke_python") or sys.executable
        return cls(python=python, layer=root / "CoreLayer" / "python", functions=functions)


AGAINST = "@against"


def _code(target: str, build: Build | None, against: Path | None = None, first: bool = False) -> str:
    if target == BASELINE:
        path = [] if build is None else [str(build.layer)]
        return _PROBE.format(body=_BASELINE_CODE, path=path, event=None)
    function = target.removesuffix(AGAINST)
    first_path = FIRST_REQUESTS.get(function) if first else None
    event = _event(first_path) if first_path else None
    if target.endswith(AGAINST) and against is not None:
        body = _HANDLER_CODE.format(path=str(against / "functions" / function / "handler.py"))
        return _PROBE.format(body=body, path=[str(against / "shared")], event=event)
    if build is None:
        path, handler = [], REPO_ROOT / "functions" / target / "handler.py"
    else:
        path, handler = [str(build.functions[target]), str(build.layer)], build.functions[target] / "handler.py"
    body = _HANDLER_CODE.format(path=str(handler))
    return _PROBE.format(body=body, path=path, event=event)


def _runtime_env(target: str, init_type: str = "on-demand") -> dict[str, str]:
    """What Lambda's Python runtime sets in a function's environment (the baseline gets it too)."""
    name = "baseline" if target == BASELINE else target.removesuffix(AGAINST)
    return {
        "LAMBDA_TASK_ROOT": str(REPO_ROOT / "functions" / name) if target != BASELINE else str(REPO_ROOT),
        "AWS_LAMBDA_INITIALIZATION_TYPE": init_type,
        "LAMBDA_RUNTIME_DIR": "/var/runtime",
        "AWS_LAMBDA_FUNCTION_NAME": f"mcpbridge-bench-{name}",
        "AWS_LAMBDA_FUNCTION_VERSION": "1",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "1024",
        "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/mcpbridge-bench-{name}",
        "AWS_LAMBDA_LOG_STREAM_NAME": "2026/12/01/[1]00000000000000000000000000000000",
        "AWS_EXECUTION_ENV": "AWS_Lambda_python3.13",
        "_HANDLER": "handler.handler",
    }


def _env() -> dict[str, str]:
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("MCPBRIDGE_", "AWS_", "POWERTOOLS_")) and name != "PYTHONPATH"
    }
    env.update(_FAKE_ENV)
    return env


@dataclass(frozen=True)
class Options:
    build: Build | None = None
    init_type: str = "on-demand"
    against: Path | None = None
    first_request: bool = False


def measure(target: str, env: dict[str, str], options: Options) -> Sample:
    build = options.build
    env = {**env, **_runtime_env(target, options.init_type)}
    # -I: isolated (no user site, no script dir or cwd on sys.path); the editable install still resolves mcpbridge.
    # With a build, -S too: no site-packages at all, only the built code and layer (as in Lambda).
    command = [sys.executable, "-I", "-c"] if build is None else [build.python, "-I", "-S", "-c"]
    started = time.perf_counter()
    done = subprocess.run(
        [*command, _code(target, build, options.against, options.first_request)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    process_ms = (time.perf_counter() - started) * 1000
    if done.returncode != 0:
        raise SystemExit(f"{target}: the probe failed ({done.returncode}):\n{done.stderr}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return Sample(
        ms=report["ms"],
        process_ms=process_ms,
        modules=report["modules"],
        boto3=report["boto3"],
        first_ms=report["first_ms"],
    )


def p90(values: list[float]) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=10, method="inclusive")[8]


def run(runs: int, warmup: int, targets: tuple[str, ...], options: Options | None = None) -> list[Result]:
    options = options or Options()
    env = _env()
    samples: dict[str, list[Sample]] = {t: [] for t in targets}
    for _ in range(warmup):
        for target in targets:
            measure(target, env, options)
    for _ in range(runs):
        for target in targets:
            samples[target].append(measure(target, env, options))
    baseline = statistics.median(s.ms for s in samples[BASELINE])
    results = []
    for target in targets:
        ms = [s.ms for s in samples[target]]
        median = statistics.median(ms)
        results.append(
            Result(
                target=target,
                runs=len(ms),
                median_ms=round(median, 1),
                p90_ms=round(p90(ms), 1),
                ratio_to_baseline=round(median / baseline, 2),
                process_median_ms=round(statistics.median(s.process_ms for s in samples[target]), 1),
                modules=samples[target][-1].modules,
                boto3_imported=samples[target][-1].boto3,
                first_request_median_ms=_first_median(samples[target]),
            )
        )
    return results


def _first_median(samples: list[Sample]) -> float | None:
    firsts = [s.first_ms for s in samples if s.first_ms is not None]
    return round(statistics.median(firsts), 1) if firsts else None


def table(results: list[Result]) -> str:
    header = (
        "target",
        "runs",
        "median ms",
        "p90 ms",
        "x baseline",
        "process ms",
        "modules",
        "boto3 loaded",
        "1st req ms",
    )
    rows = [
        (
            r.target,
            str(r.runs),
            f"{r.median_ms:.1f}",
            f"{r.p90_ms:.1f}",
            f"{r.ratio_to_baseline:.2f}",
            f"{r.process_median_ms:.1f}",
            str(r.modules),
            "yes" if r.boto3_imported else "no",
            "-" if r.first_request_median_ms is None else f"{r.first_request_median_ms:.1f}",
        )
        for r in results
    ]
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(cells, widths, strict=True))
        )

    return "\n".join([line(header), line(tuple("-" * w for w in widths)), *(line(row) for row in rows)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=7, help="measured runs per target (default 7)")
    parser.add_argument("--warmup", type=int, default=1, help="discarded runs per target first (default 1)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--build", type=Path, help="load the handlers from this build (e.g. .aws-sam/smoke)")
    parser.add_argument(
        "--init-type",
        choices=("on-demand", "snap-start"),
        default="on-demand",
        help="AWS_LAMBDA_INITIALIZATION_TYPE of the handler processes (default on-demand)",
    )
    parser.add_argument("--against", type=Path, help="another checkout whose handlers to measure alongside")
    parser.add_argument(
        "--first-request",
        action="store_true",
        help="then time one request without a key (FIRST_REQUESTS: the admin API's GET /api/v1/knowledge-bases)",
    )
    args = parser.parse_args(argv)
    if args.runs < 1 or args.warmup < 0:
        parser.error("--runs must be at least 1 and --warmup at least 0")
    if args.against is not None and args.build is not None:
        parser.error("--against measures checkouts, not builds: give one or the other")

    build = Build.load(args.build) if args.build else None
    against = args.against.resolve() if args.against else None
    functions = [f for name in FUNCTIONS for f in (name, *([name + AGAINST] if against else []))]
    options = Options(build=build, init_type=args.init_type, against=against, first_request=args.first_request)
    results = run(args.runs, args.warmup, (BASELINE, *functions), options)
    meta: dict[str, Any] = {
        "python": platform.python_version() if build is None else build.python,
        "build": str(args.build) if args.build else None,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "runs": args.runs,
        "warmup": args.warmup,
        "init_type": args.init_type,
        "against": str(against) if against else None,
        "baseline": _BASELINE_CODE,
        "measured": "perf_counter around the import/load in a fresh `python -I` process; process = whole subprocess",
    }
    if args.json:
        print(json.dumps({**meta, "results": [asdict(r) for r in results]}, indent=2))
    else:
        print(
            f"cold start ({args.init_type}), Python {meta['python']} on {meta['machine']}, "
            f"{args.runs} runs (+{args.warmup} warm-up)"
        )
        if against:
            print(f"@against: {against}")
        print(f"baseline: {_BASELINE_CODE}")
        print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
