"""The background jobs of knowledge bases, as the job queue hands them over (threads locally, the indexer Lambda
function on AWS): one ``kind`` and a payload of strings per job."""

from __future__ import annotations

import logging

from mcpbridge.knowledge.documents import DELETE_JOB, Documents

log = logging.getLogger("mcpbridge.knowledge")


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
