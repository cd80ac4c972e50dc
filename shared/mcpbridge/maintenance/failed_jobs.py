"""Background jobs that failed for good: after Lambda's retries (its failure record, from the indexer's failure
queue) or after the local thread pool's.

* ``index_document``: the document's version, if it still waits, becomes ``failed`` with the reason (what the last
  attempt raised, a timeout, memory, or an hour in the queue), never left ``pending``;
* any other job (a purge, a re-analysis, a deletion): submitted again, once per job. A job that fails again after
  that is given up: the caller keeps its record for an operator (on AWS it ends in the redrive queue, whose alarm
  goes off); a re-analysis given up no longer shows as under way on its knowledge base.

Safe to run twice: the document's move is conditional, and the resubmission is remembered (``JOBREDRIVE#<digest>``,
kept 14 days, the queue's retention) with the id of the failure it answered, so the same failure delivered again
is not a second failure.

A destination record (Lambda's asynchronous invocation record)::

    {"version": "1.0", "timestamp": ..., "requestContext": {"requestId", "functionArn", "condition":
     "RetriesExhausted" | "EventAgeExceeded", "approximateInvokeCount"}, "requestPayload": {"kind", "payload"},
     "responseContext": {...}, "responsePayload": {"errorType", "errorMessage", ...}}

(the response parts may be missing for ``EventAgeExceeded``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from mcpbridge import errors
from mcpbridge.domain.items import Key, Update
from mcpbridge.knowledge.bases import KnowledgeBases
from mcpbridge.knowledge.document_recovery import IndexingRecovery
from mcpbridge.ports import Clock, Jobs, Store

log = logging.getLogger("mcpbridge.maintenance")

INDEX_JOB: Final = "index_document"
REANALYSE_JOB: Final = "reanalyse_index"
RESUBMISSION_TTL: Final = 14 * 24 * 3600
Outcome = Literal["failed", "ignored", "resubmitted", "given_up"]


@dataclass(frozen=True)
class FailedJob:
    kind: str
    payload: dict[str, str]
    reason: str
    """For a person: why it failed, without internals (the logs have those)."""
    failure_id: str
    """The failed invocation's request id: one failure, however often its record is delivered."""


def failed_job_of(record: Mapping[str, Any]) -> FailedJob:
    """The job and its failure from Lambda's destination record; ValueError when ``record`` is not one."""
    request = record.get("requestPayload")
    context = record.get("requestContext")
    if not isinstance(request, Mapping) or not isinstance(context, Mapping):
        raise ValueError("not an asynchronous invocation record")
    kind, payload = request.get("kind"), request.get("payload")
    if not isinstance(kind, str) or not isinstance(payload, Mapping):
        raise ValueError("the record's request is not a job")
    response = record.get("responsePayload")
    response = response if isinstance(response, Mapping) else {}
    reason = _reason(
        kind,
        str(context.get("condition", "")),
        int(context.get("approximateInvokeCount") or 0),
        str(response.get("errorType") or ""),
        str(response.get("errorMessage") or ""),
    )
    failure_id = str(context.get("requestId") or uuid.uuid4())
    return FailedJob(kind, {str(k): str(v) for k, v in payload.items()}, reason, failure_id)


def failed_job_from(kind: str, payload: Mapping[str, str], exc: BaseException, attempts: int) -> FailedJob:
    """A job the local thread pool gave up on after ``attempts`` tries, ``exc`` the last one's error."""
    message = exc.message if isinstance(exc, errors.MCPBridgeError) else str(exc)
    reason = _reason(kind, "RetriesExhausted", attempts, type(exc).__name__, message)
    return FailedJob(kind, dict(payload), reason, str(uuid.uuid4()))


class FailedJobs:
    def __init__(
        self, store: Store, clock: Clock, jobs: Jobs, indexing: IndexingRecovery, bases: KnowledgeBases
    ) -> None:
        self._store = store
        self._clock = clock
        self._jobs = jobs
        self._indexing = indexing
        self._bases = bases

    def record(self, job: FailedJob) -> Outcome:
        """Carry out what a job's failure calls for (see the module docstring)."""
        if job.kind == INDEX_JOB:
            payload = job.payload
            version = int(payload["version"])
            moved = self._indexing.fail_indexing(payload["workspace_id"], payload["document_id"], version, job.reason)
            return "failed" if moved else "ignored"
        key = _resubmission_key(job)
        earlier = self._store.get(key)
        if earlier is not None and earlier.get("failure_id") != job.failure_id:
            log.error("job %s failed again after its resubmission, given up: %s", job.kind, job.reason)
            if job.kind == REANALYSE_JOB:
                self._bases.finish_reanalysis(
                    job.payload["workspace_id"], job.payload["knowledge_base_id"], job.payload["language"]
                )
            return "given_up"
        if earlier is None:
            self._jobs.submit(job.kind, job.payload)
            expires = int(self._clock.now()) + RESUBMISSION_TTL
            self._store.update(key, Update(set={"kind": job.kind, "failure_id": job.failure_id, "expires_at": expires}))
            log.warning("job %s failed (%s): submitted again once", job.kind, job.reason)
        return "resubmitted"


def _resubmission_key(job: FailedJob) -> Key:
    digest = hashlib.sha256(json.dumps([job.kind, sorted(job.payload.items())]).encode()).hexdigest()[:32]
    return Key(f"JOBREDRIVE#{digest}", "JOB")


def _error_names() -> frozenset[str]:
    def below(cls: type[errors.MCPBridgeError]) -> Iterator[type[errors.MCPBridgeError]]:
        for sub in cls.__subclasses__():
            yield sub
            yield from below(sub)

    return frozenset(cls.__name__ for cls in below(errors.MCPBridgeError) if cls.__module__ == errors.__name__)


_OURS: Final = _error_names() | {"MCPBridgeError"}


def _reason(kind: str, condition: str, attempts: int, error_type: str, message: str) -> str:
    what = "indexing" if kind == INDEX_JOB else f"the {kind} job"
    again = "; update the document to index it again" if kind == INDEX_JOB else ""
    if condition == "EventAgeExceeded":
        return f"{what} waited too long for the indexer (more than an hour, throttled) and was dropped{again}"
    if error_type == "Sandbox.Timedout" or "timed out" in message.lower():
        cause = "it did not finish within the indexer's time limit"
    elif "OutOfMemory" in error_type or "out of memory" in message.lower():
        cause = "it ran out of memory"
    elif error_type in _OURS and message:
        cause = message  # the product's own messages are written for people and hold no secret
    else:
        cause = f"an internal error ({error_type or 'unknown'})"
    tries = f" after {attempts} attempts" if attempts > 1 else ""
    return f"{what} failed{tries}: {cause[:300]}{again}"
