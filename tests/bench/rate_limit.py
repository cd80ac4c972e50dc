"""Cost of one allowed call to the per-endpoint rate limiter: the single-item log it replaced against the current one.

    python tests/bench/rate_limit.py [--base HEAD] [--calls 30] [--rounds 4] [--limits 60,6000] [--json]

The baseline is the limiter as it is in git at ``--base`` (``shared/mcpbridge/publishing/rate_limit.py``, or
``server/rate_limit.py`` in commits before that package moved; read with ``git show`` at run time and loaded as a
module of its own); the candidate is the working tree's. Pass the commit before the O(1) limiter (``21692fe~2``) as
``--base`` (the script says so when both are the same code).

Each implementation gets its own store (a SQLite file, or a table in moto's in-process DynamoDB) and its own fake
clock. The window starts full: ``limit`` calls spaced ``60 s / limit`` apart (for the baseline, its window item
written directly; for the candidate, real calls, since its log spans several items), and the measured calls keep
it full, each call allowed because the one a minute older has just left. Rounds alternate A, B, A, B, ...; each
round makes ``--calls`` calls per implementation.

Reported per backend and limit, per allowed call: store calls, items written, bytes written as DynamoDB bills them
(and as the SQLite adapter stores them, JSON), DynamoDB write and read units, wall time (median over rounds), and
every figure as a ratio candidate / baseline. Figures are for notes (quote the ratios), never for assertions.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import boto3
from moto import mock_aws
from tests.support.aws import FAKE_AWS_ENV, table_create_kwargs
from tests.support.clock import FakeClock
from tests.support.dynamo_size import item_size

from mcpbridge.adapters.aws.dynamodb import DynamoStore
from mcpbridge.adapters.local.sqlite import SqliteStore
from mcpbridge.domain.items import Condition, Item, Key, Update
from mcpbridge.ports import Store
from mcpbridge.publishing import rate_limit as candidate_module

REPO = Path(__file__).resolve().parents[2]
MODULE_PATH = "shared/mcpbridge/publishing/rate_limit.py"
OLD_MODULE_PATH = "shared/mcpbridge/server/rate_limit.py"  # where the limiter was before the package moved


@dataclass
class Tally:
    calls: int = 0
    reads: int = 0
    read_units: int = 0
    writes: int = 0
    write_units: int = 0
    dynamo_bytes: int = 0
    json_bytes: int = 0
    seconds: list[float] = field(default_factory=list)


class CountingStore:
    """The store, with every call counted and every item read or written measured."""

    def __init__(self, inner: Store) -> None:
        self._inner = inner
        self.tally = Tally()

    def _wrote(self, item: Item) -> None:
        size = item_size(item)
        self.tally.writes += 1
        self.tally.write_units += max(1, math.ceil(size / 1024))
        self.tally.dynamo_bytes += size
        self.tally.json_bytes += len(json.dumps(item, separators=(",", ":")))

    def get(self, key: Key) -> Item | None:
        item = self._inner.get(key)
        self.tally.reads += 1
        self.tally.read_units += max(1, math.ceil(item_size(item) / 4096)) if item else 1
        return item

    def put(self, item: Item, *, condition: Condition | None = None, **options: Any) -> None:
        self._wrote(item)
        self._inner.put(item, condition=condition, **options)

    def update(self, key: Key, update: Update, *, condition: Condition | None = None, **options: Any) -> Item:
        item = self._inner.update(key, update, condition=condition, **options)
        self._wrote(item)
        return item

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"the rate limiter is not expected to call Store.{name}")


def _path_at(base: str) -> str:
    found = subprocess.run(["git", "cat-file", "-e", f"{base}:{MODULE_PATH}"], cwd=REPO, capture_output=True)
    return MODULE_PATH if found.returncode == 0 else OLD_MODULE_PATH


def load_baseline(base: str) -> tuple[types.ModuleType, bool]:
    """The limiter module at git revision ``base``, and whether it is the same code as the working tree's."""
    source = subprocess.run(
        ["git", "show", f"{base}:{_path_at(base)}"], cwd=REPO, check=True, capture_output=True, text=True
    ).stdout
    module = types.ModuleType("rate_limit_baseline")
    module.__file__ = f"<git {base}:{_path_at(base)}>"
    sys.modules[module.__name__] = module  # dataclasses look their module up while building the class
    exec(compile(source, module.__file__, "exec"), module.__dict__)  # noqa: S102 - our own code, from git
    return module, source == (REPO / MODULE_PATH).read_text()


@contextlib.contextmanager
def stores(backend: str, root: Path) -> Iterator[dict[str, tuple[Store, FakeClock]]]:
    """One store and one clock per implementation, on ``backend``."""
    clocks = {"baseline": FakeClock(), "candidate": FakeClock()}
    if backend == "sqlite":
        opened = {name: SqliteStore(root / f"{name}.sqlite3", clock) for name, clock in clocks.items()}
        try:
            yield {name: (opened[name], clocks[name]) for name in clocks}
        finally:
            for store in opened.values():
                store.close()
        return
    saved = {name: os.environ.get(name) for name in FAKE_AWS_ENV}
    os.environ.update(FAKE_AWS_ENV)
    try:
        with mock_aws():
            client = boto3.client("dynamodb", region_name=FAKE_AWS_ENV["AWS_DEFAULT_REGION"])
            out: dict[str, tuple[Store, FakeClock]] = {}
            for name, clock in clocks.items():
                client.create_table(**table_create_kwargs(f"bench-{name}"))
                out[name] = (DynamoStore(client, f"bench-{name}", clock), clock)
            yield out
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def fill(name: str, module: types.ModuleType, store: Store, clock: FakeClock, limit: int, spacing: float) -> None:
    """A full window: ``limit`` calls, ``spacing`` apart, the last one just made."""
    if name == "baseline":
        # The single-item log: one item holding every time (writing it call by call would cost O(limit^2)).
        start_ms = math.floor(clock.now() * 1000)
        hits = [start_ms + math.floor(i * spacing * 1000) for i in range(limit)]
        clock.advance((limit - 1) * spacing)
        store.put(
            {
                **module.window_key("ep_bench").as_dict(),
                "hits": hits,
                "version": limit,
                "expires_at": math.floor(clock.now()) + 120,
            }
        )
        return
    limiter = module.RateLimiter(store, clock)
    for i in range(limit):
        if i:
            clock.advance(spacing)
        if not limiter.hit("ep_bench", limit).allowed:
            raise RuntimeError("the fill was denied: the spacing is too tight for the limit")


def measure(backend: str, limit: int, calls: int, rounds: int, baseline: types.ModuleType) -> dict[str, Tally]:
    # Just over 60 s / limit apart: each call finds the call ``limit`` places before it out of the window.
    spacing = 60 / limit + 0.0005
    modules = {"baseline": baseline, "candidate": candidate_module}
    tallies = {name: Tally() for name in modules}
    with tempfile.TemporaryDirectory() as tmp, stores(backend, Path(tmp)) as opened:
        limiters = {}
        for name, module in modules.items():
            store, clock = opened[name]
            fill(name, module, store, clock, limit, spacing)
            counting = CountingStore(store)
            counting.tally = tallies[name]
            limiters[name] = (module.RateLimiter(counting, clock), clock)
        for _ in range(rounds):
            for name in modules:  # A, B, A, B, ...
                limiter, clock = limiters[name]
                started = time.perf_counter()
                for _ in range(calls):
                    clock.advance(spacing)
                    if not limiter.hit("ep_bench", limit).allowed:
                        raise RuntimeError(f"{name} denied a call the window had room for")
                tallies[name].seconds.append((time.perf_counter() - started) / calls)
                tallies[name].calls += calls
    return tallies


def per_call(tally: Tally) -> dict[str, float]:
    n = tally.calls
    return {
        "store calls": (tally.reads + tally.writes) / n,
        "items written": tally.writes / n,
        "bytes written (DynamoDB)": tally.dynamo_bytes / n,
        "bytes written (JSON)": tally.json_bytes / n,
        "write units": tally.write_units / n,
        "read units": tally.read_units / n,
        "wall us (median)": statistics.median(tally.seconds) * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="HEAD", help="git revision of the baseline limiter (default HEAD)")
    parser.add_argument("--calls", type=int, default=30, help="measured calls per implementation and round")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--limits", default="60,6000")
    parser.add_argument("--backends", default="sqlite,moto")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    baseline, same = load_baseline(args.base)
    if same:
        print(
            f"note: {args.base} holds the same limiter as the working tree; pass --base <older commit>", file=sys.stderr
        )
    results: list[dict[str, Any]] = []
    for backend in args.backends.split(","):
        for limit in (int(x) for x in args.limits.split(",")):
            tallies = measure(backend, limit, args.calls, args.rounds, baseline)
            old, new = per_call(tallies["baseline"]), per_call(tallies["candidate"])
            results.append({"backend": backend, "limit": limit, "baseline": old, "candidate": new})
    if args.json:
        print(json.dumps({"base": args.base, "python": sys.version.split()[0], "results": results}, indent=2))
        return
    print(f"rate limiter, per allowed call: baseline = git {args.base}, candidate = working tree")
    print(f"{args.rounds} rounds x {args.calls} calls per implementation, interleaved; Python {sys.version.split()[0]}")
    for result in results:
        print(f"\n{result['backend']}, limit {result['limit']}/min")
        print(f"  {'':26} {'baseline':>12} {'candidate':>12} {'ratio':>8}")
        for metric, old_value in result["baseline"].items():
            new_value = result["candidate"][metric]
            ratio = new_value / old_value if old_value else float("nan")
            print(f"  {metric:26} {old_value:12.2f} {new_value:12.2f} {ratio:8.3f}")


if __name__ == "__main__":
    main()
