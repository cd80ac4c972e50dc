"""CPU and wall time of ``mcpbridge kb list`` and ``mcpbridge calls pending``: this tree against a baseline,
interleaved.

    .venv/bin/python tests/bench/cli_commands.py --baseline cd2c7fc          # a revision (exported with git archive)
    .venv/bin/python tests/bench/cli_commands.py --baseline main --runs 11 --json

One data directory is initialised and served by this tree's ``mcpbridge serve`` on a free port, with one knowledge
base and a second workspace. Each run is a fresh interpreter running the command the way its tree's CLI runs it:
the baseline's on the data directory (as it did: the command builds the API in its own process), this tree's as a
client of the running serve (``MCPBRIDGE_URL`` and the admin key). Runs alternate baseline, this tree, baseline...,
after one discarded warm-up each (it writes the ``.pyc`` files). CPU is the child's user + system time
(``RUSAGE_CHILDREN``); the server's own CPU is not counted (it is the same server's either way for this tree, and
the baseline has none). Quote the ratios (``x baseline``), not the milliseconds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COMMANDS = (("kb", "list"), ("calls", "pending"))


def _tree(baseline: str, scratch: Path) -> Path:
    given = Path(baseline)
    if given.is_dir():
        return given
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", baseline, "shared"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(scratch)], input=archive, check=True)
    return scratch / "shared"


def _timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {done.stderr}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _serve(env: dict[str, str], cwd: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with (cwd / "serve.out").open("wb") as log, (cwd / "serve.err").open("wb") as errors:
        process = subprocess.Popen(
            [sys.executable, "-m", "mcpbridge.cli", "serve", "--port", str(port), "--json"],
            env=env,
            cwd=cwd,
            stdout=log,
            stderr=errors,
        )
    for _ in range(1200):
        text = (cwd / "serve.out").read_text(errors="replace")
        if text.strip().startswith("{"):
            return process, f"http://127.0.0.1:{port}", json.loads(text.splitlines()[0])["api_key"]
        if process.poll() is not None:
            raise SystemExit(f"serve exited: {text}{(cwd / 'serve.err').read_text(errors='replace')}")
        time.sleep(0.1)
    raise SystemExit(f"serve did not start: {(cwd / 'serve.err').read_text(errors='replace')[-2000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="cd2c7fc", help="a revision or a shared/ directory (default cd2c7fc)")
    parser.add_argument(
        "--baseline-is-client",
        action="store_true",
        help="the baseline's CLI is already a REST client (run it against the same serve, not on the data)",
    )
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        base_tree = _tree(options.baseline, scratch)
        data = scratch / "data"
        # .pyc files written and read, as for an installed package (a shell may turn their writing off)
        common = {
            k: v for k, v in os.environ.items() if not k.startswith("MCPBRIDGE_") and k != "PYTHONDONTWRITEBYTECODE"
        }
        common |= {"MCPBRIDGE_DATA_DIR": str(data), "MCPBRIDGE_EMBEDDING_PROVIDER": "none"}
        common["MCPBRIDGE_INDEX_CACHE_DIR"] = str(scratch / "cache")
        process, url, key = _serve({**common, "PYTHONPATH": str(REPO / "shared")}, scratch)
        try:
            client = {k: v for k, v in common.items() if not k.startswith("MCPBRIDGE_")}
            client |= {"MCPBRIDGE_URL": url, "MCPBRIDGE_API_KEY": key, "PYTHONPATH": str(REPO / "shared")}
            baseline_env = {**(client if options.baseline_is_client else common), "PYTHONPATH": str(base_tree)}
            entry = [sys.executable, "-m", "mcpbridge.cli"]
            _timed([*entry, "kb", "create", "handbook"], client, scratch)
            _timed([*entry, "workspaces", "create", "Acme"], client, scratch)
            results: dict[str, dict[str, list[float]]] = {}
            for command in COMMANDS:
                name = " ".join(command)
                runs: dict[str, list[float]] = {"base_wall": [], "base_cpu": [], "this_wall": [], "this_cpu": []}
                _timed([*entry, *command], baseline_env, scratch)
                _timed([*entry, *command], client, scratch)
                for _ in range(options.runs):
                    wall, cpu = _timed([*entry, *command], baseline_env, scratch)
                    runs["base_wall"].append(wall)
                    runs["base_cpu"].append(cpu)
                    wall, cpu = _timed([*entry, *command], client, scratch)
                    runs["this_wall"].append(wall)
                    runs["this_cpu"].append(cpu)
                results[name] = runs
        finally:
            process.terminate()
            process.wait(timeout=30)
    summary = {
        name: {label: round(statistics.median(values), 3) for label, values in runs.items()}
        | {
            "cpu_ratio": round(statistics.median(runs["this_cpu"]) / statistics.median(runs["base_cpu"]), 3),
            "wall_ratio": round(statistics.median(runs["this_wall"]) / statistics.median(runs["base_wall"]), 3),
        }
        for name, runs in results.items()
    }
    load = os.getloadavg()[0]
    if options.json:
        print(json.dumps({"runs": options.runs, "load": load, "commands": summary}))
        return
    print(f"{options.runs} interleaved runs each, load {load:.1f}; medians in seconds")
    print(
        f"{'command':<16}{'base cpu':>10}{'this cpu':>10}{'x base':>8}{'base wall':>11}{'this wall':>11}{'x base':>8}"
    )
    for name, row in summary.items():
        print(
            f"{name:<16}{row['base_cpu']:>10.3f}{row['this_cpu']:>10.3f}{row['cpu_ratio']:>8.2f}"
            f"{row['base_wall']:>11.3f}{row['this_wall']:>11.3f}{row['wall_ratio']:>8.2f}"
        )


if __name__ == "__main__":
    main()
