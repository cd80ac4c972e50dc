"""Jobs on a small in-process thread pool (embedded mode).

A job lost to a crash is not lost work: documents waiting for indexing are found again at start-up
(``Documents.resume_pending``), and every job is safe to run twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger("mcpbridge.jobs")

JobRunner = Callable[[str, dict[str, str]], None]


class ThreadJobs:
    """``ports.Jobs`` on a thread pool; ``close`` waits for the jobs already submitted."""

    def __init__(self, run: JobRunner, *, workers: int = 2) -> None:
        self._run = run
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mcpbridge-job")

    def submit(self, kind: str, payload: dict[str, str]) -> None:
        self._pool.submit(self._guarded, kind, dict(payload))

    def _guarded(self, kind: str, payload: dict[str, str]) -> None:
        try:
            self._run(kind, payload)
        except Exception:
            log.exception("job %s failed", kind)

    def close(self) -> None:
        self._pool.shutdown(wait=True)


class InlineJobs:
    """``ports.Jobs`` that runs each job at once, in the caller's thread (AWS mode without an indexer function)."""

    def __init__(self, run: JobRunner) -> None:
        self._run = run

    def submit(self, kind: str, payload: dict[str, str]) -> None:
        self._run(kind, dict(payload))
