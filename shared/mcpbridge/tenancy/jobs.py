"""Every kind of background job, as the job queue hands them over (threads locally, the indexer Lambda function on
AWS): the purge of a deleted workspace here, the rest to the knowledge jobs (``knowledge.jobs``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from mcpbridge.identity.workspaces import PURGE_JOB

if TYPE_CHECKING:
    from mcpbridge.knowledge.documents import Documents
    from mcpbridge.ports import IndexMaintenance
    from mcpbridge.tenancy.workspace_purge import WorkspacePurge


def run_job(
    kind: str,
    payload: dict[str, str],
    *,
    purge: Callable[[], WorkspacePurge],
    documents: Callable[[], Documents],
    maintenance: Callable[[], IndexMaintenance | None] = lambda: None,
) -> None:
    """Carry out one job; each imports and builds only what it needs (an indexing job never loads the agent's
    modules, which a purge needs)."""
    if kind == PURGE_JOB:
        purge().run(payload["workspace_id"])
        return
    from mcpbridge.knowledge.jobs import INDEX_JOBS, run_index_job
    from mcpbridge.knowledge.jobs import run_job as run_knowledge_job

    if kind in INDEX_JOBS:
        run_index_job(maintenance(), kind, payload)
        return
    run_knowledge_job(documents(), kind, payload)
