"""Threads released at once, for tests of concurrent writers."""

from __future__ import annotations

import threading
from collections.abc import Callable


def run_together(workers: int, work: Callable[[int], None], *, timeout: float = 60) -> None:
    """Run ``work(worker)`` in ``workers`` threads released at once; fail with the first errors any of them raised."""
    ready = threading.Barrier(workers)
    errors: list[BaseException] = []

    def run(worker: int) -> None:
        try:
            ready.wait()
            work(worker)
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    assert not errors, errors[:3]
