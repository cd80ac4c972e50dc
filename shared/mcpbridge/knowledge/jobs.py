"""The background jobs of knowledge bases, as the job queue hands them over (threads locally, the indexer Lambda
function on AWS): one ``kind`` and a payload of strings per job."""

from __future__ import annotations

import logging

from mcpbridge.knowledge.documents import DELETE_JOB, Documents
from mcpbridge.ports import IndexMaintenance

log = logging.getLogger("mcpbridge.knowledge")

OPTIMISE_INDEX_JOB = "optimise_index"
MIGRATE_INDEX_JOB = "migrate_index"
INDEX_JOBS = frozenset({OPTIMISE_INDEX_JOB, MIGRATE_INDEX_JOB})


def run_job(documents: Documents, kind: str, payload: dict[str, str]) -> None:
    """Carry out one job; an unknown kind is logged and dropped (a message from a newer release, say)."""
    if kind == "index_document":
        documents.run_indexing(payload["workspace_id"], payload["document_id"], int(payload["version"]))
    elif kind == "reanalyse_index":
        documents.run_reanalysis(payload["workspace_id"], payload["knowledge_base_id"], payload["language"])
    elif kind == "purge_knowledge_base":
        documents.purge_knowledge_base(payload["workspace_id"], payload["knowledge_base_id"])
    elif kind == DELETE_JOB:
        documents.run_deletion(
            payload["workspace_id"], payload["knowledge_base_id"], payload["document_id"], int(payload["version"])
        )
    else:
        log.warning("unknown job kind %s ignored", kind)


def run_index_job(maintenance: IndexMaintenance | None, kind: str, payload: dict[str, str]) -> None:
    """The search engine's upkeep of one knowledge base; nothing when the engine needs none (a job submitted before
    a deployment went back to the file index, say)."""
    if maintenance is None:
        log.info("%s for knowledge base %s: this search engine needs none", kind, payload.get("knowledge_base_id"))
        return
    kb_id = payload["knowledge_base_id"]
    if kind == OPTIMISE_INDEX_JOB:
        maintenance.optimise(kb_id)
    elif maintenance.migrate(kb_id):
        log.info("the index of knowledge base %s was migrated", kb_id)
