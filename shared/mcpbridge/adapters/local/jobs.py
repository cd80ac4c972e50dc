"""Jobs on a small in-process thread pool (embedded mode).

A job lost to a crash is not lost work: documents waiting for indexing are found again at start-up
(``Documents.resume_pending``), and every job is safe to run twice. A job that raises a retryable error is tried
again after a pause (doubling), as Lambda retries the indexer; one that still fails, or fails otherwise, goes to
``on_failure`` (which records it, as the failed-jobs consumer does on AWS).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from mcpbridge.errors import MCPBridgeError

log = logging.getLogger("mcpbridge.jobs")

JobRunner = Callable[[str, dict[str, str]], None]
FailureHandler = Callable[[str, dict[str, str], Exception, int], None]
"""``(kind, payload, the last error, attempts)`` of a job given up on."""


class ThreadJobs:
    """``ports.Jobs`` on a thread pool; ``close`` waits for the jobs already submitted."""

    def __init__(
        self,
        run: JobRunner,
        *,
        workers: int = 2,
        attempts: int = 3,
        backoff_seconds: float = 1.0,
        on_failure: FailureHandler | None = None,
    ) -> None:
        self._run = run
        self._attempts = attempts
        self._backoff = backoff_seconds
        self._on_failure = on_failure
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mcpbridge-job")

    def submit(self, kind: str, payload: dict[str, str]) -> None:
        self._pool.submit(self._guarded, kind, dict(payload))

    def _guarded(self, kind: str, payload: dict[str, str]) -> None:
        attempt = 0
        while True:
            attempt += 1
            try:
                self._run(kind, payload)
                return
            except MCPBridgeError as exc:
                if exc.retryable and attempt < self._attempts:
                    log.info("job %s: %s, trying again", kind, exc.code)
                    time.sleep(self._backoff * 2 ** (attempt - 1))
                    continue
                log.error("job %s failed after %d attempts: %s", kind, attempt, exc.code)
                failure: Exception = exc
            except Exception as exc:
                log.exception("job %s failed", kind)
                failure = exc
            break
        if self._on_failure is not None:
            try:
                self._on_failure(kind, payload, failure, attempt)
            except Exception:
                log.exception("job %s: its failure could not be recorded", kind)

    def close(self) -> None:
        self._pool.shutdown(wait=True)


class InlineJobs:
    """``ports.Jobs`` that runs each job at once, in the caller's thread (AWS mode without an indexer function)."""

    def __init__(self, run: JobRunner) -> None:
        self._run = run

    def submit(self, kind: str, payload: dict[str, str]) -> None:
        self._run(kind, dict(payload))
