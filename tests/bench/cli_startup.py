"""Wall time of ``mcpbridge --help`` and ``mcpbridge --version``: this tree against a baseline, interleaved.

    .venv/bin/python tests/bench/cli_startup.py --baseline HEAD~5        # a revision (exported with git archive)
    .venv/bin/python tests/bench/cli_startup.py --baseline /tmp/old/shared --runs 21 --json

Each run is a fresh interpreter doing what the console script does (``from mcpbridge.cli import main``, then
``main()``) with ``PYTHONPATH`` pointing at one tree's ``shared/``; runs of the baseline and of this tree alternate,
after one discarded warm-up each (it writes the ``.pyc`` files). ``python -c pass`` is measured in the same rounds as
the floor. Quote the ratios (``x baseline``), not the milliseconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ENTRY = "import sys; from mcpbridge.cli import main; sys.exit(main())"
COMMANDS = (("--help",), ("--version",))


def _tree(baseline: str, scratch: Path) -> Path:
    """The ``shared/`` directory of the baseline: a directory as given, else a revision exported there."""
    given = Path(baseline)
    if given.is_dir():
        return given
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", baseline, "shared"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(scratch)], input=archive, check=True)
    return scratch / "shared"


def _once(argv: list[str], pythonpath: Path | None) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPBRIDGE_")}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    started = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return (time.perf_counter() - started) * 1000


def measure(baseline: Path, runs: int) -> dict[str, dict[str, float]]:
    targets: dict[str, tuple[list[str], Path | None]] = {"python -c pass": ([sys.executable, "-c", "pass"], None)}
    for args in COMMANDS:
        for label, tree in (("baseline", baseline), ("current", REPO / "shared")):
            targets[f"{label} mcpbridge {' '.join(args)}"] = ([sys.executable, "-c", ENTRY, *args], tree)
    samples: dict[str, list[float]] = {name: [] for name in targets}
    for argv, tree in targets.values():
        _once(argv, tree)  # warm-up: .pyc files
    for _ in range(runs):
        for name, (argv, tree) in targets.items():
            samples[name].append(_once(argv, tree))
    return {
        name: {"median_ms": statistics.median(values), "p90_ms": statistics.quantiles(values, n=10)[-1]}
        for name, values in samples.items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True, help="a git revision, or a directory holding mcpbridge/")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        figures = measure(_tree(args.baseline, Path(scratch)), args.runs)
    for args_ in COMMANDS:
        shown = " ".join(args_)
        base = figures[f"baseline mcpbridge {shown}"]["median_ms"]
        figures[f"current mcpbridge {shown}"]["x_baseline"] = figures[f"current mcpbridge {shown}"]["median_ms"] / base
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    print(f"{'target':<36} {'median ms':>10} {'p90 ms':>8} {'x baseline':>11}")
    for name, values in figures.items():
        ratio = f"{values['x_baseline']:.2f}" if "x_baseline" in values else ""
        print(f"{name:<36} {values['median_ms']:>10.1f} {values['p90_ms']:>8.1f} {ratio:>11}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
