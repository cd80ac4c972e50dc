"""The embedded store's operations on its table layout as it is in git at ``--base`` against the working tree's.

    python tests/bench/sqlite_store.py [--base 53d356d] [--partitions 200] [--items 200] [--rounds 4]

The baseline is ``shared/mcpbridge/adapters/local/sqlite.py`` at ``--base`` (read with ``git show`` and loaded as a
module of its own; ``53d356d`` is the last commit with the WITHOUT ROWID table); the candidate is the working tree's
``SqliteStore``. Each gets its own file, filled with the same items (``--partitions`` x ``--items``, bodies of 100 to
1,500 characters, every other item in the first index), then rounds alternate A, B, A, B: reads of one item by its
key, queries of a partition's first 20 items, queries of the index, durable puts replacing an item, deletes.
Reported: microseconds per operation (median over rounds) and the ratio candidate / baseline. For notes, never for
assertions.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
for entry in (ROOT, ROOT / "shared"):
    if str(entry) not in sys.path:
        sys.path.insert(0, str(entry))

from tests.support.clock import FakeClock  # noqa: E402

from mcpbridge.adapters.local.sqlite import SqliteStore  # noqa: E402
from mcpbridge.domain.items import Key  # noqa: E402

MODULE = "shared/mcpbridge/adapters/local/sqlite.py"


def baseline_store(base: str) -> type[Any]:
    source = subprocess.run(["git", "show", f"{base}:{MODULE}"], cwd=ROOT, check=True, capture_output=True, text=True)
    spec = importlib.util.spec_from_loader("baseline_sqlite", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    exec(compile(source.stdout, f"{base}:{MODULE}", "exec"), module.__dict__)  # noqa: S102 - our own code from git
    store: type[Any] = module.SqliteStore
    return store


def fill(store: Any, partitions: int, items: int) -> None:
    rnd = random.Random(7)
    for p in range(partitions):
        for i in range(items):
            indexed = {"gsi1pk": f"G#{p}", "gsi1sk": f"{i:05d}"} if i % 2 else {}
            body = "x" * rnd.randint(100, 1500)
            store.put({"pk": f"WS#{p}", "sk": f"ITEM#{i:05d}", "body": body, **indexed}, durable=False)


def operations(store: Any, partitions: int, items: int, count: int) -> dict[str, float]:
    """Microseconds per operation, for each kind."""
    rnd = random.Random(11)

    def timed(work: Callable[[], object], times: int) -> float:
        start = time.perf_counter()
        for _ in range(times):
            work()
        return (time.perf_counter() - start) / times * 1e6

    def key() -> Key:
        return Key(f"WS#{rnd.randrange(partitions)}", f"ITEM#{rnd.randrange(items):05d}")

    def replace() -> None:
        k = key()
        store.put({"pk": k.pk, "sk": k.sk, "body": "y" * rnd.randint(100, 1500)})

    def delete_and_restore() -> None:
        k = key()
        store.delete(k)
        store.put({"pk": k.pk, "sk": k.sk, "body": "z" * 200}, durable=False)

    return {
        "get": timed(lambda: store.get(key()), count * 10),
        "query 20": timed(lambda: store.query(f"WS#{rnd.randrange(partitions)}", limit=20), count * 2),
        "index query 20": timed(lambda: store.query(f"G#{rnd.randrange(partitions)}", index="gsi1", limit=20), count),
        "durable put": timed(replace, count),
        "delete + put": timed(delete_and_restore, count),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default="53d356d")
    parser.add_argument("--partitions", type=int, default=200)
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--count", type=int, default=500, help="operations of each kind per round")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mcpbridge-store-bench-") as tmp:
        stores = {
            "baseline": baseline_store(args.base)(Path(tmp) / "baseline.db", FakeClock()),
            "candidate": SqliteStore(Path(tmp) / "candidate.db", FakeClock()),
        }
        for store in stores.values():
            fill(store, args.partitions, args.items)
        rounds: dict[str, list[dict[str, float]]] = {name: [] for name in stores}
        for _ in range(args.rounds):
            for name, store in stores.items():
                rounds[name].append(operations(store, args.partitions, args.items, args.count))
        sizes = {name: (Path(tmp) / f"{name}.db").stat().st_size for name in stores}
        for store in stores.values():
            store.close()
    result: dict[str, Any] = {}
    for kind in rounds["baseline"][0]:
        a = statistics.median(r[kind] for r in rounds["baseline"])
        b = statistics.median(r[kind] for r in rounds["candidate"])
        result[kind] = {"baseline_us": round(a, 1), "candidate_us": round(b, 1), "ratio": round(b / a, 2)}
    result["file_bytes"] = sizes
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
