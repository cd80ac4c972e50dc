"""Whether chunking Markdown stays linear in the document's size: 2 MB against ten times 200 KB of the same text.

The same section (an English guide with headings, Chinese text and prose paragraphs) repeated to ~200 KB and to
~2 MB; each round chunks the small text ten times and the large one once, in alternating order (A, B, B, A, ...) so
that drift in the machine's load hits both alike. ``large/10 small`` is the median of the large run divided by the
median of ten small runs: about 1 when the cost grows with the size, far above 1 if it grows faster.

    .venv/bin/python tests/bench/chunking.py [--rounds 7] [--json]

Numbers depend on the machine: quote the ratio, never assert on it (see tests/bench/README.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

from mcpbridge.knowledge.chunking import chunk_document

SECTION = (
    "# Guide\n\nHow to rotate a refresh token.\n\n## Setup\n\n"
    + ("A line of prose that goes on for a while. " * 8 + "\n\n") * 10
    + "## 用户指南\n\n"
    + "本节介绍如何配置访问令牌与刷新令牌。" * 20
    + "\n\n"
)


def _timed(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def measure(rounds: int) -> dict[str, float]:
    small = SECTION * (200_000 // len(SECTION) + 1)
    large = small * 10

    def ten_small() -> None:
        for _ in range(10):
            chunk_document(small, format="markdown")

    def one_large() -> None:
        chunk_document(large, format="markdown")

    ten_small()  # warm-up: imports, caches
    smalls: list[float] = []
    larges: list[float] = []
    for index in range(rounds):
        order = ((smalls, ten_small), (larges, one_large))
        for times, run in order if index % 2 == 0 else reversed(order):
            times.append(_timed(run))
    return {
        "ten_small_s": statistics.median(smalls),
        "large_s": statistics.median(larges),
        "large_over_ten_small": statistics.median(larges) / statistics.median(smalls),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    result = measure(options.rounds)
    if options.json:
        print(json.dumps(result))
    else:
        print(
            f"10 x 200 KB: {result['ten_small_s']:.3f} s   2 MB: {result['large_s']:.3f} s   "
            f"large/10 small: {result['large_over_ten_small']:.2f}"
        )


if __name__ == "__main__":
    main()
